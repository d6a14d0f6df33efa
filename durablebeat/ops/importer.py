"""``manage.py durablebeat import-django-celery-beat``: move in one command.

Reads django-celery-beat's own tables (it must be in ``INSTALLED_APPS`` while you import)
and creates one durablebeat schedule per periodic task. Each next fire is computed from the
stored ``last_run_at`` on the schedule's own grid, so nothing fires at once or twice on the
switch. Nothing is written to django-celery-beat's tables. Running it twice changes
nothing: a name that exists already in durablebeat is left as it is.

Stop django-celery-beat's beat before importing, start durablebeat's after.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
from dataclasses import dataclass, field
from typing import Any

from django.apps import apps
from django.core.exceptions import ValidationError
from django.db import DatabaseError

from .. import conf, db
from ..core import timing
from ..enums import Reason, Source
from ..models import Schedule
from ..validation import (
    JSON_SHAPES,
    MAX_EVERY,
    MIN_EVERY,
    describe_errors,
    shape_error,
    validate_schedule_fields,
)
from ..words import absolute, duration_words, schedule_words

logger = logging.getLogger("durablebeat")

CREATE, EXISTS, SKIP = "create", "exists", "skip"

_PERIODS = {
    "days": dt.timedelta(days=1),
    "hours": dt.timedelta(hours=1),
    "minutes": dt.timedelta(minutes=1),
    "seconds": dt.timedelta(seconds=1),
    "microseconds": dt.timedelta(microseconds=1),
}


class NotInstalled(RuntimeError):
    """django-celery-beat is not in INSTALLED_APPS, so its tables cannot be read."""


class Skip(Exception):
    """A periodic task that cannot be moved; the message says why."""


@dataclass
class Item:
    """One periodic task and what the import does with it."""

    name: str
    action: str
    row: Schedule | None = None
    why: str = ""
    notes: list[str] = field(default_factory=list)

    def line(self) -> str:
        # A name with a newline would print a line of its own: shown quoted instead.
        name = self.name if self.name.isprintable() else repr(self.name)
        if self.action == SKIP:
            return f"skip    {name}: {self.why}"
        if self.action == EXISTS:
            return f"exists  {name}: {self.why}"
        assert self.row is not None
        words = schedule_words(self.row)
        state = "" if self.row.enabled else " [disabled]"
        notes = "".join(f"; {n}" for n in self.notes)
        return f"create  {name}: {self.row.task}, {words}{state}; {self.why}{notes}"


@dataclass
class Result:
    items: list[Item]
    dry_run: bool

    def count(self, action: str) -> int:
        return sum(1 for i in self.items if i.action == action)

    def lines(self) -> list[str]:
        lines = [i.line() for i in self.items]
        verb = "would create" if self.dry_run else "created"
        lines.append(
            f"{verb} {self.count(CREATE)}, skipped {self.count(SKIP)}, "
            f"already present {self.count(EXISTS)}"
            + (" (dry run: nothing written)" if self.dry_run else "")
        )
        return lines


def _periodic_task_model() -> Any:
    if not apps.is_installed("django_celery_beat"):
        raise NotInstalled(
            "django-celery-beat is not in INSTALLED_APPS: add 'django_celery_beat' for the "
            "import (its tables must be there), then remove it"
        )
    return apps.get_model("django_celery_beat", "PeriodicTask")


def _json(text: str | None, name: str) -> Any:
    """Message field ``name`` (``validation.JSON_SHAPES``) from django-celery-beat's text."""
    if not text:
        return JSON_SHAPES[name][0]()
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise Skip(f"{name}: malformed JSON ({exc})") from exc
    if (msg := shape_error(name, value)) is not None:
        raise Skip(f"{name}: {msg}")
    return value


def _spec(task: Any) -> timing.Spec:
    try:
        if task.solar_id is not None:  # R25: the same sun event, computed as Celery does
            sun = task.solar
            return timing.Solar(sun.event, float(sun.latitude), float(sun.longitude))
        if task.interval_id is not None:
            return timing.Interval(_every(task.interval.every, task.interval.period))
        if task.crontab_id is not None:
            c = task.crontab
            return timing.Crontab.from_fields(c, str(getattr(c.timezone, "key", c.timezone)))
        if task.clocked_id is not None:
            return timing.Clocked(task.clocked.clocked_time)
    except timing.InvalidSchedule as exc:
        raise Skip(f"its schedule is invalid: {exc}") from exc
    raise Skip("it has no schedule (no interval, crontab, clocked or solar)")


def _every(count: int, period: str) -> dt.timedelta:
    """django-celery-beat's (every, period) as a timedelta, refused by range before
    timedelta's own arithmetic can overflow (R21)."""
    if period not in _PERIODS:
        raise Skip(f"its interval period {period!r} is unknown")
    seconds = count * _PERIODS[period].total_seconds()
    if not MIN_EVERY.total_seconds() <= seconds <= MAX_EVERY.total_seconds():
        raise Skip(
            f"every: {count} {period} is outside {MIN_EVERY.total_seconds():g} s to "
            f"{MAX_EVERY.days} days"
        )
    return count * _PERIODS[period]


def _aware(value: dt.datetime | None) -> dt.datetime | None:
    if value is None or value.tzinfo is not None:
        return value
    return value.replace(tzinfo=dt.UTC)  # django-celery-beat with USE_TZ off stores UTC


def _ran(task: Any) -> bool:
    return bool(task.total_run_count) or task.last_run_at is not None


def _interval_next(
    spec: timing.Interval, task: Any, now: dt.datetime
) -> tuple[dt.datetime | None, str]:
    """From the last run, on its grid; like django-celery-beat, a task that never ran counts
    from when it was last changed; past that, beat's startup grace (R2)."""
    last = _aware(task.last_run_at)
    anchor, what = (last, "last run") if last else (_aware(task.date_changed), "last change")
    if anchor is None:
        return None, "never ran: fires one startup grace after beat starts"
    first = anchor + spec.every
    if first > now:
        return first, f"{what} {absolute(anchor)} + {duration_words(spec.every)}"
    if last is None:
        return (
            None,
            f"due since {absolute(first)}, never ran: fires one startup grace after beat starts",
        )
    nxt = timing.advance(spec, first, now)
    return nxt, f"slot {absolute(first)} passed on the switch: next on its grid"


def _next_fire(
    spec: timing.Spec, task: Any, now: dt.datetime
) -> tuple[dt.datetime | None, bool, str]:
    """(next_fire_at, enabled, why) so that the switch neither fires early nor twice."""
    start = _aware(task.start_time)
    if isinstance(spec, timing.Clocked):
        if _ran(task):
            return None, False, "one-off that already ran: imported disabled"
        if spec.at <= now:
            return (
                None,
                False,
                f"one-off time {absolute(spec.at)} passed without a run: imported disabled",
            )
        return spec.at, True, "one-off at its time"
    assert not isinstance(spec, timing.Custom)  # _spec never makes one
    if start is not None and start > now:
        if isinstance(spec, timing.Interval):
            return start, True, f"first fire at its start time {absolute(start)}"
        slot = timing.next_slot(spec, start - dt.timedelta(microseconds=1))
        return slot, True, f"first slot from its start time {absolute(start)}"
    if isinstance(spec, timing.Interval):
        nxt, why = _interval_next(spec, task, now)
        return nxt, True, why
    return timing.next_slot(spec, now), True, "next slot after now"


def build_row(task: Any, now: dt.datetime) -> tuple[Schedule, str, list[str]]:
    """The durablebeat row for one periodic task; ``Skip`` says why there is none."""
    notes: list[str] = []
    ended = _aware(task.expires)
    if ended is not None and ended > now:
        raise Skip(
            f"it has an end date (expires {absolute(ended)}), which durablebeat does not "
            "enforce: re-create it and disable it by hand when it ends"
        )
    spec = _spec(task)
    args = _json(task.args, "args")
    kwargs = _json(task.kwargs, "kwargs")
    headers = _json(task.headers, "headers")
    nxt, enabled, why = _next_fire(spec, task, now)
    if task.one_off and not isinstance(spec, timing.Clocked):
        if _ran(task):
            enabled, nxt, why = False, None, "one-off that already ran: imported disabled"
        else:
            # Fire once, then stop: here that is a one-off at the time it would have fired.
            spec = timing.Clocked(nxt or now + conf.settings.STARTUP_GRACE)
            nxt = spec.at
            notes.append(f"one-off: fires once at {absolute(spec.at)}")
    if ended is not None:
        # django-celery-beat sent its messages already expired: it did not run any more.
        enabled, nxt, why = False, None, f"its end date {absolute(ended)} passed: imported disabled"
    if not task.enabled:
        enabled, nxt = False, None
    row = Schedule(
        name=task.name,
        task=task.task,
        args=args,
        kwargs=kwargs,
        queue=task.queue or "",
        exchange=task.exchange or "",
        routing_key=task.routing_key or "",
        priority=task.priority,
        expire_seconds=float(task.expire_seconds) if task.expire_seconds else None,
        headers=headers,
        description=task.description or "",
        enabled=enabled,
        source=Source.CODE if task.name in _code_names() else Source.DATABASE,
        next_fire_at=nxt if enabled else None,
        next_fire_reason=Reason.SCHEDULED,
    )
    row.set_spec(spec)
    # R29: the task is django-celery-beat's row's, a person's write, checked even when the
    # name is also a beat_schedule entry's (the row then comes in as code's)
    errors = validate_schedule_fields(row, check_task=True)
    try:
        row.clean_fields(exclude=set(errors))  # lengths and types, as the admin would
    except ValidationError as exc:
        errors |= {f: " ".join(msgs) for f, msgs in exc.message_dict.items()}
    if errors:
        raise Skip(describe_errors(errors))
    if enabled and nxt is not None:
        why = f"next fire {absolute(nxt)} ({why})"
    if row.source == Source.CODE:
        notes.append("beat_schedule has this name: code owns it from beat's next boot")
    return row, why, notes


def _code_names() -> frozenset[str]:
    """Names in the Celery app's ``beat_schedule``. django-celery-beat copies those entries
    into its own table, so the import meets them again: imported as code-defined, beat's
    next boot owns them (keeping the imported next fire when the timing is the same)
    instead of refusing to take over an admin-made row (codesync)."""
    from celery import current_app

    return frozenset(current_app._get_current_object().conf.beat_schedule or {})


def plan(now: dt.datetime) -> list[Item]:
    """What the import would do, without writing anything."""
    periodic_task = _periodic_task_model()
    existing = set(Schedule.objects.values_list("name", flat=True))
    items = []
    tasks = periodic_task.objects.select_related("interval", "crontab", "solar", "clocked")
    for task in tasks.order_by("name"):
        if task.name in existing:
            items.append(
                Item(task.name, EXISTS, why="a durablebeat schedule has this name; left as it is")
            )
            continue
        try:
            row, why, notes = build_row(task, now)
        except Skip as exc:
            items.append(Item(task.name, SKIP, why=str(exc)))
            continue
        except Exception as exc:  # one row that cannot be read must not stop the import
            logger.warning("cannot import %r", task.name, exc_info=True)
            items.append(Item(task.name, SKIP, why=f"cannot be read: {type(exc).__name__}: {exc}"))
            continue
        items.append(Item(task.name, CREATE, row, why, notes))
    return items


def run_import(now: dt.datetime, *, dry_run: bool) -> Result:
    items = plan(now)
    if not dry_run:
        with db.atomic():
            for item in items:
                if item.action == CREATE and item.row is not None:
                    try:
                        with db.atomic():  # a savepoint: the rest still goes in
                            item.row.save()
                    except DatabaseError as exc:
                        item.action, item.why = SKIP, f"the database refused it: {exc}"
                        continue
                    logger.info(
                        "imported from django-celery-beat: %s",
                        item.name,
                        extra={"event": "imported", "schedule": item.name},
                    )
    return Result(items, dry_run)
