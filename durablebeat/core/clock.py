"""The one clock seam: every "now" the IO layer uses comes from here.

R26: the clock is the database server's. ``now()`` is this host's UTC clock plus its
offset to the database's, a plain value set by ``durablebeat.dbclock`` (which measures it,
NTP-style) and kept as it is while the database is down (R5). Before any measurement, and
on SQLite (one host), the offset is zero. This module does no IO: the offset math is pure.

Tests move time with ``time_machine``; pure schedule math (``timing``) never calls this and
takes its time as an argument instead.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable
from dataclasses import dataclass

ZERO = dt.timedelta(0)
_offset = ZERO


def now() -> dt.datetime:
    """The current instant on the database's clock (R26), aware, in UTC."""
    return dt.datetime.now(dt.UTC) + _offset


def local_now() -> dt.datetime:
    """This host's own clock, aware, in UTC: only to measure the offset against."""
    return dt.datetime.now(dt.UTC)


def offset() -> dt.timedelta:
    """What ``now()`` adds to this host's clock: the database's clock minus this host's."""
    return _offset


def set_offset(value: dt.timedelta) -> None:
    global _offset
    _offset = value


@dataclass(frozen=True)
class Sample:
    """One reading of the database's clock: the offset to it and the round trip it took."""

    offset: dt.timedelta
    round_trip: dt.timedelta


def sample(sent: dt.datetime, server: dt.datetime, received: dt.datetime) -> Sample:
    """NTP's estimate: the server read its clock half-way through the round trip, so the
    offset is ``server - (sent + received) / 2``, wrong by at most half the round trip."""
    check_aware(server, "server time")
    round_trip = received - sent
    return Sample(offset=server - (sent + round_trip / 2), round_trip=round_trip)


def best(samples: Iterable[Sample]) -> Sample | None:
    """The sample with the shortest round trip (the least uncertain); None for none. A
    negative round trip (this host's clock stepped back during the read) is discarded."""
    kept = [one for one in samples if one.round_trip >= ZERO]
    return min(kept, key=lambda one: one.round_trip, default=None)


def check_aware(value: dt.datetime, name: str = "datetime") -> dt.datetime:
    """Refuse naive datetimes at the boundary instead of guessing their zone."""
    if value.tzinfo is None or value.utcoffset() is None:
        raise ValueError(f"{name} must be timezone-aware, got naive {value!r}")
    return value


#: the calendar's edges, as aware instants
EARLIEST = dt.datetime.min.replace(tzinfo=dt.UTC)
LATEST = dt.datetime.max.replace(tzinfo=dt.UTC)


def shift(instant: dt.datetime, delta: dt.timedelta) -> dt.datetime:
    """``instant + delta``, stopping at the calendar's edge instead of raising: a stored
    value out of every range (written around the checks) must not stop the loop (R21)."""
    try:
        return instant + delta
    except OverflowError:
        return LATEST if delta > dt.timedelta(0) else EARLIEST


def before(instant: dt.datetime, span: dt.timedelta) -> dt.datetime:
    """``instant - span`` (a window's start), stopping at the calendar's first instant."""
    try:
        return instant - span
    except OverflowError:
        return EARLIEST
