"""Tell every running beat that a schedule changed, through the broker (R6).

On PostgreSQL a trigger sends ``NOTIFY`` and beat ``LISTEN``s (``beat.notify``). MariaDB,
MySQL and SQLite have nothing like it, so a process that changes a schedule (the admin, the
ORM, the commands) publishes one small message on a fanout exchange of the Celery broker
that beat already uses, after its transaction commits; each beat consumes from a queue of
its own bound to that exchange and looks at the database at once.

Never a reason for a save to fail (R5): a broker that is down, or no Celery app configured,
only means that beat sees the change when it next looks (within the longer of
``DURABLEBEAT_MAX_INTERVAL`` and ``DURABLEBEAT_HEARTBEAT_INTERVAL``), and after a failed
send this process tries the broker again only after ``RETRY_AFTER`` seconds, so that a
broker that is down does not slow every save. A beat process sends nothing: its own writes
need no wake-up (on PostgreSQL its session is marked for the same reason).

R31: on PostgreSQL the trigger's ``NOTIFY`` carries a change, unless a live beat found its
``LISTEN`` deaf (a pooler in transaction mode: ``beat.notify``) and recorded it as a
``listen_deaf`` incident; then this process publishes on the broker too. It reads that once
per ``DEAF_CACHE`` seconds at most, after the commit (never inside the caller's
transaction), and beat relies on the broker only once every saver can have read it.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

from django.db import DatabaseError, transaction

from . import conf, db

logger = logging.getLogger("durablebeat")

#: the fanout exchange every beat binds a queue of its own to
EXCHANGE = "durablebeat.wake"
#: how long a wake-up message may wait for a beat; an old one wakes nobody usefully
EXPIRES = 60.0
#: after a failed send, seconds before this process tries the broker again
RETRY_AFTER = 30.0
#: seconds a send waits for a producer of the app's pool
ACQUIRE_TIMEOUT = 1.0
#: the incident a beat records when its LISTEN is deaf (R31)
LISTEN_DEAF = "listen_deaf"
#: seconds a saver keeps what it read about deaf beats
DEAF_CACHE = 1.0

_muted = False
_broken_until = 0.0
#: whether a live beat recorded its LISTEN deaf: ``beat.boots.listen_deaf_alive``, set when
#: the app is ready (this module is below the models, which call it)
deaf_beat_alive: Callable[[], bool] | None = None
#: (monotonic instant read, a live beat's LISTEN is deaf)
_deaf_seen: tuple[float, bool] = (-DEAF_CACHE, False)


def mute(muted: bool = True) -> None:
    """This process is a beat: its writes wake nobody (``mute(False)`` when its scheduler
    closes: a process that goes on, as a test run or an embedded beat's host, saves as any)."""
    global _muted
    _muted = muted


def needed() -> bool:
    """Whether a change in this process may have to go out on the broker: not in a beat,
    not when the setting is off (on PostgreSQL ``send`` asks whether NOTIFY carries it)."""
    return not _muted and bool(conf.settings.BROKER_WAKE)


def notify_carries() -> bool:
    """On PostgreSQL with LISTEN on, the trigger's NOTIFY wakes beat, unless a live beat
    recorded its LISTEN deaf (R31): read at most once per ``DEAF_CACHE`` seconds. A read
    that fails counts as heard (the change is seen at beat's next look)."""
    global _deaf_seen
    if not (db.connection().vendor == "postgresql" and conf.settings.LISTEN_NOTIFY):
        return False
    at, deaf = _deaf_seen
    t = time.monotonic()
    if t - at < DEAF_CACHE:
        return not deaf
    try:
        deaf = deaf_beat_alive is not None and deaf_beat_alive()
    except DatabaseError:
        return True
    _deaf_seen = (t, deaf)
    return not deaf


def schedules_changed() -> None:
    """A schedule row was written: wake the beats once this transaction commits (once per
    transaction, however many rows it wrote; nothing when it rolls back)."""
    if not needed():
        return
    connection = db.connection()
    if not connection.in_atomic_block:
        send()
    elif not any(entry[1] is send for entry in connection.run_on_commit):
        transaction.on_commit(send, using=connection.alias)


def exchange() -> Any:
    """The fanout exchange, declared alike by senders and by each beat's queue."""
    from kombu import entity

    make: Any = entity.Exchange  # kombu is untyped
    return make(EXCHANGE, type="fanout", durable=False, auto_delete=True, delivery_mode=1)


def configured_app() -> Any:
    """The project's Celery app, or None when the process has none with a broker set (a
    bare default app would try a broker on localhost that nobody configured)."""
    from celery import current_app

    app = current_app._get_current_object()
    if not (app.conf.broker_url or app.conf.broker_write_url):
        return None
    return app


def send() -> None:
    """Publish one wake-up message; when it cannot go out, beat sees the change when it
    next looks."""
    global _broken_until
    app = configured_app()
    if app is None or time.monotonic() < _broken_until or notify_carries():
        return
    try:
        publish(app, {"changed": "schedule"})
    except Exception as exc:  # any broker error: beat sees the change when it next looks
        _broken_until = time.monotonic() + RETRY_AFTER
        logger.warning(
            "could not wake beat through the broker (it sees the change within the longer "
            "of DURABLEBEAT_MAX_INTERVAL and DURABLEBEAT_HEARTBEAT_INTERVAL; next try in "
            "%.0f s): %s",
            RETRY_AFTER,
            exc,
            extra={"event": "wake_failed"},
        )


def publish(app: Any, body: dict[str, str]) -> None:
    """One message on the wake-up exchange: a change, or a beat's probe (``beat.notify``)."""
    with app.producer_pool.acquire(block=True, timeout=ACQUIRE_TIMEOUT) as producer:
        producer.publish(
            body,
            exchange=exchange(),
            routing_key="",
            declare=[exchange()],
            retry=False,
            expiration=EXPIRES,
            serializer="json",
        )
