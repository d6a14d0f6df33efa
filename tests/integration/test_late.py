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


@pytest.fixture
def one_off(make_schedule, time_machine):
    """A one-off for ``at``, written at ``written`` (a minute before its instant unless
    given: its reason depends on when it was written, issue 39)."""

    def make(at: dt.datetime, written: dt.datetime | None = None, name: str = "once"):
        time_machine.move_to(written or at - M, tick=False)
        return make_schedule(name, kind="clocked", clocked_at=at, catch_up=False)

    return make


def test_a_one_off_found_late_by_a_running_beat_fires_once_late_and_says_why(
    make_engine, one_off, publisher, t0
):
    engine = make_engine()
    engine.tick(t0)  # beat is running...
    one_off(t0 + 5 * S)
    engine.tick(t0 + 45 * S)  # ...and wakes 40 s after the slot (issue 30: a deaf LISTEN)
    assert [(c.slot, c.reason) for c in publisher.claims] == [(t0 + 5 * S, Reason.SCHEDULED)]
    run = Run.objects.get()
    assert run.detail.startswith("fired late: beat ")
    assert "was running at the slot, found 40 s late" in run.detail
    assert not MissedSlots.objects.exists()
    engine.tick(t0 + 50 * S)
    assert len(publisher.claims) == 1  # once


def test_a_one_off_past_its_late_window_is_missed_with_the_true_reason(
    make_engine, one_off, publisher, t0, settings
):
    settings.DURABLEBEAT_ONE_OFF_LATE_WINDOW = 30
    engine = make_engine()
    engine.tick(t0)
    one_off(t0 + 5 * S)
    engine.tick(t0 + 45 * S)
    assert publisher.claims == []
    missed = MissedSlots.objects.get()
    assert "was running at the slot, found 40 s late" in missed.reason
    assert missed.reason != NO_BEAT


def test_a_one_off_due_while_no_beat_ran_fires_late_after_the_boot(
    make_engine, one_off, publisher, t0
):
    one_off(t0)
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


# --- a one-off written after its own instant (issue 39): never "no beat could fire it" ----


def test_a_one_off_made_after_its_instant_fires_at_once_saying_so(
    make_engine, one_off, publisher, t0
):
    """Within DURABLEBEAT_ONE_OFF_LATE_WINDOW: sent at the first look, its run saying it
    was made after its instant (a beat was running all along: neither "no beat" nor "woke
    late" is true)."""
    engine = make_engine()
    engine.tick(t0)
    one_off(t0 + 5 * S, written=t0 + 25 * M)
    engine.tick(t0 + 25 * M + S)
    assert [c.slot for c in publisher.claims] == [t0 + 5 * S]
    detail = Run.objects.get().detail
    assert detail.startswith("fired late: the one-off was made 24 min after its instant")
    assert NO_BEAT not in detail and "was running at the slot" not in detail


def test_a_one_off_made_past_its_window_is_missed_saying_it_was_made_after(
    make_engine, one_off, publisher, t0
):
    """An ORM write the API would refuse (test_api: a past one-off), found by a running
    beat: missed, and the reason is the write's, not the beat's."""
    engine = make_engine()
    engine.tick(t0)
    one_off(t0 + 5 * S, written=t0 + 3 * 60 * M)
    engine.tick(t0 + 3 * 60 * M + S)
    assert publisher.claims == []
    reason = MissedSlots.objects.get().reason
    assert reason.startswith("the one-off was made 2 h 59 min after its instant")
    assert reason != NO_BEAT


def test_a_one_off_moved_into_the_past_says_it_was_written_after(
    make_engine, one_off, publisher, t0, time_machine
):
    engine = make_engine()
    engine.tick(t0)
    row = one_off(t0 + 10 * M, written=t0)
    engine.tick(t0 + S)  # beat has its next fire
    time_machine.move_to(t0 + 20 * M, tick=False)
    row.clocked_at = t0 + 2 * M  # a timing edit: beat computes its next fire afresh
    row.save()
    engine.tick(t0 + 20 * M + S)
    assert [c.slot for c in publisher.claims] == [t0 + 2 * M]
    detail = Run.objects.get().detail
    assert "the one-off was written 18 min after its instant" in detail


def test_a_late_one_offs_note_survives_its_start_and_finish(make_engine, one_off, publisher, t0):
    """R31: the worker's start and completion cleared every run's detail, so a late one-off
    that ran read as on time (found by the e2e test of issue 39). They clear a lost or
    no-news note only."""
    from durablebeat.worker import completion

    one_off(t0, written=t0 + 5 * M)
    make_engine().tick(t0 + 5 * M + S)
    [claim] = publisher.claims
    assert completion.start(completion.Started(claim.task_id, t0 + 6 * M, "w@h", 1, None))
    assert completion.finish(completion.Finished(claim.task_id, t0 + 7 * M, True))
    run = Run.objects.get()
    assert run.state == RunState.SUCCEEDED
    assert run.detail.startswith("fired late: the one-off was made 5 min after its instant")
