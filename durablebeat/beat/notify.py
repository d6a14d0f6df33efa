"""Wake beat when a schedule changes: PostgreSQL ``LISTEN``, a message on the broker
elsewhere, polling when neither answers (R6); a way is relied on only while it is seen to
deliver (R31).

Migration 0002 adds a trigger that sends ``NOTIFY durablebeat_schedule`` when a schedule row
is inserted or its ``next_fire_at`` / ``enabled`` / ``error`` changes, except for changes a
beat makes itself (its session sets ``durablebeat.beat``). Beat sleeps in ``Listener.wait``
on its own connection and looks again as soon as a notification comes, so a schedule edited
in the admin is picked up in milliseconds instead of up to ``max_interval``.

On MariaDB/MySQL and SQLite, whoever changes a schedule publishes a wake-up on the Celery
broker (``durablebeat.wakeup``); ``BrokerListener`` consumes it on a queue of this beat's own.
``Wakeups`` picks whichever of the two this database uses.

R31: a ``LISTEN`` can be deaf. Behind a pooler in transaction mode it lands on a server
connection that goes back to the pool, and no notification reaches beat, though every call
succeeds. So each way proves itself: at its start and with each heartbeat beat sends one
probe on it from elsewhere (a ``NOTIFY`` from beat's own Django connection; a message on the
broker) and relies on the way, sleeping until its next heartbeat, only once the probe came
back. A probe not back within ``PROBE_WAIT`` seconds makes the way deaf: said once in the
log, and beat wakes through the broker instead. A deaf ``LISTEN`` is recorded as a
``listen_deaf`` incident of the boot: the processes that save schedules read it
(``wakeup``) and publish their wake-ups on the broker while such a beat is alive, and
``check`` names it with its fix.

Never a reason for beat not to run (R5): where neither is possible (the database or the
broker down, the settings off) ``wait`` simply sleeps, and the listening connection is
tried again every ``RETRY_EVERY`` seconds.
"""

from __future__ import annotations

import contextlib
import logging
import math
import select
import time
import uuid
from typing import Any

from django.db import DatabaseError, connections

from .. import conf, db, wakeup
from ..core import clock

logger = logging.getLogger("durablebeat")

CHANNEL = "durablebeat_schedule"
#: a session setting: this connection is a beat's, its writes wake nobody
BEAT_SETTING = "durablebeat.beat"
RETRY_EVERY = 30.0
#: seconds a probe may take to come back before its way is deaf (a direct connection
#: takes milliseconds; a loaded host, some hundreds)
PROBE_WAIT = 2.0
#: what a probe's payload starts with; the trigger's own notifications carry ''
PROBE_PREFIX = "probe:"
#: seconds a last look at a way takes before it is found deaf (what came while beat was
#: busy elsewhere is read first)
PEEK = 0.01


def mark_beat_session() -> None:
    """Tag the Django connection as a beat's, so that its own writes do not notify. Not
    when LISTEN goes to a database of its own (``LISTEN_DATABASE``): Django's is then a
    pooler's, and a pooler in transaction mode would hand the session's tag to other
    clients' transactions, whose changes would then wake nobody (beat's own writes wake it
    once more instead: a look at the database that finds nothing)."""
    if conf.settings.LISTEN_DATABASE:
        return
    connection = db.connection()
    if connection.vendor == "postgresql":
        with connection.cursor() as cur:
            cur.execute(f"SELECT set_config('{BEAT_SETTING}', 'on', false)")


class _Channel:
    """A connection beat sleeps on until a schedule change wakes it. Where it cannot be had,
    ``wait`` simply sleeps and the connection is tried again every ``RETRY_EVERY`` seconds
    (R5). It is relied on only once a probe sent on it came back (R31); one that does not
    come back within ``PROBE_WAIT`` makes it deaf. Subclasses say whether they apply here
    and how to open, probe, block on and drop it."""

    #: what the log calls it
    what = "schedule change listener"
    #: seconds before a deaf way is tried again (``inf``: not in this boot)
    deaf_retry = RETRY_EVERY
    #: what to do about a deaf way, for the log
    fix = ""

    def __init__(self) -> None:
        self._conn: Any = None
        self._next_try = 0.0
        #: the probe on its way: its token and the monotonic instant it went out
        self._probe: tuple[str, float] | None = None
        self._next_probe = 0.0
        self.proven = False
        #: found deaf (and not proven since): beat wakes another way
        self.deaf = False
        self._said_deaf = False

    def wanted(self) -> bool:
        raise NotImplementedError

    def _open(self) -> Any:
        raise NotImplementedError

    def _send_probe(self, token: str) -> None:
        """Send ``token`` on this way from elsewhere; ``heard`` sees it come back."""
        raise NotImplementedError

    def _block(self, conn: Any, timeout: float) -> bool:
        """Block up to ``timeout`` seconds; True when a change came (a probe is not one)."""
        raise NotImplementedError

    def _drop(self, conn: Any) -> None:
        raise NotImplementedError

    def listening(self) -> bool:
        """Listening now on a way seen to deliver (asks nobody)."""
        return self._conn is not None and self.proven

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
        self.proven, self._probe, self._next_probe = False, None, 0.0
        return True

    def heard(self, payload: str) -> None:
        """A probe came back: this way delivers (another beat's probe proves nothing)."""
        if self._probe is None or payload != self._probe[0]:
            return
        if not self.proven:
            logger.info(
                "%s delivers: its probe came back, beat relies on it",
                self.what,
                extra={"event": "listen_proven"},
            )
        self._probe, self.proven, self.deaf = None, True, False

    def wait(self, timeout: float) -> bool:
        """Sleep up to ``timeout`` seconds; True when a schedule change woke us earlier.
        False early when the way was just found deaf: the caller looks another way."""
        if timeout <= 0:
            return False
        if not self.available():
            time.sleep(timeout)
            return False
        start = time.monotonic()
        end = start + timeout
        try:
            while True:
                self._probe_when_due()
                block = end - time.monotonic()
                if self._probe is not None:
                    back_by = self._probe[1] + PROBE_WAIT - time.monotonic()
                    if back_by <= 0:
                        # What came while beat was busy elsewhere is read before deciding.
                        changed = self._block(self._conn, PEEK)
                        if self._probe is not None:
                            self._deafened()
                            return changed
                        continue
                    block = min(block, back_by)
                if block <= 0:
                    return False
                if self._block(self._conn, block):
                    return True
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
            time.sleep(max(0.0, end - time.monotonic()))
            return False

    def _probe_when_due(self) -> None:
        """A probe at the start and one per heartbeat interval: a way that goes deaf later
        is found within an interval (R31). One that cannot be sent is no finding."""
        t = time.monotonic()
        if self._probe is not None or t < self._next_probe:
            return
        self._next_probe = t + conf.settings.HEARTBEAT_INTERVAL.total_seconds()
        token = f"{PROBE_PREFIX}{uuid.uuid4().hex}"
        try:
            self._send_probe(token)
        except Exception as exc:  # the database or the broker is down: the tick sees to it
            logger.debug("%s probe not sent: %s", self.what, exc)
            self._next_probe = t + PROBE_WAIT
            return
        self._probe = (token, t)

    def _deafened(self) -> None:
        """The probe did not come back: rely on this way no more (R31), said once a boot."""
        self.deaf, self.proven = True, False
        if not self._said_deaf:
            self._said_deaf = True
            logger.warning(
                "%s is deaf: a probe sent on it did not come back within %.0f s; beat "
                "wakes another way. %s",
                self.what,
                PROBE_WAIT,
                self.fix,
                extra={"event": "listen_deaf"},
            )
        self.close()
        self._next_try = time.monotonic() + self.deaf_retry

    def close(self) -> None:
        if self._conn is not None:
            with contextlib.suppress(Exception):  # a broken connection may fail to let go
                self._drop(self._conn)
        self._conn = None
        self._probe, self.proven = None, False
        self._next_try = time.monotonic() + RETRY_EVERY


class Listener(_Channel):
    """A dedicated autocommit PostgreSQL connection that LISTENs, on the database
    ``DURABLEBEAT_LISTEN_DATABASE`` names (a direct one, past a pooler) or Django's own."""

    what = "LISTEN"
    #: a pooler's mode does not change under a running beat
    deaf_retry = math.inf
    fix = (
        "Behind a pooler in transaction mode, set DURABLEBEAT_LISTEN_DATABASE to a database "
        "alias that reaches PostgreSQL directly (or a session-mode pool) and restart beat "
        "(docs/operations.md)."
    )

    def _database(self) -> Any:
        return connections[conf.settings.LISTEN_DATABASE or db.alias()]

    def wanted(self) -> bool:
        if not conf.settings.LISTEN_NOTIFY or db.connection().vendor != "postgresql":
            return False
        return bool(self._database().vendor == "postgresql")

    def _open(self) -> Any:
        import psycopg

        params = {
            k: v
            for k, v in self._database().get_connection_params().items()
            if k not in {"cursor_factory", "context", "prepare_threshold"}
        }
        params.setdefault("connect_timeout", 5)
        conn = psycopg.connect(**params, autocommit=True)
        conn.execute(f"LISTEN {CHANNEL}")
        return conn

    def _send_probe(self, token: str) -> None:
        # From beat's own Django connection, as a change comes from another process: sent
        # on the listening connection itself, the notification would come back on it even
        # through a pooler in transaction mode.
        with db.connection().cursor() as cur:
            cur.execute("SELECT pg_notify(%s, %s)", [CHANNEL, token])

    def _block(self, conn: Any, timeout: float) -> bool:
        # select() itself, not the driver's wait: a signal (beat's SIGTERM) interrupts it at
        # once, as it does Celery's own sleep.
        ready, _, _ = select.select([conn.pgconn.socket], [], [], timeout)
        if not ready:
            return False
        # Every notification waiting now: several changes need one look at the database.
        changed = False
        for note in conn.notifies(timeout=0.0):
            if note.payload.startswith(PROBE_PREFIX):
                self.heard(note.payload)
            else:
                changed = True
        return changed

    def _drop(self, conn: Any) -> None:
        conn.close()


class BrokerListener(_Channel):
    """A queue of this beat's own on the broker's wake-up exchange (``wakeup``)."""

    what = "broker wake-up"
    fix = "Look at the broker's fanout exchanges (durablebeat.wake)."

    def __init__(self, app: Any, listen: Listener | None = None) -> None:
        super().__init__()
        self._app = app
        self._consumer: Any = None
        self._woken = False
        #: the LISTEN this beat has: while it is not deaf, NOTIFY carries the changes
        self._listen = listen or Listener()

    def wanted(self) -> bool:
        # On PostgreSQL NOTIFY carries it while LISTEN hears, and nobody sends on the broker.
        return bool(conf.settings.BROKER_WAKE) and (self._listen.deaf or not self._listen.wanted())

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

    def _send_probe(self, token: str) -> None:
        wakeup.publish(self._app, {"probe": token})

    def _block(self, conn: Any, timeout: float) -> bool:
        start = time.monotonic()
        self._woken = False
        # drain_events may return for the broker's own traffic (a subscription's
        # confirmation, a probe): only a wake-up message ends the sleep early.
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
        """A wake-up says only "look again"; a probe, that the broker delivers."""
        if isinstance(body, dict) and isinstance(body.get("probe"), str):
            self.heard(body["probe"])
        else:
            self._woken = True

    def _drop(self, conn: Any) -> None:
        """Let go without a word to the broker: beat's SIGTERM handler may close while
        ``wait`` reads, and a cancel or a close would read too (the queue is auto-delete:
        the broker drops it with the connection)."""
        self._consumer = None
        conn.collect()


class Wakeups:
    """Whichever way this database wakes beat: LISTEN on PostgreSQL, the broker elsewhere
    and where LISTEN is deaf (R31)."""

    def __init__(self, app: Any) -> None:
        self._listen = Listener()
        self._ways: list[_Channel] = [self._listen, BrokerListener(app, self._listen)]
        #: the boot a deaf LISTEN is recorded on (the scheduler sets it once booted)
        self.boot_id: uuid.UUID | None = None
        self._recorded = False
        #: a way is relied on from here (monotonic) only: the savers' view of a deaf
        #: LISTEN (``wakeup.DEAF_CACHE``) is that old at most
        self._trust_from = 0.0

    def listening(self) -> bool:
        """Listening now on a way seen to deliver (asks nobody: a broker that is down never
        holds a tick)."""
        if time.monotonic() < self._trust_from:
            return False
        return any(way.listening() for way in self._ways)

    def available(self) -> bool:
        return self._way() is not None

    def wait(self, timeout: float) -> bool:
        way = self._way()
        if way is None:
            time.sleep(max(0.0, timeout))
            return False
        untrusted = self._trust_from - time.monotonic()
        if untrusted > 0:
            # Until the savers publish, a change may come on no way: look again then.
            timeout = min(timeout, untrusted)
        changed = way.wait(timeout)
        if self._listen.deaf and not self._recorded:
            self._way()  # the broker's queue first, then the savers are told to publish
            self._record_deaf()
        return changed

    def _record_deaf(self) -> None:
        """R31: the savers publish on the broker while this boot is alive; ``check`` names
        it. Tried again after the next wait when the database does not answer."""
        from . import boots

        if self.boot_id is None:
            return
        try:
            boots.incident(wakeup.LISTEN_DEAF, Listener.fix, clock.now(), self.boot_id)
        except DatabaseError:
            return
        self._recorded = True
        self._trust_from = time.monotonic() + wakeup.DEAF_CACHE + PROBE_WAIT

    def close(self) -> None:
        for way in self._ways:
            way.close()

    def _way(self) -> _Channel | None:
        return next((way for way in self._ways if way.available()), None)
