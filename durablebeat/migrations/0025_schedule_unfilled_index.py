"""``durablebeat_unfilled_idx``, on PostgreSQL: the enabled rows without a next fire (a raw
SQL insert, a row re-enabled while no beat ran, another code's custom schedule) by primary
key. Beat fills their first fires after its due work, a slice at a time, each slice read from
the previous one's key on (R33): through the due index, whose NULL entries PostgreSQL keeps
in no key order, each slice walked every row before it, dead versions included (200,000
such rows among a million: 30 rows a second, issue 36). It holds only the rows to fill:
empty once they are filled. SQLite and MariaDB/MySQL end each index entry with the key, so
their due index already reads these rows by key: nothing is built there.

R32: the previous release names no index, so adding one leaves it working. On PostgreSQL it
is built ``CONCURRENTLY`` (as 0021): a plain build blocks a running beat's writes while it
reads the whole table.
"""

from typing import Any

from django.db import migrations, models

import durablebeat.models

UNFILLED = durablebeat.models.PartialIndex(
    fields=["id"],
    name="durablebeat_unfilled_idx",
    where=models.Q(("enabled", True), ("next_fire_at__isnull", True)),
    only_on=("postgresql",),
)


def _forwards(apps: Any, schema_editor: Any) -> None:
    if not UNFILLED.built_on(schema_editor.connection.vendor):
        return  # SQLite, MariaDB/MySQL: nothing (see above)
    schedule = apps.get_model("durablebeat", "Schedule")
    sql = str(UNFILLED.create_sql(schedule, schema_editor, concurrently=True))
    schema_editor.execute(sql.replace("CONCURRENTLY", "CONCURRENTLY IF NOT EXISTS", 1))


def _backwards(apps: Any, schema_editor: Any) -> None:
    if UNFILLED.built_on(schema_editor.connection.vendor):
        schema_editor.execute(f"DROP INDEX CONCURRENTLY IF EXISTS {UNFILLED.name}")


class Migration(migrations.Migration):
    atomic = False  # CREATE / DROP INDEX CONCURRENTLY cannot run inside a transaction

    dependencies = [("durablebeat", "0024_pause_on_failure")]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[migrations.AddIndex(model_name="schedule", index=UNFILLED)],
            database_operations=[migrations.RunPython(_forwards, _backwards)],
        )
    ]
