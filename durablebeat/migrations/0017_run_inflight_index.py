"""overlap=skip's "a run in flight?" (R14) reads a partial index of the runs in flight
(issue 31 item 2), not ``(schedule_id, state)`` of every run: the whole index had a leaf
per schedule that every claim and every confirmation wrote into, read from disk once a
year of runs outgrew the database's memory (the burst of 10,000 ~20 % slower with 10
million old runs, benchmarks/README.md). The partial one holds the few runs in flight.
On MariaDB/MySQL (no partial indexes) and SQLite (whose planner uses a partial index only
for a query's WHERE spelled as the index's, and Django binds the states as parameters) it
is the same ``(schedule_id, state)`` index under its new name (``PartialIndex``'s
``vendors``).

R32: the previous release names no index, so replacing one leaves it working. On
PostgreSQL the new one is built, and the old one dropped, ``CONCURRENTLY`` (as 0016).
"""

from typing import Any

from django.db import migrations, models

import durablebeat.models

OLD = models.Index(fields=["schedule", "state"], name="durablebeat_run_sched_idx")
NEW = durablebeat.models.PartialIndex(
    fields=["schedule", "state"],
    name="durablebeat_run_inflight_idx",
    where=models.Q(("state__in", ("claimed", "published", "started"))),
    vendors=("postgresql",),
)


def _swap(schema_editor: Any, run: Any, add: models.Index, remove: models.Index) -> None:
    if schema_editor.connection.vendor == "postgresql":
        sql = str(add.create_sql(run, schema_editor, concurrently=True))
        schema_editor.execute(sql.replace("CONCURRENTLY", "CONCURRENTLY IF NOT EXISTS", 1))
        schema_editor.execute(f"DROP INDEX CONCURRENTLY IF EXISTS {remove.name}")
    else:
        schema_editor.add_index(run, add)
        schema_editor.remove_index(run, remove)


def _forwards(apps: Any, schema_editor: Any) -> None:
    _swap(schema_editor, apps.get_model("durablebeat", "Run"), NEW, OLD)


def _backwards(apps: Any, schema_editor: Any) -> None:
    _swap(schema_editor, apps.get_model("durablebeat", "Run"), OLD, NEW)


class Migration(migrations.Migration):
    atomic = False  # CREATE / DROP INDEX CONCURRENTLY cannot run inside a transaction

    dependencies = [("durablebeat", "0016_run_indexes")]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.RemoveIndex(model_name="run", name="durablebeat_run_sched_idx"),
                migrations.AddIndex(model_name="run", index=NEW),
            ],
            database_operations=[migrations.RunPython(_forwards, _backwards)],
        )
    ]
