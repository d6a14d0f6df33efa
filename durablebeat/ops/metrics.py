"""Prometheus metrics, computed from the database at scrape time (the ``prometheus`` extra).

Nothing is counted in process memory: beat, the workers and the web processes come and go
on every deploy, and the ledger already knows everything. The view serves one registry
holding only ``DurablebeatCollector``; mount it with ``path("durablebeat/",
include("durablebeat.urls"))``. Without prometheus-client installed the view answers 501.
"""

from __future__ import annotations

import datetime as dt
import hmac
import logging
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from django.db import DatabaseError
from django.db.models import Count, Max, QuerySet
from django.http import HttpRequest, HttpResponse
from django.views.decorators.http import require_GET

from .. import conf, dbclock
from ..core import clock, timing
from ..enums import FINAL_STATES, RunState
from ..models import Boot, Run, Schedule
from . import health, skew

logger = logging.getLogger("durablebeat")
NOT_INSTALLED = "prometheus-client is not installed: pip install durablebeat[prometheus]"

try:
    from prometheus_client import CollectorRegistry, generate_latest
    from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
    from prometheus_client.exposition import CONTENT_TYPE_LATEST

    AVAILABLE = True
except ImportError:  # pragma: no cover - exercised only without the extra
    AVAILABLE = False


def period_seconds(spec: timing.Spec, now: dt.datetime) -> float | None:
    """The gap between two slots: ``every``, or a crontab's next two slots; None: one-off."""
    if isinstance(spec, timing.Interval):
        return spec.every.total_seconds()
    if isinstance(spec, timing.Clocked | timing.Custom):
        return None
    first = timing.next_slot(spec, now)
    second = timing.next_slot(spec, first) if first is not None else None
    if first is None or second is None:
        return None
    return (second - first).total_seconds()


def _schedule_samples(
    row: Schedule, now: dt.datetime
) -> tuple[float, float, float | None, float | None]:
    """Overdue, stuck and since-completion seconds and the period of one row."""
    late = (now - row.next_fire_at).total_seconds() if row.next_fire_at else 0.0
    stuck_for = (now - row.stuck_since).total_seconds() if row.stuck_since else 0.0
    done = row.last_completed_at
    try:
        seconds = period_seconds(row.to_spec(), now)
    except timing.InvalidSchedule:
        seconds = None
    return (
        max(0.0, late) if not row.error else 0.0,
        stuck_for,
        None if done is None else (now - done).total_seconds(),
        seconds,
    )


def _run_counter(name: str, documentation: str, runs: QuerySet[Run], by: str) -> Any:
    """A counter of ``runs`` per schedule and per value of the run field ``by``."""
    fam = CounterMetricFamily(name, documentation, labels=["schedule", by])
    rows = runs.values("schedule__name", by).annotate(n=Count("id")).order_by("schedule__name", by)
    for r in rows:
        fam.add_metric([r["schedule__name"], r[by]], r["n"])
    return fam


class DurablebeatCollector:
    """Every sample is read from the database when Prometheus scrapes."""

    def __init__(self, now: Any = clock.now) -> None:
        self._now = now

    def describe(self) -> list[Any]:
        return []  # computed at scrape: the registry must not call collect() at register

    def collect(self) -> Iterator[Any]:
        now = self._now()
        up = GaugeMetricFamily(
            "durablebeat_database_up", "1 when the metrics could be read from the database."
        )
        try:
            families = list(self._families(now))
        except DatabaseError as exc:
            logger.error(
                "metrics: database unreachable: %s", exc, extra={"event": "metrics_db_error"}
            )
            up.add_metric([], 0)
            yield up
            return
        up.add_metric([], 1)
        yield up
        yield from families

    def _families(self, now: dt.datetime) -> Iterator[Any]:
        """Each group of families on its own: one that raises on what the rows hold is
        logged and counted in ``durablebeat_metrics_errors``, the others are still served
        (R21). Only a database error ends the scrape (``durablebeat_database_up 0``)."""
        groups: tuple[Callable[[], Iterable[Any]], ...] = (
            lambda: [self._fires()],
            lambda: [self._runs()],
            lambda: list(self._schedules(now)),
            lambda: list(self._beat(now)),
            lambda: [self._findings(now)],
        )
        errors = GaugeMetricFamily(
            "durablebeat_metrics_errors",
            "Metric groups that could not be computed at this scrape (the log says why).",
        )
        failed = 0
        for group in groups:
            try:
                yield from group()
            except DatabaseError:
                raise
            except Exception as exc:
                failed += 1
                logger.exception(
                    "metrics: a group failed: %r", exc, extra={"event": "metrics_error"}
                )
        errors.add_metric([], failed)
        yield errors

    def _fires(self) -> Any:
        fires = Run.objects.filter(task_id__isnull=False).exclude(
            state__in=(RunState.SKIPPED, RunState.MISSED)
        )
        return _run_counter(
            "durablebeat_fires",
            "Fires sent to the broker, by schedule and reason (from the run ledger).",
            fires,
            "reason",
        )

    def _runs(self) -> Any:
        return _run_counter(
            "durablebeat_runs",
            "Runs that reached a final state, by schedule and state.",
            Run.objects.filter(state__in=FINAL_STATES),
            "state",
        )

    def _schedules(self, now: dt.datetime) -> Iterator[Any]:
        labels = ["schedule"]
        overdue = GaugeMetricFamily(
            "durablebeat_schedule_overdue_seconds",
            "How long past its next fire an enabled schedule is (0 when not due yet).",
            labels=labels,
        )
        stuck = GaugeMetricFamily(
            "durablebeat_schedule_stuck_seconds",
            "How long every fire of the schedule has been skipped (0 when not stuck).",
            labels=labels,
        )
        since_done = GaugeMetricFamily(
            "durablebeat_schedule_seconds_since_last_completion",
            "Seconds since the schedule's last succeeded run (absent: never succeeded).",
            labels=labels,
        )
        period = GaugeMetricFamily(
            "durablebeat_schedule_period_seconds",
            "Seconds between two slots of the schedule (crontab: the next two).",
            labels=labels,
        )
        bad = GaugeMetricFamily(
            "durablebeat_schedule_invalid", "1 when beat cannot use the row (R20).", labels=labels
        )
        for row in Schedule.objects.filter(enabled=True).order_by("name"):
            name = [row.name]
            try:
                samples = _schedule_samples(row, now)
            except Exception as exc:  # R21: the row is marked invalid, the others are served
                logger.warning(
                    "metrics: cannot compute schedule=%s: %r",
                    row.name,
                    exc,
                    extra={"event": "metrics_row_error", "schedule": row.name},
                )
                bad.add_metric(name, 1)
                continue
            late, stuck_for, done_ago, seconds = samples
            bad.add_metric(name, 1 if row.error else 0)
            overdue.add_metric(name, late)
            stuck.add_metric(name, stuck_for)
            if done_ago is not None:
                since_done.add_metric(name, done_ago)
            if seconds is not None:
                period.add_metric(name, seconds)
        yield from (overdue, stuck, since_done, period, bad)

    def _beat(self, now: dt.datetime) -> Iterator[Any]:
        age = GaugeMetricFamily(
            "durablebeat_beat_heartbeat_age_seconds",
            "Seconds since the freshest beat heartbeat (+Inf: no beat ever started).",
        )
        alive = GaugeMetricFamily(
            "durablebeat_beat_alive", "Beat boots with a fresh heartbeat that have not stopped."
        )
        last = Boot.objects.aggregate(at=Max("heartbeat_at"))["at"]
        age.add_metric([], (now - last).total_seconds() if last else float("inf"))
        alive.add_metric([], len(health.live_boots(now)))
        yield age
        yield alive
        offset = GaugeMetricFamily(
            "durablebeat_clock_offset_seconds",
            "Each live beat and worker process: the database's clock minus its own (R26).",
            labels=["kind", "host", "pid"],
        )
        for one in skew.live_offsets(now):
            offset.add_metric([one.kind, one.host, str(one.pid)], one.offset)
        yield offset

    def _findings(self, now: dt.datetime) -> Any:
        fam = GaugeMetricFamily(
            "durablebeat_check_findings",
            "What `manage.py durablebeat check` would report, by finding code and severity.",
            labels=["code", "severity"],
        )
        # Every code is exported, 0 when silent: an alert on it needs no absent() guard.
        counts = {
            (code, severity.name.lower()): 0
            for code, severity in health.SEVERITIES.items()
            if code != "database_unreachable"  # that one is durablebeat_database_up
        }
        for f in health.findings(now):
            key = (f.code, f.severity.name.lower())
            counts[key] = counts.get(key, 0) + 1
        for (code, severity), n in counts.items():
            fam.add_metric([code, severity], n)
        return fam


def render(now: Any = clock.now) -> bytes:
    """The exposition text of one scrape."""
    if not AVAILABLE:
        raise RuntimeError(NOT_INSTALLED)
    registry = CollectorRegistry(auto_describe=False)
    registry.register(DurablebeatCollector(now))
    return bytes(generate_latest(registry))


CLOSED = (
    "metrics are closed: set DURABLEBEAT_METRICS_TOKEN and scrape with "
    "'Authorization: Bearer <token>', or set DURABLEBEAT_METRICS_PUBLIC = True\n"
)


def _refusal(request: HttpRequest) -> HttpResponse | None:
    """Why this request may not read the metrics, or None when it may.

    Closed by default: with no token the view answers only when ``METRICS_PUBLIC`` opens it
    (403 otherwise: the URL is documented, hiding it behind a 404 would only slow down the
    person setting up the scrape). With a token, a request without it gets 401.
    """
    token = conf.settings.METRICS_TOKEN
    if not token:
        if conf.settings.METRICS_PUBLIC:
            return None
        return HttpResponse(CLOSED, status=403, content_type="text/plain")
    given = request.headers.get("Authorization", "")
    if hmac.compare_digest(given.encode(), f"Bearer {token}".encode()):
        return None
    return HttpResponse("unauthorized\n", status=401, content_type="text/plain")


@require_GET
def metrics_view(request: HttpRequest) -> HttpResponse:
    """``GET /durablebeat/metrics``: Prometheus text format."""
    if not AVAILABLE:
        return HttpResponse(NOT_INSTALLED + "\n", status=501, content_type="text/plain")
    if bad := conf.invalid_settings():
        # Where system checks do not run (gunicorn): say which setting, not a 500. Only its
        # name: the reason may quote the value, and this answers before any token is checked.
        names = ", ".join(bad)
        return HttpResponse(
            f"durablebeat is misconfigured: invalid {names} (manage.py durablebeat check)\n",
            status=503,
            content_type="text/plain",
        )
    refusal = _refusal(request)
    if refusal is not None:
        return refusal
    dbclock.refresh()  # R26: "now" on the database's clock, measured at most once a minute
    return HttpResponse(render(), content_type=CONTENT_TYPE_LATEST)
