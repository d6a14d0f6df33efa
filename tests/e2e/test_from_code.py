"""R29 with real processes: schedules made and edited from code (``durablebeat.api`` and
plain ORM writes) while a beat and a worker run. An edit made from code takes effect at the
new time and never fires the old one; a schedule made in a transaction that rolls back
never fires; a task nobody registered is never sent, and nobody blames a worker for it."""

from __future__ import annotations

import datetime as dt

import pytest
from django.db import transaction

from durablebeat import api
from durablebeat.core import clock
from durablebeat.models import Run, Schedule
from tests.e2eapp.models import Execution

from .harness import Cluster, wait_until

pytestmark = [pytest.mark.e2e]

RECORD = "tests.e2eapp.tasks.record"
S = dt.timedelta(seconds=1)


def slots(name: str) -> list[dt.datetime]:
    return sorted(
        dt.datetime.fromisoformat(e.slot) for e in Execution.objects.filter(schedule=name)
    )


def test_edits_from_code_fire_at_the_new_time_never_the_old(cluster: Cluster) -> None:
    worker = cluster.worker(concurrency=2)
    beat = cluster.beat()
    wait_until(beat.booted, 60, what="beat boot")
    now = clock.now().replace(microsecond=0)
    old, new = now + 8 * S, now + 14 * S
    # three one-offs at the old instant, each moved by another path; one left alone
    for name in ("by-api", "by-update", "by-save", "kept"):
        api.add_schedule(name, RECORD, old)
    with pytest.raises(RuntimeError), transaction.atomic():
        api.add_schedule("rolled-back", RECORD, now + 3 * S)
        raise RuntimeError("the request failed")
    api.add_schedule("typo", RECORD, now + 3 * S)
    Schedule.objects.filter(name="typo").update(task="tests.e2eapp.tasks.recrod")
    api.update_schedule("by-api", schedule=new)
    Schedule.objects.filter(name="by-update").update(clocked_at=new)
    row = Schedule.objects.get(name="by-save")
    row.clocked_at = new
    row.save()
    assert clock.now() < old - 3 * S, "the edits took too long to test the old slot"

    wait_until(lambda: len(slots("kept")) == 1, 60, what="the unmoved one-off")
    wait_until(
        lambda: all(slots(n) for n in ("by-api", "by-update", "by-save")),
        60,
        what="the moved one-offs at their new time",
    )
    assert slots("kept") == [old]
    for name in ("by-api", "by-update", "by-save"):
        assert slots(name) == [new], name  # once, at the new time; never at the old
    assert not Schedule.objects.filter(name="rolled-back").exists()
    assert not Execution.objects.filter(schedule__in=["rolled-back", "typo"]).exists()
    typo = Schedule.objects.get(name="typo")
    assert "no task named 'tests.e2eapp.tasks.recrod' is registered" in typo.error
    assert not Run.objects.filter(schedule=typo).exists()  # never sent, so never blamed
    assert "untracked_worker" not in {f["code"] for f in cluster.check()[1]}
    assert "unregistered task" not in worker.log().lower()
    assert beat.terminate() == 0
    worker.terminate()
