"""When a beat was alive to fire (R27): the only time ``check``'s period-counting findings
count.

A schedule's periods pass while no beat runs (a deploy, an outage) and during the startup
grace that follows (R2: an overdue interval slot waits for it): no beat could have fired
then, and ``no_beat`` says the outage itself. So ``no_success`` and ``overdue`` count only
*covered* time: the boots' lifetimes merged, each stretch without a gap before it starting
``grace`` later. The walks here are pure: time and the stretches come in as arguments.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Sequence

from ..core import timing
from ..models import Boot

Stretch = tuple[dt.datetime, dt.datetime]

_US = dt.timedelta(microseconds=1)


def merge(lifetimes: Iterable[Stretch]) -> list[Stretch]:
    """Boot lifetimes (start, end) as ascending stretches with no beat gap inside."""
    merged: list[list[dt.datetime]] = []
    for start, end in sorted(lifetimes):
        if end < start:
            continue  # a boot row written around the clock: it covers nothing
        if merged and start <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], end)
        else:
            merged.append([start, end])
    return [(a, b) for a, b in merged]


def lifetimes(now: dt.datetime, stale_after: dt.timedelta) -> list[Stretch]:
    """Every boot's (start, end), merged: a stopped boot ends at its stop, a live one now, a
    silent one at its last heartbeat (nothing says it fired after that)."""
    fresh = now - stale_after
    spans = []
    rows = Boot.objects.values_list("started_at", "heartbeat_at", "stopped_at")
    for started, heartbeat, stopped in rows.iterator(chunk_size=5000):
        if stopped is not None:
            end = stopped
        elif heartbeat >= fresh:
            end = now
        else:
            end = heartbeat
        spans.append((started, min(end, now)))
    return merge(spans)


def after_grace(stretches: Sequence[Stretch], grace: dt.timedelta) -> list[Stretch]:
    """Each stretch without the startup grace that opens it (R2); one shorter is dropped."""
    kept = []
    for start, end in stretches:
        try:
            start = start + grace
        except OverflowError:
            continue
        if start < end:
            kept.append((start, end))
    return kept


def duration_bound(
    stretches: Sequence[Stretch], until: dt.datetime, need: dt.timedelta
) -> dt.datetime | None:
    """The latest ``b`` such that covered time in [b, until] is ``need``; None when all the
    covered time before ``until`` is shorter. Covered time in (since, until] reaches
    ``need`` exactly when ``since < bound + 1 µs``."""
    for start, end in reversed(stretches):
        end = min(end, until)
        if end <= start:
            continue
        if end - start >= need:
            return end - need
        need -= end - start
    return None


def slot_bound(
    spec: timing.Crontab | timing.Clocked | timing.Solar,
    stretches: Sequence[Stretch],
    until: dt.datetime,
    periods: int,
) -> dt.datetime | None:
    """The ``periods``-th latest slot at or before ``until`` that fell in covered time; None
    when fewer did. ``periods`` slots lie in covered time in (since, until] exactly when
    ``since`` is before it."""
    found = 0
    for start, end in reversed(stretches):
        end = min(end, until)
        while end > start:
            slot = timing.latest_slot(spec, start, end)
            if slot is None:
                break
            found += 1
            if found >= periods:
                return slot
            end = slot - _US
    return None
