"""R34, issue 37: overlap beyond skip and allow (``buffer_one``, ``replace``), a bound on
the runs in flight (``max_in_flight``), ``terminate`` for a replace, the slot a
``buffer_one`` schedule keeps, and the ``replaced`` run state and ``buffered`` reason.

Additive (R32): nullable columns, added without rebuilding the table on any database; the
previous release neither reads nor writes them (its inserts leave them NULL: no bound, no
terminate, nothing kept). The choices are Django's state only: no SQL.
"""

from django.db import migrations, models

OVERLAP = [
    ("skip", "Skip while running"),
    ("allow", "Allow overlap"),
    ("buffer_one", "Buffer one, send it when the run ends"),
    ("replace", "Replace the run in flight"),
]
REASONS = [
    ("scheduled", "Scheduled"),
    ("startup_grace", "Startup grace"),
    ("catch_up", "Catch-up"),
    ("manual", "Manual"),
    ("republish", "Re-publish"),
    ("backfill", "Backfill"),
    ("buffered", "Buffered"),
]
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
    ("replaced", "Replaced"),
]


class Migration(migrations.Migration):
    dependencies = [("durablebeat", "0021_schedule_read_indexes")]

    operations = [
        migrations.AddField(
            model_name="schedule",
            name="max_in_flight",
            field=models.PositiveIntegerField(
                blank=True,
                help_text="With overlap 'allow': at most this many runs in flight, a slot "
                "beyond it is skipped. Empty: no bound.",
                null=True,
            ),
        ),
        migrations.AddField(
            model_name="schedule",
            name="terminate",
            field=models.BooleanField(
                blank=True,
                help_text="With overlap 'replace': terminate the running task (Celery's "
                "revoke with terminate), not only revoke it.",
                null=True,
            ),
        ),
        migrations.AddField(
            model_name="schedule",
            name="buffered_slot",
            field=models.DateTimeField(blank=True, editable=False, null=True),
        ),
        migrations.AlterField(
            model_name="schedule",
            name="overlap",
            field=models.CharField(
                choices=OVERLAP,
                default="skip",
                help_text="A slot that comes while a run is in flight: skipped, sent anyway "
                "(up to max in flight), kept and sent when that run ends (one at most), or "
                "sent in place of that run (R14, R34).",
                max_length=16,
            ),
        ),
        migrations.AlterField(
            model_name="schedule",
            name="next_fire_reason",
            field=models.CharField(
                choices=REASONS, default="scheduled", editable=False, max_length=16
            ),
        ),
        migrations.AlterField(
            model_name="run",
            name="reason",
            field=models.CharField(choices=REASONS, default="scheduled", max_length=16),
        ),
        migrations.AlterField(
            model_name="schedule",
            name="last_outcome",
            field=models.CharField(blank=True, choices=STATES, editable=False, max_length=16),
        ),
        migrations.AlterField(
            model_name="run",
            name="state",
            field=models.CharField(choices=STATES, default="claimed", max_length=16),
        ),
    ]
