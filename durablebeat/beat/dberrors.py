"""Which database errors are an outage and which will happen again on every try (R5, R23).

Only an error at the connection level (refused, reset, server gone or shutting down) means
"the database is unreachable": beat fires its code-defined schedules from memory and tries
again (R5). A conflict that passes (a deadlock, a lock or statement timeout, too many
connections, SQLite's busy file) is treated the same way: the next try may well succeed.
Anything else (a feature the server refuses, a missing table, a permission, a bad
statement) happens again on every try: it stops beat's boot with a clear message, and after
the boot it is logged as such and reported by ``check`` as critical (``database_error``),
never a silent, permanent memory mode.

Django re-raises a driver's exception as its own class with the same ``args`` and the
driver's exception as ``__cause__``; the driver's codes are read from there.
"""

from __future__ import annotations

import datetime as dt
import logging
import uuid
from typing import Any

from django.db import DatabaseError, InterfaceError, OperationalError
from django.db.models import F

from .. import db
from ..models import Boot, Incident

logger = logging.getLogger("durablebeat")

#: PostgreSQL SQLSTATEs (or their two-character classes) of a connection that failed or a
#: server that is going away: 08 connection exception; admin / crash shutdown, cannot
#: connect now
PG_UNREACHABLE = ("08", "57P01", "57P02", "57P03")
#: ... and of a conflict or a shortage that passes: 40 transaction rollback (deadlock,
#: serialization), 53 insufficient resources (too many connections, disk full, out of
#: memory), lock not available, statement timeout (query canceled)
PG_PASSING = ("40", "53", "55P03", "57014")

#: MySQL/MariaDB client and server codes of a connection that failed or was cut:
#: can't connect (socket, host, unknown host), server gone away, lost connection (2013,
#: 2055), server shutting down, aborted connection, connection killed (MariaDB), client
#: disconnected for inactivity (MySQL 8)
MYSQL_UNREACHABLE = frozenset({2002, 2003, 2005, 2006, 2013, 2055, 1053, 1152, 1927, 4031})
#: ... and of a conflict or a shortage that passes: too many connections, lock wait
#: timeout, deadlock, query interrupted, statement time limit (MySQL 3024, MariaDB 1969)
MYSQL_PASSING = frozenset({1040, 1205, 1213, 1317, 3024, 1969})

#: SQLite primary result codes: CANTOPEN (the file or its volume is not there now), and the
#: ones that pass: BUSY, LOCKED, IOERR, FULL
SQLITE_UNREACHABLE = frozenset({14})
SQLITE_PASSING = frozenset({5, 6, 10, 13})


class DatabaseUnusable(RuntimeError):
    """Beat's boot met a database error that will recur on every try, or a database backend
    durablebeat does not support (R23): the boot stops with this message."""

    def __init__(self, exc: BaseException | str) -> None:
        what = (
            exc
            if isinstance(exc, str)
            else f"the database refuses what durablebeat needs: {describe(exc)}"
        )
        super().__init__(
            f"{what}. This is not an outage and will not pass by waiting: fix the database, "
            "its permissions or its migrations (manage.py migrate), or the DATABASES "
            "setting, then start beat again (R23)"
        )


def refuse_unsupported() -> None:
    """Stop beat's boot on a database backend durablebeat does not support (R23)."""
    problem = unsupported_backend()
    if problem is not None:
        raise DatabaseUnusable(problem)


def describe(exc: BaseException) -> str:
    """``ProgrammingError: relation "x" does not exist``, on one line."""
    text = " ".join(str(exc).split()) or repr(exc)
    return f"{type(exc).__name__}: {text}"[:1000]


def _codes(exc: BaseException) -> tuple[str | None, int | None, int | None]:
    """(PostgreSQL SQLSTATE, MySQL code, SQLite code) of the driver's exception, if any."""
    cause: Any = exc.__cause__ or exc
    sqlstate = getattr(cause, "sqlstate", None) or getattr(cause, "pgcode", None)
    mysql = sqlite = None
    module = type(cause).__module__ or ""
    if module.startswith(("MySQLdb", "pymysql")) and cause.args:
        first = cause.args[0]
        mysql = first if isinstance(first, int) else None
    code = getattr(cause, "sqlite_errorcode", None)
    if isinstance(code, int):
        sqlite = code & 0xFF  # the primary code of an extended one
    return sqlstate, mysql, sqlite


def _is_pg_driver(exc: BaseException) -> bool:
    module = type(exc.__cause__ or exc).__module__ or ""
    return module.startswith(("psycopg", "psycopg2"))


def is_unreachable(exc: BaseException) -> bool:
    """The connection failed or was cut: the database cannot be reached now (R5)."""
    if isinstance(exc, InterfaceError):  # a connection already closed or broken
        return True
    if not isinstance(exc, DatabaseError):
        return False
    sqlstate, mysql, sqlite = _codes(exc)
    if sqlstate is not None:
        return sqlstate.startswith(PG_UNREACHABLE)
    if _is_pg_driver(exc):
        # psycopg's own connection failures (refused, reset, timed out) carry no SQLSTATE
        bases = {c.__name__ for c in type(exc.__cause__ or exc).__mro__}
        return bool(bases & {"OperationalError", "InterfaceError"})
    if mysql is not None:
        return mysql in MYSQL_UNREACHABLE
    if sqlite is not None:
        return sqlite in SQLITE_UNREACHABLE
    # An OperationalError whose driver gave no code to read: taken for the connection, as
    # before R23 (an outage wrongly taken for a recurring error would stop a boot).
    return isinstance(exc, OperationalError)


def is_passing(exc: BaseException) -> bool:
    """Unreachable, or a conflict or shortage that the next try may not meet: R5's path."""
    if is_unreachable(exc):
        return True
    sqlstate, mysql, sqlite = _codes(exc)
    if sqlstate is not None:
        return sqlstate.startswith(PG_PASSING)
    if mysql is not None:
        return mysql in MYSQL_PASSING
    if sqlite is not None:
        return sqlite in SQLITE_PASSING
    return False


def will_recur(exc: BaseException) -> bool:
    """A database error that every try will meet again (R23): not an outage."""
    return isinstance(exc, DatabaseError) and not is_passing(exc)


#: a recurring error is written for ``check`` at most this often per boot ...
REPORT_EVERY = dt.timedelta(seconds=60)
#: ... and ``check`` reports it while its last report is this recent
REPORTED_FOR = dt.timedelta(minutes=5)
KIND = "database_error"


class Reporter:
    """Logs a recurring database error and records it for ``check`` (an ``Incident`` of
    kind ``database_error``, one row per boot and error, its count and time moved on), at
    most every ``REPORT_EVERY``. The record is best effort: the error may forbid it too."""

    def __init__(self) -> None:
        self._last: dict[str, dt.datetime] = {}

    def report(self, exc: BaseException, boot_id: uuid.UUID, now: dt.datetime) -> None:
        text = describe(exc)
        last = self._last.get(text)
        if last is not None and now - last < REPORT_EVERY:
            return
        if len(self._last) > 100:  # bounded (R21): the oldest errors are forgotten
            self._last.clear()
        self._last[text] = now
        logger.error(
            "database error that will recur on every try, not an outage: %s; firing "
            "code-defined schedules from memory, reported by check as database_error (R23)",
            text,
            extra={"event": "database_error", "boot": str(boot_id)},
        )
        try:
            record(text, boot_id, now)
        except DatabaseError as again:
            logger.error(
                "could not record the database error for check: %s",
                describe(again),
                extra={"event": "database_error_unrecorded", "boot": str(boot_id)},
            )


def record(text: str, boot_id: uuid.UUID, now: dt.datetime) -> None:
    with db.atomic():
        boot = boot_id if Boot.objects.filter(pk=boot_id).exists() else None
        same = Incident.objects.filter(kind=KIND, detail=text)
        same = same.filter(boot_id=boot) if boot else same.filter(boot__isnull=True)
        if not same.update(count=F("count") + 1, at=now):
            Incident.objects.create(kind=KIND, detail=text, boot_id=boot, at=now)


def recent(now: dt.datetime) -> list[tuple[str, int, dt.datetime, str]]:
    """The recurring errors beats reported within ``REPORTED_FOR`` before ``now``:
    (error, times reported, last reported, the beat's host:pid or '')."""
    rows = (
        Incident.objects.filter(kind=KIND, at__gte=now - REPORTED_FOR, at__lte=now)
        .select_related("boot")
        .order_by("-at")[:20]
    )
    return [
        (r.detail, r.count, r.at, f"{r.boot.hostname}:{r.boot.pid}" if r.boot else "") for r in rows
    ]


#: the database vendors durablebeat is built and tested for (Django's ``connection.vendor``:
#: ``mysql`` is MariaDB and MySQL)
SUPPORTED_VENDORS = ("postgresql", "mysql", "sqlite")


def unsupported_backend(alias: str | None = None) -> str | None:
    """Why the database ``alias`` (durablebeat's, by default) is not one durablebeat
    supports, or None (R23).

    Read from the backend, without connecting: a system check runs with the database down."""
    from django.db import connections

    wrapper = connections[alias or db.alias()]
    vendor = wrapper.vendor
    if vendor in SUPPORTED_VENDORS:
        return None
    engine = wrapper.settings_dict.get("ENGINE", "?")
    return (
        f"durablebeat does not support the database backend {engine!r} (vendor {vendor!r}): "
        "it runs on PostgreSQL, MariaDB 10.6+ / MySQL 8, or SQLite, whose row locking and "
        "compare-and-set it is tested on"
    )
