"""What really happened to a fire: the run's moves after publish (R11-R13).

claimed -> published -> started -> succeeded | failed, published/started -> lost
(reclaimed, see ``reclaim``), and published -> no news (no worker news within the bound,
R22). Each move is one conditional UPDATE keyed on the run's task id,
so it is safe to apply twice, in any order, from the worker's signals and from the result
backend alike. "Later evidence wins": a completion turns a lost run into succeeded or failed,
and nothing moves a succeeded or failed run again.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Any

from django.db.models import Case, F, Q, QuerySet, Value, When
from django.db.models.functions import Coalesce

from .. import db
from ..enums import UNTRACKED, RunState
from ..models import Run, Schedule
from ..overlap import release_kept
from ..pausing import Ended, after_runs
from ..validation import storable

#: states a start may move on from: a lost (or no-news) run that starts was alive after all,
#: and a started one that starts again was redelivered (acks_late after its worker died)
STARTABLE = (
    RunState.CLAIMED,
    RunState.PUBLISHED,
    RunState.STARTED,
    RunState.LOST,
    RunState.NO_NEWS,
)
#: states a completion may move on from (R11, R22: a completion overrides lost and no news)
COMPLETABLE = STARTABLE
#: error text kept on a run
MAX_ERROR = 4000
#: a start or a completion clears the note of a lost or no-news run (the news overrides
#: it) and keeps any other: a one-off's "fired late: ..." (R31), who asked for a "run now"
#: (``report`` names an API call and an admin click apart by it)
KEEP_DETAIL = Case(
    When(state__in=(RunState.LOST, RunState.NO_NEWS), then=Value("")), default=F("detail")
)


@dataclass(frozen=True)
class Started:
    """A worker began the body of a run's task."""

    task_id: str
    at: dt.datetime
    worker: str
    worker_pid: int | None
    hard_time_limit: float | None


@dataclass(frozen=True)
class Finished:
    """A run's body ended: ``succeeded`` when it returned normally (R12)."""

    task_id: str
    at: dt.datetime
    succeeded: bool
    started_at: dt.datetime | None = None
    soft_time_limit_exceeded: bool = False
    error: str = ""
    #: read from the result backend by the reconciliation, not sent by a worker (R13)
    from_backend: bool = False


def start(event: Started) -> bool:
    """Record a start; False when the task id is not a run (not ours, or not written yet)."""
    return bool(
        Run.objects.filter(task_id=event.task_id, state__in=STARTABLE).update(
            detail=KEEP_DETAIL,  # first: MySQL's SET reads the state it already set
            state=RunState.STARTED,
            started_at=event.at,
            worker=storable(event.worker)[:255],
            worker_pid=event.worker_pid,
            hard_time_limit=event.hard_time_limit,
            published_at=Coalesce(F("published_at"), event.at),
        )
    )


def finish(event: Finished) -> bool:
    """Record a completion and move the schedule's last outcome (R11, R12).

    ``last_completed_at`` moves on every succeeded run, however late (never back); a failure moves
    ``last_failed_at`` and never ``last_completed_at``.
    """
    state = RunState.SUCCEEDED if event.succeeded else RunState.FAILED
    changes: dict[str, object] = {
        # first: MySQL/MariaDB's SET reads the values it already set, so KEEP_DETAIL must
        # see the run's state before this update moves it
        "detail": KEEP_DETAIL,
        "state": state,
        "finished_at": event.at,
        "started_at": Coalesce(F("started_at"), event.started_at or event.at),
        "published_at": Coalesce(F("published_at"), event.started_at or event.at),
        "soft_time_limit_exceeded": event.soft_time_limit_exceeded,
        "error": storable(event.error)[:MAX_ERROR],
    }
    with db.atomic():
        runs = Run.objects.filter(task_id=event.task_id, state__in=COMPLETABLE)
        if event.from_backend and runs.filter(started_at__isnull=True).exists():
            changes["detail"] = UNTRACKED  # a worker ran it, none said so (R27)
        found = _move(runs, changes)
        if found is None:
            return False
        schedule_id, kept, was, own_bound = found
        if kept is not None:  # R34: the slot kept behind this run goes now
            release_kept([schedule_id], event.at)
        # R36: the count of failures in a row (a lost run that failed was counted already)
        after_runs([Ended(schedule_id, own_bound, state, was)], event.at)
        # Only updated fields: a save() would clear the row's error and touch the rest.
        # A late reconciliation older than what is recorded moves no time back, and does
        # not overwrite the outcome of a newer completion.
        mark = "last_completed_at" if event.succeeded else "last_failed_at"
        row = Schedule.objects.filter(pk=schedule_id)
        row.filter(Q(**{f"{mark}__isnull": True}) | Q(**{f"{mark}__lt": event.at})).update(
            **{mark: event.at}
        )
        row.exclude(last_completed_at__gt=event.at).exclude(last_failed_at__gt=event.at).update(
            last_outcome=state
        )
    return True


#: what ``finish`` reads of a run before it moves it: its schedule, the slot that schedule
#: keeps (R34), the state the run moves from and the schedule's own bound (R36)
_BEFORE = ("schedule_id", "schedule__buffered_slot", "state", "schedule__pause_after_failures")
#: tries of ``_move``'s compare-and-set: each lost try is another writer's move of the run
_TRIES = 3


def _move(runs: QuerySet[Run], changes: dict[str, object]) -> tuple[Any, ...] | None:
    """Move the run from the state it was read in (compare-and-set), so that the state it
    moved from is known for sure (R36: a lost run's failure is not counted twice); read
    again when another writer (the reclaim round) moved it meanwhile. ``_BEFORE``'s values,
    or None when no run moved."""
    for _ in range(_TRIES):
        found = runs.values_list(*_BEFORE).first()
        if found is None:
            return None
        if runs.filter(state=found[2]).update(**changes):
            return tuple(found)
    return None


def is_replaced(run_id: int) -> bool:
    """R34: the run ended ``replaced`` (a later slot of its ``overlap=replace`` schedule
    took its place): its message must not run."""
    return Run.objects.filter(pk=run_id, state=RunState.REPLACED).exists()
