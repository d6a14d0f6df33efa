"""Hosts whose clock is off the database's (R26): each live beat boot and worker process
records its measured offset; ``check`` names the ones past ``CLOCK_SKEW_TOLERANCE``
(``clock_skew``) and ``/metrics`` exports every live one's."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

from .. import conf
from ..beat.boots import alive_q
from ..models import Boot, WorkerHeartbeat
from .findings import Finding


@dataclass(frozen=True)
class HostOffset:
    """One live process and its clock: ``offset`` is the database's clock minus its own, in
    seconds (positive: the host is behind)."""

    kind: str  # "beat" or "worker"
    host: str
    pid: int
    offset: float

    def words(self) -> str:
        way = "behind" if self.offset > 0 else "ahead of"
        return (
            f"{self.kind} {self.host}:{self.pid}: its clock is {abs(self.offset):.1f} s {way} "
            "the database's"
        )


def live_offsets(now: dt.datetime) -> list[HostOffset]:
    """Every live beat boot (R17) and every worker alive by its liveness row (R15) that
    recorded an offset, beats first."""
    found = [
        HostOffset("beat", boot.hostname, boot.pid, boot.clock_offset_seconds)
        for boot in Boot.objects.filter(alive_q(now), clock_offset_seconds__isnull=False)
        .only("hostname", "pid", "clock_offset_seconds")
        .order_by("hostname", "pid")
        if boot.clock_offset_seconds is not None
    ]
    fresh = now - conf.settings.WORKER_DEAD_AFTER
    found += [
        HostOffset("worker", row.worker, row.pid, row.clock_offset_seconds)
        for row in WorkerHeartbeat.objects.filter(
            seen_at__gte=fresh, clock_offset_seconds__isnull=False
        ).order_by("worker", "pid")
        if row.clock_offset_seconds is not None
    ]
    return found


def find_clock_skew(now: dt.datetime) -> list[Finding]:
    """A live host whose clock is further off the database's than the tolerance: it fires
    and records on the database's clock all the same (R26), but its logs, and whatever
    else it times by its own clock, are off by as much, and its time sync is broken."""
    bound = conf.settings.CLOCK_SKEW_TOLERANCE.total_seconds()
    return [
        Finding(
            "clock_skew",
            f"{one.words()} (more than the tolerance of {bound:g} s); durablebeat uses the "
            "database's clock, fix this host's time sync",
        )
        for one in live_offsets(now)
        if abs(one.offset) > bound
    ]
