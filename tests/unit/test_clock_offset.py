"""R26: the offset math of the one clock: NTP's estimate, the best of a few readings, and
``now()`` as this host's clock plus the offset."""

from __future__ import annotations

import datetime as dt

import pytest

from durablebeat.core import clock
from durablebeat.core.custom import CLOCK_SLACK

T = dt.datetime(2026, 3, 2, 12, 0, tzinfo=dt.UTC)
MS = dt.timedelta(milliseconds=1)
US = dt.timedelta(microseconds=1)
S = dt.timedelta(seconds=1)


@pytest.fixture(autouse=True)
def _no_offset_after():
    yield
    clock.set_offset(clock.ZERO)


def test_the_server_read_its_clock_half_way_through_the_round_trip():
    # sent at T, answered at T + 10 ms; the server, 90 s ahead, read its clock at T + 5 ms
    one = clock.sample(T, T + 90 * S + 5 * MS, T + 10 * MS)
    assert one.offset == 90 * S
    assert one.round_trip == 10 * MS


def test_a_server_behind_gives_a_negative_offset():
    assert clock.sample(T, T - 150 * S + 2 * MS, T + 4 * MS).offset == -150 * S


def test_a_naive_server_time_is_refused_not_guessed():
    with pytest.raises(ValueError, match="server time"):
        clock.sample(T, T.replace(tzinfo=None), T + MS)


def test_the_reading_with_the_shortest_round_trip_is_kept():
    slow = clock.Sample(offset=2 * S, round_trip=300 * MS)
    fast = clock.Sample(offset=1 * S, round_trip=3 * MS)
    assert clock.best([slow, fast, slow]) == fast


def test_a_reading_during_which_the_host_clock_stepped_back_is_discarded():
    stepped = clock.Sample(offset=5 * S, round_trip=-2 * S)
    kept = clock.Sample(offset=1 * S, round_trip=50 * MS)
    assert clock.best([stepped, kept]) == kept
    assert clock.best([stepped]) is None
    assert clock.best([]) is None


def test_now_is_the_local_clock_plus_the_offset(time_machine):
    time_machine.move_to(T, tick=False)
    assert clock.now() == T
    clock.set_offset(-90 * S)
    assert clock.now() == T - 90 * S
    assert clock.local_now() == T
    assert clock.offset() == -90 * S


@pytest.mark.parametrize(
    ("wall", "since_boot", "jumped"),
    [(600, 600, False), (600, 0, True), (-3600, 5, True), (5, 5, False)],
    ids=["suspended-10-min", "stepped-forward", "stepped-back", "ran-on"],
)
def test_a_host_suspended_and_resumed_has_not_jumped(monkeypatch, wall, since_boot, jumped):
    """R26: a jump is the wall clock moving unlike a clock that counts a suspend too. A host
    suspended for ten minutes comes back with both ten minutes on: "now" moves with them
    (with ``time.monotonic``, which a suspend stops on Linux, it read as a 10-min step and
    "now" stayed ten minutes behind until the database answered)."""
    from durablebeat import dbclock

    readings = iter([(T, 100.0), (T + wall * S, 100.0 + since_boot)])
    current: list[tuple[dt.datetime, float]] = []

    def advance() -> None:
        current[:] = [next(readings)]

    monkeypatch.setattr(clock, "local_now", lambda: current[0][0])
    monkeypatch.setattr(dbclock, "elapsed", lambda: current[0][1])
    measured: list[str] = []
    monkeypatch.setattr(dbclock, "measure", lambda using: measured.append(using))
    dbclock.forget()
    monkeypatch.setattr(dbclock, "_last", clock.Sample(clock.ZERO, clock.ZERO))
    advance()
    assert not dbclock.watch_jumps()  # the first look
    advance()
    assert dbclock.watch_jumps() is jumped
    assert clock.offset() == (-(wall - since_boot) * S if jumped else clock.ZERO)
    assert measured == ([None] if jumped else [])  # None: durablebeat's database (db.alias)
    dbclock.forget()


def test_elapsed_is_the_clock_that_counts_a_suspend_where_the_kernel_has_one():
    import functools
    import time

    from durablebeat import dbclock

    if not hasattr(time, "CLOCK_BOOTTIME"):
        pytest.skip("no CLOCK_BOOTTIME here (not Linux): time.monotonic")
    assert isinstance(dbclock.elapsed, functools.partial)
    assert (dbclock.elapsed.func, dbclock.elapsed.args) == (
        time.clock_gettime,
        (time.CLOCK_BOOTTIME,),
    )


def test_a_custom_schedule_object_is_handed_its_last_run_on_this_hosts_clock():
    """R25 + R26: the object reads this host's clock (Celery's beat passes the last run on
    it); beat stamps the last run on the database's. With the database 5 ms behind, a run
    stamped 56.995 ran at 57.000 here: the object is told 57.000, so "due at every
    multiple of 3 s" does not take the run of 57 as still to come (e2e test_schedule_kinds'
    two fires in one slot)."""
    from durablebeat.core.custom import Custom, custom_next

    seen: list[dt.datetime] = []

    class Recording:
        def is_due(self, last_run_at):
            seen.append(last_run_at)
            return (False, 3.0)

    clock.set_offset(-5 * MS)
    stamped = T - 5 * MS  # the database's clock, 5 ms behind this host's
    custom_next(Custom("recording", Recording()), stamped, stamped)
    assert seen == [T + CLOCK_SLACK]  # and the slack two readings of the offset may differ by


def test_a_run_stamped_through_another_beats_reading_of_the_offset_is_not_due_again():
    """R25, R26, R4: two beats read the database's clock each with an error of a fraction
    of a millisecond. One stamps the object's instant 33.000 through its reading (6.3 ms
    behind); the other, reading 5.8 ms, hands it back 0.5 ms before 33.000, and an object
    "due at every multiple of 3 s" took the run of 33 as still to come: fired again 1 s
    later (a clean clone's e2e test_schedule_kinds, two beats: 15 fires in 12 slots)."""
    from durablebeat.core.custom import Custom, custom_next

    grid = dt.datetime(2026, 12, 7, 19, 59, 33, tzinfo=dt.UTC)  # a multiple of 3 s

    class EveryThreeSeconds:
        def is_due(self, last_run_at):
            following = (int(last_run_at.timestamp()) // 3 + 1) * 3
            remaining = following - (grid + 990 * MS).timestamp()  # its clock: 33.990
            return (remaining <= 0, max(remaining, 0.0) or 3.0)

    stamped = grid - 6294 * US  # the first beat's reading: the database 6.294 ms behind
    clock.set_offset(-5800 * US)  # the second beat's reading
    due, _ = custom_next(Custom("every-3s", EveryThreeSeconds()), stamped, grid + 984 * MS)
    assert not due


def test_a_custom_schedule_whose_last_run_is_at_the_calendars_edge_is_still_asked():
    """R21: a stored last run at the first instant the calendar has, with the database's
    clock ahead of this host's, is handed over as that first instant, never an
    OverflowError that would set the schedule aside."""
    from durablebeat.core.custom import Custom, custom_next

    seen: list[dt.datetime] = []

    class Recording:
        def is_due(self, last_run_at):
            seen.append(last_run_at)
            return (False, 3.0)

    clock.set_offset(5 * MS)
    earliest = dt.datetime.min.replace(tzinfo=dt.UTC)
    custom_next(Custom("recording", Recording()), earliest, T)
    assert seen == [earliest + CLOCK_SLACK]
