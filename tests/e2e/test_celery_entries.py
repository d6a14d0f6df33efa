"""R25 with real processes: what Celery's beat sends for an entry reaches the task body.

One beat and one worker: an entry whose ``args`` hold a ``timedelta`` (pickled, by the
entry's own serializer; the worker accepts pickle for this test only) and whose ``kwargs``
hold a ``BeatLazyFunc``, and results that expire with a backend that does not expire them,
so ``celery.backend_cleanup`` is installed. Every wait is on a condition, bounded.
"""

from __future__ import annotations

import os

import pytest

from durablebeat.enums import Source
from durablebeat.models import Schedule
from tests.e2eapp.models import Execution

from .harness import Cluster, wait_until

pytestmark = [pytest.mark.e2e]


def test_a_pickled_timedelta_arrives_as_one_and_a_lazy_value_is_computed_per_fire(
    cluster: Cluster,
):
    cluster.beat_schedule = {
        "values": {
            "task": "tests.e2eapp.tasks.record_values",
            "every": 2,
            "args": [{"$timedelta": 90}],
            "kwargs": {"stamp": {"$lazy": "tests.e2eapp.values.fire_stamp"}},
            "options": {"serializer": "pickle"},
            "durablebeat": {"startup_grace": 1, "overlap": "allow"},
        }
    }
    cluster.settings = {"E2E_ACCEPT_PICKLE": "1", "E2E_RESULT_EXPIRES": "86400"}
    if os.geteuid() == 0:  # a CI container: Celery refuses pickle to root unless told
        cluster.settings["C_FORCE_ROOT"] = "1"
    worker = cluster.worker(concurrency=1)
    wait_until(lambda: "ready" in worker.log(), 60, what="worker ready")
    beat = cluster.beat()
    wait_until(
        lambda: Execution.objects.filter(schedule="values").count() >= 2,
        60,
        what="two fires of 'values' executed",
    )
    notes = list(
        Execution.objects.filter(schedule="values").order_by("at").values_list("reason", flat=True)
    )
    assert all(note.startswith("timedelta=90 stamp=") for note in notes), notes
    stamps = [note.split("stamp=")[1] for note in notes]
    assert len(set(stamps)) == len(stamps), stamps  # computed again at each fire

    row = Schedule.objects.get(name="values")
    assert row.args == [{"__python__": "datetime.timedelta(seconds=90)"}]
    assert row.kwargs == {"stamp": {"__computed_at_send__": "tests.e2eapp.values.fire_stamp()"}}
    cleanup = Schedule.objects.get(name="celery.backend_cleanup")
    assert (cleanup.source, cleanup.task, cleanup.hour) == (
        Source.CODE,
        "celery.backend_cleanup",
        "4",
    )
    assert beat.alive
