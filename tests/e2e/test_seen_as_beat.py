"""R30 with real processes: a fire of durablebeat looks, to the tools beside beat, like a
fire of Celery's own beat.

sentry-sdk runs in every process with ``CeleryIntegration(monitor_beat_tasks=True)``, its
envelopes written to a file (``tests/e2eapp/sentry_capture.py``, no network); the test counts
check-ins per monitor and status, and the traces of the worker's tasks. Every wait is on a
condition (the ledger, the envelope file), bounded.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from django_celery_results.models import TaskResult

from durablebeat.enums import RunState
from durablebeat.models import Run
from tests.e2eapp import observers, sentry_capture
from tests.e2eapp.models import Execution

from .harness import QUIET, Cluster, wait_until

pytestmark = [QUIET, pytest.mark.e2e]

RECORD = "tests.e2eapp.tasks.record"
MARK = "tests.e2eapp.tasks.record_beat_mark"
FINAL = (RunState.SUCCEEDED, RunState.FAILED, RunState.LOST)
#: as Celery's beat gives them to sentry-sdk: an interval of whole minutes and a crontab are
#: monitored, in the app's zone; an interval under a minute is not (Sentry Crons refuses it)
MONITORS = {
    "minutely": {"schedule": {"type": "interval", "value": 1, "unit": "minute"}, "timezone": "UTC"},
    "cron": {"schedule": {"type": "crontab", "value": "* * * * *"}, "timezone": "UTC"},
}


def _tools(cluster: Cluster, tmp_path: Path) -> tuple[Path, Path]:
    """Sentry's envelopes, and what Celery's signals and OpenTelemetry's spans saw."""
    envelopes, observed = tmp_path / "envelopes.jsonl", tmp_path / "observed.jsonl"
    cluster.settings |= {
        "E2E_SENTRY_ENVELOPES": str(envelopes),
        "E2E_OBSERVE": str(observed),
        "E2E_RESULT_EXTENDED": "1",
    }
    return envelopes, observed


def _signals(observed: Path) -> Counter[str]:
    return Counter(o["signal"] for o in observers.read(observed) if "signal" in o)


def _publish_spans(observed: Path) -> list[dict[str, Any]]:
    return [
        o
        for o in observers.read(observed)
        if o.get("kind") == "PRODUCER" and o["span"].startswith("apply_async/")
    ]


def _check_ins(envelopes: Path) -> list[dict[str, Any]]:
    return [i["payload"] for i in sentry_capture.read(envelopes) if i["type"] == "check_in"]


def _counts(envelopes: Path) -> Counter[tuple[str, str]]:
    return Counter((c["monitor_slug"], c["status"]) for c in _check_ins(envelopes))


def _runs(name: str) -> list[Run]:
    return list(Run.objects.filter(schedule__name=name))


def _settled(*names: str) -> bool:
    """Every run of these schedules in a final state (none in flight)."""
    return all(runs and all(r.state in FINAL for r in runs) for runs in map(_runs, names))


def test_sentry_crons_traces_headers_and_options_as_under_celerys_beat(
    cluster: Cluster, tmp_path: Path
):
    """R30, standalone beat: per monitored schedule one ``in_progress`` check-in per fire and
    one ``ok`` per run that succeeded, same check-in id, the schedule's name as slug and its
    config (interval or crontab, time zone); none for a sub-minute interval. Each fire is a
    trace of its own. Every message carries ``celery_beat_task`` and the name
    django-celery-results stores. ``-s`` and a ``--max-interval`` beyond durablebeat's are
    said at boot; ``-l DEBUG`` says each wake. Celery's signals and OpenTelemetry's publish
    spans: once per boot and once per fire."""
    envelopes, observed = _tools(cluster, tmp_path)
    grace = {"durablebeat": {"startup_grace": 1}}
    cluster.beat_schedule = {
        "minutely": {"task": MARK, "every": 60, **grace},
        "cron": {"task": RECORD, "cron": "* * * * *"},
        "ten-seconds": {"task": RECORD, "every": 10, **grace},
    }
    worker = cluster.worker(concurrency=2)
    wait_until(lambda: "ready" in worker.log(), 60, what="worker ready")
    schedule_file = tmp_path / "celerybeat-schedule-unused"
    beat = cluster.beat(options=("-l", "DEBUG", "-s", str(schedule_file), "--max-interval", "60"))
    wait_until(
        lambda: (
            all(Execution.objects.filter(schedule=n).exists() for n in MONITORS)
            and Execution.objects.filter(schedule="ten-seconds").count() >= 2
        ),
        100,
        what="the crontab's first minute, the interval and two 10 s fires executed",
    )
    assert beat.terminate() == 0
    names = (*MONITORS, "ten-seconds")
    wait_until(lambda: _settled(*names), 60, what="every run final")
    succeeded = {n: sum(r.state == RunState.SUCCEEDED for r in _runs(n)) for n in names}
    fires = {n: len(_runs(n)) for n in names}
    wait_until(
        lambda: all(_counts(envelopes)[(n, "ok")] >= succeeded[n] for n in MONITORS),
        30,
        what="the worker's ok check-ins",
    )

    counts = _counts(envelopes)
    for name, config in MONITORS.items():
        assert counts[(name, "in_progress")] == fires[name] >= 1, counts
        assert counts[(name, "ok")] == succeeded[name] == fires[name], counts
        mine = [c for c in _check_ins(envelopes) if c["monitor_slug"] == name]
        assert all(c["monitor_config"] == config for c in mine), mine
        started = {c["check_in_id"] for c in mine if c["status"] == "in_progress"}
        assert {c["check_in_id"] for c in mine if c["status"] == "ok"} == started
    assert not [c for c in _check_ins(envelopes) if c["monitor_slug"] == "ten-seconds"]

    # A trace per fire: every task the worker ran continued a trace of its own. sentry-sdk
    # sends a task's transaction from its background transport after the task's ok
    # check-in: waited for, as the check-ins are (a loaded machine wrote it seconds later).
    def transactions() -> list[dict[str, Any]]:
        return [
            i["payload"]
            for i in sentry_capture.read(envelopes)
            if i["type"] == "transaction" and i["payload"].get("transaction") in (RECORD, MARK)
        ]

    expected = sum(succeeded.values())
    wait_until(lambda: len(transactions()) >= expected, 30, what="the tasks' transactions")
    tasks = transactions()
    assert len(tasks) == expected
    assert len({t["contexts"]["trace"]["trace_id"] for t in tasks}) == len(tasks)

    # Celery's conventions: celery_beat_task on the message, the schedule's name stored.
    marks = set(Execution.objects.filter(schedule="minutely").values_list("reason", flat=True))
    assert marks == {"celery_beat_task=True"}
    for name in names:
        ids = [r.task_id for r in _runs(name)]
        stored = set(
            TaskResult.objects.filter(task_id__in=ids).values_list("periodic_task_name", flat=True)
        )
        assert stored == {name}

    # Celery's signals and OpenTelemetry: once per boot, and a publish span per fire.
    signals = _signals(observed)
    total = sum(fires.values())
    assert signals["beat_init"] == 1 and signals["beat_embedded_init"] == 0
    assert signals["before_task_publish"] == signals["after_task_publish"] == total
    assert len(_publish_spans(observed)) == total

    log = beat.log()
    assert f"-s {schedule_file} (beat_schedule_filename) is not used" in log
    assert "--max-interval 60 s (beat_max_loop_interval) is more than" in log
    assert not schedule_file.exists()
    assert log.count("beat: Waking up in ") >= 2


def test_sentry_crons_under_worker_with_embedded_beat(cluster: Cluster, tmp_path: Path):
    """R30, ``celery worker -B``: the embedded beat's fire sends its ``in_progress``
    check-in and the worker its ``ok``, as under Celery's beat; Celery's embedded-beat
    signal and OpenTelemetry's publish span are there."""
    envelopes, observed = _tools(cluster, tmp_path)
    cluster.beat_schedule = {
        "minutely": {"task": RECORD, "every": 60, "durablebeat": {"startup_grace": 1}}
    }
    cluster.worker(concurrency=1, options=("-B",))
    wait_until(
        lambda: _counts(envelopes)[("minutely", "ok")] >= 1,
        60,
        what="the embedded beat's fire checked in ok",
    )
    counts = _counts(envelopes)
    assert counts[("minutely", "in_progress")] == counts[("minutely", "ok")] == 1, counts
    signals = _signals(observed)
    assert signals["beat_init"] == signals["beat_embedded_init"] == 1, signals
    assert len(_publish_spans(observed)) == 1
