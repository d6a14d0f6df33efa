"""Wake beat when a schedule changes: PostgreSQL ``LISTEN``, a message on the broker
elsewhere, polling when neither answers (R6).

Migration 0002 adds a trigger that sends ``NOTIFY durablebeat_schedule`` when a schedule row
is inserted or its ``next_fire_at`` / ``enabled`` / ``error`` changes, except for changes a
beat makes itself (its session sets ``durablebeat.beat``). Beat sleeps in ``Listener.wait``
on its own connection and looks again as soon as a notification comes, so a schedule edited
in the admin is picked up in milliseconds instead of up to ``max_interval``.

On MariaDB/MySQL and SQLite, whoever changes a schedule publishes a wake-up on the Celery
broker (``durablebeat.wakeup``); ``BrokerListener`` consumes it on a queue of this beat's own.
``Wakeups`` picks whichever of the two this database uses.

Never a reason for beat not to run (R5): where neither is possible (a pooler in transaction
mode, the database or the broker down, the settings off) ``wait`` simply sleeps, and the
listening connection is tried again every ``RETRY_EVERY`` seconds.
"""

from __future__ import annotations

import contextlib
import logging
import select
import time
import uuid
from typing import Any, Protocol

from django.db import connection

from .. import conf, wakeup

logger = logging.getLogger("durablebeat")

CHANNEL = "durablebeat_schedule"
#: a session setting: this connection is a beat's, its writes wake nobody
BEAT_SETTING = "durablebeat.beat"
RETRY_EVERY = 30.0


def mark_beat_session() -> None:
    """Tag the Django connection as a beat's, so that its own writes do not notify."""
    if connection.vendor == "postgresql":
        with connection.cursor() as cur:
            cur.execute(f"SELECT set_config('{BEAT_SETTING}', 'on', false)")


class Listener:
    """A dedicated autocommit connection that LISTENs; beat sleeps on it."""

    def __init__(self) -> None:
        self._conn: Any = None
        self._next_try = 0.0

    def available(self) -> bool:
        """Listening now, or could start to (tried at most every ``RETRY_EVERY`` s)."""
        return self._connect() is not None

    def wait(self, timeout: float) -> bool:
        """Sleep up to ``timeout`` seconds; True when a schedule change woke us earlier."""
        if timeout <= 0:
            return False
        conn = self._connect()
        if conn is None:
            time.sleep(timeout)
            return False
        start = time.monotonic()
        try:
            # select() itself, not the driver's wait: a signal (beat's SIGTERM) interrupts
            # it at once, as it does Celery's own sleep.
            ready, _, _ = select.select([conn.pgconn.socket], [], [], timeout)
            # Every notification waiting now: several changes need one look at the database.
            return bool(ready) and any([True for _ in conn.notifies(timeout=0.0)])
        except Exception as exc:  # the driver's errors are many; sleeping is always safe
            logger.warning(
                "schedule change listener lost, polling every max_interval: %s",
                exc,
                extra={"event": "listen_lost"},
            )
            self.close()
            time.sleep(max(0.0, timeout - (time.monotonic() - start)))
            return False

    def close(self) -> None:
        if self._conn is not None:
            with contextlib.suppress(Exception):  # closing a broken connection may fail too
                self._conn.close()
        self._conn = None
        self._next_try = time.monotonic() + RETRY_EVERY

    def _connect(self) -> Any:
        if self._conn is not None:
            return self._conn
        if not conf.settings.LISTEN_NOTIFY or connection.vendor != "postgresql":
            return None
        if time.monotonic() < self._next_try:
            return None
        try:
            import psycopg

            params = {
                k: v
                for k, v in connection.get_connection_params().items()
                if k not in {"cursor_factory", "context", "prepare_threshold"}
            }
            params.setdefault("connect_timeout", 5)
            conn = psycopg.connect(**params, autocommit=True)
            conn.execute(f"LISTEN {CHANNEL}")
        except Exception as exc:  # any failure here means: poll instead (R5)
            logger.info(
                "LISTEN unavailable, polling every max_interval: %s",
                exc,
                extra={"event": "listen_unavailable"},
            )
            self._next_try = time.monotonic() + RETRY_EVERY
            return None
        self._conn = conn
        logger.info("listening for schedule changes", extra={"event": "listening"})
        return conn


class BrokerListener:
    """A queue of this beat's own on the broker's wake-up exchange; beat sleeps on it."""

    def __init__(self, app: Any) -> None:
        self._app = app
        self._conn: Any = None
        self._consumer: Any = None
        self._next_try = 0.0
        self._woken = False

    def available(self) -> bool:
        return self._connect() is not None

    def wait(self, timeout: float) -> bool:
        """Sleep up to ``timeout`` seconds; True when a wake-up message came earlier."""
        if timeout <= 0:
            return False
        conn = self._connect()
        if conn is None:
            time.sleep(timeout)
            return False
        start = time.monotonic()
        self._woken = False
        try:
            # drain_events may return for the broker's own traffic (a subscription's
            # confirmation): only a wake-up message ends the sleep early.
            while not self._woken:
                left = timeout - (time.monotonic() - start)
                if left <= 0:
                    return False
                conn.drain_events(timeout=left)
        except TimeoutError:
            return False
        except Exception as exc:  # the broker's errors are many; sleeping is always safe
            if self._conn is None:
                return False  # closed under the read: beat is stopping
            logger.warning(
                "broker wake-up listener lost, polling every max_interval: %s",
                exc,
                extra={"event": "listen_lost"},
            )
            self.close()
            time.sleep(max(0.0, timeout - (time.monotonic() - start)))
            return False
        return True

    def _on_message(self, body: Any, message: Any) -> None:
        """A wake-up says only "look again"."""
        self._woken = True

    def close(self) -> None:
        """Drop the connection without a word to the broker: beat's SIGTERM handler calls
        this while ``wait`` may be reading from it, and a cancel or a close would read
        too (the broker drops the queue with its connection: it is auto-delete)."""
        if self._conn is not None:
            with contextlib.suppress(Exception):  # a broken connection may fail to let go
                self._conn.collect()
        self._conn = self._consumer = None
        self._next_try = time.monotonic() + RETRY_EVERY

    def _connect(self) -> Any:
        if self._conn is not None:
            return self._conn
        if not conf.settings.BROKER_WAKE or time.monotonic() < self._next_try:
            return None
        if connection.vendor == "postgresql" and conf.settings.LISTEN_NOTIFY:
            return None  # NOTIFY carries it there, and nobody sends on the broker
        try:
            from kombu import entity

            make_queue: Any = entity.Queue  # kombu is untyped
            conn = self._app.connection_for_read()
            conn.ensure_connection(max_retries=0)
            queue = make_queue(
                f"{wakeup.EXCHANGE}.{uuid.uuid4().hex}",
                wakeup.exchange(),
                routing_key="",
                durable=False,
                auto_delete=True,
            )
            consumer = conn.Consumer(
                [queue], callbacks=[self._on_message], no_ack=True, accept=["json"]
            )
            consumer.consume()
            # Redis subscribes when the connection is first polled: poll once now, so that a
            # change made before beat first sleeps is not published to nobody.
            with contextlib.suppress(TimeoutError):
                conn.drain_events(timeout=0.01)
        except Exception as exc:  # any failure here means: poll instead (R5)
            logger.info(
                "broker wake-up unavailable, polling every max_interval: %s",
                exc,
                extra={"event": "listen_unavailable"},
            )
            with contextlib.suppress(Exception):
                conn.collect()
            self._next_try = time.monotonic() + RETRY_EVERY
            return None
        self._conn, self._consumer = conn, consumer
        logger.info("listening for schedule changes on the broker", extra={"event": "listening"})
        return conn


class _Way(Protocol):
    def available(self) -> bool: ...
    def wait(self, timeout: float) -> bool: ...
    def close(self) -> None: ...


class Wakeups:
    """Whichever way this database wakes beat: LISTEN on PostgreSQL, the broker elsewhere."""

    def __init__(self, app: Any) -> None:
        self._ways: list[_Way] = [Listener(), BrokerListener(app)]

    def available(self) -> bool:
        return self._way() is not None

    def wait(self, timeout: float) -> bool:
        way = self._way()
        if way is None:
            time.sleep(max(0.0, timeout))
            return False
        return way.wait(timeout)

    def close(self) -> None:
        for way in self._ways:
            way.close()

    def _way(self) -> _Way | None:
        return next((way for way in self._ways if way.available()), None)
