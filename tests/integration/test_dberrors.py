"""R23 in the engine: an error that recurs on every try is not an outage (R5).

At boot it stops beat with a clear message; after the boot it is logged as such and
``check`` reports it as critical (``database_error``). A connection-level error still puts
beat into its from-memory mode, and an unsupported backend is refused by a system check.
The errors are the database's own (a statement it refuses), or, for a connection cut, the
driver's exception as Django raises it.
"""

from __future__ import annotations

import datetime as dt

import MySQLdb
import pytest
from django.core import checks
from django.db import DatabaseError, NotSupportedError, connection
from django.db.utils import DatabaseErrorWrapper

from durablebeat import checks as db_checks
from durablebeat.beat import boots, dberrors, due
from durablebeat.beat.dberrors import DatabaseUnusable
from durablebeat.models import Incident
from durablebeat.ops import health

pytestmark = pytest.mark.django_db(transaction=True)

S = dt.timedelta(seconds=1)
CODE = {"tick": {"task": "tests.e2eapp.tasks.record", "schedule": 5}}


def _missing_table(*args, **kwargs):
    """What a beat meets on a database whose migrations were never run: the database's own
    error for a table that is not there."""
    with connection.cursor() as cur:
        cur.execute("SELECT * FROM durablebeat_no_such_table")


def _connection_cut(*args, **kwargs):
    from types import SimpleNamespace

    wrapper = DatabaseErrorWrapper(SimpleNamespace(Database=MySQLdb, errors_occurred=False))
    with wrapper:
        raise MySQLdb.OperationalError(2013, "Lost connection to server during query")


def _refused_feature(*args, **kwargs):
    raise NotSupportedError("FOR UPDATE OF is not supported on this database backend.")


def test_a_missing_table_at_boot_stops_beat_naming_the_error(make_engine, monkeypatch, t0):
    monkeypatch.setattr(boots, "register_boot", _missing_table)
    engine = make_engine(CODE)
    with pytest.raises(DatabaseUnusable) as stopped:
        engine.tick(t0)
    assert "durablebeat_no_such_table" in str(stopped.value)
    assert "not an outage" in str(stopped.value)
    assert isinstance(stopped.value.__cause__, DatabaseError)


def test_a_due_query_the_server_refuses_stops_the_boot(make_engine, monkeypatch, t0):
    """R23: MariaDB refuses ``FOR UPDATE OF``; a refusal that recurs is not an outage to sit
    out in memory mode for ever."""
    monkeypatch.setattr(due, "fetch_due", _refused_feature)
    monkeypatch.setattr(due, "first_due", _refused_feature)  # the tick asks it first
    with pytest.raises(DatabaseUnusable, match="FOR UPDATE OF is not supported"):
        make_engine(CODE).tick(t0)


def test_a_connection_cut_at_boot_is_an_outage_beat_fires_from_memory(
    make_engine, monkeypatch, publisher, t0
):
    monkeypatch.setattr(boots, "register_boot", _connection_cut)
    engine = make_engine(CODE)
    engine.tick(t0)
    assert not engine.db_ok
    engine.tick(t0 + 70 * S)  # code schedules fire from memory (R5)
    assert [c.schedule for c in publisher.claims] == ["tick"]


def test_after_boot_a_recurring_error_is_logged_and_check_reports_it_critical(
    make_engine, monkeypatch, caplog, t0
):
    engine = make_engine(CODE)
    engine.tick(t0)
    assert engine.db_ok
    assert "database_error" not in {f.code for f in health.check(t0)}
    monkeypatch.setattr(due, "fetch_due", _missing_table)
    monkeypatch.setattr(due, "first_due", _missing_table)  # the tick asks it first
    engine.tick(t0 + S)
    assert not engine.db_ok
    assert "database_error" in {r.event for r in caplog.records if hasattr(r, "event")}
    found = [f for f in health.check(t0 + 2 * S) if f.code == "database_error"]
    assert len(found) == 1
    assert found[0].severity == health.Severity.CRITICAL
    assert "durablebeat_no_such_table" in found[0].message
    assert health.exit_code(found) == 2
    # Met again at every retry: one record whose count moves on, at most once a minute.
    for seconds in (5, 10, 70):
        engine.tick(t0 + seconds * S)
    (incident,) = Incident.objects.filter(kind=dberrors.KIND)
    assert incident.count == 2
    # Once the beat stops meeting it, check forgets it.
    later = t0 + 70 * S + dberrors.REPORTED_FOR + S
    assert "database_error" not in {f.code for f in health.check(later)}


def test_after_boot_a_connection_cut_is_no_database_error(make_engine, monkeypatch, t0):
    engine = make_engine(CODE)
    engine.tick(t0)
    monkeypatch.setattr(due, "fetch_due", _connection_cut)
    monkeypatch.setattr(due, "first_due", _connection_cut)  # the tick asks it first
    engine.tick(t0 + S)
    assert not engine.db_ok
    assert not Incident.objects.filter(kind=dberrors.KIND).exists()


def test_a_connection_cut_while_a_batch_is_decided_still_sends_the_slots_decided_so_far(
    make_engine, make_schedule, publisher, monkeypatch, t0
):
    """R5: the database drops after a row of the batch was decided to fire: that slot goes
    out unclaimed and is kept for the ledger (written once the database is back), as when
    the claim itself fails; beat goes on from memory."""
    from durablebeat.beat import triage

    make_schedule("first", every=60, next_fire_at=t0 - S)
    make_schedule("second", every=60, next_fire_at=t0)
    real = triage.due_from_row

    def cut_at_second(row, *args):
        if row.name == "second":
            _connection_cut()
        return real(row, *args)

    monkeypatch.setattr(triage, "due_from_row", cut_at_second)
    engine = make_engine()
    engine.tick(t0)
    assert [c.schedule for c in publisher.claims] == ["first"]
    assert not engine.db_ok
    assert [f.schedule for f in engine.memory.fires] == ["first"]


def test_a_recurring_error_stops_the_beat_process_not_just_one_tick(monkeypatch):
    """Celery's beat exits when ``tick`` raises: the scheduler lets the boot error through."""
    from durablebeat.schedulers import DurableScheduler
    from project.celery import app

    monkeypatch.setattr(boots, "register_boot", _missing_table)
    scheduler = DurableScheduler(app)
    try:
        with pytest.raises(DatabaseUnusable):
            scheduler.tick()
    finally:
        scheduler.close()


def test_an_unsupported_database_backend_is_e004(monkeypatch):
    assert db_checks.check_database_backend() == []
    monkeypatch.setattr(connection, "vendor", "oracle")
    found = [m for m in checks.run_checks() if m.id == "durablebeat.E004"]
    assert len(found) == 1
    assert "does not support the database backend" in found[0].msg
    with pytest.raises(DatabaseUnusable, match="oracle"):
        dberrors.refuse_unsupported()
