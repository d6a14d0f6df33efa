"""Schedules from code (R29): ``durablebeat.api``, and plain ORM writes, meet the same rules:
every bad value refused naming its field, a task name nobody registered refused as a typo
(beat sends one that reached the table by name, test_unregistered.py), every timing
edit honoured at the next slot of the new timing, whatever the path."""

from __future__ import annotations

import datetime as dt
import functools
import json
from collections.abc import Callable
from typing import Any

import pytest
from celery.schedules import crontab
from django.core.exceptions import ValidationError
from django.db import transaction
from django.test import override_settings

from durablebeat import api, wakeup
from durablebeat.core import timing
from durablebeat.enums import Reason, RunState
from durablebeat.models import Run, Schedule
from durablebeat.ops.report import build_report, format_report

pytestmark = pytest.mark.django_db(transaction=True)

TASK = "tests.e2eapp.tasks.record"
S = dt.timedelta(seconds=1)
H = dt.timedelta(hours=1)


@pytest.fixture
def frozen(time_machine, t0):
    time_machine.move_to(t0, tick=False)
    return t0


def digest(hour: int = 8, **extra: Any) -> dict[str, Any]:
    options = {"durablebeat": {"overlap": "allow"}}
    return {"task": TASK, "schedule": crontab(minute=0, hour=hour), "options": options} | extra


# --- the API ------------------------------------------------------------------------------


@pytest.mark.parametrize("chunk", [10, 2])
def test_a_name_given_twice_to_add_schedules_takes_its_last_entry(frozen, monkeypatch, chunk):
    """As a dict of them would: the last entry of a name is the one stored, whether both
    are in one chunk of the write or in two (``WRITE_CHUNK``)."""
    monkeypatch.setattr(api, "WRITE_CHUNK", chunk)
    written = api.add_schedules([("a", digest(8)), ("b", digest(8)), ("a", digest(10))])
    hours = dict(Schedule.objects.values_list("name", "hour"))
    assert hours == {"a": "10", "b": "8"}
    # one chunk: two rows created; two chunks: the second replaces the first's "a"
    assert (written.created, written.replaced) == {10: (2, 0), 2: (2, 1)}[chunk]


def test_add_creates_then_replaces_by_name_and_a_retry_changes_nothing(frozen):
    info = api.add_schedule("digest-42", TASK, crontab(minute=0, hour=8), kwargs={"customer": 42})
    assert (info.name, info.task, info.enabled, info.source) == (
        "digest-42",
        TASK,
        True,
        "database",
    )
    assert info.schedule == "At 08:00 (UTC)"
    assert (
        api.add_schedule("digest-42", TASK, crontab(minute=0, hour=8), kwargs={"customer": 42})
        == info
    )
    assert api.add_schedules({"digest-42": digest(kwargs={"customer": 42})}).created == 0
    replaced = api.add_schedule("digest-42", TASK, 3600, kwargs={"customer": 43})
    assert replaced.schedule == "every 1 hour"
    assert Schedule.objects.get().kwargs == {"customer": 43}
    assert Schedule.objects.count() == 1


@pytest.mark.parametrize("changed", [{"task": "tests.e2eapp.tasks.record"}, {}])
def test_a_replace_writes_a_json_value_python_calls_equal(frozen, changed):
    """``1 == 1.0 == True`` in Python, not in a task's arguments: a replace that turns one
    into another writes it, alone or beside another change (R29)."""
    api.add_schedules({"job": digest(kwargs={"dry_run": 1})})
    for value in (True, 1.0, 1):
        written = api.add_schedules({"job": digest(kwargs={"dry_run": value}) | changed})
        assert written.replaced == 1
        stored = Schedule.objects.get().kwargs["dry_run"]
        assert (type(stored), stored) == (type(value), value)


@pytest.mark.parametrize(
    ("entry", "field", "words"),
    [
        ({"schedule": -5}, "schedule", "positive"),
        ({"task": "billing.tasks.ghost"}, "task", "billing.tasks.ghost"),
        ({"options": {"queue": 5}}, "queue", "string"),
        ({"schedule": dt.datetime(2030, 1, 1)}, "schedule", "aware"),
        ({"args": [object()]}, "args", "JSON"),
        ({"options": {"durablebeat": {"overlap": "sometimes"}}}, "overlap", "sometimes"),
        ({"options": {"priority": 300}}, "priority", "255"),
    ],
)
def test_a_bad_value_is_refused_naming_its_field_and_nothing_is_written(
    frozen, entry, field, words
):
    with pytest.raises(api.InvalidSchedule) as refused:
        api.add_schedules({"good": digest(), "bad": digest() | entry})
    assert refused.value.field == field
    assert words in str(refused.value) and "'bad'" in str(refused.value)
    assert not Schedule.objects.exists()  # all or nothing


def test_update_changes_what_is_given_and_keeps_the_rest(frozen):
    api.add_schedule("r", TASK, 60, kwargs={"a": 1}, options={"queue": "q", "priority": 3})
    api.update_schedule("r", options={"priority": None, "durablebeat": {"catch_up": True}})
    row = Schedule.objects.get()
    assert (row.queue, row.priority, row.catch_up, row.kwargs) == ("q", None, True, {"a": 1})
    api.update_schedule("r", kwargs={"b": 2}, task=TASK)
    assert Schedule.objects.get().kwargs == {"b": 2}
    with pytest.raises(api.InvalidSchedule):
        api.update_schedule("r", schedule=0)
    assert Schedule.objects.get().every == 60 * S
    with pytest.raises(api.ScheduleNotFound):
        api.update_schedule("nobody", task=TASK)


def test_a_schedule_defined_in_code_is_changed_in_code(make_engine, frozen):
    make_engine({"nightly": {"task": TASK, "schedule": 3600}}).tick(frozen)
    for write in (
        lambda: api.add_schedule("nightly", TASK, 60),
        lambda: api.update_schedule("nightly", schedule=60),
        lambda: api.delete_schedule("nightly", history="remove"),
    ):
        with pytest.raises(api.InvalidSchedule, match="beat_schedule"):
            write()
    assert Schedule.objects.get().every == H


def test_pause_and_resume(make_engine, publisher, frozen, time_machine):
    api.add_schedule("p", TASK, 60, options={"durablebeat": {"overlap": "allow"}})
    engine = make_engine()
    engine.tick(frozen)
    api.pause_schedule("p")
    engine.tick(frozen + 10 * 60 * S)
    assert publisher.slots() == []
    assert api.get_schedule("p").next_fire == "disabled"
    time_machine.move_to(frozen + 10 * 60 * S, tick=False)
    api.resume_schedule("p")  # its passed next fire is computed afresh, not missed
    # R33: with a beat alive, the resume writes it: the resume's now + startup grace (R2)
    assert api.get_schedule("p").next_fire_at == frozen + 11 * 60 * S
    for second in range(11 * 60, 13 * 60, 10):
        engine.tick(frozen + second * S)
    assert publisher.slots() == [frozen + 11 * 60 * S, frozen + 12 * 60 * S]
    assert not Run.objects.filter(state=RunState.MISSED).exists()


def test_delete_keeps_the_history_or_removes_it_as_asked(make_engine, publisher, frozen):
    for name in ("kept", "gone"):
        api.add_schedule(name, TASK, 60, options={"durablebeat": {"overlap": "allow"}})
    engine = make_engine()
    engine.tick(frozen)
    engine.tick(frozen + 60 * S)
    assert Run.objects.count() == 2
    with pytest.raises(api.InvalidSchedule, match="keep"):
        api.delete_schedule("kept", history="yes")  # type: ignore[arg-type]
    api.delete_schedule("kept", history="keep")
    api.delete_schedule("gone", history="remove")
    assert list(Run.objects.values_list("schedule__name", flat=True)) == ["kept"]
    assert [s.name for s in api.list_schedules()] == []
    [deleted] = api.list_schedules(include_deleted=True)
    assert (deleted.name, deleted.next_fire, deleted.enabled) == ("kept", "deleted", False)
    # issue 39: a schedule kept, marked deleted, reads back (it raised ScheduleNotFound)
    kept = api.get_schedule("kept")
    assert (kept.deleted_at, kept.next_fire, kept.enabled) == (frozen, "deleted", False)
    assert kept == deleted
    for change in (api.pause_schedule, api.resume_schedule, api.run_now):
        with pytest.raises(api.ScheduleNotFound):  # the calls that change one: it is gone
            change("kept")
    with pytest.raises(api.ScheduleNotFound):
        api.get_schedule("gone")
    report = build_report(frozen - H, frozen + H)
    assert "  kept (deleted): 1" in format_report(report).splitlines()  # the ledger says it
    engine.tick(frozen + 5 * 60 * S)
    assert len(publisher.slots()) == 2  # neither fires again
    api.add_schedule("kept", TASK, 60)  # back, with its history
    assert Run.objects.filter(schedule__name="kept").count() == 1
    assert api.get_schedule("kept").enabled


def test_made_in_a_transaction_that_rolls_back_never_fires(make_engine, publisher, frozen):
    with pytest.raises(RuntimeError), transaction.atomic():
        api.add_schedule("never", TASK, 60)
        raise RuntimeError("the request failed")
    assert not Schedule.objects.exists()
    make_engine().tick(frozen + H)
    assert publisher.slots() == []


@override_settings(DURABLEBEAT_LISTEN_NOTIFY=False, DURABLEBEAT_BROKER_WAKE=True)
def test_beat_is_woken_once_on_commit_not_before(frozen, monkeypatch):
    sent: list[int] = []
    monkeypatch.setattr(wakeup, "send", lambda: sent.append(1))
    with transaction.atomic():
        api.add_schedule("a", TASK, 60)
        api.add_schedules({f"t-{i}": digest() for i in range(3)})
        assert sent == []
    assert sent == [1]
    with pytest.raises(RuntimeError), transaction.atomic():
        api.add_schedule("b", TASK, 60)
        raise RuntimeError
    assert sent == [1]


def test_run_now_sends_once_with_a_manual_run(frozen, settings):
    import redis

    client = redis.Redis.from_url(settings.CELERY_BROKER_URL)
    client.flushdb()
    api.add_schedule("now", TASK, 3600, kwargs={"x": 1})
    task_id = api.run_now("now")
    run = Run.objects.get()
    assert (run.task_id, run.reason) == (task_id, Reason.MANUAL)
    [message] = [json.loads(m) for m in client.lrange("celery", 0, -1)]
    assert message["headers"]["id"] == task_id
    client.flushdb()


def test_many_at_once_created_then_replaced(make_engine, publisher, frozen):
    first = api.add_schedules({f"tenant-{i}": digest(8) for i in range(2500)})
    assert first == api.Written(created=2500, replaced=0, unchanged=0)
    tomorrow = frozen.replace(hour=8) + dt.timedelta(days=1)
    fires = dict(Schedule.objects.values_list("name", "next_fire_at"))
    assert set(fires.values()) == {tomorrow}  # R33: written with the rows, 08:00 tomorrow
    Schedule.objects.update(next_fire_at=tomorrow + dt.timedelta(days=1))  # as if moved on
    moved = {f"tenant-{i}": digest(9) for i in range(0, 2500, 2)}
    same = {f"tenant-{i}": digest(8) for i in range(1, 2500, 2)}
    assert api.add_schedules(moved | same) == api.Written(created=0, replaced=1250, unchanged=1250)
    fires = dict(Schedule.objects.values_list("name", "next_fire_at"))
    # R29: only the moved ones get the new timing's next slot, at once (R33)
    assert fires["tenant-0"] == tomorrow + H
    assert fires["tenant-1"] == tomorrow + dt.timedelta(days=1)


@pytest.mark.parametrize(
    ("own", "field", "words"),
    [
        ({"kwargs": {1: "one"}}, "kwargs", "keys must be strings"),
        ({"kwargs": {"note": "x\x00"}}, "kwargs", "must be JSON values"),  # was "args"
        ({"kwargs": {"blob": "x" * 70_000}}, "kwargs", "DURABLEBEAT_MAX_MESSAGE_BYTES"),
        ({"args": [object()]}, "args", "JSON"),
        ({"args": "abc"}, "args", "list or tuple"),
        ({"name": "tenant\n7"}, "name", "printable"),
        ({"name": "t" * 201}, "name", "200"),
        ({"name": ""}, "name", "blank"),
    ],
)
def test_one_bad_entry_among_many_of_one_shape_refuses_the_call_naming_it(
    frozen, own, field, words
):
    """R29, all or nothing: entries of one shape are checked in full once and each one's own
    name, args and kwargs on their own (codesync.ShapeCache); a fault in those, on the
    700th of 1,000, refuses the whole call naming the entry and the field."""
    entries = {f"tenant-{i}": digest(kwargs={"tenant": i}) for i in range(1000)}
    bad = dict(entries.pop("tenant-700"))
    name = own.pop("name", "tenant-700")
    entries[name] = bad | own
    with pytest.raises(api.InvalidSchedule) as refused:
        api.add_schedules(entries)
    assert refused.value.field == field
    assert words in str(refused.value) and f"schedule {name!r}" in str(refused.value)
    assert not Schedule.objects.exists()


@pytest.mark.parametrize(
    ("good", "bad", "field", "words"),
    [
        ({"options": {"priority": 1}}, {"options": {"priority": True}}, "priority", "bool"),
        ({"options": {"priority": 1}}, {"options": {"priority": 1.0}}, "priority", "float"),
        (
            {"timezone": "Europe/Berlin"},
            {"timezone": "Mars/Olympus"},
            "timezone",
            "Mars",
        ),  # was "schedule"
        ({"schedule": 60}, {"schedule": 0}, "schedule", "positive"),
        ({"task": TASK}, {"task": TASK + "_typo"}, "task", "_typo"),
        ({"options": {"headers": {"x": 1}}}, {"options": {"headers": {"id": 1}}}, "headers", "id"),
    ],
)
def test_entries_that_differ_in_more_than_their_own_values_are_each_read_in_full(
    frozen, good, bad, field, words
):
    """The shape of an entry is told by value and type (1, 1.0 and True differ): one that
    differs from a checked shape by anything but name, args and kwargs is checked itself."""
    with pytest.raises(api.InvalidSchedule) as refused:
        api.add_schedules({"a": digest() | good, "b": digest() | bad})
    assert refused.value.field == field and "'b'" in str(refused.value)
    assert words in str(refused.value)
    assert not Schedule.objects.exists()


def test_rows_written_many_at_once_hold_what_a_save_writes(frozen):
    """The COPY path on PostgreSQL (and bulk_create elsewhere) writes each value as save()
    does: every column of a created and of a replaced row equals a saved row's."""
    from durablebeat.beat.codesync import parse_entry
    from durablebeat.enums import Source

    def entry(hour: int, tenant: int) -> dict[str, Any]:
        options = {
            "queue": "mail",
            "priority": 7,
            "expires": 120.5,
            "headers": {"tenant": tenant},
            "delivery_mode": "transient",
            "durablebeat": {
                "startup_grace": dt.timedelta(minutes=3),
                "catch_up": True,
                "catch_up_window": 600,
                "overlap": "allow",
                "description": "digest\nper tenant",
            },
        }
        schedule = crontab(minute=15, hour=hour)
        return {"task": TASK, "schedule": schedule, "args": [tenant, "é"], "options": options}

    def saved(name: str, values: dict[str, Any], row: Schedule | None = None) -> Schedule:
        row = row or Schedule(name=name, source=Source.DATABASE)
        parse_entry(name, values, "Europe/Berlin").apply_to(row)
        row.save()
        return row

    def columns(name: str) -> dict[str, Any]:
        values = Schedule.objects.filter(name=name).values().get()
        return {k: v for k, v in values.items() if k not in ("id", "name", "updated_at")}

    many = {f"copied-{i}": entry(8, 42) | {"timezone": "Europe/Berlin"} for i in range(3)}
    api.add_schedules(many)
    saved("saved", entry(8, 42))
    Schedule.objects.update(created_at=frozen)
    assert columns("copied-1") == columns("saved")
    Schedule.objects.update(next_fire_at=frozen + H)  # as beat would
    moved = {name: entry(9, 43) | {"timezone": "Europe/Berlin"} for name in many}
    assert api.add_schedules(moved).replaced == 3
    saved("saved", entry(9, 43), Schedule.objects.get(name="saved"))
    assert columns("copied-1") == columns("saved")
    # R29, R33: the new timing's next slot, written with the row (09:15 Berlin tomorrow)
    assert columns("saved")["next_fire_at"] == frozen.replace(hour=8, minute=15) + dt.timedelta(
        days=1
    )


def test_paused_is_kept_or_set_as_asked_by_calls_that_share_a_transaction(frozen):
    """A replace keeps a paused schedule paused unless ``paused`` says otherwise; two calls
    in one transaction each replace (on PostgreSQL each its own COPY table)."""
    api.add_schedules({"a": digest(8), "b": digest(8)}, paused=True)
    assert not Schedule.objects.filter(enabled=True).exists()
    with transaction.atomic():
        assert api.add_schedules({"a": digest(9)}) == api.Written(0, 1, 0)
        assert not Schedule.objects.get(name="a").enabled
        both = {"a": digest(10), "b": digest(8)}
        assert api.add_schedules(both, paused=False) == api.Written(0, 2, 0)
    a, b = Schedule.objects.order_by("name")
    assert (a.hour, a.enabled, b.hour, b.enabled) == ("10", True, "8", True)
    assert b.enabled_at is not None  # resumed as any edit resumes (models.edit_rules)


@pytest.mark.postgres_only
def test_a_bulk_add_to_a_table_never_analyzed_leaves_its_statistics(frozen, monkeypatch):
    """R33: ``add_schedules`` of ``ANALYZE_AFTER`` rows or more into a schedule table
    PostgreSQL has no statistics of (a new one: ``reltuples`` -1) analyzes it before it
    returns, inside the caller's transaction; the planner took it for a few rows until
    autovacuum came, and beat's read of the rows to fill sorted all of them at every slice.
    A table with statistics is left to autovacuum: a second bulk add does not analyze."""
    from django.db import connection

    if connection.vendor != "postgresql":
        pytest.skip("PostgreSQL's statistics")
    monkeypatch.setattr(api, "ANALYZE_AFTER", 5)

    def reltuples() -> float:
        with connection.cursor() as cur:
            cur.execute("SELECT reltuples FROM pg_class WHERE relname = 'durablebeat_schedule'")
            return cur.fetchone()[0]

    with transaction.atomic(), connection.cursor() as cur:
        # autovacuum's own ANALYZE waits for this lock: only the writes below analyze
        cur.execute("LOCK TABLE durablebeat_schedule IN SHARE UPDATE EXCLUSIVE MODE")
        # as a new table is: never analyzed
        cur.execute("UPDATE pg_class SET reltuples = -1 WHERE relname = 'durablebeat_schedule'")
        api.add_schedules((f"few-{i}", digest()) for i in range(4))
        assert reltuples() == -1  # fewer than ANALYZE_AFTER: left to autovacuum
        api.add_schedules((f"new-{i}", digest()) for i in range(6))
        assert reltuples() == 10  # analyzed in the caller's transaction, its rows counted
        api.add_schedules((f"more-{i}", digest()) for i in range(6))
        assert reltuples() == 10  # a table with statistics: not analyzed again


@pytest.mark.postgres_only
def test_many_copied_at_once_wake_a_listening_beat_on_commit_only(frozen):
    """R6, R29 (issue 28 item 5: picked up by a running beat without a restart): rows
    created or replaced by COPY fire the schedule table's NOTIFY as any insert or edit does,
    and only when the transaction commits."""
    from django.db import connection

    if connection.vendor != "postgresql":
        pytest.skip("LISTEN/NOTIFY is PostgreSQL's")
    import psycopg

    from durablebeat.beat.notify import CHANNEL

    params = connection.get_connection_params()
    with psycopg.connect(**params, autocommit=True) as listener:
        listener.execute(f"LISTEN {CHANNEL}")

        def heard() -> int:
            return sum(1 for _ in listener.notifies(timeout=0.5, stop_after=1))

        with transaction.atomic():
            api.add_schedules({f"t-{i}": digest(8) for i in range(50)})
            assert heard() == 0
        assert heard() == 1
        Schedule.objects.update(next_fire_at=frozen + H)  # as beat computes it
        heard()
        api.add_schedules({f"t-{i}": digest(9) for i in range(50)})  # replaced: fire reset
        assert heard() == 1
        api.add_schedules({f"t-{i}": digest(9) for i in range(50)})  # unchanged: no wake-up
        assert heard() == 0


# --- one rule for every write path (R20, R21, R29) -----------------------------------------


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({"kind": "crontab", "hour": "25"}, "hour"),
        ({"kind": "crontab", "timezone": "Mars/Olympus"}, "timezone"),
        ({"task": "billing.tasks.ghost"}, "task"),
        ({"every": dt.timedelta(0)}, "every"),
        ({"queue": "q" * 500}, "queue"),
    ],
)
def test_plain_orm_writes_refuse_a_bad_value_naming_the_field(frozen, fields, field):
    base = {"name": "orm", "task": TASK, "kind": "interval", "every": H} | fields
    for write in (
        lambda: Schedule.objects.create(**base),
        lambda: Schedule.objects.bulk_create([Schedule(**base)]),
    ):
        with pytest.raises(ValidationError) as refused:
            write()
        assert field in refused.value.message_dict
    row = Schedule.objects.create(name="orm", task=TASK, every=H)
    for name, value in fields.items():
        setattr(row, name, value)
    with pytest.raises(ValidationError) as refused:
        row.save()
    assert field in refused.value.message_dict
    with pytest.raises(ValidationError):
        Schedule.objects.bulk_update([row], list(fields))


def test_a_bad_value_written_by_update_is_set_aside_with_its_reason(
    make_engine, make_schedule, publisher, frozen
):
    """R29 amended (issue 39): a task name beat has not registered is no bad value at fire
    time: it is sent by name, as Celery's beat sends it (test_unregistered.py), where this
    test set it aside before."""
    for name in ("good", "unregistered", "hour"):
        make_schedule(name, every=60, next_fire_at=frozen)
    Schedule.objects.filter(name="unregistered").update(task="billing.tasks.ghost")
    Schedule.objects.filter(name="hour").update(kind="crontab", hour="25", next_fire_at=frozen)
    make_engine().tick(frozen)
    assert [c.schedule for c in publisher.claims] == ["good", "unregistered"]
    assert Schedule.objects.get(name="unregistered").error == ""
    assert "hour" in Schedule.objects.get(name="hour").error
    assert not Run.objects.filter(schedule__name="hour").exists()  # no one blamed


# --- every timing edit takes effect at the next slot of the new timing (R29) --------------


def _via_api(row: Schedule) -> None:
    api.update_schedule(row.name, schedule=crontab(minute=0, hour=9))  # in its own zone


def _via_save(row: Schedule) -> None:
    row.hour = "9"
    row.save()


def _via_save_update_fields(row: Schedule) -> None:
    row.hour = "9"
    row.save(update_fields=["hour"])


def _via_update(row: Schedule) -> None:
    Schedule.objects.filter(pk=row.pk).update(hour="9")


def _via_bulk_update(row: Schedule) -> None:
    row.hour = "9"
    Schedule.objects.bulk_update([row], ["hour"])


def _via_unloaded_instance(row: Schedule) -> None:
    fresh = Schedule(**{f.attname: getattr(row, f.attname) for f in Schedule._meta.concrete_fields})
    fresh.hour = "9"
    fresh.save()


@pytest.mark.parametrize(
    "edit",
    [
        _via_api,
        _via_save,
        _via_save_update_fields,
        _via_update,
        _via_bulk_update,
        _via_unloaded_instance,
    ],
)
def test_a_timing_edit_never_fires_the_old_slot(
    make_engine, publisher, frozen, time_machine, edit: Callable[[Schedule], None]
):
    """The reported case: a digest at 08:00 Europe/Berlin (07:00 UTC) moved to 09:00 from
    code fired once more at 08:00. Here it fires at 09:00 Berlin, and never at 08:00."""
    morning = frozen.replace(hour=5)  # 06:00 in Berlin (UTC+1 in March)
    time_machine.move_to(morning, tick=False)  # the write's now: its next slot is 08:00 (R33)
    api.add_schedule(
        "digest",
        TASK,
        crontab(minute=0, hour=8),
        timezone="Europe/Berlin",
        options={"durablebeat": {"overlap": "allow"}},
    )
    engine = make_engine()
    engine.tick(morning)
    row = Schedule.objects.get()
    assert row.next_fire_at == morning.replace(hour=7)
    edit(row)
    for minute in range(0, 4 * 60, 5):  # 06:00 .. 10:00 Berlin, a tick every 5 minutes
        engine.tick(morning + minute * 60 * S)
    assert publisher.slots() == [morning.replace(hour=8)]  # 09:00 Berlin


# --- a one-off whose instant passed (R31, issue 39) ----------------------------------------


def test_a_one_off_past_the_late_window_is_refused_naming_the_field_and_by_how_much(frozen):
    past = frozen - 2 * H
    for write in (
        lambda: api.add_schedule("late", TASK, past),
        lambda: api.add_schedules({"ok": digest(), "late": {"task": TASK, "schedule": past}}),
    ):
        with pytest.raises(api.InvalidSchedule) as refused:
            write()
        assert refused.value.field == "schedule"
        message = str(refused.value)
        assert "passed 2 h ago" in message and "ONE_OFF_LATE_WINDOW (1 h)" in message
        assert "'late'" in message
    assert not Schedule.objects.exists()
    api.add_schedule("late", TASK, frozen + H)
    with pytest.raises(api.InvalidSchedule) as refused:
        api.update_schedule("late", schedule=past)
    assert refused.value.field == "schedule" and "'late'" in str(refused.value)
    assert Schedule.objects.get().clocked_at == frozen + H


def test_a_one_off_within_the_late_window_is_sent_at_once_saying_why(
    frozen, make_engine, publisher, time_machine
):
    """A one-off for "now" is a few ms past when written: taken, and sent at the next look
    as scheduled; one written 20 minutes after its instant is sent at once too, its run
    saying so (never "no beat could fire it" while a beat ran: issue 39)."""
    engine = make_engine()
    engine.tick(frozen)  # a beat is running
    api.add_schedule("now", TASK, frozen - dt.timedelta(milliseconds=10))
    api.add_schedule("earlier", TASK, frozen - 20 * 60 * S)
    engine.tick(frozen + S)
    assert sorted(c.schedule for c in publisher.claims) == ["earlier", "now"]
    runs = {r.schedule.name: r for r in Run.objects.select_related("schedule")}
    assert runs["now"].detail == ""  # on time
    assert runs["earlier"].detail.startswith(
        "fired late: the one-off was made 20 min after its instant"
    )
    time_machine.move_to(frozen + 2 * H, tick=False)
    api.add_schedule("earlier", TASK, frozen - 20 * 60 * S)  # a retry: the same, not refused


# --- one field per mistake, whatever the call; every message names the schedule (issue 39) --


CALLS: dict[str, Callable[..., Any]] = {
    "add_schedule": lambda **kw: api.add_schedule(
        "s", kw.pop("task", TASK), kw.pop("schedule", crontab(minute=0, hour=8)), **kw
    ),
    "add_schedules": lambda **kw: api.add_schedules(
        {"s": {"task": TASK, "schedule": crontab(minute=0, hour=8)} | kw}
    ),
    "update_schedule": lambda **kw: api.update_schedule("s", **kw),
}


@pytest.mark.parametrize("call", list(CALLS))
@pytest.mark.parametrize(
    ("mistake", "field"),
    [
        ({"timezone": "Mars/Olympus"}, "timezone"),
        ({"timezone": "Mars/Olympus", "schedule": 60}, "timezone"),  # ignored by the timing
        ({"timezone": 5}, "timezone"),
        ({"kwargs": {"at": object()}}, "kwargs"),
        ({"args": [object()]}, "args"),
        ({"task": "tests.e2eapp.tasks.recrod"}, "task"),
        ({"schedule": 0}, "schedule"),
    ],
)
def test_one_field_per_mistake_whatever_the_call(frozen, call, mistake, field):
    api.add_schedules({"s": {"task": TASK, "schedule": crontab(minute=0, hour=9)}})
    with pytest.raises(api.InvalidSchedule) as refused:
        CALLS[call](**dict(mistake))
    assert refused.value.field == field
    assert "(schedule 's')" in str(refused.value)


def test_a_zone_is_looked_up_once_per_name_whatever_the_call(frozen, monkeypatch):
    """R33: add_schedules of many entries in one zone looks the zone up once (cached per
    name), and update_schedule checks its ``timezone`` once, in ``_parse``."""
    looked_up: list[Any] = []
    zone_of = timing.zone_of
    monkeypatch.setattr(timing, "zone_of", lambda zone: looked_up.append(zone) or zone_of(zone))
    monkeypatch.setattr(
        api, "_known_zone", functools.lru_cache(maxsize=256)(api._known_zone.__wrapped__)
    )
    entries = {f"s-{i}": digest(timezone="Asia/Kathmandu") for i in range(5)}
    api.add_schedules(entries)
    assert looked_up == ["Asia/Kathmandu"]
    looked_up.clear()
    with pytest.raises(api.InvalidSchedule) as refused:
        api.update_schedule("s-0", timezone="Mars/Olympus")  # refused: never cached
    assert refused.value.field == "timezone"
    assert looked_up == ["Mars/Olympus"]


def test_delete_refuses_an_unknown_history_naming_the_schedule(frozen):
    api.add_schedule("s", TASK, 60)
    with pytest.raises(api.InvalidSchedule) as refused:
        api.delete_schedule("s", history="yes")  # type: ignore[arg-type]
    assert refused.value.field == "history" and "(schedule 's')" in str(refused.value)
