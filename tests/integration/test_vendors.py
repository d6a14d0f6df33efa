"""Each database's own way to the same guarantees (§1, R3, R4, R23).

PostgreSQL has ``FOR UPDATE OF ... SKIP LOCKED`` and ``UPDATE ... FROM ... RETURNING``;
MariaDB has SKIP LOCKED (10.6+) but no ``OF`` and no ``UPDATE ... RETURNING``; MySQL 8 has
``OF`` but returns no ids from a multi-row ``INSERT``; SQLite locks no rows at all. These
tests run the path of the database under test, and MySQL's insert path on any of them.
"""

from __future__ import annotations

import datetime as dt
import threading
import uuid

import pytest
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext

from durablebeat.beat.batch_claim import claim_many
from durablebeat.beat.boots import register_boot
from durablebeat.beat.claims import claim
from durablebeat.beat.due import due_from_row, fetch_due
from durablebeat.beat.messages import Message, ToFire
from durablebeat.core.policy import Fire, decide
from durablebeat.models import Run, Schedule

pytestmark = pytest.mark.django_db(transaction=True)

S = dt.timedelta(seconds=1)


def _many(n: int, due_at: dt.datetime) -> list[int]:
    Schedule.objects.bulk_create(
        Schedule(
            name=f"v-{i:04d}",
            task="tests.e2eapp.tasks.record",
            kind="interval",
            every=dt.timedelta(hours=1),
            overlap="allow",
            next_fire_at=due_at + i * dt.timedelta(milliseconds=1),
        )
        for i in range(n)
    )
    return list(Schedule.objects.order_by("pk").values_list("pk", flat=True))


def _fires(now: dt.datetime) -> list[ToFire]:
    fires = []
    for row in fetch_due(now, 1000):
        due = due_from_row(row)
        action = decide(due, now, dt.timedelta(seconds=10), False)
        assert isinstance(action, Fire)
        fires.append(ToFire(due=due, fire=action, message=Message.for_row(row)))
    return fires


def _lock_wait_at_most(seconds: int) -> None:
    """A test that would wait on another transaction's row lock fails fast instead."""
    with connection.cursor() as cur:
        if connection.vendor == "postgresql":
            cur.execute(f"SET lock_timeout = '{seconds}s'")
        else:
            cur.execute(f"SET SESSION innodb_lock_wait_timeout = {seconds}")


def test_the_due_query_asks_only_for_the_locking_the_server_has(t0):
    """MariaDB refuses ``FOR UPDATE OF`` (Django raises NotSupportedError): the
    due query locks with SKIP LOCKED alone there, with OF where the server has it."""
    if not connection.features.has_select_for_update:
        pytest.skip("SQLite locks no rows")
    _many(3, t0)
    with transaction.atomic(), CaptureQueriesContext(connection) as queries:
        assert len(fetch_due(t0 + S, 10, lock=True)) == 3
    sql = " ".join(q["sql"] for q in queries)
    assert "SKIP LOCKED" in sql
    assert ("FOR UPDATE OF" in sql) == connection.features.has_select_for_update_of


def test_a_second_beat_takes_the_due_rows_the_first_does_not_hold(t0):
    """§1 with several beats on one burst: while one beat's transaction holds a batch,
    another beat's due query skips it and takes the next rows, without waiting."""
    if not connection.features.has_select_for_update_skip_locked:
        pytest.skip("no row locks to skip")
    _many(200, t0)
    held = threading.Event()
    done = threading.Event()
    first: list[int] = []

    def hold() -> None:
        try:
            with transaction.atomic():
                first.extend(r.pk for r in fetch_due(t0 + S, 4, lock=True))
                held.set()
                done.wait(20)
        finally:
            connection.close()

    holder = threading.Thread(target=hold)
    holder.start()
    try:
        assert held.wait(10)
        _lock_wait_at_most(3)
        with transaction.atomic():
            second = [r.pk for r in fetch_due(t0 + S, 4, lock=True)]
    finally:
        done.set()
        holder.join(20)
    assert len(first) == len(second) == 4
    assert not set(first) & set(second)


def test_a_stale_batch_is_claimed_by_one_beat_only_on_every_vendor(t0):
    """R4 through this database's compare-and-set (``UPDATE ... RETURNING`` or, on MariaDB
    and MySQL, a locking read of the rows still where the beat read them): a batch read by
    two beats is fired by the first claim, and one row moved meanwhile by nobody."""
    ids = _many(20, t0)
    stale = _fires(t0 + S)
    Schedule.objects.filter(pk=ids[3]).update(next_fire_at=t0 + dt.timedelta(hours=2))
    boots = [uuid.uuid4(), uuid.uuid4()]
    for boot in boots:
        register_boot(boot, "host", 1, t0)
    first = claim(stale, boots[0], t0 + S)
    assert claim(stale, boots[1], t0 + 2 * S) == []
    assert len(first) == 19
    assert ids[3] not in {c.schedule_id for c in first}
    assert Schedule.objects.get(pk=ids[3]).next_fire_at == t0 + dt.timedelta(hours=2)
    moved = Schedule.objects.exclude(pk=ids[3])
    assert set(moved.values_list("last_fired_at", flat=True)) == {t0 + S}
    assert all(at > t0 + S for at in moved.values_list("next_fire_at", flat=True))


def test_claims_carry_their_run_ids_where_a_bulk_insert_returns_none(monkeypatch, t0):
    """MySQL 8's multi-row INSERT returns no ids: the claims still carry each run's id,
    so that publishing can confirm it (R3), as on the databases that return them."""
    _many(5, t0)
    boot = uuid.uuid4()
    register_boot(boot, "host", 1, t0)
    features = type(connection.features)  # a property on some backends' class
    monkeypatch.setattr(features, "can_return_rows_from_bulk_insert", False)
    with transaction.atomic():
        won = claim_many(_fires(t0 + S), boot, t0 + S)
    runs = dict(Run.objects.values_list("schedule_id", "pk"))
    assert len(won) == 5
    assert {sid: run_id for sid, (run_id, _) in won.items()} == runs
