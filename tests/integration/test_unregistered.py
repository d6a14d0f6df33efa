"""R29 amended (with R25, R21), issue 39: a task name this process has not registered.

Beat sends it by name, as Celery's beat does (its ``Scheduler.apply_async`` falls back to
``send_task``), says so once per schedule and boot, and keeps firing everything else; the
writes from code refuse it as a likely typo unless ``DURABLEBEAT_EXTERNAL_TASKS`` names it.
"""

from __future__ import annotations

import datetime as dt
import logging
from typing import Any

import pytest
from celery.schedules import crontab
from django.core.exceptions import ValidationError

from durablebeat import api
from durablebeat.enums import Source
from durablebeat.models import Schedule
from durablebeat.schedulers import DurableScheduler
from project.celery import app

pytestmark = pytest.mark.django_db(transaction=True)

TASK = "tests.e2eapp.tasks.record"
ELSEWHERE = "billing.invoices.send_all"  # served by another codebase's workers
S = dt.timedelta(seconds=1)


def _said(caplog: pytest.LogCaptureFixture, schedule: str) -> list[logging.LogRecord]:
    return [
        r
        for r in caplog.records
        if getattr(r, "event", None) == "unregistered_task"
        and getattr(r, "schedule", None) == schedule
    ]


def test_beat_boots_with_an_unregistered_task_fires_the_others_and_sends_it_by_name(
    make_engine, publisher, time_machine, t0, caplog
):
    caplog.set_level(logging.WARNING, logger="durablebeat")
    time_machine.move_to(t0, tick=False)
    allow = {"durablebeat": {"overlap": "allow"}}
    engine = make_engine(
        {
            "good": {"task": TASK, "schedule": crontab(), "options": allow},
            "elsewhere": {"task": ELSEWHERE, "schedule": crontab(), "options": allow},
            "typo": {"task": "tests.e2eapp.tasks.recrod", "schedule": crontab()},
        }
    )
    assert len(_said(caplog, "elsewhere")) == 1  # said at boot, before anything fires
    [typo] = _said(caplog, "typo")
    assert "did you mean 'tests.e2eapp.tasks.record'?" in typo.getMessage()
    engine.tick(t0)  # the boot: the rows synced, their first slots computed
    for minute in (1, 2):
        now = t0 + dt.timedelta(minutes=minute)
        time_machine.move_to(now, tick=False)
        engine.tick(now)
    sent = {(c.schedule, c.message.task) for c in publisher.claims}
    assert sent == {("good", TASK), ("elsewhere", ELSEWHERE), ("typo", "tests.e2eapp.tasks.recrod")}
    assert len(publisher.slots("elsewhere")) == len(publisher.slots("good")) == 2
    assert not Schedule.objects.exclude(error="").exists()  # never set aside for it
    assert len(_said(caplog, "elsewhere")) == 1  # once per boot, not per fire


def test_a_task_external_tasks_names_is_sent_by_name_without_a_word(
    make_engine, publisher, time_machine, t0, caplog, settings
):
    """R29: DURABLEBEAT_EXTERNAL_TASKS names a task served elsewhere on purpose: beat sends
    it by name and says nothing of it (no unregistered_task line, no likely typo)."""
    caplog.set_level(logging.WARNING, logger="durablebeat")
    settings.DURABLEBEAT_EXTERNAL_TASKS = ["billing.*"]
    time_machine.move_to(t0, tick=False)
    allow = {"durablebeat": {"overlap": "allow"}}
    engine = make_engine(
        {
            "elsewhere": {"task": ELSEWHERE, "schedule": crontab(), "options": allow},
            "ghost": {"task": "shop.tasks.ghost", "schedule": crontab(), "options": allow},
        }
    )
    engine.tick(t0)
    now = t0 + dt.timedelta(minutes=1)
    time_machine.move_to(now, tick=False)
    engine.tick(now)
    assert len(publisher.slots("elsewhere")) == 1
    assert {c.message.task for c in publisher.claims} == {ELSEWHERE, "shop.tasks.ghost"}
    assert _said(caplog, "elsewhere") == []
    assert len(_said(caplog, "ghost")) == 1


def test_a_database_row_whose_task_beat_has_not_registered_is_sent_and_said_once(
    make_engine, make_schedule, publisher, t0, caplog
):
    """A row that reached the table around the write checks (``update()``, raw SQL, or a
    writer whose process registered the task) is sent by name, never set aside for it."""
    caplog.set_level(logging.WARNING, logger="durablebeat")
    for name in ("good", "typo"):
        make_schedule(name, every=60, next_fire_at=t0)
    Schedule.objects.filter(name="typo").update(task="billing.tasks.ghost")
    engine = make_engine()
    engine.tick(t0)
    engine.tick(t0 + 60 * S)
    assert sorted(c.schedule for c in publisher.claims) == ["good", "good", "typo", "typo"]
    assert {c.message.task for c in publisher.claims if c.schedule == "typo"} == {
        "billing.tasks.ghost"
    }
    assert Schedule.objects.get(name="typo").error == ""
    assert len(_said(caplog, "typo")) == 1


def test_the_scheduler_boots_an_entry_whose_task_it_has_not_registered(monkeypatch, caplog):
    """Celery's ``celery beat`` path (``DurableScheduler.setup_schedule``): no ``BadEntry``,
    the entry is among the code entries, and one line says it (issue 39: beat exited)."""
    caplog.set_level(logging.WARNING, logger="durablebeat")
    entries = {"cleanup": {"task": "shop.tasks.cleanup", "schedule": crontab(minute=0)}}
    monkeypatch.setitem(app.conf, "beat_schedule", entries)
    scheduler = DurableScheduler(app, lazy=True)
    try:
        scheduler.setup_schedule()
        names = {e.name: e.task for e in scheduler.engine.code_entries}
        assert names["cleanup"] == "shop.tasks.cleanup"
        [line] = _said(caplog, "cleanup")
        assert "unregistered task schedule=cleanup task=shop.tasks.cleanup sent by name" in (
            line.getMessage()
        )
    finally:
        scheduler.close()


# --- the writes keep refusing a typo; another codebase's task is named explicitly ----------


def test_the_api_refuses_a_typo_naming_the_field_and_the_closest_task():
    with pytest.raises(api.InvalidSchedule) as refused:
        api.add_schedule("digest", "tests.e2eapp.tasks.recrod", 60)
    assert refused.value.field == "task"
    assert "did you mean 'tests.e2eapp.tasks.record'?" in str(refused.value)
    assert "'digest'" in str(refused.value)
    assert "DURABLEBEAT_EXTERNAL_TASKS" in str(refused.value)
    api.add_schedule("digest", TASK, 60)
    with pytest.raises(api.InvalidSchedule) as refused:
        api.update_schedule("digest", task="tests.e2eapp.tasks.recrod")
    assert refused.value.field == "task" and "'digest'" in str(refused.value)
    assert not Schedule.objects.filter(task__endswith="recrod").exists()


@pytest.mark.parametrize("external", [[ELSEWHERE], ["billing.*"], ("billing.invoices.*",)])
def test_a_task_external_tasks_names_is_taken_by_every_write_path(settings, external):
    with pytest.raises(api.InvalidSchedule):
        api.add_schedule("invoices", ELSEWHERE, 60)
    settings.DURABLEBEAT_EXTERNAL_TASKS = external
    assert api.add_schedule("invoices", ELSEWHERE, 60).task == ELSEWHERE
    api.add_schedules({"invoices-2": {"task": ELSEWHERE, "schedule": 60}})
    Schedule.objects.create(name="orm", task=ELSEWHERE, every=dt.timedelta(minutes=1))
    row = Schedule(name="clean", task=ELSEWHERE, every=dt.timedelta(minutes=1))
    row.full_clean()  # the admin form's check
    assert Schedule.objects.filter(task=ELSEWHERE).count() == 3
    with pytest.raises(ValidationError) as refused:  # a name it does not match: still refused
        Schedule.objects.create(name="other", task="billing2.ghost", every=dt.timedelta(1))
    assert "task" in refused.value.message_dict


def test_a_stored_code_row_with_an_unregistered_task_may_be_edited(make_engine):
    """The admin edits a beat_schedule row (its description, say): its task is code's,
    sent by name (R29), and is no reason to refuse the edit."""
    make_engine({"elsewhere": {"task": ELSEWHERE, "schedule": 60}}).tick(dt.datetime.now(dt.UTC))
    row: Any = Schedule.objects.get(name="elsewhere")
    row.description = "sends the invoices"
    row.full_clean()
    row.save()
    assert Schedule.objects.get(name="elsewhere").description == "sends the invoices"


@pytest.mark.parametrize("write", ["full_clean", "save"])
def test_a_new_code_row_with_an_unregistered_task_is_taken_by_every_check(write):
    """R29: the code sync's own rows are never refused over the task name: a new
    beat_schedule row (no pk yet) passes full_clean as it passes save(), one decision
    (validate_schedule_fields); a new row of any other source is refused by both."""
    row = Schedule(name="elsewhere", task=ELSEWHERE, every=dt.timedelta(minutes=1))
    row.source = Source.CODE
    getattr(row, write)()
    other = Schedule(name="typed", task=ELSEWHERE, every=dt.timedelta(minutes=1))
    with pytest.raises(ValidationError) as refused:
        getattr(other, write)()
    assert "task" in refused.value.message_dict


def test_the_admin_form_refuses_a_typo_naming_the_closest_task(admin_client, settings):
    """R29: the admin is a write: a typo is refused on the field, with the likely task; a
    name DURABLEBEAT_EXTERNAL_TASKS matches is taken."""
    from tests.integration.admin_forms import schedule_form

    add = "/admin/durablebeat/schedule/add/"
    response = admin_client.post(add, schedule_form(task="tests.e2eapp.tasks.recrod"))
    errors = response.context["adminform"].form.errors
    assert "did you mean 'tests.e2eapp.tasks.record'?" in " ".join(errors["task"])
    assert not Schedule.objects.exists()
    settings.DURABLEBEAT_EXTERNAL_TASKS = ["billing.*"]
    response = admin_client.post(add, schedule_form(task=ELSEWHERE))
    assert response.status_code == 302
    assert Schedule.objects.get().task == ELSEWHERE
