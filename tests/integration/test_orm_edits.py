"""R2, R29: an ORM ``update()`` follows the rules a save follows (``models.edit_rules``),
decided row by row in SQL: a schedule enabled again whose next fire passed while it was
disabled fires from its next slot (its slots meanwhile neither fired late nor reported
missed); an explicit next fire is a scheduled one; a row already enabled keeps its own."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable

import pytest
from celery.schedules import crontab

from durablebeat import api
from durablebeat.enums import Reason, RunState
from durablebeat.models import Run, Schedule

pytestmark = pytest.mark.django_db(transaction=True)

TASK = "tests.e2eapp.tasks.record"
M = dt.timedelta(minutes=1)
DAILY_8 = crontab(minute=0, hour=8)  # 08:00 UTC


def _via_api(name: str) -> None:
    api.resume_schedule(name)


def _via_save(name: str) -> None:
    row = Schedule.objects.get(name=name)
    row.enabled = True
    row.save()


def _via_update(name: str) -> None:
    Schedule.objects.filter(name=name).update(enabled=True)


def _via_bulk_update(name: str) -> None:
    row = Schedule.objects.get(name=name)
    row.enabled = True
    Schedule.objects.bulk_update([row], ["enabled"])


@pytest.mark.parametrize("resume", [_via_api, _via_save, _via_update, _via_bulk_update])
def test_a_schedule_enabled_again_fires_from_its_next_slot(
    time_machine, make_engine, publisher, t0, resume: Callable[[str], None]
):
    morning = t0.replace(hour=7)
    time_machine.move_to(morning, tick=False)
    api.add_schedule("paused", TASK, DAILY_8, options={"durablebeat": {"overlap": "allow"}})
    api.add_schedule("running", TASK, DAILY_8, options={"durablebeat": {"overlap": "allow"}})
    engine = make_engine()
    engine.tick(morning)
    api.pause_schedule("paused")
    Schedule.objects.filter(name="paused").update(next_fire_reason=Reason.CATCH_UP)
    time_machine.move_to(morning + 90 * M, tick=False)  # 08:30: the 08:00 slot passed paused
    Schedule.objects.filter(name="running").update(enabled=True)  # already enabled
    resume("paused")
    row = Schedule.objects.get(name="paused")
    day_two = t0.replace(hour=8) + dt.timedelta(days=1)
    # R33: a writer with the row in hand writes its next slot at once; update() has none,
    # and leaves it to beat
    written = None if resume is _via_update else day_two
    assert row.next_fire_at == written and row.next_fire_reason == Reason.SCHEDULED
    assert row.enabled_at == morning + 90 * M
    kept = Schedule.objects.get(name="running")  # its overdue slot is beat's to fire
    assert kept.next_fire_at == t0.replace(hour=8) and kept.enabled_at != row.enabled_at
    for minute in range(90, 90 + 24 * 60 + 60, 30):  # to 08:30 the next day
        engine.tick(morning + minute * M)
    assert publisher.slots("paused") == [day_two]
    assert not Run.objects.filter(schedule=row, state=RunState.MISSED).exists()


def test_update_of_the_next_fire_makes_it_a_scheduled_one(make_schedule, t0):
    row = make_schedule("resent", every=60, next_fire_at=t0)
    Schedule.objects.filter(pk=row.pk).update(next_fire_reason=Reason.CATCH_UP)
    Schedule.objects.filter(pk=row.pk).update(next_fire_at=t0 + M)
    row.refresh_from_db()
    assert (row.next_fire_at, row.next_fire_reason) == (t0 + M, Reason.SCHEDULED)
