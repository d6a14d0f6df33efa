"""Beat's hold on the database: the boot and each reconnect, the heartbeat with the clock's
offset, and what a lost connection means (R5, R17, R23, R26).

The engine asks ``ok`` before each tick, ``connect`` when it is not and a retry is due, and
says ``lost`` when a query failed; it fires from memory meanwhile (``outage``).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import logging
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field

from django.db import DatabaseError, close_old_connections

from .. import conf, db, schema
from ..core import clock
from ..words import duration_words
from . import boots, dberrors, notify
from . import due as due_query
from .codesync import CodeEntry
from .codesync import sync as sync_code
from .outage import OutageMemory

logger = logging.getLogger("durablebeat")


@dataclass
class Session:
    """One beat boot's connection to the database: whether it answers, when to try it
    again, and the boot row it keeps alive."""

    boot_id: uuid.UUID
    hostname: str
    pid: int
    code_entries: list[CodeEntry]
    #: written into the ledger at each (re)connect, planned from code when there is none
    memory: OutageMemory
    #: R26: measures the offset to the database's clock, returns it for the boot row (None:
    #: tests that drive ``tick`` with their own instants: nothing measured)
    sync_clock: Callable[[], float | None] | None = None

    ok: bool = False
    booted: bool = False
    last_try: dt.datetime | None = None
    last_heartbeat: dt.datetime | None = None
    failures: int = 0
    #: database errors that will recur, logged and recorded for ``check`` (R23)
    errors: dberrors.Reporter = field(default_factory=dberrors.Reporter)
    #: R32: durablebeat's migrations the database lacks, as last said (beat waits for them)
    missing: list[str] = field(default_factory=list)

    def retry_due(self, now: dt.datetime) -> bool:
        last = self.last_try
        return last is None or now - last >= conf.settings.DB_RETRY_INTERVAL

    def connect(self, now: dt.datetime) -> dt.datetime:
        """Boot or reconnect; ``now`` as measured on the database's clock (R26)."""
        self.last_try = now
        try:
            close_old_connections()
            db.connection().ensure_connection()
            dberrors.refuse_unsupported()  # R23: a backend durablebeat cannot use stops the boot
            if missing := schema.pending():  # R32: before any query names a new column
                self._wait_for_migrations(missing)
                return now
            notify.mark_beat_session()  # this beat's own writes wake no beat
            now, offset = self._measure_clock(now)  # R26: before the first instant is written
            boots.register_boot(self.boot_id, self.hostname, self.pid, now, offset)
            sync_code(self.code_entries, now)
            self.memory.write(self.boot_id, now)
            due_query.probe_due(now)
        except DatabaseError as exc:
            db.connection().close()
            if dberrors.will_recur(exc):  # R23: not an outage
                if not self.booted:
                    raise dberrors.DatabaseUnusable(exc) from exc
                self.errors.report(exc, self.boot_id, now)
            if self.memory.plan == {} and not self.booted:
                self.memory.plan_from_code(self.code_entries, now)
            self.ok = False
            self.failures += 1
            if self.failures == 1 or self.failures % 30 == 0:
                logger.error(
                    "database unreachable (%d tries), firing code-defined schedules from "
                    "memory: %s",
                    self.failures,
                    exc,
                    extra={"event": "db_unreachable", "boot": str(self.boot_id)},
                )
            return now
        self.failures, self.missing = 0, []
        self.ok, self.booted, self.last_heartbeat = True, True, now
        self.memory.plan_with_db(self.code_entries)
        logger.info(
            "beat boot %s on %s:%d: database reachable, %d code schedules synced",
            self.boot_id,
            self.hostname,
            self.pid,
            len(self.code_entries),
            extra={"event": "boot", "boot": str(self.boot_id)},
        )
        return now

    def _wait_for_migrations(self, missing: list[str]) -> None:
        """R32: a new beat met a database its deploy has not migrated yet: it fires nothing
        (the previous release's beat fires meanwhile; nothing is planned from memory) and
        asks again at each retry. Said once per wait (a ``migrate`` under way changes what
        is missing at each step: not said again)."""
        self.ok = False
        db.connection().close()
        if not self.missing:
            logger.warning(
                "%s; beat waits for them, firing nothing, and looks again every %s (R32)",
                schema.words(missing),
                duration_words(conf.settings.DB_RETRY_INTERVAL),
                extra={"event": "migrations_pending", "boot": str(self.boot_id)},
            )
        self.missing = missing

    def lost(self, now: dt.datetime, exc: Exception) -> None:
        """A query failed: fire from memory until a retry answers (R5)."""
        self.ok = False
        self.last_try = now
        if dberrors.will_recur(exc):  # R23: logged as such and reported by check, critical
            self.errors.report(exc, self.boot_id, now)
        with contextlib.suppress(DatabaseError):
            db.connection().close()
        logger.error(
            "database error, firing code-defined schedules from memory until it answers: %s",
            exc,
            extra={"event": "db_lost", "boot": str(self.boot_id)},
        )

    def heartbeat(self, now: dt.datetime) -> dt.datetime:
        """R17: the boot's heartbeat when it is due, with the clock's offset measured (R26:
        with the heartbeat, no query per fire); ``now`` as that measurement moved it."""
        last = self.last_heartbeat
        if last is not None and now - last < conf.settings.HEARTBEAT_INTERVAL:
            return now
        now, offset = self._measure_clock(now)
        if not boots.heartbeat(self.boot_id, now, offset):
            boots.register_boot(self.boot_id, self.hostname, self.pid, now, offset)
        self.last_heartbeat = now
        self.memory.refresh()
        return now

    def next_heartbeat_in(self, now: dt.datetime) -> float:
        """Seconds from ``now`` until the next heartbeat is due (R17)."""
        interval = conf.settings.HEARTBEAT_INTERVAL
        if self.last_heartbeat is None:
            return interval.total_seconds()
        return (self.last_heartbeat + interval - now).total_seconds()

    def close(self, now: dt.datetime) -> None:
        if self.ok:
            try:
                boots.stop_boot(self.boot_id, now)
            except DatabaseError:
                logger.warning("could not record beat stop", exc_info=True)

    def _measure_clock(self, now: dt.datetime) -> tuple[dt.datetime, float | None]:
        """Measure the offset to the database's clock; ``now`` moved by what it changed
        (this tick's instant was read with the offset before) and the offset to record.
        A measurement that fails keeps the last offset (R5) and never stops the tick."""
        if self.sync_clock is None:
            return now, None
        before = clock.offset()
        try:
            recorded = self.sync_clock()
        except Exception:
            logger.warning("could not measure the clock offset", exc_info=True)
            return now, None
        return now + (clock.offset() - before), recorded
