"""R27 with real processes: a deploy (beat SIGTERMed, down less than the deploy grace,
started again) is quiet in ``durablebeat check`` during the gap and after it; a beat held
down past the bound is ``no_beat`` critical. ``check`` runs as the real command."""

from __future__ import annotations

import time

import pytest

from durablebeat.enums import RunState
from durablebeat.models import Run

from .harness import Cluster, Proc, wait_until

pytestmark = [pytest.mark.e2e]

RECORD = "tests.e2eapp.tasks.record"
GRACE = 40  # DURABLEBEAT_DEPLOY_GRACE, s: the bound under test
DOWN = 20  # a deploy's gap, s: less than the bound


def _succeeded_since(pk: int) -> int:
    return Run.objects.filter(schedule__name="every5", state=RunState.SUCCEEDED, pk__gt=pk).count()


def _last_run() -> int:
    return Run.objects.order_by("-pk").values_list("pk", flat=True).first() or 0


def _up(cluster: Cluster) -> Proc:
    beat = cluster.beat()
    wait_until(lambda: beat.booted(), 60, what="beat boot")
    return beat


@pytest.mark.long
def test_a_deploy_inside_the_grace_is_quiet_and_one_held_past_it_is_no_beat(cluster: Cluster):
    cluster.beat_schedule = {
        "every5": {"task": RECORD, "every": 5, "durablebeat": {"startup_grace": 3}},
        "minutely": {"task": RECORD, "cron": "* * * * *"},
    }
    # Short bounds so that the old behaviour would show within the test: a 5-s job, 3
    # periods, 10 s tolerance; the gap (20 s) alone is longer than 3 periods + tolerance.
    cluster.settings = {
        "DURABLEBEAT_DEPLOY_GRACE": str(GRACE),
        "DURABLEBEAT_OVERDUE_TOLERANCE": "10",
    }
    worker = cluster.worker()
    wait_until(lambda: "ready" in worker.log(), 60, what="worker ready")
    beat = _up(cluster)
    wait_until(lambda: _succeeded_since(0) >= 2, 60, what="two successes")
    assert cluster.check() == (0, [])

    # A deploy: SIGTERM (a clean stop), down DOWN s, started again.
    stopped = time.monotonic()
    assert beat.terminate() == 0
    for at in (2, DOWN - 4):
        time.sleep(max(0.0, stopped + at - time.monotonic()))  # the gap is the input
        assert cluster.check() == (0, []), f"{at} s into the deploy"
    time.sleep(max(0.0, stopped + DOWN - time.monotonic()))
    assert time.monotonic() - stopped < GRACE - 5, "the machine is too slow for this test"
    before = _last_run()
    beat = _up(cluster)
    assert cluster.check() == (0, []), "just after the new boot"
    wait_until(lambda: _succeeded_since(before) >= 3, 90, what="three successes after")
    assert cluster.check() == (0, []), "after the deploy"

    # Held down past the bound: an outage, critical.
    assert beat.terminate() == 0
    time.sleep(GRACE + 1)  # the outage's length is the input
    code, found = cluster.check()
    assert code == 2
    assert [(f["code"], f["severity"]) for f in found] == [("no_beat", "critical")]
    assert "deploy grace" in found[0]["message"]
    assert "Traceback" not in worker.log()
