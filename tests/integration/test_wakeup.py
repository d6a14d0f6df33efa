"""R6: a schedule change wakes beat in milliseconds where the database has no LISTEN,
through a message on the real broker (Redis here); polling stays the fallback.

On PostgreSQL the trigger and LISTEN do this (test_scale.py); here LISTEN_NOTIFY is off so
that the broker path runs on every database of the suite.
"""

from __future__ import annotations

import datetime as dt
import logging
import time
from collections.abc import Iterator
from typing import Any

import pytest
from celery import Celery
from django.db import transaction

from durablebeat import wakeup
from durablebeat.beat import notify
from durablebeat.models import Schedule
from project.celery import app

pytestmark = pytest.mark.django_db(transaction=True)
FAR = dt.datetime(2030, 1, 1, tzinfo=dt.UTC)


@pytest.fixture(autouse=True)
def _broker_path(settings: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    settings.DURABLEBEAT_LISTEN_NOTIFY = False
    monkeypatch.setattr(wakeup, "_muted", False)
    monkeypatch.setattr(wakeup, "_broken_until", 0.0)


@pytest.fixture
def listener() -> Iterator[notify.BrokerListener]:
    listening = notify.BrokerListener(app)
    assert listening.available(), "the broker listener could not start on the test broker"
    try:
        yield listening
    finally:
        listening.close()


def test_a_save_wakes_a_beat_within_milliseconds(make_schedule, listener):
    assert listener.wait(0.3) is False  # nothing changed: it sleeps the whole timeout
    start = time.monotonic()
    make_schedule(name="saved", every=dt.timedelta(minutes=5))
    assert listener.wait(5) is True
    # The measured figure is in benchmarks/; this only says "woken, not timed out".
    assert time.monotonic() - start < 5


def test_the_admins_bulk_actions_wake_a_beat(make_schedule, listener):
    make_schedule(name="bulk", every=dt.timedelta(minutes=5))
    assert listener.wait(5) is True
    Schedule.objects.filter(name="bulk").update(enabled=False)
    assert listener.wait(5) is True


def test_a_runs_outcome_written_on_its_schedule_wakes_nobody(make_schedule, listener):
    """A worker finishing a run writes last_completed_at/last_outcome on the schedule at
    every completion: only the columns PostgreSQL's trigger watches wake beat."""
    row = make_schedule(name="busy", every=dt.timedelta(minutes=5))
    assert listener.wait(5) is True
    Schedule.objects.filter(pk=row.pk).update(last_completed_at=FAR, last_outcome="succeeded")
    row.save(update_fields=["description"])
    assert listener.wait(0.5) is False
    row.save(update_fields=["next_fire_at"])
    assert listener.wait(5) is True


def test_one_transaction_is_one_wake_up(make_schedule, listener):
    with transaction.atomic():
        for i in range(3):
            make_schedule(name=f"one-{i}", every=dt.timedelta(minutes=5))
        Schedule.objects.update(next_fire_at=FAR)
    assert listener.wait(5) is True
    assert listener.wait(0.5) is False


def test_a_rolled_back_change_wakes_nobody(make_schedule, listener):
    with pytest.raises(RuntimeError), transaction.atomic():
        make_schedule(name="undone", every=dt.timedelta(minutes=5))
        raise RuntimeError("roll back")
    assert listener.wait(0.5) is False
    make_schedule(name="done", every=dt.timedelta(minutes=5))  # and the next one still does
    assert listener.wait(5) is True


def test_a_beats_own_writes_wake_no_beat(make_schedule, listener, monkeypatch):
    monkeypatch.setattr(wakeup, "_muted", True)
    make_schedule(name="by-beat", every=dt.timedelta(minutes=5))
    Schedule.objects.update(next_fire_at=FAR)
    assert listener.wait(0.5) is False


def test_on_postgresql_with_listen_the_broker_carries_nothing(settings):
    settings.DURABLEBEAT_LISTEN_NOTIFY = True
    from django.db import connection

    # R31: unless a live beat found its LISTEN deaf (tests/integration/test_pooler.py)
    assert wakeup.notify_carries() is (connection.vendor == "postgresql")
    settings.DURABLEBEAT_BROKER_WAKE = False
    assert wakeup.needed() is False
    assert notify.BrokerListener(app).available() is False


def test_a_broker_that_is_down_never_fails_a_save(make_schedule, monkeypatch, caplog):
    down = Celery("down", broker="redis://127.0.0.1:1/0", set_as_current=False)
    monkeypatch.setattr(wakeup, "configured_app", lambda: down)
    with caplog.at_level(logging.WARNING, logger="durablebeat"):
        row = make_schedule(name="still-saved", every=dt.timedelta(minutes=5))
        make_schedule(name="saved-quickly", every=dt.timedelta(minutes=5))
    assert Schedule.objects.filter(pk=row.pk).exists()
    # one try, then none for a while: a broker that is down does not slow every save
    assert [r.event for r in caplog.records if hasattr(r, "event")] == ["wake_failed"]
    down.close()


def test_a_beat_whose_broker_is_down_polls(settings, caplog):
    down = Celery("down", broker="redis://127.0.0.1:1/0", set_as_current=False)
    listening = notify.BrokerListener(down)
    with caplog.at_level(logging.INFO, logger="durablebeat"):
        assert listening.available() is False
        assert listening.listening() is False
    start = time.monotonic()
    assert listening.wait(0.2) is False  # a plain sleep of the timeout
    assert time.monotonic() - start >= 0.2
    assert "listen_unavailable" in [getattr(r, "event", None) for r in caplog.records]
    down.close()


def test_a_process_with_no_broker_configured_sends_nothing():
    bare = Celery("bare", set_as_current=False)
    bare.set_current()
    try:
        assert wakeup.configured_app() is None
    finally:
        app.set_current()
    assert wakeup.configured_app() is app


@pytest.mark.parametrize("woken_on_change, idle, due_in", [(True, 10.0, 7.0), (False, 1.0, 1.0)])
def test_a_beat_woken_on_change_sleeps_until_its_next_slot_or_heartbeat(
    settings, make_engine, make_schedule, t0, woken_on_change, idle, due_in
):
    """Nothing due means no polling every max_interval where a change wakes beat
    anyway; it looks again at its next slot or its next heartbeat, whichever is first."""
    settings.DURABLEBEAT_MAX_INTERVAL = 1
    settings.DURABLEBEAT_HEARTBEAT_INTERVAL = 10
    engine = make_engine()
    assert engine.tick(t0, woken_on_change) == idle  # boot: nothing stored
    make_schedule(name="soon", every=60, next_fire_at=t0 + dt.timedelta(seconds=8))
    assert engine.tick(t0 + dt.timedelta(seconds=1), woken_on_change) == due_in


def test_a_beat_asks_whether_it_listens_without_connecting():
    """The scheduler asks before each tick; only ``available`` (after the tick) connects,
    so a broker that is slow to refuse never holds the tick's due slots."""
    ways = notify.Wakeups(app)
    try:
        assert ways.listening() is False
        assert ways.available() is True
        assert ways.listening() is False  # R31: relied on once its probe came back
        ways.wait(0.5)
        assert ways.listening() is True
    finally:
        ways.close()
    assert ways.listening() is False
