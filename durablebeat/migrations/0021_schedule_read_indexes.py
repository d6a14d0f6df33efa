"""Four small indexes on the schedule table, two of them partial, so that ``check`` and the
admin's filters and search read the rows they show, not every schedule (R33, issue 36 item 4):

- ``durablebeat_stuck_idx``: ``stuck_since`` of the stuck rows (check's ``stuck``, the
  admin's stuck filter); the whole column on MariaDB/MySQL (``PartialIndex``).
- ``durablebeat_paused_or_bad_idx``: the rows paused or set aside, ``WHERE NOT enabled OR
  NOT error = ''`` (check's ``bad_row``, status's set-aside part, the admin's bad-row and
  disabled filters); on PostgreSQL only (``only_on``): a plain ``enabled`` index in its
  place made MariaDB's due query lock every enabled row (R4); elsewhere they read the table.
- ``durablebeat_outcome_idx``: ``last_outcome`` (status's failing part, the admin's
  outcome filter). A completion that leaves the outcome as it was writes no index entry.
- on PostgreSQL, ``durablebeat_name_upper_idx``: ``UPPER(name) text_pattern_ops``, the
  index the admin's search by name (``^name``: ``UPPER(name) LIKE UPPER('digest-42%')``)
  reads. An expression index with an operator class is PostgreSQL's own, so it is SQL
  here, not in the model's state (on SQLite and MariaDB/MySQL the search reads the table,
  as before).

R32: the previous release names no index, so adding one leaves it working. On PostgreSQL
each is built ``CONCURRENTLY`` (as 0016, 0017): a plain build blocks the writes of a beat
running beside ``migrate`` for as long as it reads a million schedules.
"""

from typing import Any

from django.db import migrations, models

import durablebeat.models

NEW = (
    durablebeat.models.PartialIndex(
        fields=["stuck_since"],
        name="durablebeat_stuck_idx",
        where=models.Q(("stuck_since__isnull", False)),
    ),
    durablebeat.models.PartialIndex(
        fields=["enabled"],
        name="durablebeat_paused_or_bad_idx",
        where=models.Q(("enabled", False)) | ~models.Q(("error", "")),
        vendors=("postgresql",),
        only_on=("postgresql",),
    ),
    models.Index(fields=["last_outcome"], name="durablebeat_outcome_idx"),
)
#: PostgreSQL only (see above); ``::text`` as Django's ``istartswith`` spells the column
NAME_UPPER = "durablebeat_name_upper_idx"
NAME_UPPER_SQL = (
    f"CREATE INDEX CONCURRENTLY IF NOT EXISTS {NAME_UPPER} "
    "ON durablebeat_schedule (UPPER(name::text) text_pattern_ops)"
)


def _forwards(apps: Any, schema_editor: Any) -> None:
    schedule = apps.get_model("durablebeat", "Schedule")
    for index in NEW:
        if isinstance(index, durablebeat.models.PartialIndex) and not index.built_on(
            schema_editor.connection.vendor
        ):
            continue
        if schema_editor.connection.vendor == "postgresql":
            sql = str(index.create_sql(schedule, schema_editor, concurrently=True))
            schema_editor.execute(sql.replace("CONCURRENTLY", "CONCURRENTLY IF NOT EXISTS", 1))
        else:
            schema_editor.add_index(schedule, index)
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(NAME_UPPER_SQL)


def _backwards(apps: Any, schema_editor: Any) -> None:
    schedule = apps.get_model("durablebeat", "Schedule")
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(f"DROP INDEX CONCURRENTLY IF EXISTS {NAME_UPPER}")
    for index in NEW:
        if isinstance(index, durablebeat.models.PartialIndex) and not index.built_on(
            schema_editor.connection.vendor
        ):
            continue
        if schema_editor.connection.vendor == "postgresql":
            schema_editor.execute(f"DROP INDEX CONCURRENTLY IF EXISTS {index.name}")
        else:
            schema_editor.remove_index(schedule, index)


class Migration(migrations.Migration):
    atomic = False  # CREATE / DROP INDEX CONCURRENTLY cannot run inside a transaction

    dependencies = [("durablebeat", "0020_workerheartbeat_queues")]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.AddIndex(model_name="schedule", index=index) for index in NEW
            ],
            database_operations=[migrations.RunPython(_forwards, _backwards)],
        )
    ]
