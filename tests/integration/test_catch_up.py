"""§2 against a real database, time passed in: R7-R10 and the broker-outage rules."""

from __future__ import annotations

import datetime as dt
import uuid

import pytest

from durablebeat.enums import Reason, RunState
from durablebeat.models import Boot, MissedSlots, Run, Schedule

pytestmark = pytest.mark.django_db(transaction=True)

S = dt.timedelta(seconds=1)
M = dt.timedelta(minutes=1)


def minutely(make_schedule, name: str, catch_up: bool, next_fire_at: dt.datetime) -> Schedule:
    return make_schedule(name, kind="crontab", catch_up=catch_up, next_fire_at=next_fire_at)


def test_delivery_slot_missed_by_a_restart_fires_once_with_reason_catch_up(
    make_engine, make_schedule, publisher, t0
):
    minutely(make_schedule, "digest", True, t0)
    make_engine().tick(t0 + 20 * S)  # beat was down at t0, back 20 s later
    assert [(c.slot, c.reason) for c in publisher.claims] == [(t0, Reason.CATCH_UP)]
    make_engine().tick(t0 + 25 * S)  # another restart: not again
    assert len(publisher.claims) == 1
    assert Schedule.objects.get().next_fire_at == t0 + M


def test_housekeeping_slot_missed_by_a_restart_is_counted_not_fired(
    make_engine, make_schedule, publisher, t0
):
    minutely(make_schedule, "sync", False, t0)
    make_engine().tick(t0 + 20 * S)
    assert publisher.claims == []
    missed = MissedSlots.objects.get()
    assert (missed.count, missed.first_slot, missed.last_slot) == (1, t0, t0)
    assert Schedule.objects.get().next_fire_at == t0 + M


def test_two_missed_delivery_slots_inside_the_window_fire_once_for_the_latest(
    make_engine, make_schedule, publisher, t0
):
    minutely(make_schedule, "digest", True, t0)
    make_engine().tick(t0 + M + 30 * S)
    assert [(c.slot, c.reason) for c in publisher.claims] == [(t0 + M, Reason.CATCH_UP)]
    assert MissedSlots.objects.get().count == 1  # the older one


def test_delivery_slot_older_than_its_window_is_missed(make_engine, make_schedule, publisher, t0):
    make_schedule("digest", kind="crontab", minute="0", hour="12", catch_up=True, next_fire_at=t0)
    make_engine().tick(t0 + 60 * M)  # default window: 55 min
    assert publisher.claims == []
    assert MissedSlots.objects.get().count == 1


def test_at_most_one_catch_up_fire_per_schedule_per_boot(make_engine, make_schedule, publisher, t0):
    row = minutely(make_schedule, "digest", True, t0)
    engine = make_engine()
    engine.tick(t0 + 20 * S)
    Schedule.objects.filter(pk=row.pk).update(next_fire_at=t0 + 2 * M)  # a second gap
    engine.tick(t0 + 2 * M + 30 * S)
    assert len(publisher.claims) == 1
    assert MissedSlots.objects.filter(schedule=row).count() == 1


def _dead_boot_claim(schedule: Schedule, slot: dt.datetime) -> Run:
    boot = Boot.objects.create(
        id=uuid.uuid4(), hostname="gone", pid=1, started_at=slot - M, heartbeat_at=slot
    )
    return Run.objects.create(
        schedule=schedule, slot=slot, boot=boot, claimed_at=slot, task_id=str(uuid.uuid4())
    )


def test_in_doubt_delivery_slot_is_resent_once_only_after_the_settle_time(
    make_engine, make_schedule, publisher, t0
):
    """R9: claimed by a boot that died before confirming the publish."""
    row = minutely(make_schedule, "digest", True, t0 + 30 * M)
    run = _dead_boot_claim(row, t0)
    make_engine().tick(t0 + 9 * M)  # settle is 10 min
    assert publisher.claims == []
    engine = make_engine()
    engine.tick(t0 + 10 * M)
    assert [(c.slot, c.task_id, c.reason) for c in publisher.claims] == [
        (t0, run.task_id, Reason.REPUBLISH)
    ]
    assert Run.objects.get(pk=run.pk).state == RunState.PUBLISHED
    make_engine().tick(t0 + 11 * M)
    engine.tick(t0 + 12 * M)
    assert len(publisher.claims) == 1


def test_in_doubt_slot_of_a_row_broken_since_is_set_aside_not_a_crash(
    make_engine, make_schedule, publisher, t0
):
    """R9 with R20: the row's kwargs were broken behind the form after the claim; the tick
    marks the row bad and goes on, and the slot stays in doubt until the row is fixed."""
    row = minutely(make_schedule, "digest", True, t0 + 30 * M)
    run = _dead_boot_claim(row, t0)
    Schedule.objects.filter(pk=row.pk).update(kwargs=[1])
    make_engine().tick(t0 + 10 * M)
    assert publisher.claims == []
    assert Schedule.objects.get(pk=row.pk).error.startswith("kwargs:")
    assert Run.objects.get(pk=run.pk).state == RunState.CLAIMED


def test_in_doubt_housekeeping_slot_is_recorded_missed_not_resent(
    make_engine, make_schedule, publisher, t0
):
    row = minutely(make_schedule, "sync", False, t0 + 30 * M)
    run = _dead_boot_claim(row, t0)
    make_engine().tick(t0 + 10 * M)
    assert publisher.claims == []
    run.refresh_from_db()
    assert run.state == RunState.MISSED and "in doubt" in run.detail


def test_publish_refused_keeps_the_run_and_retries_until_the_broker_is_back(
    make_engine, make_schedule, publisher, t0
):
    make_schedule("digest", every=60, catch_up=True, next_fire_at=t0)
    engine = make_engine()
    publisher.fail = True
    engine.tick(t0)
    run = Run.objects.get()
    assert run.state == RunState.CLAIMED
    for k in range(1, 30):
        engine.tick(t0 + k * S)
    assert Run.objects.get().state == RunState.CLAIMED
    publisher.fail = False
    engine.tick(t0 + 45 * S)
    assert publisher.slots() == [t0]
    assert Run.objects.get().state == RunState.PUBLISHED
    engine.tick(t0 + 50 * S)
    assert publisher.slots() == [t0]


def test_housekeeping_publish_is_given_up_at_its_next_slot_and_recorded_missed(
    make_engine, make_schedule, publisher, t0
):
    make_schedule("sync", every=20, next_fire_at=t0)
    engine = make_engine()
    publisher.fail = True
    for k in range(0, 20):
        engine.tick(t0 + k * S)
    publisher.fail = False
    engine.tick(t0 + 20 * S)
    first = Run.objects.get(slot=t0)
    assert first.state == RunState.MISSED and "broker unreachable" in first.detail
    assert publisher.slots() == [t0 + 20 * S]  # the next slot goes out; the old one does not


# --- exact ranges (R8, R27): no slot of a MissedSlots range has a run -----------------------


def _no_run_in_a_missed_range(row: Schedule) -> None:
    for missed in MissedSlots.objects.filter(schedule=row):
        ran = Run.objects.filter(
            schedule=row, slot__gte=missed.first_slot, slot__lte=missed.last_slot
        ).exclude(state=RunState.MISSED)
        assert not ran.exists(), (missed.first_slot, missed.last_slot, list(ran.values("slot")))


def test_a_catch_up_range_ends_before_the_slot_that_was_caught_up(
    make_engine, make_schedule, publisher, t0
):
    row = minutely(make_schedule, "digest", True, t0)
    make_engine().tick(t0 + 2 * M + 30 * S)
    assert [(c.slot, c.reason) for c in publisher.claims] == [(t0 + 2 * M, Reason.CATCH_UP)]
    missed = MissedSlots.objects.get()
    assert (missed.count, missed.first_slot, missed.last_slot) == (2, t0, t0 + M)
    _no_run_in_a_missed_range(row)


def test_a_late_slot_after_a_gap_fires_as_scheduled_and_only_older_ones_are_missed(
    make_engine, make_schedule, publisher, t0
):
    row = minutely(make_schedule, "sync", False, t0)
    make_engine().tick(t0 + 3 * M + 5 * S)  # 5 s late for 12:03: late, not missed (R8)
    assert [(c.slot, c.reason) for c in publisher.claims] == [(t0 + 3 * M, Reason.SCHEDULED)]
    missed = MissedSlots.objects.get()
    assert (missed.count, missed.first_slot, missed.last_slot) == (3, t0, t0 + 2 * M)
    _no_run_in_a_missed_range(row)
