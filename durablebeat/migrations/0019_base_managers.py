"""State only: each model's base manager is its ``objects`` (``DurableManager``), so a
related row (``run.schedule``) is read from durablebeat's database, not a read replica
(R31). Nothing in the database changes; the previous release is unaffected (R32)."""

from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [
        ("durablebeat", "0018_schedule_retention"),
    ]

    operations = [
        migrations.AlterModelOptions(
            name="boot",
            options={"base_manager_name": "objects", "ordering": ["-started_at"]},
        ),
        migrations.AlterModelOptions(
            name="incident",
            options={"base_manager_name": "objects", "ordering": ["-at"]},
        ),
        migrations.AlterModelOptions(
            name="marker",
            options={"base_manager_name": "objects"},
        ),
        migrations.AlterModelOptions(
            name="missedslots",
            options={
                "base_manager_name": "objects",
                "ordering": ["-recorded_at"],
                "verbose_name_plural": "missed slots",
            },
        ),
        migrations.AlterModelOptions(
            name="run",
            options={"base_manager_name": "objects", "ordering": ["-slot"]},
        ),
        migrations.AlterModelOptions(
            name="schedule",
            options={"base_manager_name": "objects", "ordering": ["name"]},
        ),
        migrations.AlterModelOptions(
            name="workerheartbeat",
            options={"base_manager_name": "objects"},
        ),
    ]
