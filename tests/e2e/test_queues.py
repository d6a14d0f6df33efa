"""Issue 39 item 5 with real processes: docs/from-code.md's digest sends to queue ``mail``
while the README's worker consumes only ``celery``. The worker's liveness row records its
queues, the message waits in the real broker, and ``check`` says ``unconsumed_queue``
within the heartbeat interval, long before ``no_news``; a worker on ``mail`` runs it and
``check`` is quiet again."""

from __future__ import annotations

import pytest

from durablebeat.enums import RunState
from durablebeat.models import Run, WorkerHeartbeat
from tests.e2eapp.models import Execution

from .harness import Cluster, wait_until

pytestmark = [pytest.mark.e2e]

RECORD = "tests.e2eapp.tasks.record"


def test_a_queue_no_worker_consumes_is_said_by_check_and_a_worker_on_it_clears_it(
    cluster: Cluster,
) -> None:
    cluster.beat_schedule = {
        "digest": {
            "task": RECORD,
            "every": 3600,
            "options": {"queue": "mail"},
            "durablebeat": {"startup_grace": 1},
        },
    }
    cluster.settings = {"DURABLEBEAT_WORKER_HEARTBEAT_INTERVAL": "2"}
    worker = cluster.worker()  # the README's: consumes celery only
    wait_until(lambda: "ready" in worker.log(), 60, what="worker ready")
    wait_until(
        lambda: WorkerHeartbeat.objects.filter(queues="celery").exists(),
        30,
        what="the worker's liveness row with its queues",
    )
    beat = cluster.beat()
    wait_until(beat.booted, 60, what="beat boot")
    wait_until(
        lambda: Run.objects.filter(schedule__name="digest", state=RunState.PUBLISHED).exists(),
        60,
        what="the digest published",
    )

    def said() -> list[dict[str, str]]:
        return [f for f in cluster.check()[1] if f["code"] == "unconsumed_queue"]

    wait_until(lambda: bool(said()), 30, what="check's unconsumed_queue")
    code, found = cluster.check()
    assert code == 1
    assert "no_news" not in {f["code"] for f in found}
    [finding] = [f for f in found if f["code"] == "unconsumed_queue"]
    assert finding["severity"] == "warning"
    assert "queue 'mail': 1 message(s) waiting" in finding["message"]
    assert "(digest)" in finding["message"] and "-Q celery,mail" in finding["message"]

    mail = cluster.worker(options=("-Q", "mail"))
    wait_until(
        lambda: Execution.objects.filter(schedule="digest").exists(), 60, what="the digest ran"
    )
    wait_until(lambda: not said(), 30, what="check quiet again")
    assert mail.alive
