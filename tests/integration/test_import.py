"""``durablebeat import-django-celery-beat`` against django-celery-beat's real tables:
every kind of schedule, each option, next fires that neither fire at once nor twice on the
switch, ``--dry-run`` and a second run that changes nothing."""

from __future__ import annotations

import datetime as dt
import io
import json

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django_celery_beat.models import (
    ClockedSchedule,
    CrontabSchedule,
    IntervalSchedule,
    PeriodicTask,
    SolarSchedule,
)

from durablebeat.core import timing
from durablebeat.enums import Kind, Reason, Source
from durablebeat.models import Run, Schedule
from durablebeat.ops import importer

pytestmark = pytest.mark.django_db

S = dt.timedelta(seconds=1)
MIN = dt.timedelta(minutes=1)
H = dt.timedelta(hours=1)
TASK = "tests.e2eapp.tasks.record"


@pytest.fixture(autouse=True)
def frozen(time_machine, t0):
    """django-celery-beat stamps ``date_changed`` with the clock: make it t0."""
    time_machine.move_to(t0, tick=False)


def every(n, period=IntervalSchedule.MINUTES):
    return IntervalSchedule.objects.create(every=n, period=period)


def periodic(name, **fields):
    fields.setdefault("task", TASK)
    last_run_at = fields.pop("last_run_at", None)
    date_changed = fields.pop("date_changed", None)
    task = PeriodicTask.objects.create(name=name, **fields)
    # Stored as django-celery-beat's beat left them (save() would reset them).
    updates = {}
    if last_run_at is not None:
        updates["last_run_at"] = last_run_at
    if date_changed is not None:
        updates["date_changed"] = date_changed
    if updates:
        PeriodicTask.objects.filter(pk=task.pk).update(**updates)
    return task


def run(*args):
    out = io.StringIO()
    call_command("durablebeat", "import-django-celery-beat", *args, stdout=out)
    return out.getvalue()


def items(t0):
    return {i.name: i for i in importer.plan(t0)}


# --- interval -----------------------------------------------------------------------------


def test_interval_copies_every_option_and_continues_from_last_run(t0):
    periodic(
        "hourly-sync",
        interval=every(1, IntervalSchedule.HOURS),
        args=json.dumps([1, "two"]),
        kwargs=json.dumps({"user": 7}),
        queue="low",
        routing_key="low.sync",
        priority=3,
        expire_seconds=120,
        headers=json.dumps({"x-team": "ops"}),
        description="re-fetch",
        last_run_at=t0 - 10 * MIN,
    )
    importer.run_import(t0, dry_run=False)
    row = Schedule.objects.get(name="hourly-sync")
    assert (row.kind, row.every) == (Kind.INTERVAL, H)
    assert (row.args, row.kwargs, row.headers) == ([1, "two"], {"user": 7}, {"x-team": "ops"})
    assert (row.queue, row.routing_key, row.priority, row.expire_seconds) == (
        "low",
        "low.sync",
        3,
        120.0,
    )
    assert (row.task, row.description, row.enabled, row.source) == (
        TASK,
        "re-fetch",
        True,
        Source.DATABASE,
    )
    assert row.next_fire_at == t0 + 50 * MIN  # last run + every: not at once, not twice
    assert row.next_fire_reason == Reason.SCHEDULED


def test_interval_slot_passed_during_the_switch_moves_on_its_grid(t0):
    periodic("hourly", interval=every(60), last_run_at=t0 - 90 * MIN)
    importer.run_import(t0, dry_run=False)
    assert Schedule.objects.get(name="hourly").next_fire_at == t0 + 30 * MIN


def test_interval_that_never_ran_counts_from_its_last_change(t0):
    """As django-celery-beat does: a task that never ran is due one period after it changed."""
    periodic("new", interval=every(60), date_changed=t0 - 10 * MIN)
    periodic("old", interval=every(60), date_changed=t0 - 3 * H)
    importer.run_import(t0, dry_run=False)
    assert Schedule.objects.get(name="new").next_fire_at == t0 + 50 * MIN
    assert Schedule.objects.get(name="old").next_fire_at is None  # beat: now + startup grace


def test_interval_with_a_future_start_time_waits_for_it(t0):
    periodic("later", interval=every(5), start_time=t0 + 2 * H)
    importer.run_import(t0, dry_run=False)
    assert Schedule.objects.get(name="later").next_fire_at == t0 + 2 * H


# --- crontab ------------------------------------------------------------------------------


def test_crontab_keeps_its_time_zone_and_gets_its_next_slot(t0):
    cron = CrontabSchedule.objects.create(
        minute="0",
        hour="8",
        day_of_week="mon-fri",
        day_of_month="*",
        month_of_year="*",
        timezone="Europe/Berlin",
    )
    periodic("digest", crontab=cron, last_run_at=t0 - 4 * H)
    importer.run_import(t0, dry_run=False)
    row = Schedule.objects.get(name="digest")
    assert (row.kind, row.minute, row.hour, row.day_of_week) == (Kind.CRONTAB, "0", "8", "mon-fri")
    assert row.timezone == "Europe/Berlin"
    # 2026-03-02 is a Monday, 12:00 UTC: the next 08:00 Berlin (CET) is Tuesday 07:00 UTC.
    assert row.next_fire_at == dt.datetime(2026, 3, 3, 7, 0, tzinfo=dt.UTC)
    assert row.next_fire_at == timing.next_slot(row.to_spec(), t0)


# --- clocked, one-off, disabled -----------------------------------------------------------


def test_clocked_one_off_in_the_future_fires_at_its_time(t0):
    clocked = ClockedSchedule.objects.create(clocked_time=t0 + 3 * H)
    periodic("launch", clocked=clocked, one_off=True)
    importer.run_import(t0, dry_run=False)
    row = Schedule.objects.get(name="launch")
    assert (row.kind, row.clocked_at, row.next_fire_at, row.enabled) == (
        Kind.CLOCKED,
        t0 + 3 * H,
        t0 + 3 * H,
        True,
    )


def test_clocked_that_already_ran_or_passed_is_imported_disabled(t0):
    periodic(
        "done",
        clocked=ClockedSchedule.objects.create(clocked_time=t0 - H),
        one_off=True,
        total_run_count=1,
        last_run_at=t0 - H,
    )
    periodic(
        "passed", clocked=ClockedSchedule.objects.create(clocked_time=t0 - 2 * H), one_off=True
    )
    plan = items(t0)
    assert "already ran" in plan["done"].why
    assert "passed without a run" in plan["passed"].why
    importer.run_import(t0, dry_run=False)
    for name in ("done", "passed"):
        row = Schedule.objects.get(name=name)
        assert (row.enabled, row.next_fire_at) == (False, None)


def test_one_off_interval_becomes_a_one_off_at_its_next_fire(t0):
    periodic("once", interval=every(60), one_off=True, date_changed=t0 - 10 * MIN)
    periodic(
        "once-done", interval=every(60), one_off=True, total_run_count=1, last_run_at=t0 - 5 * MIN
    )
    importer.run_import(t0, dry_run=False)
    once = Schedule.objects.get(name="once")
    assert (once.kind, once.clocked_at, once.next_fire_at) == (
        Kind.CLOCKED,
        t0 + 50 * MIN,
        t0 + 50 * MIN,
    )
    assert Schedule.objects.get(name="once-done").enabled is False


def test_task_past_its_end_date_is_imported_disabled(t0):
    """django-celery-beat sends such a task's messages already expired: it no longer runs."""
    periodic("ended", interval=every(5), expires=t0 - H, last_run_at=t0 - 2 * H)
    plan = items(t0)
    assert plan["ended"].action == importer.CREATE
    assert "end date 2026-03-02 11:00:00 UTC passed" in plan["ended"].why
    importer.run_import(t0, dry_run=False)
    row = Schedule.objects.get(name="ended")
    assert (row.enabled, row.next_fire_at) == (False, None)


def test_disabled_task_is_imported_disabled(t0):
    periodic("paused", interval=every(5), enabled=False)
    importer.run_import(t0, dry_run=False)
    row = Schedule.objects.get(name="paused")
    assert (row.enabled, row.next_fire_at) == (False, None)


# --- skipped, with the reason -------------------------------------------------------------


def test_a_solar_row_is_imported_as_the_same_sun_event_with_its_next_event(t0):
    """R25: django-celery-beat's solar rows move as solar schedules, next fire the sun
    event after the switch (as Celery's solar computes it)."""
    sun = SolarSchedule.objects.create(event="sunrise", latitude=52.52, longitude=13.40)
    periodic("dawn", solar=sun)
    assert items(t0)["dawn"].action == importer.CREATE
    importer.run_import(t0, dry_run=False)
    row = Schedule.objects.get(name="dawn")
    assert (row.kind, row.solar_event, row.latitude, row.longitude) == (
        Kind.SOLAR,
        "sunrise",
        52.52,
        13.40,
    )
    expected = timing.next_slot(timing.Solar("sunrise", 52.52, 13.40), t0)
    assert row.next_fire_at == expected
    assert expected is not None and t0 < expected <= t0 + 24 * H


def test_what_cannot_move_is_listed_and_skipped_with_the_reason(t0):
    periodic("ends", interval=every(5), expires=t0 + 24 * H)
    periodic("bad-args", interval=every(5), args="[1,")
    periodic("bad-kwargs", interval=every(5), kwargs="[1]")
    periodic("typo", interval=every(5), task="no.such.task")
    sun = SolarSchedule.objects.create(event="sunrise", latitude=95, longitude=13.40)
    periodic("off-the-globe", solar=sun)
    plan = items(t0)
    assert {i.action for i in plan.values()} == {importer.SKIP}
    assert "end date" in plan["ends"].why
    assert plan["bad-args"].why.startswith("args: malformed JSON")
    assert plan["bad-kwargs"].why.startswith("kwargs: must be a JSON object")
    assert plan["typo"].why.startswith("task: no task named 'no.such.task'")
    assert "latitude: must be between -90 and 90" in plan["off-the-globe"].why
    out = run()
    assert "skip    typo: task" in out
    assert "created 0, skipped 5, already present 0" in out
    assert not Schedule.objects.exists()


# --- dry run, idempotence, the switch -----------------------------------------------------


def test_dry_run_prints_the_plan_and_writes_nothing(t0):
    periodic("hourly", interval=every(60), last_run_at=t0 - 10 * MIN)
    out = run("--dry-run")
    assert "create  hourly: tests.e2eapp.tasks.record, every 1 hour;" in out
    assert "next fire 2026-03-02 12:50:00 UTC (last run 2026-03-02 11:50:00 UTC + 1 h)" in out
    assert "would create 1, skipped 0, already present 0 (dry run: nothing written)" in out
    assert not Schedule.objects.exists()


def test_second_run_changes_nothing(t0, make_schedule):
    periodic("hourly", interval=every(60), last_run_at=t0 - 10 * MIN)
    periodic("mine", interval=every(60))
    make_schedule("mine", every=30)  # a durablebeat schedule of that name exists: left alone
    first = run()
    assert "created 1, skipped 0, already present 1" in first
    before = list(Schedule.objects.order_by("name").values())
    second = run()
    assert "created 0, skipped 0, already present 2" in second
    assert list(Schedule.objects.order_by("name").values()) == before
    assert Schedule.objects.get(name="mine").every == 30 * S


def test_import_without_django_celery_beat_installed_says_so(monkeypatch):
    monkeypatch.setattr(importer.apps, "is_installed", lambda name: False)
    with pytest.raises(CommandError, match="django-celery-beat is not in INSTALLED_APPS"):
        run()


@pytest.mark.django_db(transaction=True)
def test_after_the_switch_nothing_fires_at_once_or_twice(make_engine, publisher, t0):
    """Import, then beat boots at once and ticks for two hours: each slot fires once, on
    the grid django-celery-beat had."""
    periodic("hourly", interval=every(60), last_run_at=t0 - 10 * MIN)
    cron = CrontabSchedule.objects.create(minute="30", hour="*", timezone="UTC")
    periodic("half-past", crontab=cron, last_run_at=t0 - 30 * MIN)
    importer.run_import(t0, dry_run=False)
    engine = make_engine()
    now = t0
    while now <= t0 + 2 * H:
        engine.tick(now)
        Run.objects.filter(state="published").update(state="succeeded")
        now += 30 * S
    assert publisher.slots("hourly") == [t0 + 50 * MIN, t0 + 110 * MIN]
    assert publisher.slots("half-past") == [t0 + 30 * MIN, t0 + 90 * MIN]
    assert {c.reason for c in publisher.claims} == {Reason.SCHEDULED}
