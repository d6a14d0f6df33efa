"""R25, every schedule type Celery's beat takes: a relative flag for intervals, a solar
event with its latitude and longitude, and the label of a custom schedule object kept in
code. Additive: new columns with defaults or NULL, and two new kind choices."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("durablebeat", "0007_run_claimed_at_index"),
    ]

    operations = [
        migrations.AddField(
            model_name="schedule",
            name="custom_schedule",
            field=models.CharField(
                blank=True,
                editable=False,
                help_text="Custom schedules: the schedule object in code (class and repr).",
                max_length=300,
            ),
        ),
        migrations.AddField(
            model_name="schedule",
            name="latitude",
            field=models.FloatField(
                blank=True,
                help_text="Solar schedules: degrees, north positive (-90 to 90).",
                null=True,
            ),
        ),
        migrations.AddField(
            model_name="schedule",
            name="longitude",
            field=models.FloatField(
                blank=True,
                help_text="Solar schedules: degrees, east positive (-180 to 180).",
                null=True,
            ),
        ),
        migrations.AddField(
            model_name="schedule",
            name="relative",
            field=models.BooleanField(
                default=False,
                help_text="Interval schedules: round each fire down to the interval's clock unit in the time zone, as Celery's relative=True (1 hour: on the hour).",
            ),
        ),
        migrations.AddField(
            model_name="schedule",
            name="solar_event",
            field=models.CharField(
                blank=True,
                choices=[
                    ("dawn_astronomical", "dawn astronomical"),
                    ("dawn_civil", "dawn civil"),
                    ("dawn_nautical", "dawn nautical"),
                    ("dusk_astronomical", "dusk astronomical"),
                    ("dusk_civil", "dusk civil"),
                    ("dusk_nautical", "dusk nautical"),
                    ("solar_noon", "solar noon"),
                    ("sunrise", "sunrise"),
                    ("sunset", "sunset"),
                ],
                help_text="Solar schedules: the sun event.",
                max_length=32,
            ),
        ),
        migrations.AlterField(
            model_name="schedule",
            name="kind",
            field=models.CharField(
                choices=[
                    ("interval", "Interval"),
                    ("crontab", "Crontab"),
                    ("clocked", "One-off"),
                    ("solar", "Solar"),
                    ("custom", "Custom (code)"),
                ],
                default="interval",
                max_length=16,
            ),
        ),
    ]
