"""Schedules defined in code (``app.conf.beat_schedule``) become rows at boot (R6).

Parsing is pure and strict: a bad entry fails the boot with its name, because a deploy that
silently drops a schedule is the failure this project exists to prevent. Writing touches
only code-defined rows, so boot cost does not grow with admin-defined schedules.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from django.core.exceptions import ImproperlyConfigured, ValidationError
from django.db import transaction
from django.db.models import Q

from . import timing
from .enums import Overlap, Source
from .models import MESSAGE_FIELDS, POLICY_FIELDS, Schedule
from .validation import describe_errors, validate_schedule_fields

logger = logging.getLogger("durablebeat")

#: keys of an entry's ``options["durablebeat"]``: durablebeat's own per-schedule policy
POLICY_KEYS = {"catch_up", "catch_up_window", "startup_grace", "overlap", "description"}
#: keys of ``options`` that become message options
MESSAGE_OPTION_KEYS = {"queue", "routing_key", "priority", "expires", "headers"}


class BadEntry(ImproperlyConfigured):
    """A ``beat_schedule`` entry durablebeat cannot use; the message names it."""


@dataclass(frozen=True)
class CodeEntry:
    name: str
    task: str
    spec: timing.Spec
    args: list[Any] = field(default_factory=list)
    kwargs: dict[str, Any] = field(default_factory=dict)
    queue: str = ""
    routing_key: str = ""
    priority: int | None = None
    expire_seconds: float | None = None
    headers: dict[str, Any] = field(default_factory=dict)
    startup_grace: dt.timedelta | None = None
    catch_up: bool = False
    catch_up_window: dt.timedelta | None = None
    overlap: str = Overlap.SKIP
    description: str = ""

    def apply_to(self, row: Schedule) -> None:
        """Write everything code owns into ``row``; timing through ``set_spec``."""
        row.task, row.args, row.kwargs = self.task, self.args, self.kwargs
        row.queue, row.routing_key, row.priority = self.queue, self.routing_key, self.priority
        row.expire_seconds, row.headers = self.expire_seconds, self.headers
        row.startup_grace, row.catch_up = self.startup_grace, self.catch_up
        row.catch_up_window, row.overlap = self.catch_up_window, self.overlap
        row.description = self.description
        row.set_spec(self.spec)


def _duration(value: Any, where: str) -> dt.timedelta | None:
    if value is None or isinstance(value, dt.timedelta):
        return value
    if isinstance(value, int | float) and not isinstance(value, bool):
        return dt.timedelta(seconds=value)
    raise BadEntry(f"{where} must be a timedelta or seconds, got {value!r}")


def parse_entry(
    name: str, entry: Mapping[str, Any], default_timezone: str, check_task: bool = True
) -> CodeEntry:
    """One ``beat_schedule`` entry as a ``CodeEntry``; ``BadEntry`` names what is wrong."""
    where = f"beat_schedule[{name!r}]"
    if not isinstance(entry, Mapping):
        raise BadEntry(f"{where} must be a dict, got {type(entry).__name__}")
    unknown = set(entry) - {"task", "schedule", "args", "kwargs", "options", "relative"}
    if unknown:
        raise BadEntry(f"{where}: unknown keys {sorted(unknown)}")
    if not entry.get("task"):
        raise BadEntry(f"{where}: 'task' is required")
    if entry.get("relative"):
        # Celery's ``relative=True`` rounds the first run to the interval's unit; durablebeat
        # keeps every interval on its stored grid (R1-R3), so the flag cannot be honoured.
        raise BadEntry(f"{where}: relative=True is not supported (intervals keep their grid)")
    try:
        spec = timing.from_celery(entry.get("schedule"), default_timezone)
    except timing.InvalidSchedule as exc:
        raise BadEntry(f"{where}: schedule: {exc.message}") from exc
    options = dict(entry.get("options") or {})
    policy = dict(options.pop("durablebeat", None) or {})
    if unknown := set(policy) - POLICY_KEYS:
        raise BadEntry(f"{where}: unknown options['durablebeat'] keys {sorted(unknown)}")
    if unknown := set(options) - MESSAGE_OPTION_KEYS:
        raise BadEntry(f"{where}: unsupported options {sorted(unknown)}")
    expires = options.get("expires")
    if expires is not None and not isinstance(expires, int | float):
        raise BadEntry(f"{where}: options['expires'] must be seconds, got {expires!r}")
    code = CodeEntry(
        name=name,
        task=str(entry["task"]),
        spec=spec,
        args=list(entry.get("args") or []),
        kwargs=dict(entry.get("kwargs") or {}),
        queue=str(options.get("queue") or ""),
        routing_key=str(options.get("routing_key") or ""),
        priority=options.get("priority"),
        expire_seconds=float(expires) if expires is not None else None,
        headers=dict(options.get("headers") or {}),
        startup_grace=_duration(policy.get("startup_grace"), f"{where} startup_grace"),
        catch_up=bool(policy.get("catch_up", False)),
        catch_up_window=_duration(policy.get("catch_up_window"), f"{where} catch_up_window"),
        overlap=str(policy.get("overlap", Overlap.SKIP)),
        description=str(policy.get("description", "")),
    )
    if code.overlap not in Overlap.values:
        raise BadEntry(f"{where}: overlap must be one of {Overlap.values}, got {code.overlap!r}")
    row = Schedule(name=name)
    code.apply_to(row)
    errors = validate_schedule_fields(row, check_task=check_task)
    try:
        # The model's own field checks too (priority a number in range, lengths), so that
        # a bad option fails the boot naming the entry rather than the row's save.
        row.clean_fields(exclude=set(errors))
    except ValidationError as exc:
        errors |= {f: " ".join(msgs) for f, msgs in exc.message_dict.items()}
    if errors:
        raise BadEntry(f"{where}: {describe_errors(errors)}")
    return code


def celery_timezone(app: Any) -> str:
    """The zone Celery's own beat reads a plain ``crontab`` in: ``timezone`` when set, else
    UTC (``enable_utc``, the default) or local time, which in a Django process is
    ``TIME_ZONE`` (Django sets the process's ``TZ`` from it). Same zone, same slots when a
    project switches from Celery's scheduler (R20)."""
    if app.conf.timezone:
        return str(app.conf.timezone)
    if app.conf.enable_utc:
        return "UTC"
    from django.conf import settings

    return str(settings.TIME_ZONE or "UTC")


def parse_beat_schedule(
    beat_schedule: Mapping[str, Any], default_timezone: str, check_task: bool = True
) -> list[CodeEntry]:
    return [
        parse_entry(name, entry, default_timezone, check_task)
        for name, entry in beat_schedule.items()
    ]


def sync(entries: list[CodeEntry], now: dt.datetime) -> dict[str, Schedule]:
    """Upsert code-defined rows (R6). Returns the code rows by name, as stored."""
    by_name = {e.name: e for e in entries}
    with transaction.atomic():
        rows = Schedule.objects.select_for_update().filter(
            Q(name__in=list(by_name)) | Q(source=Source.CODE)
        )
        existing = {s.name: s for s in rows}
        result: dict[str, Schedule] = {}
        for name, entry in by_name.items():
            row = existing.get(name)
            if row is None:
                row = Schedule(name=name, source=Source.CODE)
                entry.apply_to(row)
                row.save()
                logger.info(
                    "code schedule added: %s", name, extra={"event": "code_added", "schedule": name}
                )
            else:
                _update(row, entry, now)
            result[name] = row
        for name, row in existing.items():
            if (
                name not in by_name
                and row.source == Source.CODE
                and row.removed_from_code_at is None
            ):
                # Removed from code: stop firing, keep its history.
                Schedule.objects.filter(pk=row.pk).update(
                    enabled=False, removed_from_code_at=now, next_fire_at=None
                )
                logger.warning(
                    "code schedule removed from beat_schedule, disabled: %s",
                    name,
                    extra={"event": "code_removed", "schedule": name},
                )
    return result


def _update(row: Schedule, entry: CodeEntry, now: dt.datetime) -> None:
    try:
        old_spec: timing.Spec | None = row.to_spec()
    except timing.InvalidSchedule:
        old_spec = None
    before = _owned_values(row)
    entry.apply_to(row)
    timing_changed = old_spec != entry.spec
    if timing_changed:
        row.next_fire_at = None  # beat computes it afresh (R2 for a new schedule)
        logger.info(
            "code schedule timing changed, next fire reset: %s",
            row.name,
            extra={"event": "code_timing_changed", "schedule": row.name},
        )
    if row.source != Source.CODE or row.removed_from_code_at is not None:
        if not row.enabled:
            row.enabled_at = now  # back in code: its periods count from now
        row.source, row.removed_from_code_at, row.enabled = Source.CODE, None, True
    if timing_changed or before != _owned_values(row) or row.error:
        row.save()


def _owned_values(row: Schedule) -> tuple[Any, ...]:
    names = ("task", *MESSAGE_FIELDS, *POLICY_FIELDS, "description")
    return tuple(getattr(row, n) for n in (*names, "source", "removed_from_code_at", "enabled"))
