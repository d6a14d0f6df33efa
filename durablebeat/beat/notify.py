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
from typing import Any

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


class _Channel:
    """A connection beat sleeps on until a schedule change wakes it. Where it cannot be had,
    ``wait`` simply sleeps and the connection is tried again every ``RETRY_EVERY`` seconds
    (R5). Subclasses say whether they apply here and how to open, block on and drop it."""

    #: what the log calls it
    what = "schedule change listener"

    def __init__(self) -> None:
        self._conn: Any = None
        self._next_try = 0.0

    def wanted(self) -> bool:
        raise NotImplementedError

    def _open(self) -> Any:
        raise NotImplementedError

    def _block(self, conn: Any, timeout: float) -> bool:
        """Block up to ``timeout`` seconds; True when a change came."""
        raise NotImplementedError

    def _drop(self, conn: Any) -> None:
        raise NotImplementedError

    def listening(self) -> bool:
        """Listening now (asks nobody)."""
        return self._conn is not None

    def available(self) -> bool:
        """Listening now, or could start to (tried at most every ``RETRY_EVERY`` s)."""
        if self._conn is not None:
            return True
        if time.monotonic() < self._next_try or not self.wanted():
            return False
        try:
            self._conn = self._open()
        except Exception as exc:  # any failure here means: poll instead (R5)
            logger.info(
                "%s unavailable, polling every max_interval: %s",
                self.what,
                exc,
                extra={"event": "listen_unavailable"},
            )
            self._next_try = time.monotonic() + RETRY_EVERY
            return False
        logger.info("%s listening", self.what, extra={"event": "listening"})
        return True

    def wait(self, timeout: float) -> bool:
        """Sleep up to ``timeout`` seconds; True when a schedule change woke us earlier."""
        if timeout <= 0:
            return False
        if not self.available():
            time.sleep(timeout)
            return False
        start = time.monotonic()
        try:
            return self._block(self._conn, timeout)
        except Exception as exc:  # the drivers' errors are many; sleeping is always safe
            if self._conn is None:
                return False  # closed under the read: beat is stopping
            logger.warning(
                "%s lost, polling every max_interval: %s",
                self.what,
                exc,
                extra={"event": "listen_lost"},
            )
            self.close()
            time.sleep(max(0.0, timeout - (time.monotonic() - start)))
            return False

    def close(self) -> None:
        if self._conn is not None:
            with contextlib.suppress(Exception):  # a broken connection may fail to let go
                self._drop(self._conn)
        self._conn = None
        self._next_try = time.monotonic() + RETRY_EVERY


class Listener(_Channel):
    """A dedicated autocommit PostgreSQL connection that LISTENs."""

    what = "LISTEN"

    def wanted(self) -> bool:
        return bool(conf.settings.LISTEN_NOTIFY) and connection.vendor == "postgresql"

    def _open(self) -> Any:
        import psycopg

        params = {
            k: v
            for k, v in connection.get_connection_params().items()
            if k not in {"cursor_factory", "context", "prepare_threshold"}
        }
        params.setdefault("connect_timeout", 5)
        conn = psycopg.connect(**params, autocommit=True)
        conn.execute(f"LISTEN {CHANNEL}")
        return conn

    def _block(self, conn: Any, timeout: float) -> bool:
        # select() itself, not the driver's wait: a signal (beat's SIGTERM) interrupts it at
        # once, as it does Celery's own sleep.
        ready, _, _ = select.select([conn.pgconn.socket], [], [], timeout)
        # Every notification waiting now: several changes need one look at the database.
        return bool(ready) and any([True for _ in conn.notifies(timeout=0.0)])

    def _drop(self, conn: Any) -> None:
        conn.close()


class BrokerListener(_Channel):
    """A queue of this beat's own on the broker's wake-up exchange (``wakeup``)."""

    what = "broker wake-up"

    def __init__(self, app: Any) -> None:
        super().__init__()
        self._app = app
        self._consumer: Any = None
        self._woken = False

    def wanted(self) -> bool:
        # On PostgreSQL NOTIFY carries it, and nobody sends on the broker.
        return bool(conf.settings.BROKER_WAKE) and not (
            connection.vendor == "postgresql" and conf.settings.LISTEN_NOTIFY
        )

    def _open(self) -> Any:
        from kombu import entity

        make_queue: Any = entity.Queue  # kombu is untyped
        conn = self._app.connection_for_read()
        try:
            conn.ensure_connection(max_retries=0)
            queue = make_queue(
                f"{wakeup.EXCHANGE}.{uuid.uuid4().hex}",
                wakeup.exchange(),
                routing_key="",
                durable=False,
                auto_delete=True,
            )
            self._consumer = conn.Consumer(
                [queue], callbacks=[self._on_message], no_ack=True, accept=["json"]
            )
            self._consumer.consume()
            # Redis subscribes when the connection is first polled: poll once now, so that a
            # change made before beat first sleeps is not published to nobody.
            with contextlib.suppress(TimeoutError):
                conn.drain_events(timeout=0.01)
        except Exception:
            self._drop(conn)
            raise
        return conn

    def _block(self, conn: Any, timeout: float) -> bool:
        start = time.monotonic()
        self._woken = False
        # drain_events may return for the broker's own traffic (a subscription's
        # confirmation): only a wake-up message ends the sleep early.
        while not self._woken:
            left = timeout - (time.monotonic() - start)
            if left <= 0:
                return False
            try:
                conn.drain_events(timeout=left)
            except TimeoutError:
                return False
        return True

    def _on_message(self, body: Any, message: Any) -> None:
        """A wake-up says only "look again"."""
        self._woken = True

    def _drop(self, conn: Any) -> None:
        """Let go without a word to the broker: beat's SIGTERM handler may close while
        ``wait`` reads, and a cancel or a close would read too (the queue is auto-delete:
        the broker drops it with the connection)."""
        self._consumer = None
        conn.collect()


class Wakeups:
    """Whichever way this database wakes beat: LISTEN on PostgreSQL, the broker elsewhere."""

    def __init__(self, app: Any) -> None:
        self._ways: list[_Channel] = [Listener(), BrokerListener(app)]

    def listening(self) -> bool:
        """Listening now (asks nobody: a broker that is down never holds a tick)."""
        return any(way.listening() for way in self._ways)

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

    def _way(self) -> _Channel | None:
        return next((way for way in self._ways if way.available()), None)
