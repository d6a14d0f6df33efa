"""What ``manage.py durablebeat check`` finds (R17): the silent stops, in words.

Each ``find_*`` function looks at the database as it is at ``now`` and returns findings,
one per thing a person has to look at. They are silent on a healthy system: every one of
them is tested firing on a situation built for it and quiet on a healthy one. The command
and the admin's health summary call ``check(now)``, the metrics ``findings(now)``.

Here: beat liveness, the schedules, database errors and settings, and ``FINDERS``, the list
``check`` runs; the run ledger's finders are in ``run_findings``, and what a finding is, with
its one severity, in ``findings``.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Callable, Iterable

from django.db import DatabaseError
from django.db.models import QuerySet

from .. import conf, schema
from ..beat import dberrors
from ..beat.boots import alive_q
from ..conf import invalid_settings
from ..models import Boot, Schedule
from ..wakeup import LISTEN_DEAF
from ..words import ago, duration_words
from . import coverage
from .findings import CODES as CODES
from .findings import SEVERITIES as SEVERITIES
from .findings import Finding as Finding
from .findings import Severity as Severity
from .findings import active_schedules, each_shown
from .queues import find_unconsumed_queues
from .run_findings import (
    find_lost,
    find_no_news,
    find_no_success,
    find_unpublishable,
    find_unresolved,
    find_untracked,
)
from .skew import find_clock_skew

logger = logging.getLogger("durablebeat")
_US = dt.timedelta(microseconds=1)


# --- beat liveness ------------------------------------------------------------------------


def _live(now: dt.datetime) -> QuerySet[Boot]:
    return Boot.objects.filter(alive_q(now))


def live_boots(now: dt.datetime) -> list[Boot]:
    return list(_live(now))


def beat_alive(now: dt.datetime) -> bool:
    return _live(now).exists()


def find_no_beat(now: dt.datetime) -> list[Finding]:
    """R17, R27: no live beat. A beat that stopped cleanly less than ``DEPLOY_GRACE`` ago is
    a deploy under way, its successor about to boot: quiet. One gone without stopping keeps
    the ``HEARTBEAT_STALE_AFTER`` bound (``alive_q``)."""
    if beat_alive(now):
        return []
    last = Boot.objects.order_by("-heartbeat_at").first()
    if last is None:
        message = "no beat has ever started against this database (is beat running?)"
    elif last.stopped_at is not None:
        grace = conf.settings.DEPLOY_GRACE
        if now - last.stopped_at <= grace:
            return []  # a deploy: the next boot is due within the grace
        message = (
            f"no beat is running: the last one ({last.hostname}:{last.pid}, boot {last.pk}) "
            f"stopped {ago(last.stopped_at, now)} ago and none booted within the deploy "
            f"grace ({duration_words(grace)})"
        )
    else:
        message = (
            f"no beat heartbeat for {ago(last.heartbeat_at, now)}: the last one "
            f"({last.hostname}:{last.pid}, boot {last.pk}) is gone without stopping"
        )
    return [Finding("no_beat", message)]


# --- schedules ----------------------------------------------------------------------------


def find_overdue(now: dt.datetime) -> list[Finding]:
    """Starvation: a next fire long past while a beat is alive and should have fired it:
    later than ``OVERDUE_TOLERANCE`` counting only time a beat was alive, past its grace."""
    if not beat_alive(now):
        return []  # no_beat says it; every schedule being late is its consequence
    s = conf.settings
    # R27: lateness counts only while a beat was alive and past its startup grace.
    covered = coverage.after_grace(
        coverage.lifetimes(now, s.HEARTBEAT_STALE_AFTER), s.STARTUP_GRACE
    )
    # Late by more than the tolerance: more than it of such time since the next fire.
    limit = coverage.duration_bound(covered, now, s.OVERDUE_TOLERANCE + _US)
    if limit is None:
        return []  # no beat has been up that long yet
    limit += _US
    # The due index (enabled, next_fire_at), read from its oldest end: the most overdue
    # first, the rest counted (R33).
    rows = active_schedules().filter(next_fire_at__lt=limit).order_by("next_fire_at", "pk")
    return each_shown(
        rows,
        "how overdue it is",
        lambda row: Finding(
            "overdue",
            f"{row.name}: next fire was {row.next_fire_at:%Y-%m-%d %H:%M:%S} UTC, "
            f"{ago(row.next_fire_at, now)} ago, and beat is alive but has not fired it",
            row.name,
        ),
        "overdue",
        "schedules overdue",
    )


def find_stuck(now: dt.datetime) -> list[Finding]:
    limit = now - conf.settings.STUCK_THRESHOLD
    # durablebeat_stuck_idx: the few stuck rows, longest stuck first (R33)
    rows = active_schedules().filter(stuck_since__lt=limit).order_by("stuck_since", "pk")
    return each_shown(
        rows,
        "how long it is stuck",
        lambda row: Finding(
            "stuck",
            f"{row.name}: every fire skipped for {ago(row.stuck_since, now)}: {row.stuck_reason}",
            row.name,
        ),
        "stuck",
        "schedules stuck",
    )


def set_aside_rows() -> QuerySet[Schedule]:
    """The enabled rows beat sets aside (an ``error``), by name: check's bad_row and
    status's set-aside part. durablebeat_paused_or_bad_idx on PostgreSQL: the rows set
    aside, not every row (R33)."""
    return Schedule.objects.filter(enabled=True).exclude(error="").order_by("name")


def paused_on_failure_rows() -> QuerySet[Schedule]:
    """R36: the schedules that paused themselves after failures in a row, the oldest pause
    first: check's paused_on_failure and status's part. durablebeat_paused_or_bad_idx on
    PostgreSQL: the paused rows, not every row (R33)."""
    rows = Schedule.objects.filter(enabled=False, paused_on_failure=True, deleted_at=None)
    return rows.order_by("paused_at", "pk")


def find_paused_on_failure(now: dt.datetime) -> list[Finding]:
    """R36: critical, as ``stuck`` is: the schedule does not fire, and unlike a failing one
    it never starts again by itself; a person fixes its task and resumes it (or pauses it
    with a note of their own, ``api.pause_schedule``, to keep it paused)."""
    return each_shown(
        paused_on_failure_rows(),
        "its pause",
        lambda row: Finding(
            "paused_on_failure",
            f"{row.name}: not firing, it paused itself {ago(row.paused_at, now)} ago: "
            f"{row.paused_note}; resume it once its task is fixed (the admin's enable, "
            "durablebeat.api.resume_schedule)",
            row.name,
        ),
        "paused_on_failure",
        "schedules paused after failures",
    )


def find_bad_rows(now: dt.datetime) -> list[Finding]:
    return each_shown(
        set_aside_rows(),
        "its error",
        lambda row: Finding(
            "bad_row",
            f"{row.name}: beat cannot use this schedule and skips it: {row.error}",
            row.name,
        ),
        "bad_row",
        "schedules beat cannot use",
    )


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


def find_listen_deaf(now: dt.datetime) -> list[Finding]:
    """R31: a live beat whose LISTEN hears nothing (a pooler in transaction mode): it wakes
    through the broker, and every save of a schedule publishes a wake-up there."""
    deaf = Boot.objects.filter(alive_q(now), incident__kind=LISTEN_DEAF).distinct()
    return [
        Finding(
            "listen_deaf",
            f"beat {boot.hostname}:{boot.pid} (boot {boot.pk}): its LISTEN hears no "
            "notification (a pooler in transaction mode?); it wakes through the broker, and "
            "every save publishes a wake-up there. Fix: set DURABLEBEAT_LISTEN_DATABASE to "
            "a database alias that reaches PostgreSQL directly, then restart beat "
            "(docs/configuration.md: Behind a connection pooler)",
        )
        for boot in deaf.order_by("started_at")
    ]


Finder = Callable[[dt.datetime], list[Finding]]

FINDERS: tuple[Finder, ...] = (
    find_no_beat,
    find_database_errors,
    find_overdue,
    find_stuck,
    find_paused_on_failure,
    find_lost,
    find_unresolved,
    find_no_news,
    find_unconsumed_queues,
    find_untracked,
    find_unpublishable,
    find_no_success,
    find_bad_rows,
    find_clock_skew,
    find_listen_deaf,
)

#: the codes each finder of ``FINDERS`` can report: ``check --only`` runs only the finders
#: that can report a code asked for, so that the liveness probe (``--only no_beat,overdue``)
#: reads what those two read, not the ledger and every schedule's periods (R33). A finder
#: missing here runs whatever ``only`` asks (its findings are then filtered).
FINDS: dict[Finder, frozenset[str]] = {
    find_no_beat: frozenset({"no_beat"}),
    find_database_errors: frozenset({"database_error"}),
    find_overdue: frozenset({"overdue", "bad_row"}),
    find_stuck: frozenset({"stuck", "bad_row"}),
    find_paused_on_failure: frozenset({"paused_on_failure", "bad_row"}),
    find_lost: frozenset({"lost_runs"}),
    find_unresolved: frozenset({"unresolved_runs", "bad_row"}),
    find_no_news: frozenset({"no_news"}),
    find_untracked: frozenset({"untracked_worker"}),
    find_unpublishable: frozenset({"unpublishable"}),
    find_no_success: frozenset({"no_success", "bad_row"}),
    find_bad_rows: frozenset({"bad_row"}),
    find_clock_skew: frozenset({"clock_skew"}),
    find_listen_deaf: frozenset({"listen_deaf"}),
    find_unconsumed_queues: frozenset({"unconsumed_queue"}),
}


def _asked(finder: Finder, wanted: set[str] | None) -> bool:
    codes = FINDS.get(finder)
    return wanted is None or codes is None or bool(codes & wanted)


def findings(now: dt.datetime, only: Iterable[str] | None = None) -> list[Finding]:
    """Everything ``check`` reports at ``now``, worst first; ``only``: these codes, from
    the finders that can report one (``FINDS``).

    A finder that fails for any reason but the database is reported as ``check_failed``
    (kept even when ``only`` leaves it out, counted by ``exit_code`` only when asked for),
    and the others still run: one surprise never hides every other finding. An invalid
    setting is ``bad_setting`` alone (kept and counted whatever ``only`` asks).
    """
    if bad := find_bad_settings():
        # Every finder reads the settings: with one invalid, none can say anything true.
        return bad
    found: list[Finding] = []
    wanted = None if only is None else {*only}
    for finder in FINDERS:
        if not _asked(finder, wanted):
            continue
        try:
            found.extend(finder(now))
        except DatabaseError:
            raise
        except Exception as exc:
            found.append(check_failed(finder.__name__, exc))
    if wanted is not None:
        found = [f for f in found if f.code in wanted | {"check_failed"}]
    return sorted(_one_bad_row_each(found), key=lambda f: -f.severity)


def find_bad_settings() -> list[Finding]:
    return [
        Finding("bad_setting", why if name in why else f"{name}: {why}")
        for name, why in invalid_settings().items()
    ]


def _one_bad_row_each(found: list[Finding]) -> list[Finding]:
    """A row several finders could not compute with is one ``bad_row``, the first said
    (a finder's "and N more" has no schedule: each is kept)."""
    seen: set[str | None] = set()
    kept = []
    for f in found:
        if f.code == "bad_row" and f.schedule is not None:
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


def waiting_for_migrations(
    missing: list[str], now: dt.datetime, only: Iterable[str] | None = None
) -> list[Finding]:
    """R32: the database lacks some of durablebeat's migrations, so that no finder can read
    it: ``migrations_pending``, and ``no_beat`` when no beat is alive (asked of columns every
    release has: a beat of the previous release may be firing meanwhile)."""
    found = [
        Finding(
            "migrations_pending",
            f"{schema.words(missing)}; a beat of this release waits for them, firing nothing",
        )
    ]
    if (only is None or "no_beat" in only) and not beat_alive(now):
        found.append(
            Finding("no_beat", "no beat is alive, and none of this release boots before migrate")
        )
    return sorted(found, key=lambda f: -f.severity)


def check(now: dt.datetime, only: Iterable[str] | None = None) -> list[Finding]:
    """What ``durablebeat check`` prints: the findings, that migrations are pending (R32),
    or that the database cannot be read.

    The database error and the pending migrations are reported even when ``only`` leaves
    them out; ``exit_code`` then does not count them, so that a beat liveness probe does not
    restart a beat that is firing from memory through a database outage (R5), or one that
    waits for the deploy's ``migrate``.
    """
    try:
        if not invalid_settings() and (missing := schema.pending()):
            return waiting_for_migrations(missing, now, only)
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
