"""The pure decisions of §1-§2 (R2, R3, R7, R8), time passed in, no database."""

from __future__ import annotations

import datetime as dt

import pytest

from durablebeat.core import timing
from durablebeat.core.policy import Defer, Due, Fire, Miss, decide, no_news_bound
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
