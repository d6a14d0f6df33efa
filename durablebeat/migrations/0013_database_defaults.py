"""R32, expand then contract: a NOT NULL column added after 0001 gets its default in the
database, not only in Python, so that the previous release, whose models do not name the
column, can still insert rows while a deploy rolls and after a rollback.

0006 and 0008 added eight such columns to the schedule table with a Django default only (the
others since 0001 are nullable): a beat of the release before 0008 syncing a new code entry,
or its admin adding a schedule, met ``IntegrityError: null value in column
"custom_schedule"``. The defaults are the models' own (``''`` and ``False``).

Django's ``db_default`` (5.0+) cannot say it while Django 4.2 is supported, so the defaults are
set by SQL per vendor and the migration state is unchanged (``makemigrations`` sees nothing):
PostgreSQL and MariaDB/MySQL alter the default in place, a change of the catalog only, no
rewrite. SQLite cannot alter a default with ``ALTER TABLE``; rebuilding the table (Django's
way) would copy it, so the column definitions in ``sqlite_schema`` are edited instead, which
is SQLite's documented procedure for "adding, removing, or changing default values on a
column" (https://www.sqlite.org/lang_altertable.html, "otheralter"): the stored rows do not
change. A later migration that makes Django rebuild this table on SQLite, or alters one of
these columns, drops the defaults again: ``tests/integration/test_expand_contract.py`` then
fails naming the column.
"""

import re
from typing import Any

from django.db import migrations

TABLE = "durablebeat_schedule"
#: column -> its database default, spelled out so that this migration never changes with
#: the models
DEFAULTS: dict[str, Any] = {
    "compression": "",  # 0006
    "exchange": "",
    "exchange_type": "",
    "serializer": "",
    "shadow": "",
    "custom_schedule": "",  # 0008
    "relative": False,
    "solar_event": "",
}


def set_defaults(apps: Any, schema_editor: Any) -> None:
    _apply(schema_editor, add=True)


def drop_defaults(apps: Any, schema_editor: Any) -> None:
    _apply(schema_editor, add=False)


def _apply(schema_editor: Any, add: bool) -> None:
    quote = schema_editor.quote_name
    if schema_editor.connection.vendor == "sqlite":
        _sqlite(schema_editor, add)
        return
    changes = ", ".join(
        f"ALTER COLUMN {quote(column)} "
        + (f"SET DEFAULT {schema_editor.quote_value(value)}" if add else "DROP DEFAULT")
        for column, value in DEFAULTS.items()
    )
    schema_editor.execute(f"ALTER TABLE {quote(TABLE)} {changes}")


def _sqlite(schema_editor: Any, add: bool) -> None:
    """The documented edit of ``sqlite_schema``: inside the migration's transaction, with the
    schema version moved on so that every open connection reads the table again."""
    with schema_editor.connection.cursor() as cursor:
        cursor.execute("SELECT sql FROM sqlite_master WHERE type = 'table' AND name = %s", [TABLE])
        sql = cursor.fetchone()[0]
        edited = sql
        for column, value in DEFAULTS.items():
            edited = _column_default(edited, column, schema_editor.quote_value(value), add)
        if edited == sql:
            return
        cursor.execute("PRAGMA schema_version")
        version = cursor.fetchone()[0]
        cursor.execute("PRAGMA writable_schema = ON")
        cursor.execute(
            "UPDATE sqlite_master SET sql = %s WHERE type = 'table' AND name = %s", [edited, TABLE]
        )
        cursor.execute(f"PRAGMA schema_version = {int(version) + 1}")
        cursor.execute("PRAGMA writable_schema = OFF")
        cursor.execute(f"PRAGMA integrity_check({TABLE})")
        if cursor.fetchone()[0] != "ok":
            raise RuntimeError(f"{TABLE}: SQLite's integrity check failed after the edit")


def _column_default(sql: str, column: str, literal: str, add: bool) -> str:
    """``"col" varchar(64) NOT NULL`` with (``add``) or without ``DEFAULT literal``;
    unchanged when it already is so, which makes the edit safe to run twice."""
    definition = re.compile(rf'("{column}" [^,"]*? NOT NULL)((?: DEFAULT {re.escape(literal)})?)')
    match = definition.search(sql)
    if match is None:
        raise RuntimeError(f"{TABLE}.{column}: no NOT NULL column definition in {sql!r}")
    wanted = match.group(1) + (f" DEFAULT {literal}" if add else "")
    return sql[: match.start()] + wanted + sql[match.end() :]


class Migration(migrations.Migration):
    dependencies = [("durablebeat", "0012_run_failure")]

    # atomic=False: MariaDB/MySQL cannot roll DDL back, and Django refuses DDL inside a
    # transaction there; on PostgreSQL and SQLite the migration is one transaction anyway.
    operations = [migrations.RunPython(set_defaults, drop_defaults, atomic=False)]
