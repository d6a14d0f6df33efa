"""Prometheus metrics computed from the database at scrape time, and their view."""

from __future__ import annotations

import datetime as dt

import pytest
from django.db import DatabaseError
from django.test import override_settings

from durablebeat.enums import Reason, RunState
from durablebeat.models import Schedule
from durablebeat.ops import metrics

prometheus_parser = pytest.importorskip("prometheus_client.parser")

pytestmark = pytest.mark.django_db

S = dt.timedelta(seconds=1)
H = dt.timedelta(hours=1)


def scrape(now):
    text = metrics.render(lambda: now).decode()
    samples = {}
    for family in prometheus_parser.text_string_to_metric_families(text):
        for s in family.samples:
            samples[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return samples


def value(samples, name, **labels):
    return samples[(name, tuple(sorted(labels.items())))]


@pytest.fixture
def situation(make_schedule, make_boot, make_run, t0):
    boot = make_boot(started_at=t0 - H, heartbeat_at=t0 - 7 * S)
    job = make_schedule(
        "job",
        every=600,
        next_fire_at=t0 - 90 * S,
        last_completed_at=t0 - 1000 * S,
        stuck_since=t0 - 2 * H,
    )
    make_schedule("hourly", kind="crontab", minute="0", next_fire_at=t0 + H)
    make_run(job, t0 - 3 * H, boot=boot)
    make_run(job, t0 - 2 * H, boot=boot, reason=Reason.STARTUP_GRACE, state=RunState.FAILED)
    make_run(job, t0 - 90 * S, boot=boot, state=RunState.PUBLISHED)
    make_run(job, t0 - 60 * S, boot=boot, state=RunState.SKIPPED)
    make_run(job, t0 - 30 * S, reason=Reason.MANUAL, state=RunState.LOST)
    make_run(job, t0 - 20 * S, boot=boot, state=RunState.MISSED, task_id="claimed-never-sent")
    return job


def test_fires_by_schedule_and_reason(situation, t0):
    samples = scrape(t0)
    assert value(samples, "durablebeat_fires_total", schedule="job", reason="scheduled") == 2
    assert value(samples, "durablebeat_fires_total", schedule="job", reason="startup_grace") == 1
    assert value(samples, "durablebeat_fires_total", schedule="job", reason="manual") == 1


def test_runs_by_final_state(situation, t0):
    samples = scrape(t0)
    assert value(samples, "durablebeat_runs_total", schedule="job", state="succeeded") == 1
    assert value(samples, "durablebeat_runs_total", schedule="job", state="failed") == 1
    assert value(samples, "durablebeat_runs_total", schedule="job", state="lost") == 1
    assert value(samples, "durablebeat_runs_total", schedule="job", state="skipped") == 1
    assert ("durablebeat_runs_total", (("schedule", "job"), ("state", "published"))) not in samples


def test_schedule_gauges(situation, t0):
    samples = scrape(t0)
    assert value(samples, "durablebeat_schedule_overdue_seconds", schedule="job") == 90
    assert value(samples, "durablebeat_schedule_overdue_seconds", schedule="hourly") == 0
    assert value(samples, "durablebeat_schedule_stuck_seconds", schedule="job") == 7200
    assert value(samples, "durablebeat_schedule_stuck_seconds", schedule="hourly") == 0
    assert (
        value(samples, "durablebeat_schedule_seconds_since_last_completion", schedule="job") == 1000
    )
    assert (
        "durablebeat_schedule_seconds_since_last_completion",
        (("schedule", "hourly"),),
    ) not in samples  # never completed: absent, not zero
    assert value(samples, "durablebeat_schedule_period_seconds", schedule="job") == 600
    assert value(samples, "durablebeat_schedule_period_seconds", schedule="hourly") == 3600


def test_beat_heartbeat_age_and_liveness(situation, make_boot, t0):
    samples = scrape(t0)
    assert value(samples, "durablebeat_beat_heartbeat_age_seconds") == 7
    assert value(samples, "durablebeat_beat_alive") == 1
    samples = scrape(t0 + 10 * 60 * S)
    assert value(samples, "durablebeat_beat_heartbeat_age_seconds") == 607
    assert value(samples, "durablebeat_beat_alive") == 0


def test_each_live_host_exports_its_clock_offset(situation, make_boot, t0):
    """R26: the offset each live beat and worker measured; a stopped boot's is not shown."""
    from durablebeat.models import WorkerHeartbeat

    make_boot(
        started_at=t0 - 60 * S, heartbeat_at=t0, hostname="fast", pid=7, clock_offset_seconds=-90.0
    )
    make_boot(
        started_at=t0 - 60 * S,
        heartbeat_at=t0,
        stopped_at=t0,
        hostname="gone",
        pid=8,
        clock_offset_seconds=40.0,
    )
    WorkerHeartbeat.objects.create(worker="w@slow", pid=9, seen_at=t0, clock_offset_seconds=150.0)
    samples = scrape(t0)
    offset = "durablebeat_clock_offset_seconds"
    assert value(samples, offset, kind="beat", host="fast", pid="7") == -90.0
    assert value(samples, offset, kind="worker", host="w@slow", pid="9") == 150.0
    assert not [
        labels for (name, labels) in samples if name == offset and ("host", "gone") in labels
    ]
    assert value(samples, "durablebeat_check_findings", code="clock_skew", severity="warning") == 2


def test_no_beat_ever_is_infinitely_old(t0):
    samples = scrape(t0)
    assert value(samples, "durablebeat_beat_heartbeat_age_seconds") == float("inf")
    assert value(samples, "durablebeat_check_findings", code="no_beat", severity="critical") == 1


def test_check_findings_are_exported(situation, t0):
    samples = scrape(t0)
    findings = {
        dict(labels)["code"]: v
        for (name, labels), v in samples.items()
        if name == "durablebeat_check_findings"
    }
    # Every code is there, 0 when silent, so that an alert needs no absent() guard.
    assert findings == {
        "no_beat": 0,
        "overdue": 0,
        "stuck": 0,
        "paused_on_failure": 0,
        "lost_runs": 1,
        "unresolved_runs": 0,
        "no_news": 0,
        "unconsumed_queue": 0,
        "untracked_worker": 0,
        "unpublishable": 0,
        "no_success": 0,
        "bad_row": 0,
        "clock_skew": 0,
        "database_error": 0,
        "check_failed": 0,
        "bad_setting": 0,
        "migrations_pending": 0,
        "listen_deaf": 0,
    }
    assert value(samples, "durablebeat_database_up") == 1


def test_database_down_is_a_sample_not_a_500(monkeypatch, t0):
    def down(self, now):
        raise DatabaseError("connection refused")

    monkeypatch.setattr(metrics.DurablebeatCollector, "_families", down)
    samples = scrape(t0)
    assert samples == {("durablebeat_database_up", ()): 0}


@override_settings(DURABLEBEAT_METRICS_PUBLIC=True)
def test_metrics_view_serves_prometheus_text(client, situation):
    response = client.get("/durablebeat/metrics")
    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/plain")
    assert b'durablebeat_fires_total{reason="scheduled",schedule="job"} 2.0' in response.content


@override_settings(DURABLEBEAT_METRICS_TOKEN="s3cret")
def test_metrics_view_wants_the_token_when_set(client, situation):
    assert client.get("/durablebeat/metrics").status_code == 401
    wrong = client.get("/durablebeat/metrics", headers={"Authorization": "Bearer nope"})
    assert wrong.status_code == 401
    right = client.get("/durablebeat/metrics", headers={"Authorization": "Bearer s3cret"})
    assert right.status_code == 200


@pytest.mark.parametrize("token", ["", None])
def test_metrics_view_is_closed_without_a_token(client, situation, settings, token):
    """R21 safe defaults: nobody reads the metrics unless a token or a setting opens them."""
    if token is None:
        del settings.DURABLEBEAT_METRICS_TOKEN
    else:
        settings.DURABLEBEAT_METRICS_TOKEN = token
    response = client.get("/durablebeat/metrics")
    assert response.status_code == 403
    assert b"DURABLEBEAT_METRICS_TOKEN" in response.content
    assert b"DURABLEBEAT_METRICS_PUBLIC" in response.content
    assert b"durablebeat_" not in response.content.replace(b"DURABLEBEAT_", b"")


@override_settings(DURABLEBEAT_METRICS_TOKEN="s3cret", DURABLEBEAT_METRICS_PUBLIC=True)
def test_a_token_is_wanted_even_when_the_metrics_are_public(client, situation):
    assert client.get("/durablebeat/metrics").status_code == 401


@override_settings(DURABLEBEAT_METRICS_PUBLIC=False, DEBUG=False)
def test_an_anonymous_request_on_a_bad_row_gets_no_page_of_details(client, situation):
    edge = dt.datetime.max.replace(tzinfo=dt.UTC)
    Schedule.objects.filter(name="job").update(kind="lunar", next_fire_at=edge)
    response = client.get("/durablebeat/metrics")
    assert response.status_code == 403
    assert b"Traceback" not in response.content


def test_a_row_that_raises_is_marked_invalid_and_the_others_are_served(situation, monkeypatch, t0):
    """R21, by injection: any exception from one row's math, not only the known ones."""
    real = metrics.period_seconds

    def fails_for_hourly(spec, now):
        if getattr(spec, "minute", None) == "0":
            raise LookupError("injected")
        return real(spec, now)

    monkeypatch.setattr(metrics, "period_seconds", fails_for_hourly)
    samples = scrape(t0)
    assert value(samples, "durablebeat_schedule_invalid", schedule="hourly") == 1
    assert value(samples, "durablebeat_schedule_invalid", schedule="job") == 0
    assert value(samples, "durablebeat_schedule_period_seconds", schedule="job") == 600
    assert value(samples, "durablebeat_metrics_errors") == 0


def test_a_group_that_raises_is_counted_and_the_others_are_served(situation, monkeypatch, t0):
    def boom(self):
        raise RuntimeError("injected")

    monkeypatch.setattr(metrics.DurablebeatCollector, "_runs", boom)
    samples = scrape(t0)
    assert value(samples, "durablebeat_metrics_errors") == 1
    assert value(samples, "durablebeat_fires_total", schedule="job", reason="scheduled") == 2
    assert value(samples, "durablebeat_beat_alive") == 1
    assert not any(name == "durablebeat_runs_total" for name, _ in samples)


def test_metrics_view_without_prometheus_client_says_how_to_install(client, monkeypatch):
    monkeypatch.setattr(metrics, "AVAILABLE", False)
    response = client.get("/durablebeat/metrics")
    assert response.status_code == 501
    assert b"pip install durablebeat[prometheus]" in response.content


@pytest.mark.parametrize(
    ("setting", "value"),
    [
        ("DURABLEBEAT_METRICS_PUBLIC", "yes"),
        ("DURABLEBEAT_METRICS_TOKEN", "s3cret\nleaked"),
        ("DURABLEBEAT_STUCK_THRESHOLD", float("nan")),
    ],
)
def test_an_invalid_setting_is_a_503_naming_it_not_a_500(
    client, situation, settings, setting, value
):
    """Under gunicorn no system check runs: the scrape says which setting, not its value."""
    setattr(settings, setting, value)
    response = client.get("/durablebeat/metrics", headers={"Authorization": "Bearer s3cret"})
    assert response.status_code == 503
    assert response["Content-Type"].startswith("text/plain")
    assert setting.encode() in response.content
    assert b"leaked" not in response.content
