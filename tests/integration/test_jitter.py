"""R35 against a real database: schedules made from code with a jitter store each slot's
instant (their own, per name, through the API's bulk write too) beside the slot; beat sends
each at its instant, never before, its run named by the slot, once across restarts; the
next fire is the next slot's instant; an edit of the next fire by hand is its own slot;
bad jitters are refused naming the field. Real processes: tests/e2e/test_jitter.py."""

from __future__ import annotations

import datetime as dt

import pytest
from celery.schedules import crontab
from django.core.exceptions import ValidationError
from django.test import override_settings

from durablebeat import api
from durablebeat.beat.codesync import BadEntry, parse_beat_schedule
from durablebeat.core import jitter, timing
from durablebeat.enums import Reason
from durablebeat.models import Run, Schedule

pytestmark = pytest.mark.django_db(transaction=True)

TASK = "tests.e2eapp.tasks.record"
S = dt.timedelta(seconds=1)
JITTER = 60 * S
AT_13 = timing.Crontab(minute="0", hour="13")


@pytest.fixture
def frozen(time_machine, t0):
    time_machine.move_to(t0, tick=False)
    return t0


def _digests(n: int, **own) -> dict[str, dict]:
    options = {"durablebeat": {"overlap": "allow", "jitter": 60} | own}
    return {
        f"digest-{i}": {"task": TASK, "schedule": crontab(minute=0, hour=13), "options": options}
        for i in range(n)
    }


def test_rows_made_from_code_fire_at_their_own_instants_once_named_by_the_slot(
    frozen, make_engine, publisher
):
    """300 digests at 13:00 with a 60-s jitter, written by the API's bulk write (COPY on
    PostgreSQL): each row's next fire is its own instant, its slot 13:00; ticks to 13:00:30
    send those whose instant came, and after a restart, ticks to 13:01 send the rest, each
    once."""
    api.add_schedules(_digests(300))
    slot = frozen + 3600 * S  # 13:00
    rows = list(Schedule.objects.values_list("name", "next_fire_at", "next_slot"))
    instants = {name: jitter.instant(name, AT_13, slot, JITTER) for name, _, _ in rows}
    assert all(s == slot for _, _, s in rows)
    assert {name: at for name, at, _ in rows} == instants
    assert len(set(instants.values())) == 300  # spread, not one second
    assert all(slot < at < slot + JITTER for at in instants.values())

    make_engine(hooks=[]).tick(slot - S)
    assert not publisher.claims

    half = slot + 30 * S
    engine = make_engine(hooks=[])  # a beat waking every 5 s (within late_after)
    for k in range(1, 7):
        engine.tick(slot + k * 5 * S)
    early = {c.schedule for c in publisher.claims}
    assert early == {name for name, at in instants.items() if at <= half}
    assert 0 < len(early) < 300

    restarted = make_engine(hooks=[])  # a restart
    for k in range(1, 7):
        restarted.tick(half + k * 5 * S)
    assert sorted(c.schedule for c in publisher.claims) == sorted(instants)
    assert {c.slot for c in publisher.claims} == {slot}
    assert Run.objects.filter(slot=slot).count() == 300

    tomorrow = slot + dt.timedelta(days=1)
    row = Schedule.objects.get(name="digest-7")
    assert row.next_slot == tomorrow
    assert row.next_fire_at == jitter.instant("digest-7", AT_13, tomorrow, JITTER)


def test_the_setting_jitters_schedules_without_their_own_and_zero_turns_it_off(frozen):
    with override_settings(DURABLEBEAT_JITTER=dt.timedelta(minutes=5)):
        api.add_schedules(_digests(2) | {"plain": _digests(1)["digest-0"]})
        api.add_schedule(
            "off", TASK, crontab(minute=0, hour=13), options={"durablebeat": {"jitter": 0}}
        )
    slot = frozen + 3600 * S
    rows = {r.name: r for r in Schedule.objects.all()}
    assert rows["plain"].next_fire_at == jitter.instant("plain", AT_13, slot, JITTER)
    assert (rows["off"].next_fire_at, rows["off"].next_slot) == (slot, None)


def test_a_beat_filled_interval_is_jittered_and_keeps_its_grid(frozen, make_engine, make_schedule):
    """An interval's first fire (the startup grace, R2) and every next one are its slots'
    instants; the grid stays on the slots, not on the instants (no drift)."""
    job = make_schedule("job", every=600, jitter=JITTER, overlap="allow")
    engine = make_engine(hooks=[])
    engine.tick(frozen)  # no beat was alive at the write: beat fills the first fire (R2, R33)
    first = Schedule.objects.get(pk=job.pk)
    slot = first.next_slot
    assert slot == frozen + 60 * S  # the startup grace
    assert first.next_fire_at == jitter.instant("job", timing.Interval(600 * S), slot, JITTER)
    engine = make_engine(hooks=[])
    for k in range(3):
        row = Schedule.objects.get(pk=job.pk)
        assert row.next_slot == slot + k * 600 * S
        engine.tick(row.next_fire_at)
    assert list(Run.objects.order_by("slot").values_list("slot", flat=True)) == [
        slot + k * 600 * S for k in range(3)
    ]


def test_a_next_fire_set_by_hand_is_its_own_slot(frozen, make_engine, publisher):
    api.add_schedules(_digests(1))
    row = Schedule.objects.get()
    row.next_fire_at = frozen + 10 * S
    row.save()
    row.refresh_from_db()
    assert (row.next_slot, row.next_fire_reason) == (None, Reason.SCHEDULED)
    make_engine(hooks=[]).tick(frozen + 10 * S)
    assert publisher.slots() == [frozen + 10 * S]


def test_a_timing_edit_drops_the_old_slot():
    api.add_schedules(_digests(1))
    Schedule.objects.update(hour="14")
    row = Schedule.objects.get()
    assert row.next_slot is None or row.next_slot <= row.next_fire_at
    assert row.next_slot is None or row.next_slot.hour == 14


@pytest.mark.parametrize(
    ("jitter_value", "words"),
    [(-1, "0"), (2 * 86400, "1 day"), ("soon", "")],
)
def test_a_bad_jitter_is_refused_naming_the_field(jitter_value, words):
    entry = _digests(1, jitter=jitter_value)
    with pytest.raises((ValidationError, BadEntry, api.InvalidSchedule)) as refused:
        api.add_schedules(entry)
    assert "jitter" in str(refused.value) and words in str(refused.value)
    with pytest.raises(BadEntry, match="jitter"):
        parse_beat_schedule(entry, "UTC", check_task=False)
    assert not Schedule.objects.exists()


def test_a_next_fire_moved_by_a_writer_that_knows_no_slot_fires_as_its_own_slot(
    frozen, make_engine, publisher
):
    """The previous release's beat moves ``next_fire_at`` only (raw SQL here): the slot
    left beside it is ignored, the stored next fire fires as its own slot, once."""
    from django.db import connection

    api.add_schedules(_digests(1))
    moved = frozen + 5 * S
    with connection.cursor() as cur:
        stored = connection.ops.adapt_datetimefield_value(moved)  # as Django writes it
        cur.execute("UPDATE durablebeat_schedule SET next_fire_at = %s", [stored])
    make_engine(hooks=[]).tick(moved)
    assert publisher.slots() == [moved]
    assert Run.objects.get().slot == moved
