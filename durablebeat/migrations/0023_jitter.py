"""R35, issue 37: a schedule's ``jitter``, and the slot a jittered next fire sends.

Additive (R32): nullable columns without a default, added without rebuilding the table on
any database; the previous release neither reads nor writes them (its inserts leave them
NULL: DURABLEBEAT_JITTER, and a next fire that is its own slot).
"""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [("durablebeat", "0022_overlap_policies")]

    operations = [
        migrations.AddField(
            model_name="schedule",
            name="jitter",
            field=models.DurationField(
                blank=True,
                help_text="Send each slot up to this much after it (the same delay at every "
                "beat and restart, never at or after the next slot): spreads schedules that "
                "share a slot. Empty: DURABLEBEAT_JITTER.",
                null=True,
            ),
        ),
        migrations.AddField(
            model_name="schedule",
            name="next_slot",
            field=models.DateTimeField(blank=True, editable=False, null=True),
        ),
    ]
