"""PostgreSQL only: a change that can make a schedule due wakes beat at once (R6).

A row trigger on ``durablebeat_schedule`` sends ``NOTIFY durablebeat_schedule`` when a row is
inserted, or when its ``next_fire_at``, ``enabled`` or ``error`` changes, unless the change
comes from a beat itself (its session sets ``durablebeat.beat``): beat's own claims would
otherwise wake every beat after every batch. The notification carries no payload; the woken
beat runs its usual due query (``durablebeat.beat.notify`` listens). A no-op on other databases, where beat polls every
``max_interval``.
"""

from django.db import migrations

# The same names as durablebeat.notify's; spelled out so the migration never changes with it.
CHANNEL = "durablebeat_schedule"
BEAT_SETTING = "durablebeat.beat"

FUNCTION = f"""
CREATE OR REPLACE FUNCTION durablebeat_schedule_notify() RETURNS trigger AS $$
BEGIN
    PERFORM pg_notify('{CHANNEL}', '');
    RETURN NULL;
END;
$$ LANGUAGE plpgsql
"""
NOT_BEAT = f"coalesce(current_setting('{BEAT_SETTING}', true), '') <> 'on'"
ON_INSERT = f"""
CREATE TRIGGER durablebeat_schedule_notify_insert
    AFTER INSERT ON durablebeat_schedule
    FOR EACH ROW WHEN ({NOT_BEAT})
    EXECUTE FUNCTION durablebeat_schedule_notify()
"""
ON_UPDATE = f"""
CREATE TRIGGER durablebeat_schedule_notify_update
    AFTER UPDATE ON durablebeat_schedule
    FOR EACH ROW WHEN (
        {NOT_BEAT} AND (
            OLD.next_fire_at IS DISTINCT FROM NEW.next_fire_at
            OR OLD.enabled IS DISTINCT FROM NEW.enabled
            OR OLD.error IS DISTINCT FROM NEW.error
        )
    )
    EXECUTE FUNCTION durablebeat_schedule_notify()
"""
DROP = [
    "DROP TRIGGER IF EXISTS durablebeat_schedule_notify_update ON durablebeat_schedule",
    "DROP TRIGGER IF EXISTS durablebeat_schedule_notify_insert ON durablebeat_schedule",
    "DROP FUNCTION IF EXISTS durablebeat_schedule_notify()",
]


def create(apps, schema_editor):  # type: ignore[no-untyped-def]
    if schema_editor.connection.vendor == "postgresql":
        for sql in (*DROP, FUNCTION, ON_INSERT, ON_UPDATE):
            schema_editor.execute(sql)


def drop(apps, schema_editor):  # type: ignore[no-untyped-def]
    if schema_editor.connection.vendor == "postgresql":
        for sql in DROP:
            schema_editor.execute(sql)


class Migration(migrations.Migration):
    dependencies = [("durablebeat", "0001_initial")]

    operations = [migrations.RunPython(create, drop, elidable=False)]
