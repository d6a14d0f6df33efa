"""Django system checks with stable ids (``manage.py check``)."""

from __future__ import annotations

from typing import Any

from django.conf import settings as django_settings
from django.core import checks

from . import conf
from .beat.codesync import BadEntry, celery_timezone, parse_beat_schedule
from .beat.dberrors import unsupported_backend
from .validation import is_external_task, known_task_names, typo_hint

SCHEDULER_PATH = "durablebeat.schedulers:DurableScheduler"


def register() -> None:
    checks.register(check_time_zone_support, "durablebeat")
    checks.register(check_settings, "durablebeat")
    checks.register(check_unknown_settings, "durablebeat")
    checks.register(check_setting_pairs, "durablebeat")
    checks.register(check_metrics_public, "durablebeat")
    checks.register(check_scheduler_configured, "durablebeat")
    checks.register(check_code_schedules, "durablebeat")
    checks.register(check_database_backend, "durablebeat")
    checks.register(check_pooled_cursors, "durablebeat")


def check_time_zone_support(**kwargs: Any) -> list[checks.CheckMessage]:
    if not django_settings.USE_TZ:
        return [
            checks.Error(
                "durablebeat needs USE_TZ = True: next fires are absolute UTC instants.",
                id="durablebeat.E001",
            )
        ]
    return []


def check_settings(**kwargs: Any) -> list[checks.CheckMessage]:
    """E002: each setting of the wrong type or out of its range, one message per setting."""
    return [
        checks.Error(f"{name} is invalid: {why}", id="durablebeat.E002")
        for name, why in conf.invalid_settings().items()
    ]


def check_unknown_settings(**kwargs: Any) -> list[checks.CheckMessage]:
    """W003: a ``DURABLEBEAT_*`` setting durablebeat does not read (a typo is ignored
    silently otherwise, and its default used)."""
    known = {f"DURABLEBEAT_{name}" for name in conf.setting_names()}
    return [
        checks.Warning(
            f"{name} is not a durablebeat setting: it is ignored.",
            hint="See the settings table of docs/configuration.md for the names.",
            id="durablebeat.W003",
        )
        for name in sorted(dir(django_settings))
        if name.startswith("DURABLEBEAT_") and name not in known
    ]


#: (shorter, longer): the first must be less than the second, or the second reads every
#: live beat or worker as gone
SETTING_PAIRS = (
    ("HEARTBEAT_INTERVAL", "HEARTBEAT_STALE_AFTER"),
    ("WORKER_HEARTBEAT_INTERVAL", "WORKER_DEAD_AFTER"),
)


def check_setting_pairs(**kwargs: Any) -> list[checks.CheckMessage]:
    """W004: a staleness bound not longer than the heartbeat it waits for."""
    found: list[checks.CheckMessage] = []
    for shorter, longer in SETTING_PAIRS:
        try:
            short, long = getattr(conf.settings, shorter), getattr(conf.settings, longer)
        except conf.InvalidSetting:
            continue  # E002 says so
        if long <= short:
            found.append(
                checks.Warning(
                    f"DURABLEBEAT_{longer} ({long}) is not longer than "
                    f"DURABLEBEAT_{shorter} ({short}): every live one would read as gone.",
                    id="durablebeat.W004",
                )
            )
    return found


def check_metrics_public(**kwargs: Any) -> list[checks.CheckMessage]:
    """W002: the metrics view open to anyone on a production (``DEBUG`` off) site."""
    try:
        public, token = conf.settings.METRICS_PUBLIC, conf.settings.METRICS_TOKEN
    except conf.InvalidSetting:
        return []  # E002 says so
    if public and not token and not django_settings.DEBUG:
        return [
            checks.Warning(
                "DURABLEBEAT_METRICS_PUBLIC is True with no DURABLEBEAT_METRICS_TOKEN: the "
                "metrics view answers anyone.",
                hint="Set DURABLEBEAT_METRICS_TOKEN, or protect the URL another way.",
                id="durablebeat.W002",
            )
        ]
    return []


def _celery_app() -> Any:
    from celery import current_app

    return current_app._get_current_object()


def check_scheduler_configured(**kwargs: Any) -> list[checks.CheckMessage]:
    configured = str(_celery_app().conf.beat_scheduler or "")
    if configured.replace(".", ":").endswith("schedulers:DurableScheduler"):
        return []
    return [
        checks.Warning(
            f"Celery's beat scheduler is {configured!r}, not durablebeat's.",
            hint=f'Set CELERY_BEAT_SCHEDULER = "{SCHEDULER_PATH}" '
            f"or run beat with -S {SCHEDULER_PATH}.",
            id="durablebeat.W001",
        )
    ]


def check_code_schedules(**kwargs: Any) -> list[checks.CheckMessage]:
    """E003: a ``beat_schedule`` entry beat would refuse at boot (R20); W007: one whose
    task the Celery app has not registered, which beat sends by name (R29); W006: the task
    modules could not be imported to check the names."""
    app = _celery_app()
    beat_schedule = app.conf.beat_schedule or {}
    problems: list[checks.CheckMessage] = []
    names = None
    if beat_schedule:
        try:
            # Importing the task modules runs the checks again (celery's Django fix-up):
            # known_task_names imports once per process and not from inside itself.
            names = known_task_names()
        except Exception as exc:  # the project's own modules: any error they raise
            problems.append(
                checks.Warning(
                    f"could not import the Celery task modules to check beat_schedule's task "
                    f"names: {type(exc).__name__}: {exc}",
                    hint="beat sends an unregistered task by name, and says so once when it boots.",
                    id="durablebeat.W006",
                )
            )
    try:
        # The serializer a task's arguments go out with (R25) is checked when beat boots. The
        # entries Celery's beat installs itself (defaults.py) are durablebeat's own and valid;
        # deciding whether they apply builds the result backend, which a system check in a
        # web process must not need.
        parse_beat_schedule(beat_schedule, celery_timezone(app), check_task=False)
    except BadEntry as exc:
        problems.append(checks.Error(str(exc), id="durablebeat.E003"))
    if names is not None:
        problems += [
            unregistered_task_warning(name, entry["task"], names)
            for name, entry in beat_schedule.items()
            if isinstance(entry, dict)
            and isinstance(entry.get("task"), str)
            and entry["task"]
            and entry["task"] not in names
            and not is_external_task(entry["task"])  # served elsewhere on purpose (R29)
        ]
    return problems


def unregistered_task_warning(entry: str, task: str, names: frozenset[str]) -> checks.Warning:
    """W007 (R29, R25): a ``beat_schedule`` entry whose task this Celery app has not
    registered and ``DURABLEBEAT_EXTERNAL_TASKS`` does not match. Celery's beat sends it by
    name, and so does durablebeat's: a Warning, not an Error, which would stop ``migrate``
    and ``runserver`` for what may be a task served by another codebase; a likely typo when
    a registered name is close."""
    return checks.Warning(
        f"beat_schedule[{entry!r}]: task: no task named {task!r} is registered in the Celery "
        f"app; beat sends it by name, as Celery's beat does{typo_hint(task, names)}",
        hint="A typo, a task module the Celery app does not import (CELERY_IMPORTS, an "
        "installed app's tasks.py for autodiscover_tasks), or a task another codebase's "
        "workers serve (then name it, or a pattern, in DURABLEBEAT_EXTERNAL_TASKS).",
        id="durablebeat.W007",
    )


def check_database_backend(**kwargs: Any) -> list[checks.CheckMessage]:
    """R23: a backend durablebeat does not support is refused before beat starts."""
    problem = unsupported_backend()
    if problem is None:
        return []
    hint = (
        "Use PostgreSQL, MariaDB 10.6+ / MySQL 8 or SQLite"
        " (docs/configuration.md: Supported versions)."
    )
    return [checks.Error(problem, hint=hint, id="durablebeat.E004")]


#: what a pooler's address looks like: PgBouncer's port, Supabase's pooler port; the host
#: names managed poolers and proxies give (Neon's ``-pooler``, RDS Proxy's ``.proxy-``)
POOLER_PORTS = frozenset({6432, 6543})
POOLER_HOSTS = ("pgbouncer", "pooler", ".proxy-")


def check_pooled_cursors(**kwargs: Any) -> list[checks.CheckMessage]:
    """W005: a PostgreSQL database that looks pooled (by its address: nothing is asked of
    it) without ``DISABLE_SERVER_SIDE_CURSORS``. durablebeat reads with ``.iterator()``,
    whose server-side cursor a pooler in transaction mode loses between transactions."""
    found: list[checks.CheckMessage] = []
    for alias, db in django_settings.DATABASES.items():
        if "postgresql" not in str(db.get("ENGINE", "")) or db.get("DISABLE_SERVER_SIDE_CURSORS"):
            continue
        host, port = str(db.get("HOST") or "").lower(), str(db.get("PORT") or "")
        pooled = port.isdigit() and int(port) in POOLER_PORTS
        if not (pooled or any(mark in host for mark in POOLER_HOSTS)):
            continue
        found.append(
            checks.Warning(
                f"database {alias!r} ({host}:{port}) looks like a connection pooler, and "
                "DISABLE_SERVER_SIDE_CURSORS is not set: in transaction pooling, durablebeat's "
                "reads with .iterator() fail.",
                hint=(
                    "Set DISABLE_SERVER_SIDE_CURSORS = True on it (Django's advice for "
                    "transaction pooling; docs/configuration.md: Behind a connection pooler), "
                    "or silence durablebeat.W005 if it pools by session."
                ),
                id="durablebeat.W005",
            )
        )
    return found
