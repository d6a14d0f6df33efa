"""A schedule's ``countdown`` (R24, R25): each fire's message is delayed by it, as Celery's
beat delays it. Additive: a nullable column, empty for every existing schedule."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [("durablebeat", "0008_schedule_relative_solar_custom")]

    operations = [
        migrations.AddField(
            model_name="schedule",
            name="countdown",
            field=models.FloatField(
                blank=True,
                help_text="Each message is delayed by this many seconds after it is sent "
                "(Celery's countdown: the task runs at send time plus this); the run's slot "
                "stays the scheduled instant.",
                null=True,
            ),
        ),
    ]
