"""Settings for the test suite and for the beat/worker processes the e2e tests start.

``DURABLEBEAT_TEST_DB=postgres`` (default) uses the real PostgreSQL on 127.0.0.1:5432;
``mariadb`` (or ``mysql``) the MariaDB/MySQL server on 127.0.0.1:3306 (user root, no password
unless ``MYSQL_USER``/``MYSQL_PASSWORD``); ``sqlite`` uses a SQLite file. Processes started
by e2e tests get ``DATABASE_URL`` pointing at the test database pytest-django created, and
their beat schedule as JSON in ``E2E_BEAT_SCHEDULE``.
"""

import importlib
import json
import os
from datetime import timedelta
from typing import Any

from celery.beat import BeatLazyFunc
from celery.schedules import crontab

from project.settings import *  # noqa: F403
from project.settings import INSTALLED_APPS, VAR_DIR, database_from_env

INSTALLED_APPS = [*INSTALLED_APPS, "tests.e2eapp", "django_celery_beat"]
if os.environ.get("E2E_WITHOUT_DURABLEBEAT") == "1":
    # A worker of a project that forgot durablebeat: no tracking signals (R27's untracked worker).
    INSTALLED_APPS = [app for app in INSTALLED_APPS if app != "durablebeat"]
    ROOT_URLCONF = "tests.e2eapp.urls"

TEST_DB = os.environ.get("DURABLEBEAT_TEST_DB", "postgres")
# Several test runs at once on one machine (e.g. two developers' checkouts) each set their
# own suffix, so that they never share a test database or a broker database.
TEST_SUFFIX = os.environ.get("DURABLEBEAT_TEST_SUFFIX", "")
PG_USER = os.environ.get("PGUSER", "postgres")
PG_HOST = os.environ.get("PGHOST", "127.0.0.1")
if "DATABASE_URL" in os.environ:
    DATABASES = {"default": database_from_env(os.environ["DATABASE_URL"])}
elif TEST_DB == "sqlite":
    DATABASES = {"default": database_from_env(f"sqlite:///{VAR_DIR / 'tests.sqlite3'}")}
    DATABASES["default"]["TEST"] = {"NAME": str(VAR_DIR / f"test_tests{TEST_SUFFIX}.sqlite3")}
elif TEST_DB in ("mariadb", "mysql"):
    _my_user = os.environ.get("MYSQL_USER", "root")
    _my_password = os.environ.get("MYSQL_PASSWORD", "")
    _my_host = os.environ.get("MYSQL_HOST", "127.0.0.1")
    _my_auth = f"{_my_user}:{_my_password}" if _my_password else _my_user
    DATABASES = {"default": database_from_env(f"mysql://{_my_auth}@{_my_host}:3306/durablebeat")}
    DATABASES["default"]["TEST"] = {
        "NAME": f"test_durablebeat{TEST_SUFFIX}",
        "CHARSET": "utf8mb4",
        "COLLATION": "utf8mb4_unicode_ci",
    }
else:
    DATABASES = {"default": database_from_env(f"postgres://{PG_USER}@{PG_HOST}:5432/durablebeat")}
    DATABASES["default"]["TEST"] = {"NAME": f"test_durablebeat{TEST_SUFFIX}"}

# Issue 30 item 5: durablebeat in a database of its own (tests/e2eapp/routers.py). The test
# run has the aliases (a test asks for them: pytest-django creates their databases only then,
# and turns the routers on with override_settings); a process an e2e test starts is routed
# when given E2E_SCHEDULER_URL.
if "DATABASE_URL" not in os.environ and TEST_DB == "postgres":
    for _alias, _name in (("scheduler", "sched"), ("replica", "replica")):
        DATABASES[_alias] = {**DATABASES["default"], "NAME": f"durablebeat_{_name}"}
        DATABASES[_alias]["TEST"] = {"NAME": f"test_durablebeat_{_name}{TEST_SUFFIX}"}
if os.environ.get("E2E_SCHEDULER_URL"):
    import dj_database_url

    DATABASES["scheduler"] = dict(dj_database_url.parse(os.environ["E2E_SCHEDULER_URL"]))
    DATABASE_ROUTERS = ["tests.e2eapp.routers.SchedulerRouter"]
if os.environ.get("E2E_DB_POOL") == "1":
    # Django's own connection pool (5.1+, psycopg[pool]): issue 30 item 2's "django-pool" cell
    DATABASES["default"]["OPTIONS"] = {**DATABASES["default"].get("OPTIONS", {}), "pool": True}
if os.environ.get("E2E_DB_POOLED") == "1":
    # Through PgBouncer in transaction pooling (R31): Django's advice for it
    DATABASES["default"]["DISABLE_SERVER_SIDE_CURSORS"] = True
# A pytest-xdist worker (gw0, gw1, ...) counts down from the run's Redis database: each its
# own broker, as each has its own test databases (pytest-django suffixes their names).
# scripts/test.sh gives each run beside another a base far enough apart.
XDIST_WORKER = int(os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw") or 0)
REDIS_DB = int(os.environ.get("DURABLEBEAT_TEST_REDIS_DB", "15")) - XDIST_WORKER
if not 0 <= REDIS_DB <= 15:
    raise ValueError(
        f"xdist worker gw{XDIST_WORKER} has no Redis database below DURABLEBEAT_TEST_REDIS_DB"
    )
CELERY_BROKER_URL = os.environ.get("CELERY_BROKER_URL", f"redis://127.0.0.1:6379/{REDIS_DB}")
CELERY_BROKER_TRANSPORT_OPTIONS = {}
CELERY_RESULT_BACKEND = "django-db"
# Celery's beat (and durablebeat, R25) adds celery.backend_cleanup with django-db when
# results expire; the suite's boots count their schedules exactly, so results never expire
# here unless a test asks (E2E_RESULT_EXPIRES; tests/integration/test_celery_entries.py
# checks the default on its own app).
CELERY_RESULT_EXPIRES = (
    float(os.environ["E2E_RESULT_EXPIRES"]) if "E2E_RESULT_EXPIRES" in os.environ else None
)
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_TASK_ACKS_LATE = False
# project/ tracks STARTED in the result backend; e2e tests of a database cut turn it off to
# let bodies run while that backend (the same database) is unreachable.
CELERY_TASK_TRACK_STARTED = os.environ.get("E2E_TRACK_STARTED", "1") == "1"
PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]

DURABLEBEAT_MAX_INTERVAL = float(os.environ.get("DURABLEBEAT_MAX_INTERVAL", "1"))
DURABLEBEAT_HEARTBEAT_INTERVAL = float(os.environ.get("DURABLEBEAT_HEARTBEAT_INTERVAL", "2"))
DURABLEBEAT_DB_RETRY_INTERVAL = float(os.environ.get("DURABLEBEAT_DB_RETRY_INTERVAL", "1"))
DURABLEBEAT_RESULT_RECONCILE = os.environ.get("DURABLEBEAT_RESULT_RECONCILE", "1") == "1"
for _name in (
    "GC_INTERVAL",
    "WORKER_HEARTBEAT_INTERVAL",
    "WORKER_DEAD_AFTER",
    "RECLAIM_MARGIN",
    "UNCONFIRMED_AFTER",
    "CATCH_UP_SETTLE",
    "CATCH_UP_WINDOW",
    "STARTUP_GRACE",
    "NO_NEWS_AFTER",
    "DEPLOY_GRACE",
    "HEARTBEAT_STALE_AFTER",
    "OVERDUE_TOLERANCE",
    "LATE_AFTER",
):
    if f"DURABLEBEAT_{_name}" in os.environ:
        globals()[f"DURABLEBEAT_{_name}"] = float(os.environ[f"DURABLEBEAT_{_name}"])


def _beat_schedule_from_env(raw: str) -> dict[str, Any]:
    """{"name": {"task": ..., "every": 20 | "cron": "m h dow dom moy" | "solar": [event,
    lat, lon] | "custom": n (tests.e2eapp.schedules.EveryNSeconds), "relative": bool,
    "options": {...}, "durablebeat": {...}}}."""
    from celery.schedules import solar

    from tests.e2eapp.schedules import EveryNSeconds

    schedule = {}
    for name, e in json.loads(raw).items():
        timing: Any
        if "every" in e:
            timing = timedelta(seconds=e["every"])
        elif "solar" in e:
            timing = solar(*e["solar"])
        elif "custom" in e:
            timing = EveryNSeconds(e["custom"])
        else:
            m, h, dow, dom, moy = e["cron"].split()
            timing = crontab(minute=m, hour=h, day_of_week=dow, day_of_month=dom, month_of_year=moy)
        schedule[name] = {
            "task": e["task"],
            "schedule": timing,
            "args": [_python_value(v) for v in e.get("args", [])],
            "kwargs": {k: _python_value(v) for k, v in e.get("kwargs", {}).items()},
            "options": {
                **{k: _python_value(v) for k, v in e.get("options", {}).items()},
                "durablebeat": e.get("durablebeat", {}),
            },
            **({"relative": e["relative"]} if "relative" in e else {}),
        }
    return schedule


def _python_value(value: Any) -> Any:
    """What JSON cannot say (R25): ``{"$timedelta": seconds}``, ``{"$lazy": "dotted.path"}``
    (a ``BeatLazyFunc`` of that function) and ``{"$signature": "task", "args": [...]}`` (an
    immutable signature, for ``link``); anything else as given."""
    if isinstance(value, dict) and "$timedelta" in value:
        return timedelta(seconds=value["$timedelta"])
    if isinstance(value, dict) and "$lazy" in value:
        module, _, name = value["$lazy"].rpartition(".")
        return BeatLazyFunc(getattr(importlib.import_module(module), name))
    if isinstance(value, dict) and "$signature" in value:
        from celery import signature

        return signature(value["$signature"], args=value.get("args", ()), immutable=True)
    return value


# Only the e2e test of pickled arguments lets the worker take pickle (E2E_ACCEPT_PICKLE=1).
if os.environ.get("E2E_ACCEPT_PICKLE") == "1":
    CELERY_ACCEPT_CONTENT = ["json", "pickle"]

CELERY_BEAT_SCHEDULE = _beat_schedule_from_env(os.environ.get("E2E_BEAT_SCHEDULE", "{}"))

# R30: processes with Sentry's Celery integration, its envelopes written to a file (no
# network), and results that keep the periodic task's name (django-celery-results)
if os.environ.get("E2E_SENTRY_ENVELOPES"):
    from tests.e2eapp import sentry_capture

    sentry_capture.init(os.environ["E2E_SENTRY_ENVELOPES"])
if os.environ.get("E2E_OBSERVE"):  # Celery's signals and OpenTelemetry's spans, to a file
    from tests.e2eapp import observers

    observers.install(os.environ["E2E_OBSERVE"])
CELERY_RESULT_EXTENDED = os.environ.get("E2E_RESULT_EXTENDED") == "1"

# durablebeat logs one event per line ("fire schedule=... slot=... reason=..."); under
# celery they go through celery's own handler, elsewhere through Django's console handler.
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "loggers": {"durablebeat": {"level": "INFO"}},
}
