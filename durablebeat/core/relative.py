"""Celery's ``relative=True`` intervals: each slot rounded down to the interval's clock unit
(day, hour, minute or second) in the app's zone (R25). Pure; nothing reads the clock.

The rounding is Celery's own (``celery.utils.time.remaining(..., relative=True)``), called
as its beat calls it after each run, so DST days round as Celery's do. A 1-hour interval
fires on the hour; a 90-minute one, rounded to the hour after each run, fires every hour, as
it does under Celery's beat.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, tzinfo

from celery.utils.time import remaining

from .clock import check_aware
from .errors import InvalidSchedule

__all__ = ["relative_after", "relative_first"]

_SECOND = timedelta(seconds=1)
#: a chain longer than this is jumped over by whole intervals first (a beat down for days
#: under a one-second interval); exact for every interval that is whole units
_MAX_CHAIN = 10_000


def _next(every: timedelta, zone: tzinfo, start: datetime) -> datetime:
    """The slot after a run at ``start``, as Celery's ``schedule.remaining_estimate`` finds it
    with ``last_run_at = now = start`` in the app's zone."""
    local = start.astimezone(zone)
    end: datetime = (start + remaining(local, every, local, True)).astimezone(UTC)
    return end


def _chain(
    every: timedelta, zone: tzinfo, start: datetime, bound: datetime, strict: bool
) -> datetime:
    """The first slot of the chain from ``start`` after ``bound`` (or at it, not ``strict``)."""
    gap = bound - start
    if gap > every * _MAX_CHAIN:
        start += every * (gap // every - 2)
    slot = _next(every, zone, start)
    for _ in range(_MAX_CHAIN + 4):
        if slot > bound or (slot == bound and not strict):
            return slot
        after = _next(every, zone, slot)
        # a rounding that does not move on (a sub-second interval): Celery's beat moves on
        # by the interval itself then (schedule.is_due)
        slot = after if after > slot else slot + max(every, _SECOND)
    raise InvalidSchedule("every", f"{every} relative to the clock never passes {bound}")


def relative_after(every: timedelta, zone: tzinfo, deadline: datetime, now: datetime) -> datetime:
    """The next slot after the one at ``deadline``, strictly after ``now`` (R3)."""
    deadline = check_aware(deadline, "deadline").astimezone(UTC)
    return _chain(every, zone, deadline, check_aware(now, "now").astimezone(UTC), strict=True)


def relative_first(every: timedelta, zone: tzinfo, now: datetime, grace: timedelta) -> datetime:
    """A new (or overdue) relative interval's next slot (R2, R25): Celery's first slot for a
    beat started at ``now`` (``now + every`` rounded down), or, when that comes sooner than
    the startup grace, the first slot of the same chain at or after ``now + grace``."""
    now = check_aware(now, "now").astimezone(UTC)
    return _chain(every, zone, now, now + grace, strict=False)
