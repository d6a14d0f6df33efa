"""R35: a jittered slot's instant, pure: derived from the name and the slot (the same at
every call, whatever zone the slot is written in), in [0, jitter), before the next slot;
the policy writes the instant as the next fire and keeps the slot as the run's identity."""

from __future__ import annotations

import collections
import datetime as dt
from zoneinfo import ZoneInfo

import pytest

from durablebeat.core import jitter, timing
from durablebeat.core.policy import Defer, Fire, Miss, decide, jittered

from .test_policy import AT_8, EVERY_20, LATE, MINUTELY, due

S = dt.timedelta(seconds=1)
T8 = dt.datetime(2026, 12, 7, 8, 0, tzinfo=dt.UTC)
NO_WINDOW = dt.timedelta(0)


def test_the_delay_is_the_same_for_the_same_name_and_slot_in_any_zone():
    paris = T8.astimezone(ZoneInfo("Europe/Paris"))
    first = jitter.delay("digest-42", T8, 60 * S)
    assert jitter.delay("digest-42", paris, 60 * S) == first
    assert jitter.delay("digest-42", T8, 60 * S) == first
    assert jitter.delay("digest-43", T8, 60 * S) != first  # another schedule, another delay
    assert jitter.delay("digest-42", T8 + 3600 * S, 60 * S) != first  # another slot


def test_ten_thousand_schedules_sharing_a_slot_spread_flat_over_the_jitter():
    """The issue's burst, in the math: 10,000 schedules at 08:00 with a 60-s jitter, none
    early, none at or past 60 s, no second holding more than twice the mean."""
    delays = [jitter.delay(f"digest-customer-{i}", T8, 60 * S) for i in range(10_000)]
    assert min(delays) >= dt.timedelta(0)
    assert max(delays) < 60 * S
    per_second = collections.Counter(int(d.total_seconds()) for d in delays)
    assert set(per_second) == set(range(60))
    mean = 10_000 / 60
    assert max(per_second.values()) <= 2 * mean, per_second.most_common(3)


@pytest.mark.parametrize(
    ("spec", "span"),
    [
        (MINUTELY, 60 * S),  # a 10-min jitter on a minutely crontab: capped at the minute
        (EVERY_20, 20 * S),
        (timing.Clocked(T8), 600 * S),  # a one-off has no next slot: the jitter bounds it
    ],
)
def test_the_instant_never_reaches_the_next_slot(spec, span):
    for i in range(2000):
        at = jitter.instant(f"s{i}", spec, T8, 600 * S)
        assert T8 <= at < T8 + span


def test_no_jitter_is_the_slot_itself():
    assert jitter.instant("s", AT_8, T8, dt.timedelta(0)) == T8


def test_a_new_schedules_first_fire_is_its_slots_instant_and_keeps_the_slot():
    action = decide(due(AT_8, None, jitter=60 * S), T8 - 3600 * S, LATE, False, NO_WINDOW)
    assert isinstance(action, Defer)
    assert action.next_slot == T8
    assert action.next_fire_at == jitter.instant("s", AT_8, T8, 60 * S)
    assert T8 < action.next_fire_at < T8 + 60 * S


def test_a_jittered_slot_fires_with_its_slot_as_identity_and_the_next_jittered():
    at = jitter.instant("s", AT_8, T8, 60 * S)
    row = due(AT_8, at, jitter=60 * S, next_slot=T8)
    action = decide(row, at, LATE, False, NO_WINDOW)
    assert isinstance(action, Fire)
    assert action.slot == T8
    tomorrow = T8 + dt.timedelta(days=1)
    assert action.next_slot == tomorrow
    assert action.next_fire_at == jitter.instant("s", AT_8, tomorrow, 60 * S)
    assert action.following == tomorrow


def test_lateness_counts_from_the_instant_not_the_slot():
    """A slot sent hours after 08:00 by its jitter is on time 5 s after its instant (late
    after 10 s)."""
    span = dt.timedelta(hours=6)
    at = jitter.instant("s", AT_8, T8, span)
    assert at - T8 > 10 * LATE  # this name's delay (fixed: derived from the name and slot)
    action = decide(due(AT_8, at, jitter=span, next_slot=T8), at + 5 * S, LATE, False, NO_WINDOW)
    assert isinstance(action, Fire) and action.slot == T8 and action.missed is None


def test_a_missed_range_names_the_slots_and_moves_to_the_next_instant():
    """Beat down from 07:00 past 11:00 with a jittered hourly housekeeping schedule: the
    missed range is of slots; the next fire is the first slot whose instant has not come
    (11:00's, just before it; 12:00's, once 11:00's is past)."""
    hourly = timing.Crontab(minute="0")
    at = jitter.instant("s", hourly, T8, 60 * S)
    row = due(hourly, at, jitter=60 * S, next_slot=T8)
    t11, t12 = T8 + 3 * 3600 * S, T8 + 4 * 3600 * S
    at11 = jitter.instant("s", hourly, t11, 60 * S)
    assert at11 > t11

    before = decide(row, at11 - dt.timedelta(microseconds=1), LATE, False)
    assert isinstance(before, Miss)
    assert (before.missed.first, before.missed.last) == (T8, t11 - 3600 * S)
    assert (before.next_slot, before.next_fire_at) == (t11, at11)

    after = decide(row, at11 + LATE + S, LATE, False)
    assert isinstance(after, Miss)
    assert (after.missed.first, after.missed.last) == (T8, t11)
    assert (after.next_slot, after.next_fire_at) == (t12, jitter.instant("s", hourly, t12, 60 * S))


def test_a_stale_slot_after_the_next_fire_is_ignored():
    """A next fire written by hand (the row's slot left from before) is its own slot."""
    row = due(AT_8, T8, jitter=60 * S, next_slot=T8 + 3600 * S)
    assert row.slot == T8


def test_a_custom_schedule_is_not_jittered():
    class Always:
        def is_due(self, last_run_at):
            return (True, 30.0)

    spec = timing.Custom(Always(), "always")
    action = Defer(T8, "scheduled")
    assert jittered(due(spec, None, jitter=60 * S), action) is action


def test_a_stale_slot_a_writer_left_behind_is_never_fired_in_place_of_the_next():
    """The previous release's beat (or raw SQL) moved the next fire on to 08:00 tomorrow
    and left yesterday's slot beside it: the slot no longer matches, the next fire is its
    own slot."""
    tomorrow = T8 + dt.timedelta(days=1)
    row = due(AT_8, tomorrow, jitter=60 * S, next_slot=T8)
    assert row.slot == tomorrow
    assert jitter.slot_of(AT_8, tomorrow, T8) == tomorrow
    at = jitter.instant("s", AT_8, tomorrow, 60 * S)
    assert jitter.slot_of(AT_8, at, tomorrow) == tomorrow


def test_a_slot_stored_under_another_jitter_is_still_its_slot():
    """DURABLEBEAT_JITTER or the schedule's jitter changed since the instant was stored:
    that slot still goes at the instant stored, named by its slot (and an interval keeps
    its grid); the next slot takes the new jitter."""
    at = jitter.instant("s", EVERY_20, T8, 60 * S)  # capped at the 20-s gap
    row = due(EVERY_20, at, jitter=5 * S, next_slot=T8)
    assert row.slot == T8
    action = decide(row, at, LATE, False, NO_WINDOW)
    assert isinstance(action, Fire) and action.slot == T8
    assert action.next_slot == T8 + 20 * S
    assert action.next_fire_at == jitter.instant("s", EVERY_20, T8 + 20 * S, 5 * S)
