"""R24 with real processes: a beat_schedule entry's own time limits, given in its
``options`` as Celery's beat takes them, reach the worker with every fire (R12, R15).

The task has no limits of its own (``outlive_schedule_soft_limit``): whatever limit the
worker applies came in the message. Every wait is on a condition in the database, bounded.
"""

from __future__ import annotations

import pytest

from durablebeat.enums import RunState
from durablebeat.models import Run, Schedule
from tests.e2eapp.models import Execution

from .harness import Cluster, wait_until

pytestmark = [pytest.mark.e2e]

TASK = "tests.e2eapp.tasks.outlive_schedule_soft_limit"
FINAL = (RunState.SUCCEEDED, RunState.FAILED, RunState.LOST)


def _final(schedule: str) -> Run | None:
    return Run.objects.filter(schedule__name=schedule, state__in=FINAL).first()


def test_schedule_soft_limit_outlived_is_succeeded_flagged_with_its_hard_limit(
    cluster: Cluster,
):
    """R12: the body caught the per-schedule soft limit (1 s) and returned: succeeded,
    flagged; the worker recorded the per-schedule hard limit (30 s), the one the orphan
    reclaim waits for (R15). The same task fired without options runs unlimited."""
    once = {"every": 3600, "args": [3], "durablebeat": {"startup_grace": 1}}
    cluster.beat_schedule = {
        "limited": {
            "task": TASK,
            "options": {"soft_time_limit": 1, "time_limit": 30},
            **once,
        },
        "unlimited": {"task": TASK, **once},
    }
    worker = cluster.worker(concurrency=2)
    wait_until(lambda: "ready" in worker.log(), 60, what="worker ready")
    cluster.beat()
    wait_until(
        lambda: _final("limited") and _final("unlimited"), 60, what="both runs in a final state"
    )

    limited = _final("limited")
    assert limited is not None
    assert limited.state == RunState.SUCCEEDED, (limited.state, limited.error)
    assert limited.soft_time_limit_exceeded
    assert limited.hard_time_limit == 30.0
    assert Schedule.objects.get(name="limited").last_completed_at == limited.finished_at
    assert Execution.objects.get(schedule="limited").reason == "soft limit seen"

    unlimited = _final("unlimited")
    assert unlimited is not None
    assert unlimited.state == RunState.SUCCEEDED
    assert not unlimited.soft_time_limit_exceeded
    assert unlimited.hard_time_limit is None
    assert Execution.objects.get(schedule="unlimited").reason != "soft limit seen"
