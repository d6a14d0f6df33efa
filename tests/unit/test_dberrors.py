"""R5 vs R23: only a connection-level error is an outage; what recurs on every try is not.

Each case is the driver's own exception class, re-raised through Django's error wrapper as
Django does it (same class name in ``django.db``, the driver's exception as the cause).
SQLite's are raised by the real library.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path
from types import SimpleNamespace

import MySQLdb
import psycopg
import pytest
from django.db import DatabaseError, InterfaceError, NotSupportedError, OperationalError
from django.db.utils import DatabaseErrorWrapper

from durablebeat.beat import dberrors
from durablebeat.beat.dberrors import is_passing, is_unreachable, will_recur


def _through_django(cause: Exception, driver) -> DatabaseError:
    wrapper = DatabaseErrorWrapper(SimpleNamespace(Database=driver, errors_occurred=False))
    try:
        with wrapper:
            raise cause
    except DatabaseError as exc:
        assert exc.__cause__ is cause
        return exc
    raise AssertionError("not wrapped")


def pg(exc: Exception) -> DatabaseError:
    return _through_django(exc, psycopg)


def my(code: int, message: str = "") -> DatabaseError:
    return _through_django(MySQLdb.OperationalError(code, message), MySQLdb)


def _sqlite_error(tmp_path: Path, what: str) -> DatabaseError:
    """A real sqlite3 error; every connection opened for it is closed (Python 3.13 warns
    about one left to the garbage collector, and warnings are errors here)."""
    opened: list[sqlite3.Connection] = []

    def connect(*args: object, **kwargs: object) -> sqlite3.Connection:
        opened.append(sqlite3.connect(*args, **kwargs))  # type: ignore[arg-type]
        return opened[-1]

    try:
        if what == "cantopen":
            connect(tmp_path / "no-such-dir" / "db.sqlite3")
        elif what == "busy":
            path = tmp_path / "db.sqlite3"
            connect(path, isolation_level=None).execute("BEGIN EXCLUSIVE")
            connect(path, timeout=0).execute("SELECT 1 FROM sqlite_master")
        else:
            connect(":memory:").execute("SELECT * FROM no_such_table")
    except sqlite3.Error as exc:
        return _through_django(exc, sqlite3)
    finally:
        for connection in opened:
            connection.close()
    raise AssertionError("no error")


UNREACHABLE = {
    "psycopg connection refused (no SQLSTATE)": lambda: pg(
        psycopg.OperationalError("connection failed: Connection refused")
    ),
    "psycopg connection timeout": lambda: pg(psycopg.errors.ConnectionTimeout("timed out")),
    "PostgreSQL admin shutdown 57P01": lambda: pg(psycopg.errors.AdminShutdown("terminating")),
    "PostgreSQL connection failure 08006": lambda: pg(psycopg.errors.ConnectionFailure("x")),
    "MySQL can't connect 2003": lambda: my(2003, "Can't connect to server on '127.0.0.1'"),
    "MySQL server has gone away 2006": lambda: my(2006, "Server has gone away"),
    "MySQL lost connection 2013": lambda: my(2013, "Lost connection during query"),
    "MariaDB connection killed 1927": lambda: my(1927, "Connection was killed"),
    "Django InterfaceError (connection already closed)": lambda: InterfaceError("closed"),
    "Django OperationalError without a driver code": lambda: OperationalError("refused"),
}
PASSING = {
    "PostgreSQL deadlock 40P01": lambda: pg(psycopg.errors.DeadlockDetected("deadlock")),
    "PostgreSQL lock timeout 55P03": lambda: pg(psycopg.errors.LockNotAvailable("lock")),
    "PostgreSQL too many connections 53300": lambda: pg(psycopg.errors.TooManyConnections("x")),
    "PostgreSQL statement timeout 57014": lambda: pg(psycopg.errors.QueryCanceled("timeout")),
    "MySQL lock wait timeout 1205": lambda: my(1205, "Lock wait timeout exceeded"),
    "MySQL deadlock 1213": lambda: my(1213, "Deadlock found"),
    "MySQL too many connections 1040": lambda: my(1040, "Too many connections"),
}
RECURRING = {
    "Django NotSupportedError (FOR UPDATE OF on MariaDB)": lambda: NotSupportedError(
        "FOR UPDATE OF is not supported on this database backend."
    ),
    "PostgreSQL missing table 42P01": lambda: pg(psycopg.errors.UndefinedTable("relation")),
    "PostgreSQL permission denied 42501": lambda: pg(
        psycopg.errors.InsufficientPrivilege("permission denied for table")
    ),
    "PostgreSQL feature not supported 0A000": lambda: pg(psycopg.errors.FeatureNotSupported("no")),
    "PostgreSQL bad password 28P01": lambda: pg(psycopg.errors.InvalidPassword("password")),
    "MySQL table access denied 1142": lambda: my(1142, "SELECT command denied to user"),
    "MySQL unknown database 1049": lambda: my(1049, "Unknown database 'durablebeat'"),
    "MySQL access denied 1045": lambda: my(1045, "Access denied for user"),
    "MySQL missing table 1146": lambda: _through_django(
        MySQLdb.ProgrammingError(1146, "Table 'x' doesn't exist"), MySQLdb
    ),
}


@pytest.mark.parametrize("make", UNREACHABLE.values(), ids=UNREACHABLE.keys())
def test_connection_level_errors_mean_unreachable(make):
    exc = make()
    assert is_unreachable(exc) and is_passing(exc) and not will_recur(exc)


@pytest.mark.parametrize("make", PASSING.values(), ids=PASSING.keys())
def test_conflicts_that_pass_are_retried_but_are_no_outage(make):
    exc = make()
    assert not is_unreachable(exc)
    assert is_passing(exc) and not will_recur(exc)


@pytest.mark.parametrize("make", RECURRING.values(), ids=RECURRING.keys())
def test_errors_that_recur_on_every_try_are_not_an_outage(make):
    exc = make()
    assert not is_unreachable(exc) and not is_passing(exc)
    assert will_recur(exc)


def test_sqlite_errors_from_the_real_library(tmp_path):
    cantopen = _sqlite_error(tmp_path, "cantopen")
    assert is_unreachable(cantopen) and not will_recur(cantopen)
    busy = _sqlite_error(tmp_path, "busy")
    assert not is_unreachable(busy) and is_passing(busy) and not will_recur(busy)
    missing = _sqlite_error(tmp_path, "missing table")
    assert will_recur(missing)


def test_an_error_outside_the_database_is_neither():
    assert not is_unreachable(ValueError("x")) and not will_recur(ValueError("x"))


def test_the_boot_error_names_the_error_and_what_to_do():
    exc = dberrors.DatabaseUnusable(RECURRING["PostgreSQL missing table 42P01"]())
    assert "ProgrammingError: relation" in str(exc)
    assert "not an outage" in str(exc) and "manage.py migrate" in str(exc)
