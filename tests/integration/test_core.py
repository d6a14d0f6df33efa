"""§1 against a real database: R1-R4, R6, R7, R20, driven tick by tick with time passed in."""

from __future__ import annotations

import datetime as dt
import threading

import pytest
from django.core.exceptions import ValidationError
from django.db import connection

from durablebeat.beat import boots, due
from durablebeat.beat.codesync import BadEntry
from durablebeat.enums import Reason, RunState
from durablebeat.models import Boot, Run, Schedule

pytestmark = pytest.mark.django_db(transaction=True)

S = dt.timedelta(seconds=1)
# overlap=allow: no worker completes runs in these tests (tests/e2e has the real ones).
ALLOW = {"durablebeat": {"overlap": "allow"}}
EVERY_20 = {
    "job": {
        "task": "tests.e2eapp.tasks.record",
        "schedule": dt.timedelta(seconds=20),
        "options": ALLOW,
    }
}


def test_new_interval_schedule_fires_after_startup_grace_not_at_once(make_engine, publisher, t0):
    engine = make_engine(EVERY_20)
    engine.tick(t0)
    assert publisher.claims == []
    row = Schedule.objects.get(name="job")
    assert row.next_fire_at == t0 + 60 * S  # R2: written before waiting
    assert row.next_fire_reason == Reason.STARTUP_GRACE
    engine.tick(t0 + 59 * S)
    assert publisher.claims == []
    engine.tick(t0 + 60 * S)
    assert publisher.slots() == [t0 + 60 * S]
    assert publisher.claims[0].reason == Reason.STARTUP_GRACE


def test_restart_during_grace_keeps_first_fire_time(make_engine, publisher, t0):
    for restart in range(10):  # R2: ten restarts inside the grace never push it away
        make_engine(EVERY_20).tick(t0 + restart * 5 * S)
    assert Schedule.objects.get(name="job").next_fire_at == t0 + 60 * S
    engine = make_engine(EVERY_20)
    engine.tick(t0 + 60 * S)
    assert publisher.slots() == [t0 + 60 * S]


def test_stored_future_next_fire_is_used_as_is_at_boot(make_engine, make_schedule, publisher, t0):
    make_schedule("daily", every=24 * 3600, next_fire_at=t0 + dt.timedelta(hours=20))
    engine = make_engine()
    engine.tick(t0)
    assert Schedule.objects.get(name="daily").next_fire_at == t0 + dt.timedelta(hours=20)
    assert publisher.claims == []


def test_daily_job_is_not_starved_by_restarts_more_frequent_than_its_period(
    make_engine, publisher, t0
):
    """The story of §1: restarted every 2 h, a 24 h job still fires every 24 h."""
    daily = {"daily": {**EVERY_20["job"], "schedule": dt.timedelta(hours=24)}}
    now, end = t0, t0 + dt.timedelta(days=3)
    while now < end:
        engine = make_engine(daily)  # a deploy: a new beat process
        boot_end = now + dt.timedelta(hours=2)
        engine.tick(now)
        while (nxt := Schedule.objects.get(name="daily").next_fire_at) <= boot_end:
            now = max(now, nxt)
            engine.tick(now)
        now = boot_end
    fires = publisher.slots("daily")
    assert fires == [t0 + 60 * S + k * dt.timedelta(hours=24) for k in range(3)]


def test_run_is_recorded_and_next_fire_advanced_before_publish(make_engine, publisher, t0):
    """R3: when the message is sent, the ledger already has the run and the next fire."""
    make_engine(EVERY_20).tick(t0)
    seen = []

    def check_committed(claim):
        # Read through a fresh query: the claim transaction is committed by now.
        run = Run.objects.get(pk=claim.run_id)
        seen.append((run.state, Schedule.objects.get(name="job").next_fire_at))

    publisher.on_publish = check_committed
    make_engine(EVERY_20).tick(t0 + 60 * S)
    assert seen == [(RunState.CLAIMED, t0 + 80 * S)]
    assert Run.objects.get().state == RunState.PUBLISHED


def test_long_gap_fires_once_and_continues_on_the_grid(make_engine, make_schedule, publisher, t0):
    """R3/R7: late but inside the tolerance: one fire, next fire on deadline + k * every."""
    make_schedule("job", every=20, next_fire_at=t0)
    engine = make_engine()
    engine.tick(t0 + 1.5 * S)
    assert publisher.slots() == [t0]
    assert Schedule.objects.get().next_fire_at == t0 + 20 * S


def test_overdue_interval_after_downtime_fires_once_after_grace(
    make_engine, make_schedule, publisher, t0
):
    """R7: overdue by hours (beat was down): one fire after the grace, no replay."""
    make_schedule("job", every=20, next_fire_at=t0)
    engine = make_engine()
    later = t0 + dt.timedelta(hours=5)
    engine.tick(later)
    assert publisher.claims == []
    assert Schedule.objects.get().next_fire_at == later + 60 * S
    engine.tick(later + 60 * S)
    engine.tick(later + 61 * S)
    assert publisher.slots() == [later + 60 * S]
    assert Schedule.objects.get().next_fire_at == later + 80 * S


def test_two_beats_at_once_never_fire_a_slot_twice(make_engine, make_schedule, publisher, t0):
    """R4: interleaved ticks of two beats on the same database."""
    for i in range(20):
        make_schedule(f"job{i}", every=10, next_fire_at=t0)
    a, b = make_engine(), make_engine()
    now = t0
    for _ in range(60):
        a.tick(now)
        b.tick(now)
        now += 0.5 * S
    slots = [(c.schedule, c.slot) for c in publisher.claims]
    assert len(slots) == len(set(slots)) == 20 * 3
    assert Run.objects.count() == 60


@pytest.mark.postgres_only  # another connection inserting while this one holds the sync
@pytest.mark.django_db(transaction=True)
def test_two_beats_booting_at_once_both_sync_a_new_code_entry(make_engine, t0, monkeypatch):
    """R4, R6: two beats boot together on a table without the entry and both insert it; the
    second insert is refused as a duplicate. That beat syncs again and boots (it stopped
    with DatabaseUnusable, seen in the e2e two-beats test)."""
    from durablebeat.beat import codesync

    real_apply_to = codesync.CodeEntry.apply_to
    raced: list[str] = []

    def other_beat_inserts(name: str, task: str) -> None:
        try:
            Schedule.objects.create(name=name, task=task, source="code", every=20 * S)
            raced.append("inserted")
        finally:
            connection.close()

    def apply_to(entry, row):
        real_apply_to(entry, row)
        if row.pk is None and not raced:  # this beat is about to insert: the other is first
            raced.append(row.name)
            other = threading.Thread(target=other_beat_inserts, args=(row.name, row.task))
            other.start()
            other.join()

    engine = make_engine(EVERY_20)  # parses (and validates) the entry: no race yet
    monkeypatch.setattr(codesync.CodeEntry, "apply_to", apply_to)
    engine.tick(t0)
    assert raced == ["job", "inserted"]
    row = Schedule.objects.get(name="job")
    assert row.next_fire_at == t0 + 60 * S  # booted: its startup grace is planned


def test_admin_defined_schedule_is_picked_up_without_restart(
    make_engine, make_schedule, publisher, t0
):
    """R6: a row created after boot is handled on the next tick."""
    engine = make_engine()
    engine.tick(t0)
    make_schedule("late", every=30, startup_grace=dt.timedelta(seconds=2))
    engine.tick(t0 + S)
    assert Schedule.objects.get(name="late").next_fire_at == t0 + 3 * S
    engine.tick(t0 + 3 * S)
    assert publisher.slots("late") == [t0 + 3 * S]


def test_code_timing_change_resets_next_fire_other_changes_keep_it(make_engine, t0):
    make_engine(EVERY_20).tick(t0)
    assert Schedule.objects.get().next_fire_at == t0 + 60 * S
    changed_args = {"job": {**EVERY_20["job"], "args": [1]}}
    make_engine(changed_args).tick(t0 + 10 * S)
    row = Schedule.objects.get()
    assert (row.next_fire_at, row.args) == (t0 + 60 * S, [1])
    changed_timing = {"job": {**EVERY_20["job"], "schedule": dt.timedelta(seconds=30)}}
    make_engine(changed_timing).tick(t0 + 20 * S)
    assert Schedule.objects.get().next_fire_at == t0 + 80 * S  # a new schedule: now + grace


def test_schedule_removed_from_code_is_disabled_with_history_kept(make_engine, publisher, t0):
    make_engine(EVERY_20).tick(t0)
    make_engine(EVERY_20).tick(t0 + 60 * S)
    assert Run.objects.count() == 1
    make_engine({}).tick(t0 + 70 * S)
    row = Schedule.objects.get()
    assert (row.enabled, row.removed_from_code_at) == (False, t0 + 70 * S)
    assert Run.objects.count() == 1
    make_engine(EVERY_20).tick(t0 + 100 * S)  # back in code: enabled again
    row = Schedule.objects.get()
    assert (row.enabled, row.enabled_at) == (True, t0 + 100 * S)


def test_during_a_database_outage_disabled_and_bad_code_schedules_stay_silent(
    make_engine, publisher, t0, monkeypatch
):
    """R5 fires code schedules from memory while the database is down; that memory follows
    what the database said last: a schedule disabled or set aside as bad there is not fired."""
    from django.db import OperationalError

    code = {name: EVERY_20["job"] for name in ("on", "off", "bad")}
    engine = make_engine(code)
    engine.tick(t0)  # boot: each first fire at t0 + startup grace
    Schedule.objects.filter(name="off").update(enabled=False)
    Schedule.objects.filter(name="bad").update(error="every: broken")
    engine.tick(t0 + 10 * S)  # a heartbeat: the memory is refreshed from the database

    def down(*args, **kwargs):
        raise OperationalError("server closed the connection unexpectedly")

    monkeypatch.setattr(due, "fetch_due", down)
    monkeypatch.setattr(due, "first_due", down)  # the tick asks it first
    monkeypatch.setattr(boots, "register_boot", down)
    for k in range(11, 100):
        engine.tick(t0 + k * S)
    assert not engine.db_ok
    assert {c.schedule for c in publisher.claims} == {"on"}


def test_the_outage_memory_reads_each_code_schedule_as_the_orm_does(make_engine, t0):
    """R5: the memory refreshed with each heartbeat (its query compiled once, its values
    converted as the ORM converts them) holds what the rows hold."""
    engine = make_engine({name: EVERY_20["job"] for name in ("a", "b")})
    engine.tick(t0)
    Schedule.objects.filter(name="a").update(next_fire_at=t0 + 7 * S, last_fired_at=t0 - S)
    Schedule.objects.filter(name="b").update(enabled=False)
    engine.memory.refresh()
    for row in Schedule.objects.all():
        planned = engine.memory.plan[row.name]
        expected = row.next_fire_at if row.enabled else None
        assert (planned.next_fire_at, planned.reason) == (expected, row.next_fire_reason)
        assert planned.last_run_at == (row.last_fired_at or row.created_at)
    assert engine.memory.plan["a"].next_fire_at == t0 + 7 * S


def test_a_heartbeat_writes_its_instant_and_offset_and_says_when_the_boot_is_gone(t0):
    """R17, R26: the heartbeat's own UPDATE (SQL written once) stores what the ORM reads
    back; an offset not measured leaves the last one; a boot row gone reads 0 (the engine
    registers it again)."""
    import uuid

    boot = uuid.uuid4()
    boots.register_boot(boot, "host", 1, t0, 0.25)
    assert boots.heartbeat(boot, t0 + S, -1.5) == 1
    row = Boot.objects.get(pk=boot)
    assert (row.heartbeat_at, row.clock_offset_seconds) == (t0 + S, -1.5)
    assert boots.heartbeat(boot, t0 + 2 * S) == 1
    row = Boot.objects.get(pk=boot)
    assert (row.heartbeat_at, row.clock_offset_seconds) == (t0 + 2 * S, -1.5)
    assert boots.heartbeat(uuid.uuid4(), t0) == 0


def test_a_boot_without_the_database_does_not_push_back_a_stored_next_fire(
    make_engine, publisher, t0, monkeypatch
):
    """R1 with R5: a beat that boots while the database is down plans a startup grace in
    memory; when the database answers before that plan fired, the stored next fire holds."""
    from django.db import OperationalError

    make_engine(EVERY_20).tick(t0)
    stored = Schedule.objects.get().next_fire_at  # t0 + startup grace

    def down(*args, **kwargs):
        raise OperationalError("connection refused")

    engine = make_engine(EVERY_20)
    with monkeypatch.context() as m:
        m.setattr(boots, "register_boot", down)
        engine.tick(t0 + 30 * S)  # boots from code: memory plans t0 + 30 s + grace
    assert not engine.db_ok
    engine.tick(t0 + 32 * S)  # the database answers again
    assert engine.db_ok and Schedule.objects.get().next_fire_at == stored
    engine.tick(stored)
    assert publisher.slots("job") == [stored]


@pytest.mark.parametrize(
    ("broken", "field"),
    [
        ({"kind": "crontab", "minute": "61"}, "minute"),
        ({"kwargs": [1]}, "kwargs"),
        ({"args": {"a": 1}}, "args"),
        ({"headers": []}, "headers"),
    ],
)
def test_bad_row_is_skipped_with_its_error_and_others_keep_firing(
    make_engine, make_schedule, publisher, t0, broken, field
):
    """R20: a row broken behind the model's back (its timing, or the JSON its message is
    built from) is set aside with its error and does not stop the other schedules."""
    make_schedule("good", every=20, next_fire_at=t0)
    bad = make_schedule("bad", every=20, next_fire_at=t0 - S)
    Schedule.objects.filter(pk=bad.pk).update(**broken)
    engine = make_engine()
    engine.tick(t0)
    assert publisher.slots("good") == [t0]
    assert publisher.slots("bad") == []
    assert Schedule.objects.get(name="bad").error.startswith(f"{field}:")
    engine.tick(t0 + 20 * S)
    assert publisher.slots("good") == [t0, t0 + 20 * S]


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({"kind": "crontab", "minute": "61"}, "minute"),
        ({"kind": "crontab", "hour": "x"}, "hour"),
        ({"kind": "crontab", "timezone": "Mars/Olympus"}, "timezone"),
        ({"kind": "interval", "every": dt.timedelta(0)}, "every"),
        ({"kind": "interval", "every": dt.timedelta(seconds=-5)}, "every"),
        ({"kind": "interval", "every": dt.timedelta(seconds=5), "args": {"a": 1}}, "args"),
        ({"kind": "interval", "every": dt.timedelta(seconds=5), "kwargs": [1]}, "kwargs"),
        ({"kind": "interval", "every": dt.timedelta(seconds=5), "task": "no.such.task"}, "task"),
    ],
)
def test_full_clean_refuses_bad_input_naming_the_field(fields, field):
    fields.setdefault("task", "tests.e2eapp.tasks.record")
    with pytest.raises(ValidationError) as err:
        Schedule(name="x", **fields).full_clean()
    assert field in err.value.message_dict


def test_bad_code_entry_fails_the_boot_naming_the_entry(make_engine):
    with pytest.raises(BadEntry, match="'broken'"):
        make_engine({"broken": {"task": "tests.e2eapp.tasks.record", "schedule": -5}})


@pytest.mark.parametrize(
    ("extra", "words"),
    [
        ({"options": {"priority": "high"}}, r"priority: .high. value must be an integer"),
        ({"options": {"priority": -1}}, "priority: must be from 0 to 255"),
        ({"options": {"queue": "q" * 201}}, "queue: Ensure this value has at most 200"),
        ({"relative": 1}, "relative: 1 value must be True or False, not int"),
    ],
)
def test_code_entry_refused_by_the_models_own_checks_names_the_entry(make_engine, extra, words):
    """R20: what the row's save would refuse fails the boot naming the entry and the field,
    instead of an error from deep inside the sync."""
    entry = {"task": "tests.e2eapp.tasks.record", "schedule": 5, **extra}
    with pytest.raises(BadEntry, match=rf"beat_schedule\['odd'\]: {words}"):
        make_engine({"odd": entry})
    assert not Schedule.objects.exists()


def test_due_query_uses_the_partial_index_on_postgres():
    if connection.vendor != "postgresql":
        pytest.skip("EXPLAIN output is PostgreSQL's")
    from django.utils import timezone

    from durablebeat.beat.due import fetch_due

    Schedule.objects.bulk_create(
        Schedule(
            name=f"s{i}",
            task="tests.e2eapp.tasks.record",
            every=dt.timedelta(seconds=60),
            next_fire_at=timezone.now() + dt.timedelta(days=1 + i),
        )
        for i in range(2000)
    )
    with connection.cursor() as cur:
        cur.execute("ANALYZE durablebeat_schedule")
    now = timezone.now()
    qs = Schedule.objects.filter(enabled=True, next_fire_at__lte=now)
    assert "durablebeat_due_idx" in qs.explain()
    assert fetch_due(now, 10) == []
