"""The schedule table's two partial indexes become ``PartialIndex`` (R29, R23): the same
indexes, so that Django's ``models.W037`` no longer warns on MariaDB/MySQL about a condition
it ignores there. State only: the indexes in the database are exactly as they were (with
their ``WHERE`` on PostgreSQL and SQLite, on the whole column on MariaDB/MySQL), nothing is
dropped or built (R32).
"""

from django.db import migrations, models

import durablebeat.models

OLD = ("durablebeat_due_idx", "durablebeat_code_idx")


class Migration(migrations.Migration):
    dependencies = [("durablebeat", "0014_schedule_deleted_at")]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                *(migrations.RemoveIndex(model_name="schedule", name=name) for name in OLD),
                migrations.AddIndex(
                    model_name="schedule",
                    index=durablebeat.models.PartialIndex(
                        fields=["next_fire_at"],
                        name="durablebeat_due_idx",
                        where=models.Q(("enabled", True)),
                    ),
                ),
                migrations.AddIndex(
                    model_name="schedule",
                    index=durablebeat.models.PartialIndex(
                        fields=["source"],
                        name="durablebeat_code_idx",
                        where=models.Q(("source", "code")),
                    ),
                ),
            ]
        )
    ]
