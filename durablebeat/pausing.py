"""R36, pause on failure: the count of a schedule's runs in a row that failed or were lost,
and the pause when it reaches the schedule's bound.

Whoever writes a run's final state calls ``after_runs`` next to ``overlap.release_kept``, in
the same transaction: the worker's completion and the result backend's reconciliation
(``worker.completion.finish``), the orphan reclaim (``beat.reclaim``, lost), a publish the
broker client refused (``beat.claims.mark_unpublishable``, failed). What counts and what
resets is ``core.pause``'s. A missed, skipped or replaced slot and a run with no news write
nothing here.

Only schedules with a bound are counted (their own ``pause_after_failures``, else
``DURABLEBEAT_PAUSE_AFTER_FAILURES``), so with neither set a run's end costs no query more.
The count is one ``UPDATE ... SET failures_in_a_row = failures_in_a_row + n`` (two
workers finishing runs of one schedule at once both count); the pause is a compare-and-set
of ``enabled`` from true to false, so it happens once, however many runs end at once,
through ``ScheduleQuerySet.update``'s edit rules (the kept slot cleared, beat woken, R34,
R6). Then a warning in the log (event ``paused``) and the ``schedule_paused`` signal, sent
once the pause commits.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from functools import partial

from django.db import transaction
from django.db.models import F
from django.db.models.functions import Coalesce

from . import conf, db, signals
from .core import clock, pause
from .enums import RunState
from .models import Run, Schedule

logger = logging.getLogger("durablebeat")


@dataclass(frozen=True)
class Ended:
    """A run that reached a final state, as ``after_runs`` needs it."""

    schedule_id: int
    #: the schedule's own ``pause_after_failures`` (None: the setting's)
    own_bound: int | None
    #: its new state, and the one it moved from (a lost run already counted)
    state: str
    was: str | None = None


def after_runs(ended: Iterable[Ended], at: dt.datetime) -> list[str]:
    """Count these runs' outcomes in their schedules' failures in a row, and pause each
    schedule whose count reached its bound; ``at``: when they ended. Returns the names of
    the schedules paused."""
    default = conf.settings.PAUSE_AFTER_FAILURES
    counted: Counter[int] = Counter()
    bounds: dict[int, int] = {}
    last: dict[int, str] = {}
    reset: set[int] = set()
    for run in ended:
        limit = pause.bound(run.own_bound, default)
        if limit is None:
            continue
        step = pause.step(run.state, run.was)
        if step is pause.Step.COUNT:
            counted[run.schedule_id] += 1
            bounds[run.schedule_id], last[run.schedule_id] = limit, run.state
        elif step is pause.Step.RESET:
            reset.add(run.schedule_id)
    if reset:
        Schedule.objects.filter(pk__in=sorted(reset), failures_in_a_row__gt=0).update(
            failures_in_a_row=0
        )
    paused = []
    for schedule_id, n in sorted(counted.items()):
        Schedule.objects.filter(pk=schedule_id).update(
            failures_in_a_row=Coalesce(F("failures_in_a_row"), 0) + n
        )
        name = _pause_if_reached(schedule_id, bounds[schedule_id], last[schedule_id], at)
        if name is not None:
            paused.append(name)
    return paused


def _pause_if_reached(schedule_id: int, limit: int, last_state: str, at: dt.datetime) -> str | None:
    found = (
        Schedule.objects.filter(pk=schedule_id, enabled=True, failures_in_a_row__gte=limit)
        .values_list("name", "failures_in_a_row")
        .first()
    )
    if found is None:
        return None
    name, count = found[0], found[1] or 0  # at least the bound: never None here
    slots = (
        Run.objects.filter(schedule_id=schedule_id, state__in=(RunState.FAILED, RunState.LOST))
        .order_by("-slot")
        .values_list("slot", flat=True)[: min(count, pause.NAMED_SLOTS)]
    )
    note = pause.note(count, list(slots), last_state, at)
    now = clock.now()
    again = Schedule.objects.filter(pk=schedule_id, enabled=True, failures_in_a_row__gte=limit)
    if not again.update(enabled=False, paused_at=now, paused_note=note, paused_on_failure=True):
        return None  # paused meanwhile (a person, another run's end), or a success reset it
    logger.warning(
        "paused schedule=%s after %d failures in a row: %s",
        name,
        count,
        note,
        extra={"event": "paused", "schedule": name, "failures": count},
    )
    transaction.on_commit(
        partial(signals.send, signals.schedule_paused, name, note=note, failures=count, at=now),
        using=db.alias(),
    )
    return str(name)
