"""Issue 30 item 5 with real processes: a project whose ``DATABASE_ROUTERS`` give durablebeat
a database of its own (``scheduler``; tests/e2eapp/routers.py). Beat boots there (its
transaction and its locking reads on one database), LISTENs there, fires issue 30's probe
(one-offs due 1 s after their save, spread across beat's sleep) on time; the worker's
completions land there; ``check`` and ``status`` read there. Nothing of durablebeat's is
written to ``default`` (R3, R31).
"""

from __future__ import annotations

import datetime as dt
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest
from django.db import connections
from django.test import override_settings

from durablebeat.core import clock
from durablebeat.enums import Kind, Reason, RunState
from durablebeat.models import Boot, Run, Schedule
from tests.e2eapp.routers import SCHEDULER

from .harness import QUIET, ROOT, Cluster, wait_until
from .test_pooler import two_beats_and_restarts

pytestmark = [
    QUIET,
    pytest.mark.e2e,
    pytest.mark.postgres_only,
    pytest.mark.django_db(transaction=True, databases=["default", SCHEDULER]),
]

RECORD = "tests.e2eapp.tasks.record"
#: from a save to its message: a woken beat takes milliseconds (tests/e2e/test_pooler.py)
PICKUP_BOUND = dt.timedelta(seconds=1.5)


@pytest.fixture
def routed(cluster: Cluster) -> Iterator[Cluster]:
    """The processes and this one (a saver, as the admin) route durablebeat to
    ``scheduler``: its test database, created by pytest-django with every table."""
    name = connections[SCHEDULER].settings_dict["NAME"]
    default = connections["default"].settings_dict["NAME"]
    url = cluster.database_url.rsplit("/", 1)[0] + f"/{name}"
    assert name != default
    cluster.settings |= {
        "E2E_SCHEDULER_URL": url,
        # production's sleep: only a LISTEN that hears wakes beat for a one-off in time
        "DURABLEBEAT_HEARTBEAT_INTERVAL": "20",
        "DURABLEBEAT_MAX_INTERVAL": "5",
    }
    with override_settings(DATABASE_ROUTERS=["tests.e2eapp.routers.SchedulerRouter"]):
        yield cluster


def _command(cluster: Cluster, *args: str) -> str:
    done = subprocess.run(
        [sys.executable, "manage.py", "durablebeat", *args],
        cwd=ROOT,
        env=cluster.env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def test_beat_and_worker_in_a_database_of_their_own_send_the_one_off_probe_on_time(routed):
    beat, _ = routed.beat(), routed.worker()
    wait_until(beat.booted, 60, what="beat boot")
    wait_until(lambda: "LISTEN delivers" in beat.log(), 30, what="LISTEN proven on scheduler")
    for i in range(6):
        # 1.7 s apart: each save lands at another point of beat's sleep
        at = clock.now() + dt.timedelta(seconds=1)
        Schedule.objects.create(name=f"once-{i}", task=RECORD, kind=Kind.CLOCKED, clocked_at=at)
        time.sleep(1.7)  # the probe's spacing is its input, not a wait
    done = Run.objects.filter(state=RunState.SUCCEEDED)
    wait_until(lambda: done.count() == 6, 30, what="6 sent and completed")
    assert beat.alive
    runs = list(Run.objects.order_by("slot"))
    assert [r.schedule.name for r in runs] == [f"once-{i}" for i in range(6)]
    for run in runs:
        assert run.reason == Reason.SCHEDULED, run.detail
        assert run.published_at is not None and run._state.db == SCHEDULER
        assert dt.timedelta(0) <= run.published_at - run.slot <= PICKUP_BOUND, run
    assert "Traceback" not in beat.log()
    for model in (Schedule, Run, Boot):  # nothing of durablebeat's on default
        assert not model.objects.using("default").exists(), model.__name__

    _, findings = routed.check()
    assert "no_beat" not in {f["code"] for f in findings}, findings  # the live boot, read there
    assert "once-5" in _command(routed, "status")


def test_two_beats_and_restarts_in_a_database_of_their_own_fire_each_slot_once(routed):
    """Issue 30's restart storm, short, through the router: 0 duplicates, 0 missed."""
    two_beats_and_restarts(routed)
    for model in (Schedule, Run, Boot):
        assert not model.objects.using("default").exists(), model.__name__
