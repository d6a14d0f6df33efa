"""R27: the run reason ``backfill`` (a missed slot fired later by a person). Choices
only: no column changes, nothing to migrate. Additive."""

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('durablebeat', '0010_clock_offset'),
    ]

    operations = [
        migrations.AlterField(
            model_name='run',
            name='reason',
            field=models.CharField(choices=[('scheduled', 'Scheduled'), ('startup_grace', 'Startup grace'), ('catch_up', 'Catch-up'), ('manual', 'Manual'), ('republish', 'Re-publish'), ('backfill', 'Backfill')], default='scheduled', max_length=16),
        ),
        migrations.AlterField(
            model_name='schedule',
            name='next_fire_reason',
            field=models.CharField(choices=[('scheduled', 'Scheduled'), ('startup_grace', 'Startup grace'), ('catch_up', 'Catch-up'), ('manual', 'Manual'), ('republish', 'Re-publish'), ('backfill', 'Backfill')], default='scheduled', editable=False, max_length=16),
        ),
    ]
