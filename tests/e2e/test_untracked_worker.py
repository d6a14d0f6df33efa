"""R27 with real processes: a worker whose Django does not have durablebeat installed runs
the tasks (django-celery-results records them) but reports nothing; ``check`` names it
``untracked_worker``, not ``no_news`` (a message lost by the broker)."""

from __future__ import annotations

import datetime as dt

import pytest
from django.test import override_settings
from django.utils import timezone
from django_celery_results.models import TaskResult

from durablebeat.enums import RunState
from durablebeat.models import Run
from durablebeat.ops import health
from tests.e2eapp.models import Execution

from .harness import Cluster, wait_until

pytestmark = [pytest.mark.e2e]

RECORD = "tests.e2eapp.tasks.record"


def test_a_worker_without_durablebeat_is_named_not_taken_for_a_lost_message(cluster: Cluster):
    cluster.beat_schedule = {
        "every5": {"task": RECORD, "every": 5, "durablebeat": {"startup_grace": 1}},
    }
    cluster.settings = {"DURABLEBEAT_NO_NEWS_AFTER": "6"}
    worker = cluster.worker(E2E_WITHOUT_DURABLEBEAT="1")
    wait_until(lambda: "ready" in worker.log(), 60, what="worker ready")
    beat = cluster.beat()
    wait_until(lambda: Execution.objects.exists(), 60, what="a task body ran")

    def past_the_bound() -> bool:
        bound = timezone.now() - dt.timedelta(seconds=6)
        return Run.objects.filter(
            state__in=(RunState.PUBLISHED, RunState.NO_NEWS), published_at__lt=bound
        ).exists()

    wait_until(past_the_bound, 60, what="a run past the no-news bound")
    executed = Run.objects.filter(task_id__in=TaskResult.objects.values("task_id"))
    assert executed.exists(), "the result backend recorded the runs"
    assert not Run.objects.filter(state=RunState.STARTED).exists()  # nobody reported one
    with override_settings(DURABLEBEAT_NO_NEWS_AFTER=6):
        codes = [f.code for f in health.check(timezone.now())]
    assert "untracked_worker" in codes
    assert "no_news" not in codes
    assert "Traceback" not in beat.log()
