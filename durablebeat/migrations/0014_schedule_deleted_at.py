"""R29: a schedule deleted from code with its history kept is marked, not removed: its runs
stay in the ledger, and it never fires again (``durablebeat.api.delete_schedule``).

Additive (R32): a nullable column, added without rebuilding the table on any database; the
previous release neither reads nor writes it, and its inserts leave it NULL (not deleted).
"""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [("durablebeat", "0013_database_defaults")]

    operations = [
        migrations.AddField(
            model_name="schedule",
            name="deleted_at",
            field=models.DateTimeField(
                blank=True,
                editable=False,
                help_text="Deleted with its history kept (durablebeat.api.delete_schedule): it "
                "never fires again; its runs stay in the ledger.",
                null=True,
            ),
        ),
    ]
