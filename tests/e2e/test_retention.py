"""R32 with a real ``celery beat`` (issue 31 item 1): a ledger with runs older than the
retention, and a beat started on it deletes them by itself, keeping each schedule's newest
run and the recent ones, and firing meanwhile. (The rules, the bounds and the edge are in
tests/integration/test_retention.py, through the engine's own loop.)"""

from __future__ import annotations

import datetime as dt

import pytest
from django.utils import timezone

from durablebeat.enums import RunState
from durablebeat.models import Run, Schedule

from .harness import wait_until

pytestmark = [pytest.mark.e2e]

DAY = dt.timedelta(days=1)


def test_a_real_beat_prunes_runs_older_than_the_retention(cluster):
    now = timezone.now()
    paused = Schedule.objects.create(
        name="paused", task="tests.e2eapp.tasks.record", every=DAY, enabled=False
    )
    ticking = Schedule.objects.create(
        name="ticking", task="tests.e2eapp.tasks.record", every=dt.timedelta(seconds=1)
    )
    old = [
        Run(schedule=paused, slot=now - (40 + i) * DAY, claimed_at=now - (40 + i) * DAY)
        for i in range(1, 201)
    ]
    Run.objects.bulk_create(
        [*old, Run(schedule=paused, slot=now - 40 * DAY, claimed_at=now - 40 * DAY)],
        batch_size=500,
    )
    Run.objects.update(state=RunState.SUCCEEDED)
    beat = cluster.beat(DURABLEBEAT_STARTUP_GRACE="0")  # the default retention: 30 days
    wait_until(
        lambda: Run.objects.filter(schedule=paused).count() == 1, timeout=60, what="the pruning"
    )
    assert Run.objects.get(schedule=paused).slot == now - 40 * DAY  # its newest: kept
    wait_until(lambda: Run.objects.filter(schedule=ticking).count() >= 2, timeout=30, what="fires")
    assert "pruned 200 ledger rows" in beat.log()
    beat.stop()
