"""``durablebeat report`` and the timeline's fires per deploy read a window of runs by the
time they were claimed (R18): by an index, not a scan of every run. Additive."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("durablebeat", "0006_schedule_message_options"),
    ]

    operations = [
        migrations.AddIndex(
            model_name="run",
            index=models.Index(fields=["claimed_at"], name="durablebeat_run_claimed_idx"),
        ),
    ]
