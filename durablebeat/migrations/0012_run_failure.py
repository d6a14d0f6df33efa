"""R21: a run whose message the broker client refused says so by value, in ``failure``
(``check`` filtered on the first words of its detail). Additive: a nullable column (a beat
or worker of the previous release, running while the deploy rolls, inserts runs without it;
Django keeps no database default), and a data migration that marks the refused runs
already in the ledger from their detail, which keeps its text (the admin shows it)."""

from typing import Any

from django.db import migrations, models

#: how such a run's detail begins (``beat.claims.UNPUBLISHABLE``), as this migration reads it
REFUSED = "not published, the message was refused"


def mark_refused(apps: Any, schema_editor: Any) -> None:
    Run = apps.get_model("durablebeat", "Run")
    Run.objects.filter(state="failed", detail__startswith=REFUSED).update(failure="unpublishable")


class Migration(migrations.Migration):
    dependencies = [
        ("durablebeat", "0011_run_reason_backfill"),
    ]

    operations = [
        migrations.AddField(
            model_name="run",
            name="failure",
            field=models.CharField(
                blank=True,
                choices=[("unpublishable", "Message refused")],
                default="",
                editable=False,
                max_length=16,
                null=True,
            ),
        ),
        migrations.RunPython(mark_refused, migrations.RunPython.noop),
    ]
