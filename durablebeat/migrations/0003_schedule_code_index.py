"""The boot-time code sync reads code-defined rows by an index, not a scan of every row (R6)."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("durablebeat", "0002_schedule_notify"),
    ]

    operations = [
        migrations.AddIndex(
            model_name="schedule",
            index=models.Index(
                condition=models.Q(("source", "code")),
                fields=["source"],
                name="durablebeat_code_idx",
            ),
        ),
    ]
