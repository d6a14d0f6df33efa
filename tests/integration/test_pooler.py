"""R31: beat relies on a wake-up way only while it has seen it deliver. Behind PgBouncer in
transaction pooling (scripts/services.sh: port 6432; session pooling on 6433) a LISTEN
answers every call and hears nothing: beat finds it deaf by its own probe, says so once,
records it for the savers and wakes through the broker (Redis here) instead.
"""

from __future__ import annotations

import datetime as dt
import logging
import time
import uuid
from collections.abc import Iterator
from typing import Any

import django
import pytest
from django.db import connection

from durablebeat import db, wakeup
from durablebeat.beat import boots, notify
from durablebeat.core import clock
from durablebeat.models import Incident
from project.celery import app

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.postgres_only]
TRANSACTION_POOLING, SESSION_POOLING = 6432, 6433


class _Through:
    """Django's database as a pooler on ``port`` reaches it: what ``Listener`` opens."""

    vendor = "postgresql"

    def __init__(self, port: int) -> None:
        self.port = port

    def get_connection_params(self) -> dict[str, Any]:
        return connection.get_connection_params() | {"port": self.port}


@pytest.fixture(autouse=True)
def _saver(monkeypatch: pytest.MonkeyPatch) -> None:
    """This process saves schedules as the admin would: not muted, nothing remembered."""
    monkeypatch.setattr(wakeup, "_muted", False)
    monkeypatch.setattr(wakeup, "_broken_until", 0.0)
    monkeypatch.setattr(wakeup, "_deaf_seen", (-wakeup.DEAF_CACHE, False))


@pytest.fixture(autouse=True)
def _let_go() -> Iterator[None]:
    """The pooler keeps its server connections to the test database: end them, so that
    the database can be dropped at the end of the run."""
    yield
    with connection.cursor() as cur:
        cur.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
            " WHERE datname = current_database() AND pid <> pg_backend_pid()"
        )


def _through(monkeypatch: pytest.MonkeyPatch, port: int | None) -> None:
    if port is not None:
        monkeypatch.setattr(notify.Listener, "_database", lambda self: _Through(port))


@pytest.fixture
def wakeups() -> Iterator[notify.Wakeups]:
    ways = notify.Wakeups(app)
    ways.boot_id = uuid.uuid4()
    boots.register_boot(ways.boot_id, "beat-host", 4242, clock.now())
    try:
        yield ways
    finally:
        ways.close()


def _wait_proven(ways: notify.Wakeups, bound: float = 10.0) -> None:
    end = time.monotonic() + bound
    while not ways.listening() and time.monotonic() < end:
        assert ways.available()
        ways.wait(0.2)
    assert ways.listening(), "no wake-up way proved itself"


@pytest.mark.parametrize("port", [None, SESSION_POOLING], ids=["direct", "session-pooling"])
def test_a_listen_that_hears_is_proven_by_its_probe_and_relied_on(
    monkeypatch, make_schedule, caplog, port
):
    _through(monkeypatch, port)
    listener = notify.Listener()
    try:
        assert listener.available()
        assert listener.listening() is False  # open, not yet heard: not relied on
        assert listener.wait(0.5) is False  # its probe came back, and is no change
        assert listener.listening() is True
        make_schedule(name="saved", every=dt.timedelta(minutes=5))
        assert listener.wait(10) is True
        assert listener.deaf is False
    finally:
        listener.close()


@pytest.mark.skipif(django.VERSION < (5, 1), reason="Django's pool is 5.1+")
def test_a_listen_beside_djangos_own_pool_is_proven_and_hears(monkeypatch, make_schedule):
    """Django's pool (``OPTIONS: {"pool": True}``): beat's queries, its probe among them, take
    pooled connections; its LISTEN is a connection of its own opened from the same settings,
    and hears (issue 30 item 2)."""
    from django.db.backends.postgresql.base import DatabaseWrapper

    pooled_settings = {**connection.settings_dict, "OPTIONS": {"pool": {"min_size": 1}}}
    pooled = DatabaseWrapper(pooled_settings, alias="durablebeat_pool_test")
    monkeypatch.setattr(notify.Listener, "_database", lambda self: pooled)
    monkeypatch.setattr(db, "connection", lambda: pooled)  # the probe goes through the pool
    listener = notify.Listener()
    try:
        assert listener.available()
        # its probe, sent on a pooled connection, comes back (waited for, bounded: a loaded
        # machine took more than the half second this once waited)
        deadline = time.monotonic() + 10
        while not listener.listening() and time.monotonic() < deadline:
            assert listener.wait(0.2) is False
        assert listener.listening() is True
        assert pooled.pool is not None and pooled.connection._pool is pooled.pool
        make_schedule(name="saved", every=dt.timedelta(minutes=5))
        assert listener.wait(10) is True
    finally:
        listener.close()
        pooled.close()
        pooled.close_pool()


def test_a_listen_through_transaction_pooling_is_found_deaf_and_said_once(
    monkeypatch, make_schedule, caplog
):
    _through(monkeypatch, TRANSACTION_POOLING)
    listener = notify.Listener()
    try:
        with caplog.at_level(logging.INFO, logger="durablebeat"):
            assert listener.available()  # every call answers...
            start = time.monotonic()
            assert listener.wait(notify.PROBE_WAIT + 5) is False
            # ...and the probe never comes back: deaf, the wait ended to look another way
            assert time.monotonic() - start < notify.PROBE_WAIT + 5
        assert listener.deaf and not listener.listening()
        assert listener.available() is False  # not tried again in this boot
        listener.wait(0.1)
        events = [getattr(r, "event", None) for r in caplog.records]
        assert events.count("listen_deaf") == 1
        assert "DURABLEBEAT_LISTEN_DATABASE" in caplog.text
    finally:
        listener.close()


def test_a_deaf_listen_turns_beat_and_the_savers_to_the_broker(monkeypatch, make_schedule, wakeups):
    _through(monkeypatch, TRANSACTION_POOLING)
    assert wakeup.notify_carries() is True  # no beat deaf yet: NOTIFY carries a change
    end = time.monotonic() + notify.PROBE_WAIT + 10
    while not Incident.objects.filter(kind=wakeup.LISTEN_DEAF).exists():
        assert time.monotonic() < end, "the deaf LISTEN was never recorded"
        assert wakeups.available()
        wakeups.wait(0.5)
    assert Incident.objects.get(kind=wakeup.LISTEN_DEAF).boot_id == wakeups.boot_id
    monkeypatch.setattr(wakeup, "_deaf_seen", (-wakeup.DEAF_CACHE, False))
    assert wakeup.notify_carries() is False  # a live beat is deaf: the savers publish
    # Relied on only once every saver can have read that, and the broker proved itself.
    _wait_proven(wakeups)
    start = time.monotonic()
    make_schedule(name="saved", every=dt.timedelta(minutes=5))
    assert wakeups.wait(30) is True
    assert time.monotonic() - start < 30  # woken by the change, not at the timeout


def test_the_savers_stop_publishing_once_the_deaf_beat_is_gone(monkeypatch, wakeups, settings):
    boots.incident(wakeup.LISTEN_DEAF, "deaf", clock.now(), wakeups.boot_id)
    assert wakeup.notify_carries() is False
    boots.stop_boot(wakeups.boot_id, clock.now())
    monkeypatch.setattr(wakeup, "_deaf_seen", (-wakeup.DEAF_CACHE, False))
    assert wakeup.notify_carries() is True
    settings.DURABLEBEAT_LISTEN_NOTIFY = False  # no LISTEN at all: the broker always
    assert wakeup.notify_carries() is False


def test_a_listen_database_of_its_own_leaves_the_session_untagged(settings):
    """A pooler in transaction mode hands a session's settings to other clients: a tag
    there would silence their NOTIFY."""
    settings.DURABLEBEAT_LISTEN_DATABASE = "default"
    notify.mark_beat_session()
    with connection.cursor() as cur:
        cur.execute(f"SELECT current_setting('{notify.BEAT_SETTING}', true)")
        assert cur.fetchone()[0] in (None, "")


# --- loud when it matters (issue 30 item 6) -------------------------------------------------


def test_check_names_a_live_beats_deaf_listen_with_its_fix(wakeups):
    from durablebeat.ops import health

    assert "listen_deaf" not in {f.code for f in health.findings(clock.now())}
    boots.incident(wakeup.LISTEN_DEAF, "deaf", clock.now(), wakeups.boot_id)
    found = [f for f in health.findings(clock.now()) if f.code == "listen_deaf"]
    assert len(found) == 1 and str(wakeups.boot_id) in found[0].message
    assert "DURABLEBEAT_LISTEN_DATABASE" in found[0].message
    boots.stop_boot(wakeups.boot_id, clock.now())  # a beat gone: nothing to fix any more
    assert "listen_deaf" not in {f.code for f in health.findings(clock.now())}


@pytest.mark.parametrize(
    "database, warned",
    [
        ({"HOST": "127.0.0.1", "PORT": "6432"}, True),
        ({"HOST": "db.x.pooler.supabase.com", "PORT": "5432"}, True),
        ({"HOST": "app.proxy-abc.eu-west-1.rds.amazonaws.com", "PORT": ""}, True),
        ({"HOST": "127.0.0.1", "PORT": "6432", "DISABLE_SERVER_SIDE_CURSORS": True}, False),
        ({"HOST": "127.0.0.1", "PORT": "5432"}, False),
    ],
)
def test_a_pooled_looking_database_without_disable_server_side_cursors_warns(
    monkeypatch, database, warned
):
    from types import SimpleNamespace

    from durablebeat import checks

    pooled = {"ENGINE": "django.db.backends.postgresql", "NAME": "app"} | database
    monkeypatch.setattr(checks, "django_settings", SimpleNamespace(DATABASES={"app": pooled}))
    found = checks.check_pooled_cursors()
    assert [m.id for m in found] == (["durablebeat.W005"] if warned else [])
