"""R36, issue 37 item 3: pause on failure. A schedule's bound (``pause_after_failures``), the
count of its runs in a row that failed or were lost (``failures_in_a_row``), and any pause's
record: since when (``paused_at``), who and why (``paused_note``), and whether the schedule
paused itself (``paused_on_failure``).

Additive (R32): nullable columns without a default, so every database adds them with
``ALTER TABLE ... ADD COLUMN`` (SQLite does not rebuild the table); the previous release
neither reads nor writes them (its inserts leave them NULL: no bound of its own, nothing
counted, no note).
"""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [("durablebeat", "0023_jitter")]

    operations = [
        migrations.AddField(
            model_name="schedule",
            name="pause_after_failures",
            field=models.PositiveIntegerField(
                blank=True,
                help_text="Pause this schedule after this many of its runs in a row failed "
                "or were lost (R36). Empty: DURABLEBEAT_PAUSE_AFTER_FAILURES (off by "
                "default); 0: never.",
                null=True,
            ),
        ),
        migrations.AddField(
            model_name="schedule",
            name="failures_in_a_row",
            field=models.PositiveIntegerField(blank=True, editable=False, null=True),
        ),
        migrations.AddField(
            model_name="schedule",
            name="paused_at",
            field=models.DateTimeField(blank=True, editable=False, null=True),
        ),
        migrations.AddField(
            model_name="schedule",
            name="paused_note",
            field=models.TextField(
                blank=True,
                help_text="Why it is paused and who paused it, shown wherever the pause is "
                "(status, check, the API). Cleared when it is enabled again.",
                null=True,
            ),
        ),
        migrations.AddField(
            model_name="schedule",
            name="paused_on_failure",
            field=models.BooleanField(blank=True, editable=False, null=True),
        ),
    ]
