"""Settings of ``benchmarks.compare``'s beat processes: the benchmark's settings, plus what
the other schedulers need, all in one project so that every beat loads the same code.

- django-celery-beat's app (its tables live in the same database as durablebeat's);
- redbeat's storage in the broker's Redis (its usual deployment), keys ``redbeat:*``;
- ``COMPARE_BEAT_SCHEDULE_N`` entries in ``beat_schedule`` (celery's own
  ``PersistentScheduler`` reads its schedules only from there; 0 for every other beat);
- every scheduler wakes at least every 5 s, durablebeat's default: celery's own default
  (300 s) would make PersistentScheduler and redbeat idle cheaper and redbeat blind to a
  change for up to 5 minutes.
"""

import datetime as dt
import os

from benchmarks.settings import *  # noqa: F403
from benchmarks.settings import CELERY_BROKER_URL, INSTALLED_APPS

INSTALLED_APPS = [*INSTALLED_APPS, "django_celery_beat"]
CELERY_BEAT_MAX_INTERVAL = 5  # celery's Scheduler, PersistentScheduler, redbeat
CELERY_BEAT_MAX_LOOP_INTERVAL = 5  # django-celery-beat (its own default is 5 too)
CELERY_REDBEAT_REDIS_URL = CELERY_BROKER_URL
CELERY_BEAT_SCHEDULE = {
    f"tenant-{i:06d}": {
        "task": "bench.noop",
        "schedule": dt.timedelta(days=1),
        "kwargs": {"tenant": i},
    }
    for i in range(int(os.environ.get("COMPARE_BEAT_SCHEDULE_N", "0")))
}

# Django's default CONN_MAX_AGE (0) closes the connection whenever ``close_old_connections``
# runs, which django-celery-beat calls on every tick: COMPARE_CONN_MAX_AGE=none keeps it.
if os.environ.get("COMPARE_CONN_MAX_AGE"):
    _age = os.environ["COMPARE_CONN_MAX_AGE"]
    DATABASES["default"]["CONN_MAX_AGE"] = None if _age == "none" else int(_age)  # noqa: F405
