"""R33: a new row's first fire, known when its write commits.

Every writer of a schedule (``Schedule.save()``, the ORM's ``bulk_create`` and
``bulk_update``, ``durablebeat.api``, the importer, the code sync) stores the first fire of
an enabled row that has none, with the function beat itself fills such a row with
(``core.policy.first_fire``), so that beat never has a backlog of new rows to compute before
it can see what is due. What only beat can know stays for beat to fill (after its due work,
in bounded slices: ``beat.fill``): a custom schedule's (its object lives in beat's code,
R25), and a new interval's while no beat is alive, since R2 anchors its startup grace at the
moment a running beat first sees it (``now + grace`` at the write is that moment only while
a beat runs: it fills a new row at once).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Hashable
from typing import Any

from . import conf
from .core import jitter, timing
from .core.policy import first_fire
from .enums import Reason

#: distinct (timing, grace) pairs remembered per writer: a bulk write of a million rows has
#: a handful (a digest per customer: ten zones), a bounded cache keeps an odd one from
#: growing it
MAX_CACHED = 10_000


class FirstFires:
    """The first fires of rows written at one instant ``now`` (the writer's, on the one
    clock, R26): the timing math done once per distinct (timing, grace), not once per row.

    ``beat_seen``: whether a beat is alive (its heartbeat fresh, R17), so that a new
    interval's grace may start now, or how to ask (``models.beat_alive``): asked once,
    when an interval first needs it."""

    def __init__(self, now: dt.datetime, beat_seen: bool | Callable[[], bool]) -> None:
        self.now = now
        self._beat_seen = beat_seen
        self._grace: dt.timedelta | None = None
        self._jitter: dt.timedelta | None = None
        self._found: dict[Hashable, tuple[dt.datetime | None, str]] = {}

    def fill(self, row: Any) -> None:
        """Store the row's first fire when it is enabled and has none (an editor's own
        next fire is kept), and the writer can know it; otherwise leave it to beat."""
        if row.next_fire_at is not None or not row.enabled or row.deleted_at is not None:
            return
        try:
            spec = row.to_spec()
        except timing.InvalidSchedule:
            return  # refused by the write's checks, or set aside by beat (R20)
        at, reason = self.of(spec, row.startup_grace)
        if at is not None:
            sent = self.sent_at(row.name, spec, at, row.jitter)
            row.next_fire_at, row.next_fire_reason = sent, reason
            row.next_slot = at if sent != at else None
            row.__dict__["_first_fire"] = sent  # a save's edit rules keep its reason

    def sent_at(
        self, name: str, spec: timing.Spec, slot: dt.datetime, own_jitter: dt.timedelta | None
    ) -> dt.datetime:
        """R35: when schedule ``name``'s ``slot`` is sent, its jitter (its own, else the
        setting) applied, as beat applies it (``core.policy.jittered``)."""
        if own_jitter is None:
            if self._jitter is None:
                self._jitter = conf.settings.JITTER
            own_jitter = self._jitter
        if not own_jitter or isinstance(spec, timing.Custom):
            return slot
        return jitter.instant(name, spec, slot, own_jitter)

    def of(
        self, spec: timing.Spec, own_grace: dt.timedelta | None
    ) -> tuple[dt.datetime | None, str]:
        """The first fire of a row of ``spec`` and ``startup_grace``; (None, reason) when
        only beat can know it."""
        if isinstance(spec, timing.Custom):
            return None, Reason.SCHEDULED
        grace = own_grace
        if isinstance(spec, timing.Interval):
            if not self.beat_seen():
                return None, Reason.SCHEDULED
            if grace is None:
                if self._grace is None:
                    self._grace = conf.settings.STARTUP_GRACE
                grace = self._grace
        key: Hashable = (spec, grace if isinstance(spec, timing.Interval) else None)
        found = self._found.get(key)
        if found is None:
            try:
                found = first_fire(spec, self.now, grace or dt.timedelta(0))
            except (ValueError, OverflowError, ArithmeticError):
                found = (None, Reason.SCHEDULED)  # beat says why, as a bad row (R21)
            if len(self._found) >= MAX_CACHED:
                self._found.clear()
            self._found[key] = found
        return found

    def beat_seen(self) -> bool:
        if not isinstance(self._beat_seen, bool):
            self._beat_seen = self._beat_seen()
        return self._beat_seen
