"""What ``manage.py durablebeat check`` finds (R17): the silent stops, in words.

Each ``find_*`` function looks at the database as it is at ``now`` and returns findings,
one per thing a person has to look at. They are silent on a healthy system: every one of
them is tested firing on a situation built for it and quiet on a healthy one. The command
and the admin's health summary call ``check(now)``, the metrics ``findings(now)``.
"""

from __future__ import annotations

import datetime as dt
import enum
import itertools
import logging
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass
from typing import Any

from django.db import DatabaseError
from django.db.models import Count, Max, Min, Q, QuerySet
from django.db.models.functions import Coalesce

from .. import conf
from ..beat import dberrors
from ..beat.boots import alive_q
from ..beat.claims import UNPUBLISHABLE
from ..conf import invalid_settings
from ..core import clock, timing
from ..core.policy import hard_limit
from ..enums import Kind, RunState
from ..models import TIMING_FIELDS, Boot, Run, Schedule
from .words import duration_words, one_line

logger = logging.getLogger("durablebeat")


class Severity(enum.IntEnum):
    """How bad a finding is; ``check`` exits with the worst one (0 when there is none)."""

    WARNING = 1  #: something went wrong and needs a look; schedules still fire
    CRITICAL = 2  #: schedules are not firing now


#: every finding code and its severity: the one place a severity is written
SEVERITIES = {
    "no_beat": Severity.CRITICAL,
    "overdue": Severity.CRITICAL,
    "stuck": Severity.CRITICAL,
    "lost_runs": Severity.WARNING,
    "unresolved_runs": Severity.WARNING,
    "no_news": Severity.WARNING,
    "unpublishable": Severity.WARNING,
    "no_success": Severity.WARNING,
    "bad_row": Severity.WARNING,
    "database_unreachable": Severity.CRITICAL,
    "database_error": Severity.CRITICAL,
    "check_failed": Severity.CRITICAL,
    "bad_setting": Severity.CRITICAL,
}
CODES = tuple(SEVERITIES)


@dataclass(frozen=True)
class Finding:
    """One line of ``check``: a stable ``code`` to grep or alert on, and a sentence."""

    code: str
    message: str
    schedule: str | None = None

    def __post_init__(self) -> None:
        if self.code not in SEVERITIES:
            raise ValueError(f"unknown finding code {self.code!r}: add it to SEVERITIES")

    @property
    def severity(self) -> Severity:
        return SEVERITIES[self.code]

    def line(self) -> str:
        """One line, whatever a name or an error holds: a newline cannot forge a finding."""
        return one_line(f"{self.severity.name} {self.code}: {self.message}")

    def as_dict(self) -> dict[str, Any]:
        return asdict(self) | {"severity": self.severity.name.lower()}


def ago(then: dt.datetime | None, now: dt.datetime) -> str:
    """``now - then`` in words, for messages: "3 h 5 min" ("never" when there is no then)."""
    return "never" if then is None else duration_words(now - then)


# --- a broken row is a finding, never a crash (R21) ----------------------------------------


def unreadable_row(name: str, what: str, exc: Exception) -> Finding:
    """A row whose values ``check`` cannot compute with: named, so that a person can fix it."""
    logger.warning(
        "check cannot compute %s for schedule=%s: %r",
        what,
        name,
        exc,
        extra={"event": "check_row_error", "schedule": name},
    )
    return Finding(
        "bad_row",
        f"{name}: check cannot compute {what} from this row ({type(exc).__name__}: {exc}); "
        "fix or reset it",
        name,
    )


def _each_row(
    rows: Iterable[Schedule], what: str, build: Callable[[Schedule], Finding | None]
) -> list[Finding]:
    """``build`` for every row; a row it raises on becomes a ``bad_row`` finding naming it.

    Any exception, not a list of known ones: rows hold what a migration, a script or an older
    version left, and the check is what an operator reads when something is wrong. Only a
    database error propagates (``check`` reports it as ``database_unreachable``).
    """
    found = []
    for row in rows:
        try:
            finding = build(row)
        except DatabaseError:
            raise
        except Exception as exc:
            finding = unreadable_row(row.name, what, exc)
        if finding is not None:
            found.append(finding)
    return found


# --- beat liveness ------------------------------------------------------------------------


def _live(now: dt.datetime) -> QuerySet[Boot]:
    return Boot.objects.filter(alive_q(now))


def live_boots(now: dt.datetime) -> list[Boot]:
    return list(_live(now))


def beat_alive(now: dt.datetime) -> bool:
    return _live(now).exists()


def find_no_beat(now: dt.datetime) -> list[Finding]:
    if beat_alive(now):
        return []
    last = Boot.objects.order_by("-heartbeat_at").first()
    if last is None:
        message = "no beat has ever started against this database (is beat running?)"
    elif last.stopped_at is not None:
        message = (
            f"no beat is running: the last one ({last.hostname}:{last.pid}, boot {last.pk}) "
            f"stopped {ago(last.stopped_at, now)} ago"
        )
    else:
        message = (
            f"no beat heartbeat for {ago(last.heartbeat_at, now)}: the last one "
            f"({last.hostname}:{last.pid}, boot {last.pk}) is gone without stopping"
        )
    return [Finding("no_beat", message)]


# --- schedules ----------------------------------------------------------------------------


def _active() -> Any:
    return Schedule.objects.filter(enabled=True, error="")


def find_overdue(now: dt.datetime) -> list[Finding]:
    """Starvation: a next fire long past while a beat is alive and should have fired it."""
    if not beat_alive(now):
        return []  # no_beat says it; every schedule being late is its consequence
    limit = now - conf.settings.OVERDUE_TOLERANCE
    rows = _active().filter(next_fire_at__lt=limit).order_by("next_fire_at")
    return _each_row(
        rows,
        "how overdue it is",
        lambda row: Finding(
            "overdue",
            f"{row.name}: next fire was {row.next_fire_at:%Y-%m-%d %H:%M:%S} UTC, "
            f"{ago(row.next_fire_at, now)} ago, and beat is alive but has not fired it",
            row.name,
        ),
    )


def find_stuck(now: dt.datetime) -> list[Finding]:
    limit = now - conf.settings.STUCK_THRESHOLD
    rows = _active().filter(stuck_since__lt=limit).order_by("stuck_since")
    return _each_row(
        rows,
        "how long it is stuck",
        lambda row: Finding(
            "stuck",
            f"{row.name}: every fire skipped for {ago(row.stuck_since, now)}: {row.stuck_reason}",
            row.name,
        ),
    )


def find_bad_rows(now: dt.datetime) -> list[Finding]:
    rows = Schedule.objects.filter(enabled=True).exclude(error="").order_by("name")
    return [
        Finding(
            "bad_row",
            f"{row.name}: beat cannot use this schedule and skips it: {row.error}",
            row.name,
        )
        for row in rows
    ]


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
    if run.state == RunState.STARTED and (limit := hard_limit(run.hard_time_limit)):
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
    and for ``CHECK_LOOKBACK`` after, unless later news resolved them."""
    s = conf.settings
    runs = _per_schedule(
        Run.objects.filter(
            Q(state=RunState.NO_NEWS, claimed_at__gte=now - s.CHECK_LOOKBACK)
            | Q(state=RunState.PUBLISHED, published_at__lt=now - s.NO_NEWS_AFTER)
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


def find_unpublishable(now: dt.datetime) -> list[Finding]:
    """R21: slots whose message the broker client refused for its own content (an expiry
    it cannot encode, an unserialisable argument): failed at once, never retried, so the
    schedule will fail the same way on its next slot until the row is fixed."""
    since = now - conf.settings.CHECK_LOOKBACK
    refused = _per_schedule(
        Run.objects.filter(
            state=RunState.FAILED, finished_at__gte=since, detail__startswith=UNPUBLISHABLE
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


def no_success_bound(spec: timing.Spec, until: dt.datetime, periods: int) -> dt.datetime | None:
    """A schedule counted from ``since`` has ``periods`` slots in (since, until] exactly when
    ``since < bound``: its ``periods``-th latest slot at or before ``until``. None for a
    one-off, for a crontab without that many slots in the last 45 years, and for an interval
    whose periods reach back before year 1 (no row is that old)."""
    if isinstance(spec, timing.Interval):
        try:
            return until - periods * spec.every + dt.timedelta(microseconds=1)
        except OverflowError:
            return None
    if isinstance(spec, timing.Clocked):
        return None
    window = dt.timedelta(days=1)
    while window <= dt.timedelta(days=16384):
        slots = list(timing.slots_between(spec, until - window, until))
        if len(slots) >= periods:
            return slots[-periods]
        window *= 4
    return None


def _bound_or_error(
    timing_values: tuple[Any, ...], until: dt.datetime, periods: int
) -> dt.datetime | Exception | None:
    """``no_success_bound`` of one timing; the exception when its math cannot be done."""
    try:
        spec = Schedule(**dict(zip(TIMING_FIELDS, timing_values, strict=True))).to_spec()
    except timing.InvalidSchedule:
        return None  # beat sets the row aside; bad_row says so
    try:
        return no_success_bound(spec, until, periods)
    except Exception as exc:  # R21: the row is named, the other rows are still checked
        return exc


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


def find_no_success(now: dt.datetime) -> list[Finding]:
    """A schedule with no succeeded run over its last ``NO_SUCCESS_PERIODS`` slots.

    Counted from its last success (or, never having succeeded, from its creation plus the
    startup grace; never from before it was last enabled again, plus the grace) up to
    ``now - OVERDUE_TOLERANCE`` so that a run of the latest slot has time to finish. It
    catches a job that fails every time, and one whose next fire keeps
    moving away (the restart-starvation story) although nothing looks overdue.

    The schedule math runs once per distinct timing, not per row: with one schedule per
    tenant, 100,000 rows share a handful of timings (benchmarks/check_cost.py).
    """
    s = conf.settings
    periods = s.NO_SUCCESS_PERIODS
    until = now - s.OVERDUE_TOLERANCE
    bounds: dict[tuple[Any, ...], dt.datetime | Exception | None] = {}
    failing: list[int] = []
    findings = []
    rows = (
        _active()
        .exclude(kind=Kind.CLOCKED)
        .values_list(
            "pk",
            "name",
            "last_completed_at",
            "created_at",
            "enabled_at",
            "startup_grace",
            *TIMING_FIELDS,
        )
    )
    for pk, name, completed, created, enabled, grace, *timing_values in rows.iterator(
        chunk_size=5000
    ):
        key = tuple(timing_values)
        if key not in bounds:
            bounds[key] = _bound_or_error(key, until, periods)
        bound = bounds[key]
        if isinstance(bound, Exception):
            findings.append(unreadable_row(name, "its no-success bound", bound))
            continue
        since = _periods_start(completed, created, enabled, grace or s.STARTUP_GRACE)
        if bound is not None and since < bound:
            failing.append(pk)
    failing_rows = itertools.chain.from_iterable(
        Schedule.objects.filter(pk__in=failing[i : i + 500]) for i in range(0, len(failing), 500)
    )
    for row in sorted(failing_rows, key=lambda r: r.name):
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
    return findings


def find_database_errors(now: dt.datetime) -> list[Finding]:
    """R23: a database error a beat met that recurs on every try (a feature the server
    refuses, a missing table, a permission): schedules in the database are not firing, and
    waiting will not help. Reported while a beat keeps meeting it (``dberrors``)."""
    return [
        Finding(
            "database_error",
            f"beat {who or '(boot unknown)'} meets a database error on every try, not an "
            f"outage ({count} times, last {ago(at, now)} ago): {error}",
        )
        for error, count, at, who in dberrors.recent(now)
    ]


FINDERS: tuple[Callable[[dt.datetime], list[Finding]], ...] = (
    find_no_beat,
    find_database_errors,
    find_overdue,
    find_stuck,
    find_lost,
    find_unresolved,
    find_no_news,
    find_unpublishable,
    find_no_success,
    find_bad_rows,
)


def findings(now: dt.datetime, only: Iterable[str] | None = None) -> list[Finding]:
    """Everything ``check`` reports at ``now``, worst first; ``only``: these codes.

    A finder that fails for any reason but the database is reported as ``check_failed``
    (kept even when ``only`` leaves it out, counted by ``exit_code`` only when asked for),
    and the others still run: one surprise never hides every other finding. An invalid
    setting is ``bad_setting`` alone (kept and counted whatever ``only`` asks).
    """
    if bad := find_bad_settings():
        # Every finder reads the settings: with one invalid, none can say anything true.
        return bad
    found: list[Finding] = []
    for finder in FINDERS:
        try:
            found.extend(finder(now))
        except DatabaseError:
            raise
        except Exception as exc:
            found.append(check_failed(finder.__name__, exc))
    if only is not None:
        wanted = {*only, "check_failed"}
        found = [f for f in found if f.code in wanted]
    return sorted(_one_bad_row_each(found), key=lambda f: -f.severity)


def find_bad_settings() -> list[Finding]:
    return [
        Finding("bad_setting", why if name in why else f"{name}: {why}")
        for name, why in invalid_settings().items()
    ]


def _one_bad_row_each(found: list[Finding]) -> list[Finding]:
    """A row several finders could not compute with is one ``bad_row``, the first said."""
    seen: set[str | None] = set()
    kept = []
    for f in found:
        if f.code == "bad_row":
            if f.schedule in seen:
                continue
            seen.add(f.schedule)
        kept.append(f)
    return kept


def check_failed(finder: str, exc: Exception) -> Finding:
    logger.exception(
        "check: %s failed: %r", finder, exc, extra={"event": "check_failed", "finder": finder}
    )
    return Finding(
        "check_failed",
        f"{finder} could not run ({type(exc).__name__}: {exc}); see the log for the traceback",
    )


def database_unreachable(exc: Exception) -> Finding:
    return Finding("database_unreachable", f"cannot read the database: {exc}")


def check(now: dt.datetime, only: Iterable[str] | None = None) -> list[Finding]:
    """What ``durablebeat check`` prints: the findings, or that the database cannot be read.

    The database error is reported even when ``only`` leaves it out; ``exit_code`` then does
    not count it, so that a beat liveness probe does not restart a beat that is firing from
    memory through a database outage (R5).
    """
    try:
        return findings(now, only)
    except DatabaseError as exc:
        return [database_unreachable(exc)]


def exit_code(found: Iterable[Finding], only: Iterable[str] | None = None) -> int:
    """0: all is well; 1: warnings; 2: a critical finding (among ``only`` when given)."""
    # A broken configuration counts whatever ``only`` asks: no other finding can be computed.
    wanted = None if only is None else {*only, "bad_setting"}
    return max(
        (int(f.severity) for f in found if wanted is None or f.code in wanted),
        default=0,
    )
