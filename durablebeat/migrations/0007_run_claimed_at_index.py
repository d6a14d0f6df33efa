"""``durablebeat report`` and the timeline's fires per deploy read a window of runs by the
time they were claimed (R18): by an index, not a scan of every run. Additive.

On PostgreSQL the index is built ``CONCURRENTLY`` (outside a transaction): a plain build
blocks every insert into the run table until it ends, and on a large ledger that stalls
the claims of a beat still running beside ``migrate`` in a rolling deploy. Elsewhere it is
built as usual.
"""

from typing import Any

from django.db import migrations, models

INDEX = models.Index(fields=["claimed_at"], name="durablebeat_run_claimed_idx")


def _create(apps: Any, schema_editor: Any) -> None:
    run = apps.get_model("durablebeat", "Run")
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(
            f"CREATE INDEX CONCURRENTLY IF NOT EXISTS {INDEX.name} "
            f"ON {run._meta.db_table} (claimed_at)"
        )
    else:
        schema_editor.add_index(run, INDEX)


def _drop(apps: Any, schema_editor: Any) -> None:
    run = apps.get_model("durablebeat", "Run")
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(f"DROP INDEX CONCURRENTLY IF EXISTS {INDEX.name}")
    else:
        schema_editor.remove_index(run, INDEX)


class Migration(migrations.Migration):
    atomic = False  # CREATE INDEX CONCURRENTLY cannot run inside a transaction

    dependencies = [
        ("durablebeat", "0006_schedule_message_options"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[migrations.AddIndex(model_name="run", index=INDEX)],
            database_operations=[migrations.RunPython(_create, _drop)],
        ),
    ]
