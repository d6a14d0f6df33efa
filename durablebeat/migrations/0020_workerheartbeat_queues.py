"""Issue 39 item 5: each worker's liveness row records the queues it consumes, so that
``check`` can say a schedule's queue has messages no worker takes (``unconsumed_queue``).

Additive (R32): a nullable column, added without rebuilding the table on any database; the
previous release's workers neither read nor write it, their inserts leave it NULL ("not
recorded"), and ``check`` then says nothing from the worker rows.
"""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [("durablebeat", "0019_base_managers")]

    operations = [
        migrations.AddField(
            model_name="workerheartbeat",
            name="queues",
            field=models.TextField(blank=True, null=True),
        ),
    ]
