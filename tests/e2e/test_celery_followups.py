"""R25 follow-ups with real processes: a ``celery beat`` on durablebeat fires a 0.5 s
interval twice a second on its own slots, and a ``link`` callback of a code entry runs on a
real ``celery worker`` after each fire. One beat and one worker; every wait is on a
condition, bounded."""

from __future__ import annotations

import datetime as dt
import itertools

import pytest

from durablebeat.models import Run
from tests.e2eapp.models import Execution

from .harness import Cluster, wait_until

pytestmark = [pytest.mark.e2e]

HALF = dt.timedelta(milliseconds=500)


def test_a_half_second_interval_fires_twice_a_second_and_a_link_runs_after_each_fire(
    cluster: Cluster,
):
    cluster.beat_schedule = {
        "half": {
            "task": "tests.e2eapp.tasks.record",
            "every": 0.5,
            "durablebeat": {"startup_grace": 1, "overlap": "allow"},
        },
        "linked": {
            "task": "tests.e2eapp.tasks.record",
            "every": 2,
            "options": {
                "link": {"$signature": "tests.e2eapp.tasks.record_note", "args": ["linked"]}
            },
            "durablebeat": {"startup_grace": 1, "overlap": "allow"},
        },
    }
    worker = cluster.worker(concurrency=2)
    wait_until(lambda: "ready" in worker.log(), 60, what="worker ready")
    beat = cluster.beat()
    wait_until(
        lambda: Run.objects.filter(schedule__name="half").count() >= 8,
        60,
        what="eight fires of the 0.5 s interval",
    )
    slots = list(
        Run.objects.filter(schedule__name="half").order_by("slot").values_list("slot", flat=True)
    )
    # each fire on its own slot of the grid, none twice (R3, R4), most of them one after
    # the other (a tick stalled past a slot on a loaded machine skips it, as R7 says: a
    # late interval fires once and goes on on its grid)
    gaps = [b - a for a, b in itertools.pairwise(slots)]
    assert all(g >= HALF and g % HALF == dt.timedelta(0) for g in gaps), slots
    assert gaps.count(HALF) > len(gaps) // 2, slots
    wait_until(
        lambda: Execution.objects.filter(reason="linked").count() >= 2,
        60,
        what="the link callback ran after two fires of 'linked'",
    )
    fired = Execution.objects.filter(schedule="linked").count()
    assert fired >= Execution.objects.filter(reason="linked").count() - 1
    wait_until(
        lambda: Execution.objects.filter(schedule="half").count() >= 6,
        30,
        what="the bodies of the 0.5 s interval ran too",
    )
    assert beat.alive
