"""The runs table's indexes reviewed (issue 31 item 2): each one kept is named by a query
that reads through it (``Run.Meta`` says which). Two go, two come:

- dropped: ``schedule_id`` alone (``durablebeat_one_run_per_slot``, unique on
  ``(schedule_id, slot)``, answers every read by schedule, the foreign key's too), and on
  PostgreSQL the ``varchar_pattern_ops`` copy of ``task_id`` Django adds for ``LIKE``
  (``task_id`` is read by equality; the admin's search is ``UPPER(...) LIKE '%...%'``,
  which no B-tree serves). Every claim and every confirmation wrote both.
- added: ``slot`` (the admin's runs list, newest first, read 100 rows from the end of it
  instead of sorting the table) and ``finished_at`` of the few runs flagged untracked or
  unpublishable (``check`` read every run for them).

R32: the previous release names no index, so dropping one leaves it working (its queries
are planned on the others). On PostgreSQL each index is built and dropped
``CONCURRENTLY`` (outside a transaction, as 0007): a plain build blocks the claims of a
beat running beside ``migrate`` for as long as it reads the table.
"""

from typing import Any

from django.db import migrations, models

import durablebeat.enums
import durablebeat.models

SLOT = models.Index(fields=["slot"], name="durablebeat_run_slot_idx")
FLAGGED = durablebeat.models.PartialIndex(
    fields=["finished_at"],
    name="durablebeat_run_flagged_idx",
    where=models.Q(("detail", durablebeat.enums.UNTRACKED))
    | models.Q(("failure", "unpublishable")),
)
#: what the dropped ones were, to build them again when the migration is reversed
SCHEDULE_ID = "durablebeat_run_schedule_id_166fb2e3"
TASK_ID_LIKE = "durablebeat_run_task_id_7fd46edd_like"


def _redundant(schema_editor: Any, table: str) -> list[str]:
    """The indexes on ``schedule_id`` alone (MariaDB's the one InnoDB made for the foreign
    key) and PostgreSQL's ``LIKE`` copy of ``task_id``, whatever their names."""
    connection = schema_editor.connection
    with connection.cursor() as cursor:
        found = connection.introspection.get_constraints(cursor, table)
    names = [
        name
        for name, c in found.items()
        if c["index"] and not c["unique"] and c["columns"] == ["schedule_id"]
    ]
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT indexname FROM pg_indexes WHERE tablename = %s AND indexdef LIKE %s",
                [table, "%(task_id varchar_pattern_ops)%"],
            )
            names += [name for (name,) in cursor.fetchall()]
    return names


def _forwards(apps: Any, schema_editor: Any) -> None:
    run = apps.get_model("durablebeat", "Run")
    table = run._meta.db_table
    postgres = schema_editor.connection.vendor == "postgresql"
    for index in (SLOT, FLAGGED):
        if postgres:
            sql = str(index.create_sql(run, schema_editor, concurrently=True))
            schema_editor.execute(sql.replace("CONCURRENTLY", "CONCURRENTLY IF NOT EXISTS", 1))
        else:
            schema_editor.add_index(run, index)
    for name in _redundant(schema_editor, table):
        if postgres:
            schema_editor.execute(f"DROP INDEX CONCURRENTLY IF EXISTS {name}")
        elif schema_editor.connection.vendor == "mysql":
            schema_editor.execute(f"DROP INDEX {name} ON {table}")
        else:
            schema_editor.execute(f"DROP INDEX IF EXISTS {name}")


def _backwards(apps: Any, schema_editor: Any) -> None:
    run = apps.get_model("durablebeat", "Run")
    table = run._meta.db_table
    postgres = schema_editor.connection.vendor == "postgresql"
    concurrently = " CONCURRENTLY" if postgres else ""
    schema_editor.execute(f"CREATE INDEX{concurrently} {SCHEDULE_ID} ON {table} (schedule_id)")
    if postgres:
        schema_editor.execute(
            f"CREATE INDEX CONCURRENTLY {TASK_ID_LIKE} ON {table} (task_id varchar_pattern_ops)"
        )
    for index in (SLOT, FLAGGED):
        if postgres:
            schema_editor.execute(f"DROP INDEX CONCURRENTLY IF EXISTS {index.name}")
        else:
            schema_editor.remove_index(run, index)


class Migration(migrations.Migration):
    atomic = False  # CREATE / DROP INDEX CONCURRENTLY cannot run inside a transaction

    dependencies = [("durablebeat", "0015_schedule_partial_indexes")]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.AlterField(
                    model_name="run",
                    name="schedule",
                    field=models.ForeignKey(
                        db_index=False,
                        on_delete=models.deletion.CASCADE,
                        related_name="runs",
                        to="durablebeat.schedule",
                    ),
                ),
                migrations.AddIndex(model_name="run", index=SLOT),
                migrations.AddIndex(model_name="run", index=FLAGGED),
            ],
            database_operations=[migrations.RunPython(_forwards, _backwards)],
        )
    ]
