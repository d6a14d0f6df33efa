"""R26: each beat boot and each worker liveness row records its host's measured offset to
the database's clock, so that ``check``, ``/metrics`` and the admin can say which host's
clock is off. Additive: two nullable columns (no rewrite, no default to fill). A
schedule's ``created_at``/``updated_at`` are stamped on the one clock: the same columns,
a field class whose ``auto_now`` reads ``clock.now()`` (no change in the database)."""

from django.db import migrations, models

import durablebeat.models


class Migration(migrations.Migration):
    dependencies = [("durablebeat", "0009_schedule_countdown")]

    operations = [
        migrations.AlterField(
            model_name="schedule",
            name="created_at",
            field=durablebeat.models.ClockDateTimeField(auto_now_add=True),
        ),
        migrations.AlterField(
            model_name="schedule",
            name="updated_at",
            field=durablebeat.models.ClockDateTimeField(auto_now=True),
        ),
        migrations.AddField(
            model_name="boot",
            name="clock_offset_seconds",
            field=models.FloatField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name="workerheartbeat",
            name="clock_offset_seconds",
            field=models.FloatField(blank=True, null=True),
        ),
    ]
