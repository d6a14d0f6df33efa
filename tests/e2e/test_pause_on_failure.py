"""R36 with real processes: a beat and a worker, a task that always raises, every 2 s, with
``pause_after_failures: 3``. The worker's completions pause the schedule after exactly three
failed runs; no fourth is sent; the real ``check`` command reports it; a resume through the
API makes it fire again, its count started afresh."""

from __future__ import annotations

import datetime as dt

import pytest
from django.utils import timezone

from durablebeat import api
from durablebeat.enums import IN_FLIGHT_STATES, RunState
from durablebeat.models import Run, Schedule
from tests.e2eapp.models import Execution

from .harness import Cluster, wait_until

pytestmark = pytest.mark.django_db(transaction=True)

EVERY = 2  # seconds between slots


def _row() -> Schedule:
    return Schedule.objects.get(name="flaky")


def test_a_schedule_failing_every_time_pauses_after_three_and_fires_again_once_resumed(
    cluster: Cluster,
):
    cluster.beat_schedule = {
        "flaky": {
            "task": "tests.e2eapp.tasks.fail",
            "every": EVERY,
            "durablebeat": {"startup_grace": 1, "pause_after_failures": 3},
        }
    }
    worker = cluster.worker()
    wait_until(lambda: "ready" in worker.log(), 60, what="worker ready")
    beat = cluster.beat()
    wait_until(
        lambda: Schedule.objects.filter(name="flaky", enabled=False).exists(),
        40,
        what="flaky paused itself",
    )

    # --- exactly three failed runs, and no fourth sent -------------------------------------
    row = _row()
    assert (row.paused_on_failure, row.failures_in_a_row) == (True, 3)
    runs = list(Run.objects.filter(schedule=row).order_by("slot"))
    assert [r.state for r in runs] == [RunState.FAILED] * 3, [(r.slot, r.state) for r in runs]
    assert row.paused_note.startswith("paused after 3 failures in a row (failed or lost): runs")
    assert all(f"{r.slot:%H:%M:%S} UTC" in row.paused_note for r in runs)
    # the slot after the third passes with beat alive and nothing sent for it
    after = runs[-1].slot + dt.timedelta(seconds=2 * EVERY)
    wait_until(lambda: timezone.now() > after + dt.timedelta(seconds=1), 10, what="a slot passed")
    assert beat.alive
    assert Run.objects.filter(schedule=row).count() == 3
    assert Execution.objects.filter(schedule="flaky").count() == 3

    # --- the real check command reports it, critical, with the note -----------------------
    code, found = cluster.check()
    [paused] = [f for f in found if f["code"] == "paused_on_failure"]
    assert code == 2 and paused["severity"] == "critical" and paused["schedule"] == "flaky"
    assert row.paused_note in paused["message"]

    # --- resumed through the API: it fires again, counted from 0 ---------------------------
    resumed = timezone.now()
    info = api.resume_schedule("flaky")
    assert (info.enabled, info.paused_note) == (True, None)
    wait_until(
        lambda: Run.objects.filter(schedule=row, claimed_at__gt=resumed).exists(),
        20,
        what="a run after the resume",
    )
    assert beat.terminate() == 0  # no more slots: the count below is these runs' alone
    wait_until(
        lambda: not Run.objects.filter(schedule=row, state__in=IN_FLIGHT_STATES).exists(),
        20,
        what="the runs after the resume ended",
    )
    again = Run.objects.filter(schedule=row, claimed_at__gt=resumed)
    assert again.exists() and all(r.state == RunState.FAILED for r in again)
    assert Execution.objects.filter(schedule="flaky").count() == 3 + again.count()
    row = _row()
    assert row.failures_in_a_row == again.count() < 3 and row.enabled
