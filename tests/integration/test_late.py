"""R31: a slot found late says what really happened, and a one-off is never lost silently
to lateness. Time passed in; the boots' liveness is the ledger's."""

from __future__ import annotations

import datetime as dt

import pytest

from durablebeat.beat.boots import NO_BEAT
from durablebeat.enums import Reason, RunState
from durablebeat.models import MissedSlots, Run

pytestmark = pytest.mark.django_db(transaction=True)

S = dt.timedelta(seconds=1)
M = dt.timedelta(minutes=1)


def one_off(make_schedule, at: dt.datetime):
    return make_schedule("once", kind="clocked", clocked_at=at, catch_up=False)


def test_a_one_off_found_late_by_a_running_beat_fires_once_late_and_says_why(
    make_engine, make_schedule, publisher, t0
):
    engine = make_engine()
    engine.tick(t0)  # beat is running...
    one_off(make_schedule, t0 + 5 * S)
    engine.tick(t0 + 45 * S)  # ...and wakes 40 s after the slot (issue 30: a deaf LISTEN)
    assert [(c.slot, c.reason) for c in publisher.claims] == [(t0 + 5 * S, Reason.SCHEDULED)]
    run = Run.objects.get()
    assert run.detail.startswith("fired late: beat ")
    assert "was running at the slot, found 40 s late" in run.detail
    assert not MissedSlots.objects.exists()
    engine.tick(t0 + 50 * S)
    assert len(publisher.claims) == 1  # once


def test_a_one_off_past_its_late_window_is_missed_with_the_true_reason(
    make_engine, make_schedule, publisher, t0, settings
):
    settings.DURABLEBEAT_ONE_OFF_LATE_WINDOW = 30
    engine = make_engine()
    engine.tick(t0)
    one_off(make_schedule, t0 + 5 * S)
    engine.tick(t0 + 45 * S)
    assert publisher.claims == []
    missed = MissedSlots.objects.get()
    assert "was running at the slot, found 40 s late" in missed.reason
    assert missed.reason != NO_BEAT


def test_a_one_off_due_while_no_beat_ran_fires_late_after_the_boot(
    make_engine, make_schedule, publisher, t0
):
    one_off(make_schedule, t0)
    make_engine().tick(t0 + 10 * M)  # the first beat boots ten minutes after it
    assert [c.slot for c in publisher.claims] == [t0]
    assert Run.objects.get().detail == f"fired late: {NO_BEAT}"


def test_a_slot_missed_while_a_beat_ran_does_not_say_none_ran(
    make_engine, make_schedule, publisher, t0
):
    engine = make_engine()
    engine.tick(t0)
    make_schedule("sync", kind="crontab", catch_up=False, next_fire_at=t0 + M)
    engine.tick(t0 + M + 30 * S)
    assert publisher.claims == []
    reason = MissedSlots.objects.get().reason
    assert "was running at the slot, found 30 s late" in reason


def test_a_slot_missed_while_no_beat_ran_says_so(make_engine, make_schedule, publisher, t0):
    make_schedule("sync", kind="crontab", catch_up=False, next_fire_at=t0)
    old = make_engine()
    old.tick(t0 - 5 * M)
    old.close(t0 - 4 * M)  # a beat that stopped before the slot
    make_engine().tick(t0 + 30 * S)
    assert MissedSlots.objects.get().reason == NO_BEAT
    assert not Run.objects.filter(state=RunState.MISSED).exists()
