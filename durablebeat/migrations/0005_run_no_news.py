"""R22: a published run with no worker news within its bound rests as ``no_news``."""

from django.db import migrations, models

STATES = [
    ("claimed", "Claimed"),
    ("published", "Published"),
    ("started", "Started"),
    ("succeeded", "Succeeded"),
    ("failed", "Failed"),
    ("lost", "Lost"),
    ("no_news", "No news"),
    ("skipped", "Skipped"),
    ("missed", "Missed"),
]


class Migration(migrations.Migration):
    dependencies = [
        ("durablebeat", "0004_schedule_enabled_at"),
    ]

    operations = [
        migrations.AlterField(
            model_name="run",
            name="state",
            field=models.CharField(choices=STATES, default="claimed", max_length=16),
        ),
        migrations.AlterField(
            model_name="schedule",
            name="last_outcome",
            field=models.CharField(blank=True, choices=STATES, editable=False, max_length=16),
        ),
    ]
