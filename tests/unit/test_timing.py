"""Pure schedule math (R3, R7, R20; docs/configuration.md, "Crontab fields and daylight
saving time").

Fixed datetimes pin the documented rules; hypothesis checks ``next_slot``, ``slots_between``,
``latest_slot`` and ``advance`` against the brute-force minute-by-minute oracle in
``timing_reference`` across the DST changes of Europe/Berlin, America/New_York, Asia/Tokyo
(1948-1951) and Australia/Lord_Howe (a 30-minute shift).
"""

from __future__ import annotations

import ast
import datetime as dt
import itertools
import pickle
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest
from celery.schedules import crontab, schedule
from django_celery_beat.tzcrontab import TzAwareCrontab
from hypothesis import example, given, reject, settings
from hypothesis import strategies as st

from durablebeat.beat.celery_specs import from_celery
from durablebeat.core import timing
from durablebeat.core.timing import Clocked, Crontab, Interval, InvalidSchedule

from . import timing_reference as reference

UTC = dt.UTC
S = dt.timedelta(seconds=1)
M = dt.timedelta(minutes=1)
H = dt.timedelta(hours=1)
D = dt.timedelta(days=1)
BERLIN, NEW_YORK, TOKYO = "Europe/Berlin", "America/New_York", "Asia/Tokyo"
LORD_HOWE = "Australia/Lord_Howe"


def utc(*args: int) -> dt.datetime:
    return dt.datetime(*args, tzinfo=UTC)


def wall(zone: str, *args: int, fold: int = 0) -> dt.datetime:
    return dt.datetime(*args, tzinfo=ZoneInfo(zone), fold=fold)


# The instants (UTC) where each zone's offset changes, spring and autumn. Tokyo observed DST
# only in 1948-1951, with its changes at local midnight, so a whole day's first hour is
# missing or doubled.
TRANSITIONS = {
    BERLIN: [utc(2025, 3, 30, 1), utc(2025, 10, 26, 1), utc(2026, 3, 29, 1), utc(2026, 10, 25, 1)],
    NEW_YORK: [utc(2025, 3, 9, 7), utc(2025, 11, 2, 6), utc(2026, 3, 8, 7), utc(2026, 11, 1, 6)],
    TOKYO: [
        *(utc(1948, 5, 1, 15), utc(1948, 9, 11, 15), utc(1949, 4, 2, 15), utc(1949, 9, 10, 15)),
        *(utc(1950, 5, 6, 15), utc(1950, 9, 9, 15), utc(1951, 5, 5, 15), utc(1951, 9, 8, 15)),
    ],
    LORD_HOWE: [utc(2026, 4, 4, 15), utc(2026, 10, 3, 15, 30)],
    "UTC": [],
}


@pytest.mark.parametrize(("zone", "instant"), [(z, t) for z, ts in TRANSITIONS.items() for t in ts])
def test_the_dst_windows_the_properties_straddle_are_real_offset_changes(zone, instant):
    before, after = (instant - M).astimezone(ZoneInfo(zone)), instant.astimezone(ZoneInfo(zone))
    assert before.utcoffset() != after.utcoffset()


# ---------------------------------------------------------------------------------------------
# Interval grid (R3): deadline + k x every, the smallest k whose slot is after now


EVERY_20S = Interval(20 * S)


def test_interval_advance_moves_to_the_next_grid_point_after_now():
    assert timing.advance(EVERY_20S, utc(2026, 3, 2, 12), utc(2026, 3, 2, 12, 0, 45)) == utc(
        2026, 3, 2, 12, 1
    )


def test_interval_advance_from_exactly_a_grid_point_moves_one_step():
    assert timing.advance(EVERY_20S, utc(2026, 3, 2, 12), utc(2026, 3, 2, 12, 0, 40)) == utc(
        2026, 3, 2, 12, 1
    )


def test_interval_advance_fired_on_time_moves_one_period():
    assert timing.advance(EVERY_20S, utc(2026, 3, 2, 12), utc(2026, 3, 2, 12)) == utc(
        2026, 3, 2, 12, 0, 20
    )


def test_interval_advance_before_its_deadline_never_returns_the_deadline_again():
    # Fired early (a manual run, a clock step): the slot at the deadline is spent.
    assert timing.advance(EVERY_20S, utc(2026, 3, 2, 12), utc(2026, 3, 2, 11, 59)) == utc(
        2026, 3, 2, 12, 0, 20
    )


def test_interval_advance_skips_a_long_outage_in_one_step_and_keeps_the_grid():
    deadline = utc(2026, 3, 2, 12, 7)
    assert timing.advance(Interval(H), deadline, deadline + 3 * D + 5 * S) == utc(2026, 3, 5, 13, 7)


def test_interval_advance_is_exact_to_the_microsecond():
    every = dt.timedelta(microseconds=333_333)
    deadline = utc(2026, 3, 2, 12)
    result = timing.advance(Interval(every), deadline, deadline + 10 * D)
    assert result == deadline + every * ((10 * D) // every + 1)


def test_interval_advance_counts_elapsed_time_not_wall_time_across_dst():
    # 01:30 CET + 1 h is 03:30 CEST (01:30 UTC), not the missing wall time 02:30.
    deadline = wall(BERLIN, 2026, 3, 29, 1, 30)
    now = wall(BERLIN, 2026, 3, 29, 3, 10)
    result = timing.advance(Interval(H), deadline, now)
    assert result == utc(2026, 3, 29, 1, 30)
    assert result.tzinfo is UTC


def test_one_off_advance_is_done_after_its_fire():
    at = utc(2026, 3, 2, 12)
    assert timing.advance(Clocked(at), at, at) is None


def test_crontab_advance_moves_to_the_next_slot_after_the_later_of_now_and_deadline():
    hourly = Crontab(minute="0")
    deadline = utc(2026, 3, 2, 12)
    assert timing.advance(hourly, deadline, deadline + 5 * H + S) == utc(2026, 3, 2, 18)
    assert timing.advance(hourly, deadline, deadline - 10 * M) == utc(2026, 3, 2, 13)


# ---------------------------------------------------------------------------------------------
# Crontab slots: Celery's fields, the schedule's own zone


AT_8 = Crontab(minute="0", hour="8")


def test_next_slot_is_strictly_after_the_given_instant():
    assert timing.next_slot(AT_8, utc(2026, 3, 2, 7, 59, 59)) == utc(2026, 3, 2, 8)
    assert timing.next_slot(AT_8, utc(2026, 3, 2, 8)) == utc(2026, 3, 3, 8)


def test_next_slot_is_in_the_schedules_own_time_zone_and_returned_in_utc():
    tokyo_8 = Crontab(minute="0", hour="8", timezone=TOKYO)
    result = timing.next_slot(tokyo_8, wall(BERLIN, 2026, 3, 2, 1))
    assert result == utc(2026, 3, 2, 23)
    assert result.tzinfo is UTC


def test_day_of_month_and_day_of_week_must_both_match_like_celery():
    # Celery's AND, not Vixie cron's OR: the first Monday of the month.
    first_monday = Crontab(minute="0", hour="9", day_of_month="1-7", day_of_week="mon")
    assert timing.next_slot(first_monday, utc(2026, 3, 1)) == utc(2026, 3, 2, 9)
    assert timing.next_slot(first_monday, utc(2026, 3, 2, 9)) == utc(2026, 4, 6, 9)


def test_day_of_week_zero_is_sunday():
    sunday = Crontab(minute="0", hour="0", day_of_week="0")
    assert timing.next_slot(sunday, utc(2026, 3, 2)) == utc(2026, 3, 8)  # a Monday -> Sunday
    by_name = Crontab(minute="0", hour="0", day_of_week="sun")
    weeks = (utc(2026, 3, 1), utc(2026, 3, 22))
    sundays = [utc(2026, 3, 8), utc(2026, 3, 15), utc(2026, 3, 22)]
    assert list(timing.slots_between(by_name, *weeks)) == sundays
    assert list(timing.slots_between(sunday, *weeks)) == sundays


def test_a_range_whose_start_is_after_its_end_wraps_like_celery():
    night = Crontab(minute="0", hour="22-2")
    assert list(timing.slots_between(night, utc(2026, 3, 2, 12), utc(2026, 3, 3, 12))) == [
        utc(2026, 3, 2, 22),
        utc(2026, 3, 2, 23),
        utc(2026, 3, 3, 0),
        utc(2026, 3, 3, 1),
        utc(2026, 3, 3, 2),
    ]


def test_february_29_waits_for_the_next_leap_year():
    leap_day = Crontab(minute="0", hour="0", day_of_month="29", month_of_year="2")
    assert timing.next_slot(leap_day, utc(2026, 1, 1)) == utc(2028, 2, 29)


def test_next_slot_past_year_9999_is_none():
    new_year = Crontab(minute="0", hour="0", day_of_month="1", month_of_year="1")
    assert timing.next_slot(new_year, utc(9999, 6, 1)) is None


def test_slots_between_excludes_since_and_includes_until():
    assert list(timing.slots_between(AT_8, utc(2026, 3, 2, 8), utc(2026, 3, 4, 8))) == [
        utc(2026, 3, 3, 8),
        utc(2026, 3, 4, 8),
    ]


def test_slots_between_an_empty_or_reversed_window_is_empty():
    assert list(timing.slots_between(AT_8, utc(2026, 3, 2, 8), utc(2026, 3, 2, 8))) == []
    assert list(timing.slots_between(AT_8, utc(2026, 3, 5), utc(2026, 3, 2))) == []


def test_slots_between_is_lazy_over_a_century():
    first = list(
        itertools.islice(timing.slots_between(Crontab(), utc(2026, 1, 1), utc(2126, 1, 1)), 3)
    )
    assert first == [utc(2026, 1, 1, 0, 1), utc(2026, 1, 1, 0, 2), utc(2026, 1, 1, 0, 3)]


def test_latest_slot_is_the_last_slot_of_the_window():
    assert timing.latest_slot(AT_8, utc(2026, 3, 1), utc(2026, 3, 5, 12)) == utc(2026, 3, 5, 8)
    assert timing.latest_slot(AT_8, utc(2026, 3, 1), utc(2026, 3, 5, 8)) == utc(2026, 3, 5, 8)
    assert timing.latest_slot(AT_8, utc(2026, 3, 5, 8), utc(2026, 3, 5, 12)) is None


def test_latest_slot_finds_a_yearly_slot_months_back():
    new_year = Crontab(minute="0", hour="0", day_of_month="1", month_of_year="1")
    assert timing.latest_slot(new_year, utc(2020, 6, 1), utc(2026, 6, 1)) == utc(2026, 1, 1)


def test_one_off_is_a_single_slot():
    at = utc(2026, 3, 2, 12)
    one_off = Clocked(at)
    assert timing.next_slot(one_off, at - S) == at
    assert timing.next_slot(one_off, at) is None
    assert list(timing.slots_between(one_off, at - H, at)) == [at]
    assert list(timing.slots_between(one_off, at, at + H)) == []
    assert timing.latest_slot(one_off, at - H, at + H) == at
    assert timing.latest_slot(one_off, at, at + H) is None


def test_one_off_time_is_kept_in_utc():
    assert Clocked(wall(TOKYO, 2026, 3, 2, 21)).at == utc(2026, 3, 2, 12)
    assert Clocked(wall(TOKYO, 2026, 3, 2, 21)).at.tzinfo is UTC


# ---------------------------------------------------------------------------------------------
# DST, as docs/configuration.md documents it: every wall slot fires once, never zero times,
# never twice


def test_spring_forward_wall_time_fires_once_shifted_forward_by_the_gap_in_berlin():
    at_0230 = Crontab(minute="30", hour="2", timezone=BERLIN)
    slots = list(timing.slots_between(at_0230, utc(2026, 3, 28), utc(2026, 3, 31)))
    # 02:30 CET on the 28th, 03:30 CEST on the 29th (02:30 does not exist), 02:30 CEST on the 30th
    assert slots == [utc(2026, 3, 28, 1, 30), utc(2026, 3, 29, 1, 30), utc(2026, 3, 30, 0, 30)]
    assert slots[1] == wall(BERLIN, 2026, 3, 29, 3, 30)
    assert timing.next_slot(at_0230, utc(2026, 3, 28, 12)) == utc(2026, 3, 29, 1, 30)
    assert timing.latest_slot(at_0230, utc(2026, 3, 28, 12), utc(2026, 3, 29, 12)) == utc(
        2026, 3, 29, 1, 30
    )


def test_spring_forward_shift_onto_a_real_slot_fires_that_instant_once():
    # 02:30 is shifted to 03:30 CEST, which is itself a slot: one fire, not two.
    both = Crontab(minute="30", hour="2,3", timezone=BERLIN)
    assert list(timing.slots_between(both, utc(2026, 3, 28, 12), utc(2026, 3, 29, 12))) == [
        utc(2026, 3, 29, 1, 30)
    ]
    assert timing.next_slot(both, utc(2026, 3, 29, 1, 30)) == utc(2026, 3, 30, 0, 30)


def test_every_minute_crontab_fires_once_per_instant_through_spring_forward():
    slots = list(
        timing.slots_between(Crontab(timezone=BERLIN), utc(2026, 3, 29), utc(2026, 3, 29, 2))
    )
    assert slots == [utc(2026, 3, 29) + M * k for k in range(1, 121)]


def test_fall_back_wall_time_fires_once_at_its_first_occurrence_in_berlin():
    at_0230 = Crontab(minute="30", hour="2", timezone=BERLIN)
    # 02:30 happens at 00:30 UTC (CEST) and again at 01:30 UTC (CET): only the first fires.
    assert list(timing.slots_between(at_0230, utc(2026, 10, 24, 12), utc(2026, 10, 25, 12))) == [
        utc(2026, 10, 25, 0, 30)
    ]
    assert wall(BERLIN, 2026, 10, 25, 2, 30, fold=0).astimezone(UTC) == utc(2026, 10, 25, 0, 30)
    assert timing.next_slot(at_0230, utc(2026, 10, 25, 0, 30)) == utc(2026, 10, 26, 1, 30)
    assert timing.latest_slot(at_0230, utc(2026, 10, 25), utc(2026, 10, 25, 12)) == utc(
        2026, 10, 25, 0, 30
    )


def test_every_minute_crontab_is_silent_while_the_repeated_hour_replays():
    # Each wall minute 02:00-02:59 already fired in CEST; their CET replay does not fire again.
    slots = list(
        timing.slots_between(Crontab(timezone=BERLIN), utc(2026, 10, 25), utc(2026, 10, 25, 2))
    )
    assert slots == [utc(2026, 10, 25) + M * k for k in range(1, 60)] + [utc(2026, 10, 25, 2)]


@pytest.mark.parametrize(
    ("zone", "minute", "hour", "gap_day", "gap_slot", "repeat_day", "repeat_slot"),
    [
        (NEW_YORK, "30", "2", (2026, 3, 8), utc(2026, 3, 8, 7, 30), None, None),
        (NEW_YORK, "30", "1", None, None, (2026, 11, 1), utc(2026, 11, 1, 5, 30)),
        # Tokyo 1948: the change is at midnight, so the day's very first hour is hit.
        (
            TOKYO,
            "30",
            "0",
            (1948, 5, 2),
            utc(1948, 5, 1, 15, 30),
            (1948, 9, 12),
            utc(1948, 9, 11, 14, 30),
        ),
    ],
)
def test_dst_rule_holds_in_new_york_and_tokyo(
    zone, minute, hour, gap_day, gap_slot, repeat_day, repeat_slot
):
    spec = Crontab(minute=minute, hour=hour, timezone=zone)
    for day, slot in ((gap_day, gap_slot), (repeat_day, repeat_slot)):
        if day is None:
            continue
        midnight = wall(zone, *day, 0, 0)
        window = list(timing.slots_between(spec, midnight - 12 * H, midnight + 12 * H))
        assert window == [slot]


@pytest.mark.parametrize(
    ("zone", "year", "minute", "hour"),
    [
        (BERLIN, 2026, "30", "2"),
        (NEW_YORK, 2026, "30", "2"),
        (NEW_YORK, 2026, "30", "1"),
        (TOKYO, 1948, "30", "0"),
        (LORD_HOWE, 2026, "45", "1"),
        (LORD_HOWE, 2026, "15", "2"),
    ],
)
def test_a_daily_slot_in_a_dst_hour_fires_exactly_once_on_every_day_of_the_year(
    zone, year, minute, hour
):
    spec = Crontab(minute=minute, hour=hour, timezone=zone)
    slots = list(timing.slots_between(spec, wall(zone, year, 1, 1), wall(zone, year + 1, 1, 1)))
    days = [s.astimezone(ZoneInfo(zone)).date() for s in slots]
    # A shifted slot lands on its own local date (the gap is never a whole day): one per date.
    assert len(slots) == len(set(slots)) == (dt.date(year + 1, 1, 1) - dt.date(year, 1, 1)).days
    assert len(set(days)) == len(days)


def test_slots_stay_ascending_where_a_shift_overtakes_a_real_slot():
    # Lord Howe's 30-minute gap: 02:10 does not exist and becomes 02:40, after the real 02:35.
    spec = Crontab(minute="10,35", hour="2", timezone=LORD_HOWE)
    window = (utc(2026, 10, 3, 15), utc(2026, 10, 3, 16))
    assert list(timing.slots_between(spec, *window)) == [
        utc(2026, 10, 3, 15, 35),
        utc(2026, 10, 3, 15, 40),
    ]
    assert timing.next_slot(spec, window[0]) == utc(2026, 10, 3, 15, 35)
    assert timing.next_slot(spec, utc(2026, 10, 3, 15, 35)) == utc(2026, 10, 3, 15, 40)
    assert timing.latest_slot(spec, *window) == utc(2026, 10, 3, 15, 40)


# ---------------------------------------------------------------------------------------------
# Celery's beat_schedule values


def test_celery_schedule_becomes_an_interval():
    assert from_celery(schedule(dt.timedelta(seconds=30)), "UTC") == Interval(30 * S)
    assert from_celery(schedule(45), "UTC") == Interval(45 * S)


def test_timedelta_and_seconds_become_an_interval():
    assert from_celery(dt.timedelta(minutes=5), "UTC") == Interval(5 * M)
    assert from_celery(20, "UTC") == Interval(20 * S)
    assert from_celery(0.5, "UTC") == Interval(dt.timedelta(milliseconds=500))


def test_celery_crontab_without_its_own_zone_takes_the_default_zone():
    spec = from_celery(crontab(minute="*/15", hour="9-17", day_of_week="mon-fri"), BERLIN)
    assert spec == Crontab(
        minute="*/15",
        hour="9-17",
        day_of_week="mon-fri",
        day_of_month="*",
        month_of_year="*",
        timezone=BERLIN,
    )


def test_celery_crontab_zone_does_not_come_from_the_current_celery_app():
    # A plain crontab's .tz is the current app's zone (UTC here): not the zone it was given.
    plain = crontab(minute="0", hour="8")
    assert from_celery(plain, TOKYO).timezone == TOKYO
    plain.tz  # noqa: B018 - celery caches the app's zone on the instance; still not its own
    assert from_celery(plain, TOKYO).timezone == TOKYO


def test_celery_crontab_fields_given_as_numbers_and_sets_are_read():
    spec = from_celery(crontab(minute=0, hour={20, 8}, day_of_month=[1, 15]), "UTC")
    assert (spec.minute, spec.hour, spec.day_of_month) == ("0", "8,20", "1,15")


def test_crontab_with_its_own_zone_keeps_it():
    tz_aware = TzAwareCrontab(minute="0", hour="8", tz=ZoneInfo(TOKYO))
    assert from_celery(tz_aware, BERLIN) == Crontab(minute="0", hour="8", timezone=TOKYO)
    utc_aware = TzAwareCrontab(minute="0", hour="8", tz=dt.UTC)  # its default
    assert from_celery(utc_aware, BERLIN).timezone == "UTC"


def test_crontab_with_a_fixed_offset_zone_is_refused_naming_the_timezone():
    fixed = TzAwareCrontab(minute="0", hour="8", tz=dt.timezone(2 * H))
    with pytest.raises(InvalidSchedule) as info:
        from_celery(fixed, BERLIN)
    assert info.value.field == "timezone"


def test_aware_datetime_becomes_a_one_off():
    assert from_celery(wall(BERLIN, 2026, 7, 1, 12), "UTC") == Clocked(utc(2026, 7, 1, 10))


@pytest.mark.parametrize(
    ("value", "field"),
    [
        (object(), "schedule"),  # no is_due: not a schedule Celery's beat can ask
        ("*/5 * * * *", "schedule"),
        (None, "schedule"),
        (True, "schedule"),
        (0, "every"),
        (-5, "every"),
        (float("nan"), "every"),
        (dt.timedelta(0), "every"),
        (dt.datetime(2026, 7, 1, 12), "at"),  # naive
        (crontab(minute="*/15/2"), "minute"),  # Celery drops the "/2"
        (crontab(day_of_week="mar"), "day_of_week"),  # Celery reads Wednesday
    ],
)
def test_unsupported_celery_schedules_are_refused_naming_the_field(value, field):
    with pytest.raises(InvalidSchedule) as info:
        from_celery(value, "UTC")
    assert info.value.field == field


# ---------------------------------------------------------------------------------------------
# Bad input (R20): refused where it enters, the field named


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({"minute": "60"}, "minute"),
        ({"minute": "*/0"}, "minute"),
        ({"minute": "*/15/2"}, "minute"),
        ({"minute": 5}, "minute"),
        ({"hour": "24"}, "hour"),
        ({"hour": "3-30"}, "hour"),
        ({"hour": "1,,2"}, "hour"),
        ({"day_of_week": "7"}, "day_of_week"),
        ({"day_of_week": "mar"}, "day_of_week"),  # Celery would read Wednesday
        ({"day_of_week": "monxyz"}, "day_of_week"),
        ({"day_of_month": "0"}, "day_of_month"),
        ({"day_of_month": "32"}, "day_of_month"),
        ({"day_of_month": ""}, "day_of_month"),
        ({"day_of_month": "31", "month_of_year": "2,4"}, "day_of_month"),
        ({"month_of_year": "13"}, "month_of_year"),
        ({"month_of_year": "mon"}, "month_of_year"),
        ({"timezone": "Mars/Olympus"}, "timezone"),
        ({"timezone": ""}, "timezone"),
    ],
)
def test_invalid_crontab_field_is_refused_naming_it(fields, field):
    with pytest.raises(InvalidSchedule) as info:
        Crontab(**fields)
    assert info.value.field == field
    assert str(info.value).startswith(f"{field}: ")


def test_names_are_read_in_their_own_field():
    assert Crontab(day_of_week="mon-fri", month_of_year="jan,dec")._sets == {
        "minute": frozenset(range(60)),
        "hour": frozenset(range(24)),
        "day_of_week": frozenset({1, 2, 3, 4, 5}),
        "day_of_month": frozenset(range(1, 32)),
        "month_of_year": frozenset({1, 12}),
    }


@pytest.mark.parametrize("every", [dt.timedelta(0), -S, 5])
def test_non_positive_or_non_timedelta_interval_is_refused(every):
    with pytest.raises(InvalidSchedule) as info:
        Interval(every)
    assert info.value.field == "every"


def test_naive_one_off_time_is_refused():
    with pytest.raises(InvalidSchedule) as info:
        Clocked(dt.datetime(2026, 3, 2, 12))
    assert info.value.field == "at"


def test_invalid_schedule_survives_pickling_with_its_field():
    copy = pickle.loads(pickle.dumps(InvalidSchedule("hour", "bad")))
    assert (copy.field, copy.message, str(copy)) == ("hour", "bad", "hour: bad")


NAIVE = dt.datetime(2026, 3, 2, 12)
AWARE = utc(2026, 3, 2, 12)


@pytest.mark.parametrize(
    ("call", "name"),
    [
        (lambda: timing.next_slot(AT_8, NAIVE), "after"),
        (lambda: timing.next_slot(Clocked(AWARE), NAIVE), "after"),
        (lambda: timing.slots_between(AT_8, NAIVE, AWARE), "since"),  # refused before iterating
        (lambda: timing.slots_between(AT_8, AWARE, NAIVE), "until"),
        (lambda: timing.latest_slot(AT_8, AWARE, NAIVE), "until"),
        (lambda: timing.advance(EVERY_20S, NAIVE, AWARE), "deadline"),
        (lambda: timing.advance(AT_8, AWARE, NAIVE), "now"),
    ],
)
def test_naive_datetimes_are_refused_naming_the_argument(call, name):
    with pytest.raises(ValueError, match=f"^{name} must be timezone-aware"):
        call()


def test_timing_never_reads_the_clock():
    # Style rule: schedule math takes its instants as arguments (clock.now() is the IO seam).
    tree = ast.parse(Path(timing.__file__).read_text())
    clock_reads = {"now", "utcnow", "today", "time", "time_ns", "monotonic", "perf_counter"}
    calls = [
        ast.unparse(node.func)
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and (getattr(node.func, "attr", None) or getattr(node.func, "id", None)) in clock_reads
    ]
    imports = [
        ast.unparse(node)
        for node in ast.walk(tree)
        if (isinstance(node, ast.Import) and any(a.name == "time" for a in node.names))
        or (
            isinstance(node, ast.ImportFrom)
            and (node.module == "time" or any(a.name in clock_reads for a in node.names))
        )
    ]
    assert calls == imports == []


# ---------------------------------------------------------------------------------------------
# Properties against the brute-force oracle

PROPERTY = settings(max_examples=120, deadline=None)


def _field(low: int, high: int) -> st.SearchStrategy[str]:
    number = st.integers(low, high)
    step = st.integers(1, high - low + 1)
    part = st.one_of(
        st.just("*"),
        number.map(str),
        st.tuples(number, number).map(lambda ab: f"{ab[0]}-{ab[1]}"),
        step.map(lambda s: f"*/{s}"),
        st.tuples(number, number, step).map(lambda abs_: "{}-{}/{}".format(*abs_)),
    )
    return st.lists(part, min_size=1, max_size=3).map(",".join)


FIELDS = {
    "minute": _field(0, 59),
    "hour": _field(0, 23),
    # Mostly "*", so that a few days' window usually holds slots.
    "day_of_week": st.one_of(st.just("*"), _field(0, 6)),
    "day_of_month": st.one_of(st.just("*"), st.just("*"), _field(1, 31)),
    "month_of_year": st.one_of(st.just("*"), st.just("*"), _field(1, 12)),
}
ZONES = list(TRANSITIONS)
WINDOW_YEARS = {TOKYO: (1948, 1951)}


@st.composite
def crontabs(draw: st.DrawFn) -> tuple[Crontab, dict[str, str]]:
    fields = {name: draw(strategy) for name, strategy in FIELDS.items()}
    zone = draw(st.sampled_from(ZONES))
    try:
        return Crontab(**fields, timezone=zone), fields
    except InvalidSchedule:  # e.g. day_of_month="31", month_of_year="2"
        reject()


@st.composite
def instants_near_dst(draw: st.DrawFn, zone: str) -> dt.datetime:
    """Mostly within two days of one of the zone's DST changes, otherwise anywhere nearby."""
    changes = TRANSITIONS[zone]
    if changes and draw(st.booleans()):
        anchor = draw(st.sampled_from(changes))
        return anchor + draw(st.timedeltas(-2 * D, 2 * D))
    first, last = WINDOW_YEARS.get(zone, (2024, 2027))
    naive = draw(st.datetimes(dt.datetime(first, 1, 1), dt.datetime(last, 12, 31)))
    return naive.replace(tzinfo=UTC)


@st.composite
def windows(draw: st.DrawFn) -> tuple[Crontab, dict[str, str], dt.datetime, dt.datetime]:
    spec, fields = draw(crontabs())
    since = draw(instants_near_dst(spec.timezone))
    until = since + draw(st.timedeltas(dt.timedelta(0), 3 * D))
    # Given in any zone: the functions must not care.
    shown_in = ZoneInfo(draw(st.sampled_from(ZONES)))
    return spec, fields, since.astimezone(shown_in), until.astimezone(shown_in)


@PROPERTY
@given(windows())
def test_slots_between_equals_the_minute_by_minute_reference(window):
    spec, fields, since, until = window
    expected = reference.slots(fields, spec.timezone, since, until)
    assert list(timing.slots_between(spec, since, until)) == expected
    assert timing.latest_slot(spec, since, until) == (expected[-1] if expected else None)


HORIZON = 3 * D


@PROPERTY
@given(windows())
def test_next_slot_equals_the_first_slot_of_the_reference(window):
    spec, fields, after, _ = window
    expected = reference.slots(fields, spec.timezone, after, after + HORIZON)
    _assert_first_slot(timing.next_slot(spec, after), expected, after + HORIZON)


def _assert_first_slot(
    result: dt.datetime | None, expected: list[dt.datetime], horizon: dt.datetime
) -> None:
    if expected:
        assert result == expected[0]
    else:  # nothing within the horizon: it is further away (or beyond year 9999)
        assert result is None or result > horizon


@settings(max_examples=60, deadline=None)
@given(windows())
def test_crontab_advance_is_the_first_reference_slot_after_now_and_deadline(window):
    spec, fields, deadline, now = window
    later = max(deadline, now)
    expected = reference.slots(fields, spec.timezone, later, later + HORIZON)
    for result in (timing.advance(spec, deadline, now), timing.advance(spec, now, deadline)):
        _assert_first_slot(result, expected, later + HORIZON)


AWARE_INSTANTS = st.datetimes(
    dt.datetime(2000, 1, 1),
    dt.datetime(2100, 1, 1),
    timezones=st.sampled_from([UTC, *(ZoneInfo(z) for z in ZONES)]),
)


@settings(max_examples=300, deadline=None)
@given(
    every=st.timedeltas(dt.timedelta(microseconds=1), 3 * D),
    deadline=AWARE_INSTANTS,
    gap=st.timedeltas(-10 * D, 400 * D),
)
@example(  # a deadline in Berlin's spring-forward gap
    every=dt.timedelta(microseconds=1),
    deadline=dt.datetime(2000, 3, 26, 2, 59, tzinfo=ZoneInfo("Europe/Berlin")),
    gap=dt.timedelta(seconds=60),
)
def test_interval_advance_is_the_smallest_grid_point_strictly_after_now(every, deadline, gap):
    now = deadline + gap
    result = timing.advance(Interval(every), deadline, now)
    assert result.tzinfo is UTC
    steps, remainder = divmod(result - deadline, every)
    assert remainder == dt.timedelta(0) and steps >= 1  # on the grid, never the deadline again
    assert result > now  # in the future
    # and the smallest such point; max() in UTC: within one zone Python compares wall
    # times, and deadline + gap can land in a DST gap whose wall time reads later
    assert result - every <= max(now.astimezone(UTC), deadline.astimezone(UTC))
