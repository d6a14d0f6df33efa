"""R25 on the database: relative, solar and custom schedules booted by the real engine and
the real ``DurableScheduler``, with an injected clock. One fire per slot across beats (R4)
holds for a custom schedule; a custom object that raises is set aside (R21) and the others
keep firing; a beat whose code lacks a custom schedule leaves it alone."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest
import time_machine
from celery import Celery
from celery.schedules import BaseSchedule, crontab, schedule, solar

from durablebeat.beat import defaults
from durablebeat.core import timing
from durablebeat.enums import Kind
from durablebeat.models import Run, Schedule
from durablebeat.schedulers import DurableScheduler
from durablebeat.words import next_fire_words
from tests import compat_corpus as corpus

pytestmark = pytest.mark.django_db(transaction=True)

TASK = corpus.TASK
T0 = corpus.utc(2026, 6, 10, 9, 17, 23)  # a Wednesday
MIN = dt.timedelta(minutes=1)


class Boom(BaseSchedule):
    """A custom schedule whose ``is_due`` raises."""

    def is_due(self, last_run_at: dt.datetime) -> tuple[bool, float]:
        raise ValueError("boom: no next run")

    def __repr__(self) -> str:
        return "<boom>"


def test_a_custom_schedule_fires_once_per_slot_across_two_beats(make_engine, publisher):
    """R4: both beats ask the object, both find it due at its stored next fire; one
    claims the slot, the other finds it taken."""
    beat_schedule = {"quarters": {"task": TASK, "schedule": corpus.EveryQuarterHourOnWeekdays()}}
    with time_machine.travel(T0, tick=False) as clock:
        a, b = make_engine(beat_schedule), make_engine(beat_schedule)
        a.tick(T0)
        b.tick(T0)
        row = Schedule.objects.get(name="quarters")
        assert row.kind == Kind.CUSTOM
        assert "EveryQuarterHourOnWeekdays: <every 15 min on weekdays>" in row.custom_schedule
        assert row.next_fire_at is not None and row.next_fire_at <= corpus.utc(2026, 6, 10, 9, 30)
        now = T0
        while now < corpus.utc(2026, 6, 10, 10, 20):
            now += MIN
            clock.move_to(now)
            a.tick(now)
            b.tick(now)
    slots = publisher.slots("quarters")
    assert len(slots) == len(set(slots)) == 4
    assert [s.minute for s in slots] == [30, 45, 0, 15]
    assert Run.objects.filter(schedule__name="quarters").count() == 4


def _beside_a_minutely_job(make_engine: Any, name: str, custom: Any, ticks: int) -> Any:
    """An engine with the custom schedule ``name`` and a minutely crontab, ticked every 5 s
    (as a beat with minutely work wakes) ``ticks`` times from T0."""
    engine = make_engine(
        {
            name: {"task": TASK, "schedule": custom},
            "minutely": {
                "task": TASK,
                "schedule": crontab(),
                "options": {"durablebeat": {"overlap": "allow"}},
            },
        }
    )
    with time_machine.travel(T0, tick=False) as clock:
        now = T0
        for _ in range(ticks):
            engine.tick(now)
            now += dt.timedelta(seconds=5)
            clock.move_to(now)
    return engine


def test_a_custom_schedule_that_raises_is_set_aside_and_the_others_keep_firing(
    make_engine, publisher
):
    _beside_a_minutely_job(make_engine, "boom", Boom(), ticks=48)
    boom = Schedule.objects.get(name="boom")
    assert boom.error == "ValueError: boom: no next run"
    assert len(publisher.slots("minutely")) >= 3
    assert publisher.slots("boom") == []


class AsksTheDatabase(BaseSchedule):  # type: ignore[misc]
    """A project's schedule class that reads its own table, which is not there (yet)."""

    def is_due(self, last_run_at: dt.datetime) -> tuple[bool, float]:
        from django.db import connection

        with connection.cursor() as cursor:
            cursor.execute("SELECT hours FROM tenant_business_hours_missing")
        return False, 60.0

    def __repr__(self) -> str:
        return "<business hours>"


def test_a_custom_schedule_whose_own_query_fails_is_set_aside_and_the_batch_fires(
    make_engine, publisher
):
    """R25, R21: is_due is the project's code; its failing query is that row's error, not a
    database outage, and on PostgreSQL it must not abort the batch's transaction either."""
    engine = _beside_a_minutely_job(make_engine, "hours", AsksTheDatabase(), ticks=30)
    assert engine.db_ok
    assert "tenant_business_hours_missing" in Schedule.objects.get(name="hours").error
    assert len(publisher.slots("minutely")) >= 2


def test_a_beat_without_the_custom_schedule_in_its_code_leaves_it_alone(make_engine, publisher):
    """A rolling deploy: the old beat, running, has no such entry; the new beat boots and
    adds it. The old one neither fires it nor sets it aside."""
    old = make_engine({})
    new = make_engine({"quarters": {"task": TASK, "schedule": corpus.EveryQuarterHourOnWeekdays()}})
    with time_machine.travel(T0, tick=False):
        old.tick(T0)
        new.tick(T0)
        Schedule.objects.filter(name="quarters").update(next_fire_at=T0)  # due now
        old.tick(T0 + dt.timedelta(seconds=1))
    row = Schedule.objects.get(name="quarters")
    assert (row.error, row.enabled, row.next_fire_at) == ("", True, T0)
    assert publisher.slots() == []


def test_a_relative_interval_fires_on_the_hour_and_its_first_fire_waits_the_grace(
    make_engine, publisher
):
    """R25 with R2: Celery's first slot of a relative hourly interval booted at 09:17 is
    10:00; booted at 09:59:30 (10:00 is sooner than the 60 s grace), the chain's next, 11:00."""
    engine = make_engine({"hourly": {"task": TASK, "schedule": schedule(3600, relative=True)}})
    engine.tick(T0)
    row = Schedule.objects.get(name="hourly")
    assert (row.kind, row.relative, row.timezone) == (Kind.INTERVAL, True, "UTC")
    assert row.next_fire_at == corpus.utc(2026, 6, 10, 10)
    for now in (corpus.utc(2026, 6, 10, 10), corpus.utc(2026, 6, 10, 11)):
        engine.tick(now)
    assert publisher.slots("hourly") == [corpus.utc(2026, 6, 10, 10), corpus.utc(2026, 6, 10, 11)]
    late = make_engine({"late": {"task": TASK, "schedule": 3600, "relative": True}})
    late.tick(corpus.utc(2026, 6, 10, 9, 59, 30))
    assert Schedule.objects.get(name="late").next_fire_at == corpus.utc(2026, 6, 10, 11)


def test_a_solar_schedule_stores_the_sun_event_and_a_polar_night_says_until_when(
    make_engine, publisher
):
    engine = make_engine(
        {
            "sunrise-london": {"task": TASK, "schedule": solar("sunrise", 51.5074, -0.1278)},
            "sunrise-svalbard": {"task": TASK, "schedule": solar("sunrise", 78.2232, 15.6267)},
        }
    )
    now = corpus.utc(2026, 11, 20, 12)
    engine.tick(now)
    london = Schedule.objects.get(name="sunrise-london")
    assert (london.kind, london.solar_event, london.latitude) == (Kind.SOLAR, "sunrise", 51.5074)
    assert london.next_fire_at == timing.next_slot(london.to_spec(), now)
    assert "(" not in next_fire_words(london, now)  # a sunrise tomorrow: nothing to say
    svalbard = Schedule.objects.get(name="sunrise-svalbard")
    nxt = svalbard.next_fire_at
    assert nxt is not None and nxt.year == 2027 and nxt.month == 2
    words = next_fire_words(svalbard, now)
    assert words.endswith(f"(the sun does not rise at 78.2232°N, 15.6267°E until {nxt:%Y-%m-%d})")
    engine.tick(london.next_fire_at)
    assert publisher.slots("sunrise-london") == [london.next_fire_at]


def test_a_solar_entry_without_ephem_stops_the_boot_naming_the_entry_and_the_extra(
    monkeypatch,
):
    import importlib.util

    from durablebeat.beat.codesync import BadEntry, parse_entry

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "ephem" else real(name, *a)
    )
    with pytest.raises(BadEntry) as info:
        parse_entry("dawn", {"task": TASK, "schedule": solar("sunrise", 10, 20)}, "UTC")
    assert "beat_schedule['dawn']" in str(info.value)
    assert "pip install 'durablebeat[solar]'" in str(info.value)


def corpus_app() -> Celery:
    """One app holding every entry of the corpus (names prefixed by their project)."""
    app = Celery("corpus", set_as_current=False)
    app.conf.timezone = "Europe/London"
    app.conf.broker_url = "memory://"
    app.conf.beat_schedule = {
        f"{p.name}/{name}": entry
        for p in corpus.projects()
        for name, entry in p.beat_schedule.items()
    }
    return app


def test_the_real_scheduler_boots_the_whole_corpus_and_fires_it():
    """Every entry of the compatibility corpus boots under the real ``DurableScheduler``
    (code sync, first next fires) and the frequent ones fire: no entry refused, none set
    aside."""
    app = corpus_app()
    sent: list[Any] = []
    with time_machine.travel(T0, tick=False) as clock:
        scheduler = DurableScheduler(app)
        scheduler.engine.dispatcher.publish = sent.append
        now = T0
        for _ in range(30):
            scheduler.tick()
            now += MIN
            clock.move_to(now)
        scheduler.close()
    rows = {r.name: r for r in Schedule.objects.all()}
    # and the entry Celery's beat installs itself for this app's result backend (R25)
    assert set(rows) == set(defaults.beat_schedule(app)) > set(app.conf.beat_schedule)
    assert {name: r.error for name, r in rows.items() if r.error} == {}
    assert all(r.next_fire_at is not None for r in rows.values())
    fired = {claim.schedule for claim in sent}
    assert {
        "no-zone/every-minute",
        "kolkata/quarter-hours",
        "no-zone/custom-weekday-quarters",
    } <= fired


def test_a_custom_schedule_is_not_backfilled(make_engine):
    """R25, R27: only the object knows a custom schedule's slots, and late ones fire once
    instead of being counted missed: a backfill of it is refused, naming why."""
    from durablebeat.ops import backfill

    engine = make_engine(
        {"quarters": {"task": TASK, "schedule": corpus.EveryQuarterHourOnWeekdays()}}
    )
    with time_machine.travel(T0, tick=False):
        engine.tick(T0)
    with pytest.raises(backfill.BackfillRefused, match="custom schedule"):
        backfill.backfill("quarters", T0 - dt.timedelta(hours=2), T0 - dt.timedelta(hours=1), T0)
