"""Bad input is refused where it enters, with the field named (R20).

One function serves the model's ``full_clean``, the admin form and the code sync, so the three
entry points can never disagree about what is valid.
"""

from __future__ import annotations

import functools
import json
from typing import TYPE_CHECKING, Any

from . import timing

if TYPE_CHECKING:
    from .models import Schedule


def known_task_names() -> frozenset[str] | None:
    """Task names registered in the current Celery app, or None when that cannot be known."""
    from celery import current_app

    app = current_app._get_current_object()
    if app.main is None and not app.conf.get("include") and not app.conf.get("imports"):
        # The default app: nobody configured Celery in this process, so there is no
        # registry to check against; refusing every name would be wrong.
        return None
    _import_task_modules(app)
    return frozenset(app.tasks.keys())


_importing = False


@functools.cache
def _import_task_modules(app: Any) -> None:
    # Celery's autodiscovery runs lazily (in worker/beat start-up); a web process has to ask.
    # Importing runs Django's system checks (celery's Django fix-up), which may validate
    # schedules again: that inner call must not import a second time.
    global _importing
    if _importing:
        return
    _importing = True
    try:
        app.loader.import_default_modules()
    finally:
        _importing = False


def task_name_error(name: str) -> str | None:
    names = known_task_names()
    if names is None or name in names:
        return None
    return f"no task named {name!r} is registered in the Celery app"


#: the JSON fields of a schedule's message and the shape each must have
JSON_SHAPES: dict[str, tuple[type, str]] = {
    "args": (list, "list"),
    "kwargs": (dict, "object"),
    "headers": (dict, "object"),
}


def _shape_error(value: Any, expected: type, what: str) -> str | None:
    if not isinstance(value, expected):
        return f"must be a JSON {what}, got {type(value).__name__}"
    return None


def check_message_shapes(schedule: Schedule) -> None:
    """Raise ``timing.InvalidSchedule`` naming the first message field of the wrong shape.

    Cheap enough for every fire: a row written around the form (SQL, a fixture, an old
    version) must be set aside as bad, not break the batch it is in (R20)."""
    for name, (expected, what) in JSON_SHAPES.items():
        if (msg := _shape_error(getattr(schedule, name), expected, what)) is not None:
            raise timing.InvalidSchedule(name, msg)


def _json_error(value: Any, expected: type, what: str) -> str | None:
    if (msg := _shape_error(value, expected, what)) is not None:
        return msg
    try:
        json.dumps(value)
    except (TypeError, ValueError) as exc:
        return f"must be JSON-serialisable: {exc}"
    return None


def validate_schedule_fields(schedule: Schedule, *, check_task: bool = True) -> dict[str, str]:
    """Every problem with a schedule row, as {model field: message}. Empty means valid."""
    errors: dict[str, str] = {}
    try:
        schedule.to_spec()
    except timing.InvalidSchedule as exc:
        errors[schedule.model_field_for(exc.field)] = exc.message
    for name, (expected, what) in JSON_SHAPES.items():
        if (msg := _json_error(getattr(schedule, name), expected, what)) is not None:
            errors[name] = msg
    if schedule.startup_grace is not None and schedule.startup_grace.total_seconds() < 0:
        errors["startup_grace"] = "must not be negative"
    if schedule.catch_up_window is not None and schedule.catch_up_window.total_seconds() <= 0:
        errors["catch_up_window"] = "must be positive"
    if schedule.expire_seconds is not None and schedule.expire_seconds <= 0:
        errors["expire_seconds"] = "must be positive"
    if check_task and schedule.task and (msg := task_name_error(schedule.task)) is not None:
        errors["task"] = msg
    return errors


def describe_errors(errors: dict[str, str]) -> str:
    return "; ".join(f"{field}: {msg}" for field, msg in sorted(errors.items()))
