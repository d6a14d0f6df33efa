"""Settings of the benchmark's beat processes: the demo project on PostgreSQL and Redis.

``BENCH_DATABASE_URL`` / ``BENCH_BROKER_URL`` choose the database and broker (defaults: the
``durablebeat_bench`` database, Redis db 13); nothing is scheduled from code, every
schedule is a row, as with one schedule per tenant.
"""

import os

from project.settings import *  # noqa: F403
from project.settings import database_from_env

DATABASES = {
    "default": database_from_env(
        os.environ.get("BENCH_DATABASE_URL", "postgres://postgres@127.0.0.1:5432/durablebeat_bench")
    )
}
if os.environ.get("BENCH_DB_POOLED") == "1":  # through PgBouncer's transaction pooling (R31)
    DATABASES["default"]["DISABLE_SERVER_SIDE_CURSORS"] = True
DEBUG = False  # as in production: Django keeps no log of every query
CELERY_BROKER_URL = os.environ.get("BENCH_BROKER_URL", "redis://127.0.0.1:6379/13")
CELERY_BROKER_TRANSPORT_OPTIONS: dict = {}
CELERY_RESULT_BACKEND = None
CELERY_BEAT_SCHEDULE: dict = {}
CELERY_IMPORTS = ["benchmarks.tasks"]  # bench.noop, the task every schedule names
DURABLEBEAT_MAX_INTERVAL = float(os.environ.get("DURABLEBEAT_MAX_INTERVAL", "5"))
DURABLEBEAT_LISTEN_NOTIFY = os.environ.get("DURABLEBEAT_LISTEN_NOTIFY", "1") == "1"
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "loggers": {"durablebeat": {"level": os.environ.get("BENCH_LOG_LEVEL", "WARNING")}},
}

if os.environ.get("BENCH_SENTRY") == "1":
    # R30: beat with Sentry's Celery integration (monitor_beat_tasks): each envelope is
    # serialized as for the network, then dropped (no network; the sending is not counted)
    import io

    import sentry_sdk
    from sentry_sdk.integrations.celery import CeleryIntegration
    from sentry_sdk.transport import Transport

    class _SerializeAndDrop(Transport):  # type: ignore[misc]
        def capture_envelope(self, envelope: object) -> None:
            envelope.serialize_into(io.BytesIO())  # type: ignore[attr-defined]

    sentry_sdk.init(
        dsn="https://public@sentry.invalid/1",
        transport=_SerializeAndDrop(),
        integrations=[CeleryIntegration(monitor_beat_tasks=True)],
    )
