"""R27: the time ``check``'s period-counting findings count: beat lifetimes merged, less the
startup grace that opens each stretch; the walks checked against counting by hand."""

from __future__ import annotations

import datetime as dt

import pytest

from durablebeat.core import timing
from durablebeat.ops import coverage

T0 = dt.datetime(2026, 3, 2, 12, 0, tzinfo=dt.UTC)
S = dt.timedelta(seconds=1)
MIN = dt.timedelta(minutes=1)


def test_overlapping_boots_are_one_stretch_and_a_gap_splits_them():
    """A rolling deploy (the new beat up before the old one stops) leaves no gap."""
    spans = [(T0 + 5 * MIN, T0 + 9 * MIN), (T0, T0 + 6 * MIN), (T0 + 10 * MIN, T0 + 11 * MIN)]
    assert coverage.merge(spans) == [(T0, T0 + 9 * MIN), (T0 + 10 * MIN, T0 + 11 * MIN)]


def test_a_boot_ending_before_it_starts_covers_nothing():
    assert coverage.merge([(T0, T0 - S)]) == []


def test_the_grace_opens_each_stretch_and_a_shorter_one_is_dropped():
    stretches = [(T0, T0 + 10 * MIN), (T0 + 20 * MIN, T0 + 20 * MIN + 30 * S)]
    assert coverage.after_grace(stretches, MIN) == [(T0 + MIN, T0 + 10 * MIN)]


def _covered_seconds(stretches, since, until):
    return sum(max(0.0, (min(b, until) - max(a, since)).total_seconds()) for a, b in stretches)


@pytest.mark.parametrize("need_s", [0, 30, 60, 90, 150, 200])
def test_duration_bound_leaves_exactly_need_of_covered_time_after_it(need_s):
    stretches = [(T0, T0 + MIN), (T0 + 2 * MIN, T0 + 3 * MIN), (T0 + 5 * MIN, T0 + 5 * MIN)]
    bound = coverage.duration_bound(stretches, T0 + 10 * MIN, need_s * S)
    if need_s > 120:
        assert bound is None
    else:
        assert bound is not None
        assert _covered_seconds(stretches, bound, T0 + 10 * MIN) == need_s


def test_duration_bound_ignores_time_after_until():
    assert coverage.duration_bound([(T0, T0 + 10 * MIN)], T0 + 5 * MIN, MIN) == T0 + 4 * MIN


@pytest.mark.parametrize("periods", [1, 2, 3, 5])
def test_slot_bound_is_the_nth_latest_slot_inside_the_stretches(periods):
    spec = timing.Crontab(minute="*/10")
    stretches = [(T0, T0 + 25 * MIN), (T0 + 45 * MIN, T0 + 65 * MIN)]
    until = T0 + 70 * MIN
    inside = [
        slot
        for slot in timing.slots_between(spec, T0 - S, until)
        if any(a < slot <= b for a, b in stretches)
    ]  # 12:10 12:20 | 12:50 13:00
    expected = inside[-periods] if periods <= len(inside) else None
    assert coverage.slot_bound(spec, stretches, until, periods) == expected
