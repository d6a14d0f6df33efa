"""Wake beat when a schedule changes: PostgreSQL ``LISTEN``, polling everywhere else (R6).

Migration 0002 adds a trigger that sends ``NOTIFY durablebeat_schedule`` when a schedule row
is inserted or its ``next_fire_at`` / ``enabled`` / ``error`` changes, except for changes a
beat makes itself (its session sets ``durablebeat.beat``). Beat sleeps in ``Listener.wait``
on its own connection and looks again as soon as a notification comes, so a schedule edited
in the admin is picked up in milliseconds instead of up to ``max_interval``.

Never a reason for beat not to run (R5): where LISTEN is impossible (SQLite, a pooler in
transaction mode, the database down, the setting off) ``wait`` simply sleeps, and the
listening connection is tried again every ``RETRY_EVERY`` seconds.
"""

from __future__ import annotations

import contextlib
import logging
import select
import time
from typing import Any

from django.db import connection

from .. import conf

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
