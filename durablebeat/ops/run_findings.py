"""What ``check`` finds in the run ledger (R15, R17, R22): runs lost, unresolved, with no
news, not sendable, and schedules with no success over their last periods."""

from __future__ import annotations

import datetime as dt
import functools
import itertools
import operator
from collections.abc import Callable, Sequence
from typing import Any

from django.apps import apps
from django.db import DatabaseError, connections, router, transaction
from django.db.models import Case, Count, Exists, F, Max, Min, OuterRef, Q, QuerySet, When
from django.db.models.functions import Coalesce

from .. import conf, db
from ..core import clock, timing
from ..core.policy import hard_limit
from ..enums import UNTRACKED, Failure, Kind, RunState
from ..models import TIMING_FIELDS, Run, Schedule
from ..words import ago
from . import coverage
from .findings import (
    SHOWN,
    Finding,
    active_schedules,
    count_words,
    counted,
    each_shown,
    unreadable_row,
)

# --- runs ---------------------------------------------------------------------------------


def _per_schedule(runs: QuerySet[Run], at: Any) -> Any:
    """``runs`` counted per schedule name (``n``), with the time ``at`` of each group."""
    return runs.values("schedule__name").annotate(n=Count("id"), at=at).order_by("schedule__name")


def find_lost(now: dt.datetime) -> list[Finding]:
    """Runs reclaimed as lost (R15) within the look-back window."""
    since = now - conf.settings.CHECK_LOOKBACK
    lost = _per_schedule(
        Run.objects.filter(state=RunState.LOST)
        .annotate(ended=Coalesce("finished_at", "claimed_at"))
        .filter(ended__gte=since),
        Max("ended"),
    )
    return [
        Finding(
            "lost_runs",
            f"{g['schedule__name']}: {g['n']} run(s) lost in the last "
            f"{ago(since, now)} (worker gone or past its hard time limit), "
            f"the latest {ago(g['at'], now)} ago",
            g["schedule__name"],
        )
        for g in lost
    ]


def _last_news(run: Run) -> dt.datetime:
    return run.started_at or run.published_at or run.claimed_at


def _unresolved_after(run: Run) -> dt.timedelta:
    """How long a run may stay in flight before ``check`` calls it unresolved."""
    s = conf.settings
    if run.state == RunState.CLAIMED:
        return s.UNCONFIRMED_AFTER  # the publish was never confirmed: broker trouble
    if run.state == RunState.STARTED and (limit := hard_limit(run.hard_time_limit)) is not None:
        # Orphan reclaim should have ended it by then (R15).
        try:
            return limit + s.RECLAIM_MARGIN + s.GC_INTERVAL
        except OverflowError:  # a limit about as long as the calendar never runs out
            return dt.timedelta.max
    return s.UNRESOLVED_AFTER


def _describe_unresolved(state: str, runs: list[Run], now: dt.datetime) -> str:
    oldest = min(_last_news(r) for r in runs)
    name = runs[0].schedule.name
    if state == RunState.CLAIMED:
        what = "claimed but never confirmed on the broker (is the broker reachable?)"
    else:
        what = "started with no completion recorded (worker hung, or completion not recorded?)"
    return f"{name}: {len(runs)} run(s) {what}, the oldest for {ago(oldest, now)}"


def find_unresolved(now: dt.datetime) -> list[Finding]:
    s = conf.settings
    shortest = min(s.UNCONFIRMED_AFTER, s.UNRESOLVED_AFTER, s.RECLAIM_MARGIN + s.GC_INTERVAL)
    candidates = (
        # Published runs with no news are find_no_news's (R22).
        Run.objects.filter(state__in=UNRESOLVED_STATES, claimed_at__lt=now - shortest)
        .select_related("schedule")
        .order_by("schedule__name", "state", "claimed_at")
    )
    late, findings = [], []
    for run in candidates:
        try:
            if now - _last_news(run) > _unresolved_after(run):
                late.append(run)
        except DatabaseError:
            raise
        except Exception as exc:  # a run whose times cannot be computed with (R21)
            findings.append(unreadable_row(run.schedule.name, f"run {run.pk}'s age", exc))
    for (_, state), group in itertools.groupby(late, key=lambda r: (r.schedule_id, r.state)):
        runs = list(group)
        findings.append(
            Finding(
                "unresolved_runs",
                _describe_unresolved(state, runs, now),
                runs[0].schedule.name,
            )
        )
    return findings


#: in flight and reported by ``find_unresolved``
UNRESOLVED_STATES = (RunState.CLAIMED, RunState.STARTED)


def find_no_news(now: dt.datetime) -> list[Finding]:
    """R22: runs published that no worker started within the no-news bound (a message the
    broker lost, a queue nobody consumes), reported when they stop holding their schedule,
    and for ``CHECK_LOOKBACK`` after, unless later news resolved them. A run the result
    backend shows executed is not one: ``find_untracked`` says what it is."""
    s = conf.settings
    runs = _per_schedule(
        _without_backend_news(
            Run.objects.filter(
                Q(state=RunState.NO_NEWS, claimed_at__gte=now - s.CHECK_LOOKBACK)
                # A schedule's countdown delays its bound (R25): the no-news round marks
                # those runs when it is past, and they are reported from then.
                | Q(state=RunState.PUBLISHED, published_at__lt=now - s.NO_NEWS_AFTER)
                & ~Q(schedule__countdown__gt=0)
            )
        ),
        Min(Coalesce("published_at", "claimed_at")),
    )
    return [
        Finding(
            "no_news",
            f"{g['schedule__name']}: {g['n']} run(s) published that no worker started "
            f"(message lost by the broker, or its queue not consumed), the oldest sent "
            f"{ago(g['at'], now)} ago; they no longer hold the schedule",
            g["schedule__name"],
        )
        for g in runs
    ]


# --- a worker that runs the tasks but does not report them -------------------------------


#: result backend states that say a worker took the message
EXECUTED = ("STARTED", "SUCCESS", "FAILURE", "RETRY", "REVOKED")


def _task_results() -> Any:
    """django-celery-results' TaskResult model when it is installed, else None."""
    try:
        return apps.get_model("django_celery_results", "TaskResult")
    except LookupError:
        return None


def _backend_news(runs: QuerySet[Run]) -> Any:
    """Which of ``runs`` the result backend (django-celery-results) shows taken by a
    worker: a subquery on the same database; where its router puts its table on another
    database than durablebeat's, the task ids read there first (no query joins two)."""
    model = _task_results()
    if model is None:
        return None
    executed = model.objects.filter(status__in=EXECUTED)
    if router.db_for_read(model) == db.alias():
        return Exists(executed.filter(task_id=OuterRef("task_id")))
    ids = list(runs.exclude(task_id=None).values_list("task_id", flat=True))
    return Q(task_id__in=list(executed.filter(task_id__in=ids).values_list("task_id", flat=True)))


def _without_backend_news(runs: QuerySet[Run]) -> QuerySet[Run]:
    news = _backend_news(runs)
    return runs if news is None else runs.exclude(news)


def find_untracked(now: dt.datetime) -> list[Finding]:
    """Runs a worker executed that no worker reported (R13, R27): the result backend says
    the task ran (a django-celery-results row, or the reconciliation already applied one),
    but no worker sent the start that names it. The worker process is running without
    durablebeat's tracking: every run looks like a lost message (``no_news``), ``skip``
    schedules wait out the no-news bound on every slot, completions come late or never."""
    s = conf.settings
    since = now - s.CHECK_LOOKBACK
    reconciled = Q(detail=UNTRACKED, finished_at__gte=since)
    waiting = Q(state__in=(RunState.PUBLISHED, RunState.NO_NEWS), claimed_at__gte=since)
    runs = Run.objects.exclude(task_id=None)
    news = _backend_news(runs.filter(waiting))
    runs = runs.filter(reconciled) if news is None else runs.filter(reconciled | (waiting & news))
    groups = _per_schedule(runs, Max("claimed_at"))
    return [
        Finding(
            "untracked_worker",
            f"{g['schedule__name']}: {g['n']} run(s) executed (the result backend says so) "
            f"that no worker reported, the latest claimed {ago(g['at'], now)} ago: "
            "durablebeat is likely not in the worker's INSTALLED_APPS, or its task signals "
            "are not connected in the worker process; restart the worker with it",
            g["schedule__name"],
        )
        for g in groups
    ]


def find_unpublishable(now: dt.datetime) -> list[Finding]:
    """R21: slots whose message the broker client refused for its own content (an expiry
    it cannot encode, an unserialisable argument): failed at once, never retried, so the
    schedule will fail the same way on its next slot until the row is fixed."""
    since = now - conf.settings.CHECK_LOOKBACK
    refused = _per_schedule(
        Run.objects.filter(
            state=RunState.FAILED, failure=Failure.UNPUBLISHABLE, finished_at__gte=since
        ),
        Max("finished_at"),
    )
    return [
        Finding(
            "unpublishable",
            f"{g['schedule__name']}: {g['n']} slot(s) not sent, the broker client refused "
            f"the message for its own content (see the run's error), the latest "
            f"{ago(g['at'], now)} ago; fix the schedule's message options or arguments",
            g["schedule__name"],
        )
        for g in refused
    ]


def no_success_bound(
    spec: timing.Spec,
    until: dt.datetime,
    periods: int,
    covered: Sequence[coverage.Stretch] | None = None,
) -> dt.datetime | None:
    """A schedule counted from ``since`` has ``periods`` slots in (since, until] exactly when
    ``since < bound``: its ``periods``-th latest slot at or before ``until``. None for a
    one-off, for a crontab without that many slots in the last 45 years, and for an interval
    whose periods reach back before year 1 (no row is that old).

    ``covered``: count only slots (an interval: only time) inside these stretches, when a
    beat was alive and past its startup grace (R27); None counts all time."""
    if isinstance(spec, timing.Interval):
        try:
            need = periods * spec.every
            if covered is not None:
                bound = coverage.duration_bound(covered, until, need)
                return None if bound is None else bound + dt.timedelta(microseconds=1)
            return until - need + dt.timedelta(microseconds=1)
        except OverflowError:
            return None
    if isinstance(spec, timing.Clocked | timing.Custom):  # a custom one's periods: unknown
        return None
    if covered is not None:
        return coverage.slot_bound(spec, covered, until, periods)
    window = dt.timedelta(days=1)
    while window <= dt.timedelta(days=16384):
        slots = list(timing.slots_between(spec, until - window, until))
        if len(slots) >= periods:
            return slots[-periods]
        window *= 4
    return None


def _bound_or_error(
    timing_values: tuple[Any, ...],
    until: dt.datetime,
    periods: int,
    covered: Sequence[coverage.Stretch],
) -> dt.datetime | Exception | None:
    """``no_success_bound`` of one timing; the exception when its math cannot be done."""
    try:
        spec = Schedule(**dict(zip(TIMING_FIELDS, timing_values, strict=True))).to_spec()
    except timing.InvalidSchedule:
        return None  # beat sets the row aside; bad_row says so
    try:
        return no_success_bound(spec, until, periods, covered)
    except Exception as exc:  # R21: the row is named, the other rows are still checked
        return exc


#: what rows share for ``find_no_success``: the timing and the startup grace, and the last
#: outcome, so that a group's failing rows are read through durablebeat_outcome_idx (those
#: of a failed or never-run outcome, the usual ones, are few beside a million succeeded)
_GROUP_FIELDS = (*TIMING_FIELDS, "startup_grace", "last_outcome")


def _same(group: dict[str, Any]) -> Q:
    """The rows of one group (``_GROUP_FIELDS`` as ``group`` has them, NULL as NULL)."""
    return Q(
        **{
            (f"{field}__isnull" if group[field] is None else field): (
                True if group[field] is None else group[field]
            )
            for field in _GROUP_FIELDS
        }
    )


def _counted_before(bound: dt.datetime, grace: dt.timedelta) -> Q:
    """Rows whose periods are counted from before ``bound``: from the last success, or,
    never having succeeded, from creation plus the grace, and never from before they were
    last enabled again, plus the grace (``_periods_start`` in SQL)."""
    start = clock.before(bound, grace)
    return (
        Q(last_completed_at__lt=bound) | Q(last_completed_at__isnull=True, created_at__lt=start)
    ) & (Q(enabled_at__isnull=True) | Q(enabled_at__lt=start))


def _periods_start(
    completed: dt.datetime | None,
    created: dt.datetime,
    enabled: dt.datetime | None,
    grace: dt.timedelta,
) -> dt.datetime:
    """Where a row's periods are counted from."""
    since = completed if completed is not None else clock.shift(created, grace)
    if enabled is not None:
        since = max(since, clock.shift(enabled, grace))  # enabled again: its periods start over
    return since


def hashed(groups: Any) -> list[dict[str, Any]]:
    """``groups`` (a grouped query) read. On PostgreSQL, hashed: its planner counts a group
    per few rows for the mostly-NULL timing columns and sorts a million rows on disk
    (1.9 s at a million schedules) where a hash of the few hundred groups takes 0.4 s
    (``jit`` off: compiling the query took a quarter of that)."""
    connection = connections[groups.db]
    if connection.vendor != "postgresql":
        return list(groups)
    with transaction.atomic(using=groups.db), connection.cursor() as cursor:
        cursor.execute("SELECT current_setting('enable_sort'), current_setting('jit')")
        sort, jit = cursor.fetchone()
        cursor.execute(
            "SELECT set_config('enable_sort', 'off', true), set_config('jit', 'off', true)"
        )
        found = list(groups)
        # as they were: inside a caller's transaction, SET LOCAL would outlive this query
        cursor.execute(
            "SELECT set_config('enable_sort', %s, true), set_config('jit', %s, true)", [sort, jit]
        )
    return found


#: no_success's failing groups ORed in one query: each is ~20 conditions, and SQLite's
#: parser refuses an expression tree deeper than 1,000 ("Expression tree is too large")
OR_CHUNK = 50


def _unreadable_bound(exc: Exception) -> Callable[[Schedule], Finding]:
    return lambda row: unreadable_row(row.name, "its no-success bound", exc)


def find_no_success(now: dt.datetime) -> list[Finding]:
    """A schedule with no succeeded run over its last ``NO_SUCCESS_PERIODS`` slots.

    Counted from its last success (or, never having succeeded, from its creation plus the
    startup grace; never from before it was last enabled again, plus the grace) up to
    ``now - OVERDUE_TOLERANCE`` so that a run of the latest slot has time to finish. Only
    periods that passed while a beat was alive and past its startup grace count (R27): a
    deploy or an outage is not a failure streak, ``no_beat`` reports it. It catches a job
    that fails every time, and one whose next fire keeps moving away (the
    restart-starvation story) although nothing looks overdue.

    The schedule math runs once per distinct timing, not per row, and the rows are not read
    one by one (R33): one grouped query gives each (timing, grace, last outcome) and the
    earliest its rows count from; a group whose earliest is not before its bound has no
    failing row and costs nothing more, and the failing rows of the others are read by a
    query per ``OR_CHUNK`` groups (through the outcome's index), the first ``SHOWN`` by
    name, the rest counted.
    With one schedule per customer, a million rows share a few hundred timings
    (benchmarks/check_cost.py, benchmarks/million_reads.py).
    """
    s = conf.settings
    periods = s.NO_SUCCESS_PERIODS
    until = now - s.OVERDUE_TOLERANCE
    alive = coverage.lifetimes(now, s.HEARTBEAT_STALE_AFTER)
    rows = active_schedules().exclude(kind=Kind.CLOCKED)
    groups = (
        rows.values(*_GROUP_FIELDS)
        .annotate(
            done=Min("last_completed_at"),
            new=Min(Case(When(last_completed_at__isnull=True, then=F("created_at")))),
        )
        .order_by()
    )
    findings: list[Finding] = []
    failing: list[Q] = []
    bounds: dict[tuple[Any, ...], dt.datetime | Exception | None] = {}
    for group in hashed(groups):
        grace = group["startup_grace"] or s.STARTUP_GRACE
        starts = [group["done"], group["new"] and clock.shift(group["new"], grace)]
        earliest = min((at for at in starts if at is not None), default=None)
        timing_values = tuple(group[f] for f in TIMING_FIELDS)
        if (key := (*timing_values, grace)) not in bounds:
            covered = coverage.after_grace(alive, grace)
            bounds[key] = _bound_or_error(timing_values, until, periods, covered)
        bound = bounds[key]
        if isinstance(bound, Exception):  # R21: named, the first SHOWN, the rest counted
            findings += each_shown(
                rows.filter(_same(group)).order_by("name"),
                "its no-success bound",
                _unreadable_bound(bound),
                "bad_row",
                "schedules whose no-success bound check cannot compute",
            )
            continue
        if bound is None or earliest is None or earliest >= bound:
            continue  # every row of the group counts from its bound or later
        failing.append(_same(group) & _counted_before(bound, grace))
    if not failing:
        return findings
    # The groups ORed a chunk at a time (SQLite's parser refuses an expression deeper than
    # 1,000): the first SHOWN by name of each chunk, merged, and the chunks' counts added
    # (each capped, so "more than" stays true).
    shown: list[Schedule] = []
    total = 0
    for start in range(0, len(failing), OR_CHUNK):
        arms = failing[start : start + OR_CHUNK]
        failing_rows = rows.filter(functools.reduce(operator.or_, arms)).order_by("name")
        first = list(failing_rows[:SHOWN])
        total += len(first) + (counted(failing_rows, SHOWN) if len(first) == SHOWN else 0)
        # (one chunk keeps the database's order of names; more are merged by Python's)
        shown = sorted([*shown, *first], key=lambda row: row.name)[:SHOWN] if shown else first
    for row in shown:
        if row.last_completed_at is None:
            detail = f"never succeeded since it was created {ago(row.created_at, now)} ago"
        else:
            detail = f"last success {ago(row.last_completed_at, now)} ago"
        if row.last_outcome:
            detail += f", last outcome {row.last_outcome}"
        findings.append(
            Finding(
                "no_success",
                f"{row.name}: no successful run over its last {periods} periods ({detail})",
                row.name,
            )
        )
    if rest := total - len(shown):
        findings.append(
            Finding(
                "no_success",
                f"and {count_words(rest)} more schedules with no successful run over their "
                f"last {periods} periods",
            )
        )
    return findings
