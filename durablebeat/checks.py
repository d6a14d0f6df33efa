"""Django system checks with stable ids (``manage.py check``)."""

from __future__ import annotations

from typing import Any

from django.conf import settings as django_settings
from django.core import checks

from . import conf

SCHEDULER_PATH = "durablebeat.schedulers:DurableScheduler"


def register() -> None:
    checks.register(check_time_zone_support, "durablebeat")
    checks.register(check_settings, "durablebeat")
    checks.register(check_scheduler_configured, "durablebeat")
    checks.register(check_code_schedules, "durablebeat")


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
    errors: list[checks.CheckMessage] = []
    s = conf.settings
    for name in dir(type(s)):
        if name.isupper():
            try:
                getattr(s, name)
            except (TypeError, ValueError) as exc:
                errors.append(
                    checks.Error(f"DURABLEBEAT_{name} is invalid: {exc}", id="durablebeat.E002")
                )
    if not errors and s.MAX_INTERVAL <= 0:
        errors.append(
            checks.Error("DURABLEBEAT_MAX_INTERVAL must be positive.", id="durablebeat.E002")
        )
    return errors


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
    from .codesync import BadEntry, celery_timezone, parse_beat_schedule

    app = _celery_app()
    try:
        # Task names are checked when beat boots: importing task modules from inside a
        # system check would run the checks again (celery's Django fix-up).
        parse_beat_schedule(app.conf.beat_schedule or {}, celery_timezone(app), check_task=False)
    except BadEntry as exc:
        return [checks.Error(str(exc), id="durablebeat.E003")]
    return []
