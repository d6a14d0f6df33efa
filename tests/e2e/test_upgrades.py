"""R32 with real processes: a deploy that starts beat and a worker before its ``migrate``
has run. Beat meets a database that lacks durablebeat's migrations (rolled back to 0009:
``Boot.clock_offset_seconds`` is missing): it says once which, stays up, fires nothing,
and boots and fires once ``migrate`` runs; ``check`` (the real command) says
``migrations_pending`` meanwhile. Before R32 beat exited 1 at boot, its traceback ~1,000
WARNING lines, and the worker logged its failed liveness write every 2 s; now each says the
missing migrations once."""

from __future__ import annotations

import pytest
from django.core.management import call_command

from durablebeat.models import WorkerHeartbeat
from tests.e2eapp.models import Execution

from .harness import Cluster, wait_until

pytestmark = [pytest.mark.e2e]

RECORD = "tests.e2eapp.tasks.record"
SAID = "run manage.py migrate"


def test_a_beat_started_before_migrate_waits_then_boots_and_fires(cluster: Cluster) -> None:
    cluster.beat_schedule = {
        "every2": {"task": RECORD, "every": 2, "durablebeat": {"startup_grace": 1}}
    }
    call_command("migrate", "durablebeat", "0009_schedule_countdown", verbosity=0)
    try:
        worker = cluster.worker(concurrency=1)
        beat = cluster.beat()
        wait_until(lambda: SAID in beat.log(), 60, what="beat to say the migrations it lacks")
        # check, the real command, while beat waits: the migrations, and no beat alive
        found = {f["code"]: f for f in cluster.check()[1]}
        assert set(found) == {"migrations_pending", "no_beat"}, found
        assert "0010_clock_offset" in found["migrations_pending"]["message"]
        # still waiting: up, not booted, nothing fired
        assert beat.alive and not beat.booted()
        assert Execution.objects.count() == 0
    finally:
        call_command("migrate", "durablebeat", verbosity=0)
    wait_until(lambda: beat.booted(), 60, what="beat boot once migrated")
    wait_until(
        lambda: Execution.objects.filter(schedule="every2").exists(), 60, what="a fire executed"
    )
    wait_until(WorkerHeartbeat.objects.exists, 60, what="the worker's liveness row")
    for proc in (beat, worker):
        log = proc.log()
        assert log.count(SAID) == 1, log[-3000:]
        assert "Traceback" not in log and "could not record" not in log, log[-3000:]
    assert beat.terminate() == 0
    worker.terminate()
