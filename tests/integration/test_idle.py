"""Idle is idle: what a beat with nothing due costs the database per tick (R17, R26)."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from django.db import connection

from durablebeat import conf, dbclock


@contextmanager
def _depths() -> Iterator[list[tuple[int, str]]]:
    """Every statement sent while inside, with how deep in atomic blocks it ran (0: on
    its own, autocommitted: one transaction each)."""
    seen: list[tuple[int, str]] = []

    def record(execute: Callable[..., Any], sql: str, *args: Any) -> Any:
        seen.append((len(connection.atomic_blocks), sql))
        return execute(sql, *args)

    with connection.execute_wrapper(record):
        yield seen


@pytest.mark.dbclock
@pytest.mark.django_db(transaction=True)
def test_an_idle_heartbeat_tick_is_one_transaction(make_engine, make_schedule, t0):
    """The heartbeat, the clock readings (R26) and the due query of an idle tick commit
    together: an idle beat's database cost is one transaction per heartbeat interval."""
    make_schedule("later", every=3600, next_fire_at=t0 + dt.timedelta(days=30))
    engine = make_engine(hooks=[], sync_clock=dbclock.sync)
    engine.tick(t0, True)  # boot
    # The boot measured the offset to the database's clock (microseconds either way here)
    # and moved its instant by it; later ticks' instants carry it (``clock.now()``), so the
    # next heartbeat is due one interval after the boot's as recorded, not after ``t0``.
    assert engine.session.last_heartbeat is not None
    at = engine.session.last_heartbeat + conf.settings.HEARTBEAT_INTERVAL
    with _depths() as seen:
        assert engine.tick(at, True) >= conf.settings.HEARTBEAT_INTERVAL.total_seconds() - 1
    assert any("durablebeat_boot" in sql and "UPDATE" in sql.upper() for _, sql in seen)
    # (SQLite's own BEGIN opens the one transaction, before the block counts as entered)
    alone = [sql for depth, sql in seen if depth == 0 and not sql.startswith("BEGIN")]
    assert alone == []
    # this tick's heartbeat: at ``at``, give or take the change of the measured offset
    # between the two readings (R26; a microsecond or so on MariaDB)
    assert engine.session.last_heartbeat is not None
    assert abs(engine.session.last_heartbeat - at) < dt.timedelta(seconds=1)


@pytest.mark.django_db(transaction=True)
def test_a_tick_woken_between_heartbeats_sleeps_only_until_the_next_one(make_engine, t0):
    """R17: an idle beat that a change woke part-way through its sleep does not sleep a
    whole interval again: two heartbeats are never more than one interval apart, three to
    each HEARTBEAT_STALE_AFTER (else a live beat could read as gone)."""
    engine = make_engine(hooks=[])
    interval = conf.settings.HEARTBEAT_INTERVAL
    assert engine.tick(t0, True) == pytest.approx(interval.total_seconds())  # boot
    woken = t0 + interval * 0.75  # a change woke it: no heartbeat due yet
    slept = engine.tick(woken, True)
    assert engine.session.last_heartbeat == t0
    assert slept == pytest.approx((interval * 0.25).total_seconds())
    engine.tick(woken + dt.timedelta(seconds=slept), True)
    assert engine.session.last_heartbeat == t0 + interval


@pytest.mark.django_db
def test_the_due_probes_compiled_once_take_each_ticks_horizon(make_schedule, t0):
    """An idle tick reuses the due probes' SQL (compiling them was most of its CPU): the
    horizon of each call is the one its rows are read with, in order, to the limit."""
    from durablebeat.beat import due

    for i in range(3):
        make_schedule(f"s{i}", every=3600, next_fire_at=t0 + dt.timedelta(minutes=i))
    make_schedule("new", every=3600)  # no next fire yet: the first probe's
    due._COMPILED.clear()
    seen = [
        [r.name for r in due.fetch_due(t0 + dt.timedelta(minutes=m), 10)] for m in (-1, 0, 1, 5)
    ]
    # R33: a row without a next fire is not the due probe's: it is filled after the due work
    assert seen == [[], ["s0"], ["s0", "s1"], ["s0", "s1", "s2"]]
    assert [r.name for r in due.fetch_due(t0 + dt.timedelta(minutes=5), 2)] == ["s0", "s1"]
    assert due.has_unfilled() and [r.name for r in due.fetch_unfilled(0, 10)] == ["new"]
    assert due._COMPILED  # reused, not compiled again each call


@pytest.mark.postgres_only
@pytest.mark.django_db(transaction=True)
def test_a_row_another_beat_holds_wakes_this_beat_when_due_not_at_its_heartbeat(
    make_engine, make_schedule, t0
):
    """R4: the due read passes over a row another beat holds (SKIP LOCKED: it is claiming
    it, or waiting for its instant, R28). This beat still wakes when that row is due, not
    at its next heartbeat, so that it takes the slot at once should that beat die holding
    it: two beats on a 1-s interval lost the slots of a restart while this one slept
    (tests/e2e/test_pooler.py's storm, under load)."""
    import psycopg

    if connection.vendor != "postgresql":
        pytest.skip("a second connection holds the row: PostgreSQL's")
    engine = make_engine(hooks=[])
    engine.tick(t0, True)  # boot: the next heartbeat is an interval away
    now = t0 + dt.timedelta(milliseconds=100)
    make_schedule("held", every=3600, next_fire_at=now + dt.timedelta(milliseconds=500))
    s = connection.settings_dict
    other = psycopg.connect(
        host=s["HOST"] or "127.0.0.1", port=s["PORT"] or 5432, user=s["USER"], dbname=s["NAME"]
    )
    try:
        other.execute("SELECT id FROM durablebeat_schedule WHERE name = 'held' FOR UPDATE")
        sleep = engine.tick(now, True)
    finally:
        other.close()
    assert conf.settings.HEARTBEAT_INTERVAL.total_seconds() > 1
    assert sleep <= 0.6, f"slept {sleep} s past a held row due in 0.5 s"
