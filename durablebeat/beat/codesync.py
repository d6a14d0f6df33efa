"""Schedules defined in code (``app.conf.beat_schedule``) become rows at boot (R6).

Parsing is pure and strict: a bad entry fails the boot with its name, because a deploy that
silently drops a schedule is the failure this project exists to prevent. Writing touches
only code-defined rows, so boot cost does not grow with admin-defined schedules.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import logging
import math
from collections.abc import Callable, Hashable, Mapping
from dataclasses import dataclass, field
from typing import Any

from celery.schedules import crontab
from celery.schedules import schedule as celery_schedule
from django.core.exceptions import ImproperlyConfigured, ValidationError
from django.db import IntegrityError
from django.db.models import Q
from kombu.entity import DELIVERY_MODES

from .. import db
from ..core import timing
from ..enums import Overlap, Source
from ..first_fire import FirstFires
from ..models import MESSAGE_FIELDS, MESSAGE_OPTIONS, POLICY_FIELDS, Schedule
from ..validation import (
    MAX_EVERY,
    TEXT_OPTIONS,
    MessageCheck,
    describe_errors,
    line_error,
    text_error,
    validate_schedule_fields,
)
from . import entry_options
from . import live as live_values
from .celery_specs import from_celery
from .entry_options import REFUSED_OPTIONS as REFUSED_OPTIONS  # tests read it here

logger = logging.getLogger("durablebeat")

#: keys of an entry's ``options["durablebeat"]``: durablebeat's own per-schedule policy
POLICY_KEYS = {
    "catch_up",
    "catch_up_window",
    "startup_grace",
    "overlap",
    "max_in_flight",
    "terminate",
    "jitter",
    "pause_after_failures",
    "retention",
    "description",
    "take_over",
}
#: options whose value is a number of seconds
_SECONDS_OPTIONS = ("expires", "countdown", "time_limit", "soft_time_limit")


#: the keys of a ``beat_schedule`` entry that durablebeat reads
ENTRY_KEYS = ("task", "schedule", "args", "kwargs", "options", "relative")
#: keys Celery's ``ScheduleEntry`` takes that change nothing a fire does, accepted and ignored
#: as Celery's beat ignores them (R25): ``name`` and ``app`` are replaced by the entry's own
#: (``Scheduler._maybe_entry``), ``total_run_count`` is a counter Celery's beat only reports
IGNORED_KEYS = ("name", "app", "total_run_count")


class BadEntry(ImproperlyConfigured):
    """A ``beat_schedule`` entry durablebeat cannot use; the message names it, ``field``
    the part at fault (a model field where there is one)."""

    def __init__(self, message: str, field: str = "schedule") -> None:
        super().__init__(message)
        self.field = field


@dataclass(frozen=True)
class CodeEntry:
    name: str
    task: str
    spec: timing.Spec
    args: list[Any] = field(default_factory=list)
    kwargs: dict[str, Any] = field(default_factory=dict)
    # the message options (R24): named as the model's fields, empty means "not given"
    queue: str = ""
    exchange: str = ""
    exchange_type: str = ""
    routing_key: str = ""
    priority: int | None = None
    expire_seconds: float | None = None
    countdown: float | None = None
    headers: dict[str, Any] = field(default_factory=dict)
    serializer: str = ""
    compression: str = ""
    delivery_mode: int | None = None
    ignore_result: bool | None = None
    shadow: str = ""
    time_limit: float | None = None
    soft_time_limit: float | None = None
    startup_grace: dt.timedelta | None = None
    catch_up: bool = False
    catch_up_window: dt.timedelta | None = None
    overlap: str = Overlap.SKIP
    #: R34: ``allow``'s bound on the runs in flight (None: none); ``replace`` terminates
    max_in_flight: int | None = None
    terminate: bool = False
    #: R35: each slot sent up to this much after it; None: ``DURABLEBEAT_JITTER``
    jitter: dt.timedelta | None = None
    #: R36: pause after this many runs in a row failed or were lost; None: the setting's,
    #: 0: never
    pause_after_failures: int | None = None
    #: how long the ledger keeps its runs (R32); None: ``DURABLEBEAT_RETENTION``
    retention: dt.timedelta | None = None
    description: str = ""
    #: may take over an admin-made row of the same name (otherwise the boot refuses)
    take_over: bool = False
    #: the real args/kwargs when the row cannot hold them (R25): the beat publishes these
    live: live_values.LiveValues | None = field(default=None, compare=False)
    #: Celery publish options the entry gives that beat's own publish supersedes (R25)
    superseded: tuple[str, ...] = field(default=(), compare=False)
    #: the JSON text of ``args`` and ``kwargs`` as ``ShapeCache`` checked them: the API's
    #: ``COPY`` writes it as is instead of encoding them again (R33); None: not kept
    encoded: tuple[str, str] | None = field(default=None, compare=False)
    #: entries of one shape (``ShapeCache``) differ only in their ``OWN_FIELDS``; None:
    #: read on its own
    shape: int | None = field(default=None, compare=False)

    def apply_to(self, row: Schedule) -> None:
        """Write everything code owns into ``row``; timing through ``set_spec``."""
        row.task = self.task
        for name in MESSAGE_FIELDS:
            setattr(row, name, getattr(self, name))
        row.startup_grace, row.catch_up = self.startup_grace, self.catch_up
        row.catch_up_window, row.overlap = self.catch_up_window, self.overlap
        row.max_in_flight, row.terminate = self.max_in_flight, self.terminate
        row.jitter = self.jitter
        row.pause_after_failures = self.pause_after_failures
        row.retention, row.description = self.retention, self.description
        row.set_spec(self.spec)


class _Reader:
    """Reads one entry's values as they are: the wrong type is refused naming the entry
    and the field, never converted (``args='abc'`` is not ``['a', 'b', 'c']``)."""

    def __init__(self, where: str) -> None:
        self.where = where

    def bad(self, what: str, message: str) -> BadEntry:
        return BadEntry(f"{self.where}: {what}: {message}", what)

    def typed(self, value: Any, what: str, types: tuple[type, ...], words: str) -> Any:
        if value is None:
            return None
        is_bool = isinstance(value, bool)  # a bool is an int to isinstance, not to a person
        if not (is_bool if bool in types else not is_bool and isinstance(value, types)):
            raise self.bad(what, f"{value!r:.80} value must be {words}, not {type(value).__name__}")
        return value

    def text(self, value: Any, what: str) -> str:
        return str(self.typed(value, what, (str,), "a string") or "")

    def duration(self, value: Any, what: str) -> dt.timedelta | None:
        self.typed(value, what, (dt.timedelta, int, float), "a timedelta or seconds")
        if isinstance(value, int | float):
            seconds = float(value)
            # NaN, infinity and 10**20 s are refused here, before timedelta's arithmetic.
            if not math.isfinite(seconds):
                raise self.bad(what, f"must be a finite number of seconds, got {value!r}")
            if abs(seconds) > MAX_EVERY.total_seconds():
                raise self.bad(what, f"must be at most {MAX_EVERY.days} days, got {value!r}")
            return dt.timedelta(seconds=seconds)
        return value  # type: ignore[no-any-return]

    def number(self, value: Any, what: str) -> float | None:
        self.typed(value, what, (int, float), "a number of seconds")
        if value is not None and not math.isfinite(value):
            raise self.bad(what, f"must be a finite number of seconds, got {value!r}")
        return None if value is None else float(value)

    def delivery_mode(self, value: Any) -> int | None:
        words = "1, 2, 'transient' or 'persistent'"
        self.typed(value, "delivery_mode", (int, str), words)
        if isinstance(value, str):
            if value not in DELIVERY_MODES:
                raise self.bad("delivery_mode", f"must be {words}, got {value!r:.80}")
            return int(DELIVERY_MODES[value])
        return value  # type: ignore[no-any-return]

    def message(self, options: Mapping[str, Any]) -> dict[str, Any]:
        """{CodeEntry field: value} of an entry's message options, each read by its type."""
        values: dict[str, Any] = {
            MESSAGE_OPTIONS[key]: self.text(options.get(key), key) for key in TEXT_OPTIONS
        }
        for key in _SECONDS_OPTIONS:
            values[MESSAGE_OPTIONS[key]] = self.number(options.get(key), f"options[{key!r}]")
        values["priority"] = self.typed(options.get("priority"), "priority", (int,), "an integer")
        values["ignore_result"] = self.typed(
            options.get("ignore_result"), "ignore_result", (bool,), "True or False"
        )
        values["delivery_mode"] = self.delivery_mode(options.get("delivery_mode"))
        headers = self.typed(options.get("headers"), "headers", (dict,), "a dict")
        values["headers"] = dict(headers or {})
        return values


def parse_entry(
    name: str,
    entry: Mapping[str, Any],
    default_timezone: str,
    check_task: bool = True,
    serializer_of: Callable[[str], str] | None = None,
    where: str | None = None,
) -> CodeEntry:
    """One ``beat_schedule`` entry as a ``CodeEntry``; ``BadEntry`` names what is wrong.
    ``where``: how messages name the entry (``beat_schedule['name']``)."""
    where = where or f"beat_schedule[{name!r}]"
    if not isinstance(name, str):
        raise BadEntry(f"{where}: the entry's name must be a string", "name")
    if not isinstance(entry, Mapping):
        raise BadEntry(f"{where} must be a dict, got {type(entry).__name__}")
    unknown = set(entry) - {*ENTRY_KEYS, *IGNORED_KEYS}
    if unknown:
        raise BadEntry(f"{where}: unknown keys {sorted(unknown, key=repr)}")
    read = _Reader(where)
    task = read.text(entry.get("task"), "task")
    if not task:
        raise BadEntry(f"{where}: 'task' is required", "task")
    # Celery's ``relative=True`` (the entry's, or a ``schedule(..., relative=True)``'s)
    # rounds each run to the interval's clock unit; a crontab ignores it, as Celery's does
    # (R25).
    relative = read.typed(entry.get("relative"), "relative", (bool,), "True or False")
    try:
        spec = from_celery(entry.get("schedule"), default_timezone, bool(relative))
    except timing.InvalidSchedule as exc:
        # a field of its own (a solar latitude...) names itself; the rest is "the schedule"
        detail = exc.message if exc.field in ("schedule", "every", "at") else str(exc)
        raise BadEntry(f"{where}: schedule: {detail}") from exc
    args = read.typed(entry.get("args"), "args", (list, tuple), "a list or tuple")
    kwargs = read.typed(entry.get("kwargs"), "kwargs", (dict,), "a dict")
    options = dict(read.typed(entry.get("options"), "options", (dict,), "a dict") or {})
    policy = dict(
        read.typed(options.pop("durablebeat", None), "options['durablebeat']", (dict,), "a dict")
        or {}
    )
    if unknown := set(policy) - POLICY_KEYS:
        keys = sorted(unknown, key=repr)
        raise BadEntry(f"{where}: unknown options['durablebeat'] keys {keys}", "options")
    if refused := sorted(k for k in options if isinstance(k, str) and k in REFUSED_OPTIONS):
        reasons = "; ".join(f"{key} is refused: {REFUSED_OPTIONS[key]}" for key in refused)
        raise BadEntry(f"{where}: {reasons}", "options")
    try:
        superseded, links = entry_options.take_publish_options(options)
    except entry_options.BadCallback as exc:
        raise BadEntry(f"{where}: {exc}", "options") from exc
    if unknown := set(options) - {*MESSAGE_OPTIONS, "headers"}:
        raise BadEntry(f"{where}: unsupported options {sorted(unknown, key=repr)}", "options")
    flags = {
        key: read.typed(policy.get(key, False), key, (bool,), "True or False")
        for key in ("catch_up", "take_over", "terminate")
    }
    overlap = read.text(policy.get("overlap", Overlap.SKIP), "overlap")
    if overlap not in Overlap.values:
        raise BadEntry(
            f"{where}: overlap must be one of {Overlap.values}, got {overlap!r}", "overlap"
        )
    message = read.message(options)
    stored_args, stored_kwargs, live = live_values.split(args or [], kwargs or {}, links)
    if live is not None and serializer_of is not None:
        # R25: Celery's beat sends these through the message's serializer (the entry's, else
        # the task's, else the app's); one that cannot carry a value fails at every send
        # there, so it fails the boot here.
        serializer = message["serializer"] or serializer_of(task)
        if (error := live_values.serializer_error(live, serializer)) is not None:
            raise BadEntry(f"{where}: {error}", "args")
    code = CodeEntry(
        name=name,
        task=task,
        spec=spec,
        args=stored_args,
        kwargs=stored_kwargs,
        **message,
        startup_grace=read.duration(policy.get("startup_grace"), "startup_grace"),
        catch_up=flags["catch_up"],
        catch_up_window=read.duration(policy.get("catch_up_window"), "catch_up_window"),
        overlap=overlap,
        max_in_flight=read.typed(policy.get("max_in_flight"), "max_in_flight", (int,), "a number"),
        terminate=flags["terminate"],
        jitter=read.duration(policy.get("jitter"), "jitter"),
        pause_after_failures=read.typed(
            policy.get("pause_after_failures"), "pause_after_failures", (int,), "a number"
        ),
        retention=read.duration(policy.get("retention"), "retention"),
        description=read.text(policy.get("description"), "description"),
        take_over=flags["take_over"],
        live=live,
        superseded=superseded,
    )
    row = Schedule(name=name, source=Source.CODE)
    code.apply_to(row)
    errors = validate_schedule_fields(row, check_task=check_task)
    try:
        # The model's own field checks too (lengths), so that a bad option fails the boot
        # naming the entry rather than the row's save.
        row.clean_fields(exclude=set(errors))
    except ValidationError as exc:
        errors |= {f: " ".join(msgs) for f, msgs in exc.message_dict.items()}
    if errors:
        raise BadEntry(f"{where}: {describe_errors(errors)}", min(errors))
    return code


#: what entries of one shape may differ in (``_with_own_values`` sets these), named as the
#: row's fields
OWN_FIELDS = ("name", "args", "kwargs")


class ShapeCache:
    """``parse_entry`` for many entries that differ only in name, args and kwargs (a digest
    per customer): the rest of an entry (task, schedule, zone, options), its shape, is read
    and checked in full once, by ``parse_entry``; each further entry of that shape has only
    its name, args and kwargs checked, by the same rules (R20, R21, R29). An entry whose own
    values fail those checks, or whose shape cannot be told apart by value (an object in
    its options, a custom schedule), is read in full, so every refusal is ``parse_entry``'s
    own, in the same words."""

    def __init__(self, check_task: bool = True) -> None:
        self.check_task = check_task
        self._read: dict[Hashable, tuple[CodeEntry, MessageCheck]] = {}

    def parse(
        self, name: str, entry: Mapping[str, Any], default_timezone: str, where: str
    ) -> CodeEntry:
        key = _shape_key(entry, default_timezone)
        read = self._read.get(key) if key is not None else None
        if read is not None and (code := _with_own_values(*read, name, entry)) is not None:
            return code
        code = parse_entry(name, entry, default_timezone, self.check_task, where=where)
        if key is not None and code.live is None:
            code = dataclasses.replace(code, shape=len(self._read))
            self._read[key] = (code, MessageCheck(code.headers))
        return code


class _NotAValue(Exception):
    """A part of an entry that is not a plain value: its shape is not cached."""


#: the model's own check of a name (its length, not blank), as ``clean_fields`` runs it
_NAME_FIELD = Schedule._meta.get_field("name")


def _with_own_values(
    read: CodeEntry, message: MessageCheck, name: Any, entry: Mapping[str, Any]
) -> CodeEntry | None:
    """``read`` (an entry of the same shape, checked) with this entry's name, args and
    kwargs, checked as ``parse_entry`` checks them; None when they need its full reading."""
    args, kwargs = entry.get("args"), entry.get("kwargs")
    if type(name) is not str or type(args) not in (list, tuple, type(None)):
        return None
    if type(kwargs) not in (dict, type(None)):
        return None
    flat = live_values.flat(args, kwargs)  # the common case: split would keep them as given
    if flat:
        stored_args, stored_kwargs = list(args or ()), dict(kwargs or {})
    else:
        stored_args, stored_kwargs, live = live_values.split(args or [], kwargs or {})
        if live is not None:
            return None
    if line_error(name) or text_error(name):
        return None
    errors, encoded = message.check(stored_args, stored_kwargs, flat=flat)
    if errors:
        return None
    try:
        _NAME_FIELD.clean(name, None)
    except ValidationError:
        return None
    # ``dataclasses.replace`` runs ``__init__`` over every field, ``copy.copy`` goes
    # through pickle's protocol: a new object given the read one's fields, then three set,
    # is a fraction of either (a million entries, R33)
    code = object.__new__(type(read))
    code.__dict__.update(read.__dict__)
    object.__setattr__(code, "name", name)
    object.__setattr__(code, "args", stored_args)
    object.__setattr__(code, "kwargs", stored_kwargs)
    object.__setattr__(code, "encoded", encoded)
    return code


def _shape_key(entry: Mapping[str, Any], default_timezone: str) -> Hashable | None:
    """What ``parse_entry`` reads of an entry besides its name, args and kwargs, as a
    hashable value that two entries share only when they read the same; None when a part
    is an object (kombu's, a signature) or a schedule not compared by value here."""
    if type(entry) is not dict:
        return None
    try:
        return (
            default_timezone,
            tuple([_value_key(k) for k in entry if k not in _NOT_SHAPE]),
            _value_key(entry.get("task")),
            _schedule_key(entry.get("schedule")),
            _value_key(entry.get("relative")),
            _value_key(entry.get("options")),
        )
    except _NotAValue:
        return None


#: the keys of an entry its shape leaves out: its own values, and those ``parse_entry``
#: ignores
_NOT_SHAPE = frozenset({"args", "kwargs", *IGNORED_KEYS})


def _value_key(value: Any) -> Hashable:
    """A plain value as a hashable key, its types kept (1, 1.0 and True differ)."""
    kind = type(value)
    if kind in _SCALARS:
        return (kind, value)
    if kind is dict:
        return (dict, tuple([(_value_key(k), _value_key(v)) for k, v in value.items()]))
    if kind is list or kind is tuple:
        return (kind, tuple([_value_key(item) for item in value]))
    if kind is set or kind is frozenset:
        return (kind, frozenset([_value_key(item) for item in value]))
    raise _NotAValue


_SCALARS = frozenset({type(None), str, int, float, bool, dt.timedelta})


_CRONTAB_GIVEN = tuple(f"_orig_{f}" for f in timing.CRONTAB_FIELDS)


def _schedule_key(value: Any) -> Hashable:
    """A number, a ``timedelta``, a plain ``crontab`` or ``schedule`` as ``from_celery``
    reads them (a crontab's fields as given, its zone the entry's)."""
    kind = type(value)
    if kind is crontab:
        return (kind, *[_value_key(getattr(value, f)) for f in _CRONTAB_GIVEN])
    if kind is celery_schedule:
        return (kind, _value_key(value.run_every), _value_key(value.relative))
    if kind in (int, float, dt.timedelta):
        return (kind, value)
    raise _NotAValue


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
    beat_schedule: Mapping[str, Any],
    default_timezone: str,
    check_task: bool = True,
    serializer_of: Callable[[str], str] | None = None,
) -> list[CodeEntry]:
    """``serializer_of(task)``: the serializer a message of ``task`` goes out with, to check
    values JSON cannot hold against (None: not checked, as in a system check, which cannot
    import the tasks)."""
    return [
        parse_entry(name, entry, default_timezone, check_task, serializer_of)
        for name, entry in beat_schedule.items()
    ]


def sync(entries: list[CodeEntry], now: dt.datetime) -> dict[str, Schedule]:
    """Upsert code-defined rows (R6). Returns the code rows by name, as stored.

    Two beats that boot at once (a rolling deploy, R4) may both find a new entry missing and
    insert it: the second insert waits for the first to commit and is refused as a
    duplicate. That beat syncs once more and finds the row; a refusal that comes again is
    not a race, and stops the boot as any recurring database error does (R23)."""
    try:
        return _sync_once(entries, now)
    except IntegrityError as exc:
        logger.info(
            "code sync was refused a row as a duplicate (another beat booting at the same "
            "moment inserts it too), syncing again: %s",
            exc,
            extra={"event": "code_sync_retry"},
        )
        return _sync_once(entries, now)


def _sync_once(entries: list[CodeEntry], now: dt.datetime) -> dict[str, Schedule]:
    by_name = {e.name: e for e in entries}
    # R33: a new or retimed row's first fire is written with it, as this beat's first tick
    # would write it (the beat is booting: its grace starts now, R2)
    fires = FirstFires(now, beat_seen=True)
    with db.atomic():
        rows = Schedule.objects.select_for_update().filter(
            Q(name__in=list(by_name)) | Q(source=Source.CODE)
        )
        existing = {s.name: s for s in rows}
        result: dict[str, Schedule] = {}
        for name, entry in by_name.items():
            if entry.superseded:
                logger.info(
                    "code schedule %s: Celery publish options superseded by beat's own "
                    "publish retry (R5): %s",
                    name,
                    ", ".join(entry.superseded),
                    extra={
                        "event": "code_option_superseded",
                        "schedule": name,
                        "options": list(entry.superseded),
                    },
                )
            row = existing.get(name)
            if row is None:
                row = Schedule(name=name, source=Source.CODE)
                entry.apply_to(row)
                fires.fill(row)
                row.save()
                logger.info(
                    "code schedule added: %s", name, extra={"event": "code_added", "schedule": name}
                )
            else:
                _refuse_silent_takeover(row, entry)
                _update(row, entry, now, fires)
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


def _refuse_silent_takeover(row: Schedule, entry: CodeEntry) -> None:
    """A code entry named like a schedule made in the admin (or the ORM) would rewrite it
    at every boot: refused unless the entry says ``take_over``, and logged when done. A row
    the importer marked as code (its name was in ``beat_schedule``) is code already."""
    if row.source == Source.CODE or row.deleted_at is not None:
        return  # code already, or deleted from code with its history kept: code may have it
    if not entry.take_over:
        raise BadEntry(
            f"beat_schedule[{entry.name!r}]: a schedule made in the admin has this name "
            f"(Schedule id {row.pk}, task {row.task!r}); code would take it over and rewrite "
            "it at every boot. Rename the entry, rename or delete that schedule, or set "
            "options['durablebeat']['take_over'] = True to let code own it."
        )
    logger.warning(
        "code schedule takes over the admin-made schedule of the same name: %s (id %s)",
        row.name,
        row.pk,
        extra={"event": "code_took_over", "schedule": row.name},
    )


def _update(row: Schedule, entry: CodeEntry, now: dt.datetime, fires: FirstFires) -> None:
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
    if row.source != Source.CODE or row.removed_from_code_at or row.deleted_at:
        if not row.enabled:
            row.enabled_at = now  # back in code: its periods count from now
        row.source, row.removed_from_code_at, row.enabled = Source.CODE, None, True
        row.deleted_at = None
    had_next = row.next_fire_at is not None
    fires.fill(row)
    filled = not had_next and row.next_fire_at is not None
    if timing_changed or filled or before != _owned_values(row) or row.error:
        row.save()


def _owned_values(row: Schedule) -> tuple[Any, ...]:
    names = ("task", *MESSAGE_FIELDS, *POLICY_FIELDS, "description")
    state = ("source", "removed_from_code_at", "deleted_at", "enabled")
    return tuple(getattr(row, n) for n in (*names, *state))
