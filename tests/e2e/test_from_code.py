"""R29 with real processes: schedules made and edited from code (``durablebeat.api`` and
plain ORM writes) while a beat and a worker run. An edit made from code takes effect at the
new time and never fires the old one; a schedule made in a transaction that rolls back
never fires. A task name beat has not registered (R29 amended, issue 39) is sent by name, as
Celery's beat sends it, and said once: beat keeps firing everything else."""

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
    # R29 amended (issue 39; before, this row was set aside and never sent): a name written
    # around the API's check is sent by name, as Celery's beat sends it, and said once
    typo = Schedule.objects.get(name="typo")
    assert typo.error == ""
    wait_until(lambda: Run.objects.filter(schedule=typo).exists(), 60, what="typo sent")
    said = "unregistered task schedule=typo task=tests.e2eapp.tasks.recrod sent by name"
    assert beat.log().count(said) == 1
    assert "did you mean 'tests.e2eapp.tasks.record'?" in beat.log()
    wait_until(lambda: "unregistered task" in worker.log().lower(), 60, what="worker refuses")
    assert beat.terminate() == 0
    worker.terminate()


def test_beat_boots_with_an_entry_whose_task_it_has_not_registered(cluster: Cluster) -> None:
    """Issue 39: Celery's beat boots an entry naming a task another codebase serves and
    sends it by name; durablebeat's exited at boot (BadEntry). It boots, says so once, fires
    the other entries and sends that one by name (R29 amended, R25, R21)."""
    cluster.beat_schedule = {
        "good": {"task": RECORD, "every": 1, "durablebeat": {"startup_grace": 0}},
        "elsewhere": {
            "task": "billing.invoices.send_all",
            "every": 1,
            "durablebeat": {"startup_grace": 0, "overlap": "allow"},
        },
    }
    worker = cluster.worker(concurrency=2)
    beat = cluster.beat()
    wait_until(lambda: len(slots("good")) >= 2, 60, what="the registered entry fires")
    wait_until(
        lambda: Run.objects.filter(schedule__name="elsewhere").count() >= 2,
        60,
        what="the unregistered one sent by name",
    )
    assert beat.alive
    log = beat.log()
    assert log.count("unregistered task schedule=elsewhere task=billing.invoices.send_all") == 1
    assert "unregistered task schedule=good" not in log  # beat's own tasks are registered
    assert "BadEntry" not in log and "CRITICAL" not in log
    assert Schedule.objects.get(name="elsewhere").error == ""
    assert beat.terminate() == 0
    worker.terminate()


def test_a_past_one_off_from_code_is_sent_at_once_saying_why_or_refused(cluster: Cluster) -> None:
    """Issue 39 (R31): a one-off whose instant passed within DURABLEBEAT_ONE_OFF_LATE_WINDOW
    is sent at once, its run saying it was made after its instant (it read "no beat could
    fire it" while this beat ran); one further past is refused at the write."""
    worker = cluster.worker(concurrency=1)
    beat = cluster.beat()
    wait_until(beat.booted, 60, what="beat boot")
    now = clock.now()
    api.add_schedule("past", RECORD, now - 5 * 60 * S)
    api.add_schedule("now", RECORD, now)
    with pytest.raises(api.InvalidSchedule) as refused:
        api.add_schedule("ancient", RECORD, now - 2 * 3600 * S)
    assert refused.value.field == "schedule" and "ONE_OFF_LATE_WINDOW" in str(refused.value)
    wait_until(lambda: slots("past") and slots("now"), 60, what="both one-offs executed")
    past = Run.objects.get(schedule__name="past")
    assert past.detail.startswith("fired late: the one-off was made 5 min after its instant")
    assert Run.objects.get(schedule__name="now").detail == ""
    assert not Schedule.objects.filter(name="ancient").exists()
    assert beat.terminate() == 0
    worker.terminate()
