"""R32, issue 31 item 1: a schedule may keep its runs longer or shorter than
``DURABLEBEAT_RETENTION`` (``beat.retention``); NULL is the setting.

Additive (R32): a nullable column, added without rebuilding the table on any database; the
previous release neither reads nor writes it, and its inserts leave it NULL (the setting).
"""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [("durablebeat", "0017_run_inflight_index")]

    operations = [
        migrations.AddField(
            model_name="schedule",
            name="retention",
            field=models.DurationField(
                blank=True,
                help_text="How long the ledger keeps this schedule's finished runs and "
                "missed-slot records (at least a day). Empty: DURABLEBEAT_RETENTION.",
                null=True,
            ),
        ),
    ]
