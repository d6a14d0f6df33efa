"""MariaDB/MySQL have no partial indexes (Django's models.W037): Django creates the model's
``durablebeat_due_idx`` there without its condition, and the due query reads through it, so
a tick reads the due rows, not the whole table (R1). PostgreSQL's plan: test_core.py."""

import datetime as dt

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from durablebeat.models import Schedule

pytestmark = pytest.mark.django_db(transaction=True)  # the engine opens its own transactions

TABLE = Schedule._meta.db_table
DUE_INDEX = "durablebeat_due_idx"


def due_queries(sqls: list[str]) -> list[str]:
    """The due query's SELECTs among a tick's statements (with their parameters filled in)."""
    return [
        sql
        for sql in sqls
        if sql.lstrip().upper().startswith("SELECT")
        and f"FROM `{TABLE}`" in sql
        and "`next_fire_at`" in sql.partition("WHERE")[2]
    ]


def test_the_due_index_exists_on_every_database():
    with connection.cursor() as cursor:
        constraints = connection.introspection.get_constraints(cursor, TABLE)
    assert constraints[DUE_INDEX]["columns"] == ["next_fire_at"]


def test_the_model_checks_are_clean_on_every_database():
    """``manage.py check --database default`` on MariaDB said models.W037 (a condition it
    ignores) for the due and code indexes (R29): PartialIndex says nothing there."""
    from django.apps import apps

    found = [
        message
        for model in apps.get_app_config("durablebeat").get_models()
        for message in model.check(databases=["default"])
    ]
    assert found == []


def test_partial_index_builds_its_where_only_where_the_database_has_partial_indexes():
    index = next(i for i in Schedule._meta.indexes if i.name == DUE_INDEX)
    with connection.schema_editor() as editor:
        sql = str(index.create_sql(Schedule, editor))
    assert ("WHERE" in sql) is connection.features.supports_partial_indexes


def test_a_tick_reads_the_due_rows_through_the_due_index_on_mysql(make_engine, t0):
    if connection.vendor != "mysql":
        pytest.skip("MariaDB/MySQL's EXPLAIN")
    Schedule.objects.bulk_create(
        Schedule(
            name=f"s{i}",
            task="tests.e2eapp.tasks.record",
            kind="interval",
            every=dt.timedelta(seconds=60),
            enabled=i % 10 != 0,
            next_fire_at=t0 + dt.timedelta(days=1 + i),
        )
        for i in range(2000)
    )
    engine = make_engine()
    engine.tick(t0)  # boot
    with CaptureQueriesContext(connection) as tick:
        engine.tick(t0 + dt.timedelta(seconds=1))
    queries = due_queries([q["sql"] for q in tick.captured_queries])
    assert len(queries) == 2, [q["sql"] for q in tick.captured_queries]  # new rows, due rows
    for sql in queries:
        with connection.cursor() as cursor:
            cursor.execute(f"EXPLAIN {sql}")
            columns = [c[0] for c in cursor.description]
            plan = [dict(zip(columns, row, strict=True)) for row in cursor.fetchall()]
        assert [step["key"] for step in plan] == [DUE_INDEX], (sql, plan)
        assert plan[0]["type"] in ("ref", "range"), plan  # not "ALL": no table scan
