"""The pure decisions of §1-§2 (R2, R3, R7, R8), time passed in, no database."""

from __future__ import annotations

import datetime as dt

import pytest

from durablebeat.core import timing
from durablebeat.core.policy import (
    Defer,
    Due,
    Fire,
    Miss,
    Step,
    decide,
    no_news_bound,
    overlap_step,
)
from durablebeat.enums import Reason

T0 = dt.datetime(2026, 3, 2, 8, 0, tzinfo=dt.UTC)
S = dt.timedelta(seconds=1)
M = dt.timedelta(minutes=1)
LATE = 10 * S
GRACE = 60 * S


def due(spec: timing.Spec, next_fire_at: dt.datetime | None, **kw) -> Due:
    kw.setdefault("catch_up", False)
    return Due(
        id=1,
        name="s",
        spec=spec,
        next_fire_at=next_fire_at,
        next_fire_reason=kw.pop("reason", Reason.SCHEDULED),
        startup_grace=GRACE,
        catch_up_window=kw.pop("window", 55 * M),
        **kw,
    )


EVERY_20 = timing.Interval(20 * S)
AT_8 = timing.Crontab(minute="0", hour="8")
MINUTELY = timing.Crontab()


def test_new_interval_schedule_waits_one_startup_grace():
    assert decide(due(EVERY_20, None), T0, LATE, False) == Defer(T0 + GRACE, Reason.STARTUP_GRACE)


def test_new_crontab_schedule_gets_its_next_slot():
    assert decide(due(AT_8, None), T0, LATE, False) == Defer(T0 + dt.timedelta(days=1), "scheduled")


def test_due_slot_fires_and_advances_on_the_grid():
    action = decide(due(EVERY_20, T0, reason=Reason.STARTUP_GRACE), T0 + 3 * S, LATE, False)
    assert action == Fire(T0, Reason.STARTUP_GRACE, T0 + 20 * S)


def test_overdue_interval_fires_once_after_grace_r7():
    assert decide(due(EVERY_20, T0), T0 + 11 * S, LATE, False) == Defer(
        T0 + 11 * S + GRACE, Reason.STARTUP_GRACE
    )


def test_housekeeping_crontab_missed_while_down_is_counted_not_fired_r8():
    action = decide(due(MINUTELY, T0), T0 + 5 * M + 30 * S, LATE, False)
    assert isinstance(action, Miss)
    assert (action.missed.count, action.missed.first, action.missed.last) == (
        6,
        T0,
        T0 + 5 * M,
    )
    assert action.next_fire_at == T0 + 6 * M


def test_delivery_crontab_fires_latest_missed_slot_once_r8():
    action = decide(due(MINUTELY, T0, catch_up=True), T0 + 5 * M + 30 * S, LATE, False)
    assert isinstance(action, Fire)
    assert (action.slot, action.reason, action.next_fire_at) == (
        T0 + 5 * M,
        Reason.CATCH_UP,
        T0 + 6 * M,
    )
    assert action.missed is not None and action.missed.count == 5


def test_delivery_catch_up_only_once_per_boot_r8():
    action = decide(due(MINUTELY, T0, catch_up=True), T0 + 5 * M + 30 * S, LATE, True)
    assert isinstance(action, Miss)


def test_delivery_slot_older_than_window_is_missed_r8():
    action = decide(due(AT_8, T0, catch_up=True), T0 + 60 * M, LATE, False)
    assert isinstance(action, Miss) and action.missed.count == 1


def test_clocked_in_the_past_is_done_after_a_miss():
    once = timing.Clocked(T0)
    action = decide(due(once, None), T0 + 2 * M, LATE, False)
    assert action == Miss(action.missed, None)


@pytest.mark.parametrize("late", [0 * S, 9 * S, 10 * S])
def test_slot_within_late_after_fires_as_scheduled(late):
    action = decide(due(AT_8, T0), T0 + late, LATE, False)
    assert action == Fire(T0, Reason.SCHEDULED, T0 + dt.timedelta(days=1))


# --- the no-news bound (R22) with a countdown (R25) --------------------------------------


@pytest.mark.parametrize(
    ("expires", "countdown", "bound"),
    [
        (None, None, 120),
        (None, 0, 120),
        (None, 600, 720),  # no worker starts it before its ETA
        (60, None, 60),  # expired before the bound: no worker starts it after
        (300, 600, 300),  # expires before its ETA even comes
        (900, 600, 720),
    ],
)
def test_the_no_news_bound_counts_from_the_messages_eta(expires, countdown, bound):
    after = dt.timedelta(seconds=120)
    assert no_news_bound(expires, after, countdown) == dt.timedelta(seconds=bound)


# --- exact missed ranges (R8, R27): a slot that fires is never in the range ----------------


def _range(action):
    missed = action.missed
    return None if missed is None else (missed.count, missed.first, missed.last)


def test_catch_up_range_ends_at_the_slot_before_the_one_caught_up():
    """The issue's record: "count=1 first=20:18 last=20:19" where 20:19 fired as catch-up."""
    action = decide(due(MINUTELY, T0, catch_up=True), T0 + M + 30 * S, LATE, False)
    assert (action.slot, action.reason) == (T0 + M, Reason.CATCH_UP)
    assert _range(action) == (1, T0, T0)


def test_catch_up_of_the_only_missed_slot_records_no_range():
    action = decide(due(MINUTELY, T0, catch_up=True), T0 + 30 * S, LATE, False)
    assert (action.slot, action.reason, action.missed) == (T0, Reason.CATCH_UP, None)


def test_catch_up_range_of_five_hourly_slots_skips_the_sixth():
    hourly = timing.Crontab(minute="0")
    action = decide(
        due(hourly, T0, catch_up=True, window=2 * 60 * M), T0 + 5 * 60 * M + M, LATE, False
    )
    assert action.slot == T0 + 5 * 60 * M
    assert _range(action) == (5, T0, T0 + 4 * 60 * M)


def test_skip_forward_range_is_every_slot_that_passed():
    action = decide(due(MINUTELY, T0), T0 + 2 * M + 30 * S, LATE, False)
    assert isinstance(action, Miss)
    assert _range(action) == (3, T0, T0 + 2 * M)


@pytest.mark.parametrize("late", [0 * S, 5 * S, 10 * S])
def test_latest_slot_only_late_fires_as_scheduled_and_is_not_missed(late):
    """R8: a slot due less than LATE_AFTER ago is late, not missed, even after a gap."""
    action = decide(due(MINUTELY, T0), T0 + 3 * M + late, LATE, False)
    assert (action.slot, action.reason) == (T0 + 3 * M, Reason.SCHEDULED)
    assert _range(action) == (3, T0, T0 + 2 * M)
    assert action.next_fire_at == T0 + 4 * M


def test_latest_slot_just_past_late_after_is_missed():
    action = decide(due(MINUTELY, T0), T0 + 3 * M + LATE + S, LATE, False)
    assert isinstance(action, Miss) and _range(action) == (4, T0, T0 + 3 * M)


def test_an_outage_of_a_day_past_the_window_is_one_exact_range():
    now = T0 + 24 * 60 * M + 30 * S
    action = decide(due(MINUTELY, T0, catch_up=True), now, LATE, False)
    assert (action.slot, action.reason) == (T0 + 24 * 60 * M, Reason.CATCH_UP)
    assert _range(action) == (24 * 60, T0, T0 + 24 * 60 * M - M)
    action = decide(due(MINUTELY, T0, catch_up=True), now, LATE, True)  # caught up already
    assert isinstance(action, Miss)
    assert _range(action) == (24 * 60 + 1, T0, T0 + 24 * 60 * M)


def test_the_model_choices_carry_the_cores_values():
    """The core decides with plain enums (no Django in core); the rows store the choices
    built from them: one set of values, equal member by member."""
    from durablebeat import enums
    from durablebeat.core import enums as core

    for plain, choices in ((core.Overlap, enums.Overlap), (core.Reason, enums.Reason)):
        assert [m.name for m in plain] == list(choices.names)
        assert [m.value for m in plain] == list(choices.values)
        assert all(m == choices[m.name] and hash(m) == hash(choices[m.name]) for m in plain)


# --- R31: a one-off is never lost silently to lateness -------------------------------------


@pytest.mark.parametrize("stored", [None, T0], ids=["new", "stored"])
def test_a_one_off_found_late_fires_once_late_within_its_window(stored):
    once = timing.Clocked(T0)
    action = decide(due(once, stored), T0 + 2 * M, LATE, False, 60 * M)
    assert action == Fire(T0, Reason.SCHEDULED, None, late=2 * M)


def test_a_one_off_past_its_window_is_missed():
    once = timing.Clocked(T0)
    action = decide(due(once, T0), T0 + 61 * M, LATE, False, 60 * M)
    assert action == Miss(action.missed, None)


def test_only_a_one_off_fires_late_a_crontab_slot_is_missed():
    action = decide(due(AT_8, T0), T0 + 2 * M, LATE, False, 60 * M)
    assert isinstance(action, Miss)


# --- the overlap step (R14, R34) ------------------------------------------------------------


@pytest.mark.parametrize(
    ("overlap", "bound", "kept", "reason", "in_flight", "step"),
    [
        ("skip", None, False, "scheduled", 0, Step.FIRE),
        ("skip", None, False, "scheduled", 1, Step.SKIP),
        ("allow", None, False, "scheduled", 5, Step.FIRE),
        ("allow", 2, False, "scheduled", 1, Step.FIRE),
        ("allow", 2, False, "scheduled", 2, Step.SKIP),
        ("replace", None, False, "scheduled", 0, Step.FIRE),
        ("replace", None, False, "scheduled", 1, Step.REPLACE),
        ("buffer_one", None, False, "scheduled", 0, Step.FIRE),
        ("buffer_one", None, False, "scheduled", 1, Step.BUFFER),
        ("buffer_one", None, True, "scheduled", 1, Step.SKIP),
        ("buffer_one", None, True, "scheduled", 0, Step.RELEASE_AND_BUFFER),
        ("buffer_one", None, True, "buffered", 0, Step.RELEASE),
        ("buffer_one", None, True, "buffered", 1, Step.HOLD),
        ("buffer_one", None, False, "buffered", 0, Step.HOLD),
        # a slot kept before the overlap was changed is not this policy's to send
        ("skip", None, True, "buffered", 0, Step.HOLD),
        ("skip", None, True, "scheduled", 0, Step.FIRE),
    ],
)
def test_the_overlap_step_of_each_policy(overlap, bound, kept, reason, in_flight, step):
    row = due(
        EVERY_20, T0, overlap=overlap, max_in_flight=bound, buffered_slot=T0 if kept else None
    )
    assert overlap_step(row, reason, in_flight) == step


def test_the_end_of_a_run_sends_the_kept_slot_and_resumes_at_the_slot_it_put_off():
    """R34: the run ended at T0+50 s (the completion moved next fire there, reason
    buffered): the kept slot T0 goes, and next is the grid's first slot after the end."""
    kept = due(
        EVERY_20, T0 + 50 * S, reason=Reason.BUFFERED, buffered_slot=T0, overlap="buffer_one"
    )
    assert decide(kept, T0 + 51 * S, LATE, False) == Fire(T0, Reason.BUFFERED, T0 + 60 * S)
    at_8 = due(AT_8, T0 + 50 * S, reason=Reason.BUFFERED, buffered_slot=T0, overlap="buffer_one")
    assert decide(at_8, T0 + 51 * S, LATE, False) == Fire(T0, Reason.BUFFERED, T0 + 24 * 60 * M)
    # however late beat looks, the slot put off is the one after the end, not after now
    assert decide(kept, T0 + 500 * S, LATE, False).next_fire_at == T0 + 60 * S
