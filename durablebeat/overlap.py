"""R34, ``overlap=buffer_one``: the end of a run releases the slot its schedule kept.

Beat keeps a slot that comes while a run is in flight (``beat.claims``). Whoever writes that
run's final state (the worker's completion, the result backend's reconciliation, the orphan
reclaim, the no-news round, a publish that gave up or was refused) calls ``release_kept``
in the same transaction: the schedule's next fire moves to the run's end, reason
``buffered``. That is a change of ``next_fire_at``, so it wakes beat as any edit does (the
trigger's NOTIFY on PostgreSQL, the broker's wake-up elsewhere, R6), and beat's due query
finds the row at once: the kept slot goes out through the usual claim, with its
compare-and-set and its one run per slot (R3, R4), on whichever beat takes it; a restart
finds it where it was left. No polling loop.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable

from . import wakeup
from .enums import Reason
from .models import Schedule


def release_kept(schedule_ids: Iterable[int], ended_at: dt.datetime) -> int:
    """A run of each of these schedules reached a final state at ``ended_at``: a schedule
    that keeps a slot is due then (its next fire, when later, moves there with reason
    ``buffered``; ``core.policy`` sends the kept slot and finds the slot the move put off).
    Returns the rows moved. A row whose next fire is due by then already needs no move:
    its claim sends the kept slot first (``overlap_step``)."""
    ids = sorted(set(schedule_ids))
    if not ids:
        return 0
    moved = Schedule.objects.filter(
        pk__in=ids, enabled=True, buffered_slot__isnull=False, next_fire_at__gt=ended_at
    ).update(
        # first: MySQL/MariaDB's SET reads the values it already set (none read here)
        next_fire_reason=Reason.BUFFERED,
        next_fire_at=ended_at,
    )
    if moved:
        wakeup.schedules_changed()  # without NOTIFY: the broker's wake-up (R6)
    return moved
