"""R24: the apply_async options of a beat_schedule entry, stored on the schedule (additive)."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("durablebeat", "0005_run_no_news"),
    ]

    operations = [
        migrations.AddField(
            model_name="schedule",
            name="compression",
            field=models.CharField(
                blank=True,
                help_text="A compression kombu knows: gzip, bzip2, lzma... Empty: none (the app's).",
                max_length=64,
            ),
        ),
        migrations.AddField(
            model_name="schedule",
            name="delivery_mode",
            field=models.PositiveSmallIntegerField(
                blank=True,
                choices=[(1, "transient"), (2, "persistent")],
                help_text="Empty: the queue's (persistent by default).",
                null=True,
            ),
        ),
        migrations.AddField(
            model_name="schedule",
            name="exchange",
            field=models.CharField(blank=True, help_text="Empty: the queue's.", max_length=200),
        ),
        migrations.AddField(
            model_name="schedule",
            name="exchange_type",
            field=models.CharField(
                blank=True,
                help_text="direct, topic, fanout, headers. Empty: the queue's.",
                max_length=32,
            ),
        ),
        migrations.AddField(
            model_name="schedule",
            name="ignore_result",
            field=models.BooleanField(
                blank=True,
                help_text="Store no result. Empty: the task's own setting. Without a stored result, a run whose worker died is lost rather than reconciled (R13).",
                null=True,
            ),
        ),
        migrations.AddField(
            model_name="schedule",
            name="serializer",
            field=models.CharField(
                blank=True,
                help_text="A serializer kombu knows: json, msgpack, pickle, yaml. Empty: the app's.",
                max_length=64,
            ),
        ),
        migrations.AddField(
            model_name="schedule",
            name="shadow",
            field=models.CharField(
                blank=True, help_text="The task's name in worker logs and events.", max_length=200
            ),
        ),
        migrations.AddField(
            model_name="schedule",
            name="soft_time_limit",
            field=models.FloatField(
                blank=True,
                help_text="Soft time limit in seconds (at most the hard one): the body gets SoftTimeLimitExceeded. Empty: the task's or app's.",
                null=True,
            ),
        ),
        migrations.AddField(
            model_name="schedule",
            name="time_limit",
            field=models.FloatField(
                blank=True,
                help_text="Hard time limit in seconds: the worker kills the run past it, and beat reclaims a run still going this long (plus its margin) after its start. Empty: the task's or app's.",
                null=True,
            ),
        ),
    ]
