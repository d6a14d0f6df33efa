"""Schedules from your code (R29): create or replace, update, pause, resume, run now,
delete, get and list, by name.

Each call takes what a ``beat_schedule`` entry takes (a ``crontab``, a ``timedelta`` or
seconds, ``schedule(...)``, ``solar``, an aware ``datetime`` for a one-off; ``args``,
``kwargs``, message ``options``, ``options["durablebeat"]``) and checks it as the code sync,
the admin and ``save()`` do: a bad value raises ``InvalidSchedule`` naming the field, and
nothing is written. Writes are idempotent by name, so a deploy or a retried request may
call them again. Inside a transaction, what is written fires only once it commits, and
beat is woken on commit (never for a transaction that rolls back).

A timing change takes effect at the next slot of the new timing: no slot of the old timing
fires after the change commits (the edit rules of the admin, ``models.edit_rules``).

docs/from-code.md is the guide; the names here are the whole public surface.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import functools
import itertools
import json
import operator
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from django.db.models import JSONField

from . import conf, db, wakeup, words
from .beat import publishing
from .beat.codesync import OWN_FIELDS, CodeEntry, ShapeCache, celery_timezone
from .core import clock, timing
from .core.errors import InvalidSchedule
from .enums import RUN_NOW_API, Kind, Source
from .first_fire import FirstFires
from .models import (
    EDIT_RULE_FIELDS,
    MESSAGE_FIELDS,
    MESSAGE_OPTIONS,
    POLICY_FIELDS,
    TIMING_FIELDS,
    Schedule,
    beat_alive,
    edit_rules,
)
from .validation import paused_note_error

__all__ = [
    "InvalidSchedule",
    "ScheduleInfo",
    "ScheduleNotFound",
    "Written",
    "add_schedule",
    "add_schedules",
    "delete_schedule",
    "get_schedule",
    "list_schedules",
    "pause_schedule",
    "resume_schedule",
    "run_now",
    "update_schedule",
]

#: names looked up per query (well under every database's parameter limit)
CHUNK = 1000
#: what a replace or an update writes (``bulk_update``'s fields)
_WRITTEN = (
    "task",
    *MESSAGE_FIELDS,
    *TIMING_FIELDS,
    *POLICY_FIELDS,
    "description",
    "enabled",
    "deleted_at",
    "error",
    "updated_at",
    *EDIT_RULE_FIELDS,
)
#: what a replace writes into every row it changes (``_edited``)
_ALWAYS_WRITTEN = ("updated_at", "error")
_UNSET: Any = object()


class ScheduleNotFound(LookupError):
    """No schedule of that name (or, for the calls that change one, it was deleted)."""


@dataclass(frozen=True)
class ScheduleInfo:
    """A schedule as the API reads it back."""

    name: str
    task: str
    #: the timing in words ("every 5 minutes", "at 09:00 in Europe/Berlin")
    schedule: str
    enabled: bool
    #: where it was made: "database" (the API, the admin) or "code" (``beat_schedule``)
    source: str
    next_fire_at: dt.datetime | None
    #: the next fire in words, as the admin shows it ("in 4 minutes", "paused")
    next_fire: str
    last_fired_at: dt.datetime | None
    #: the last run's state ("succeeded", "failed"...), "" before the first
    last_outcome: str
    #: why beat set the row aside (R21), "" when it is good
    error: str
    deleted_at: dt.datetime | None
    #: R36: since when it is paused (None while it fires), who paused it and why (None:
    #: no note), and whether it paused itself after failures in a row
    paused_at: dt.datetime | None = None
    paused_note: str | None = None
    paused_on_failure: bool = False

    @classmethod
    def of(cls, row: Schedule, now: dt.datetime) -> ScheduleInfo:
        return cls(
            name=row.name,
            task=row.task,
            schedule=words.schedule_words(row),
            enabled=row.enabled,
            source=row.source,
            next_fire_at=row.next_fire_at,
            next_fire=words.next_fire_words(row, now),
            last_fired_at=row.last_fired_at,
            last_outcome=row.last_outcome,
            error=row.error,
            deleted_at=row.deleted_at,
            paused_at=row.paused_at,
            paused_note=row.paused_note,
            paused_on_failure=bool(row.paused_on_failure),
        )


@dataclass(frozen=True)
class Written:
    """What ``add_schedules`` did: rows created, rows replaced with other values, rows
    already as given (left alone)."""

    created: int
    replaced: int
    unchanged: int


def add_schedule(
    name: str,
    task: str,
    schedule: Any,
    *,
    args: Sequence[Any] = (),
    kwargs: Mapping[str, Any] | None = None,
    options: Mapping[str, Any] | None = None,
    relative: bool = False,
    timezone: str | None = None,
    paused: bool | None = None,
) -> ScheduleInfo:
    """Create the schedule ``name``, or replace everything it holds with these values (its
    runs stay). ``timezone``: the IANA zone a crontab (or a relative interval) counts in;
    None: Celery's (``celery_timezone``), as for a ``beat_schedule`` entry. ``paused``:
    None keeps a replaced schedule paused or running as it was (a new one runs); True or
    False sets it."""
    entry = {
        "timezone": timezone,
        "task": task,
        "schedule": schedule,
        "args": list(args),
        "kwargs": dict(kwargs or {}),
        "options": dict(options or {}),
        "relative": relative,
    }
    add_schedules({name: entry}, paused=paused)
    return get_schedule(name)


def add_schedules(
    entries: Mapping[str, Mapping[str, Any]] | Iterable[tuple[str, Mapping[str, Any]]],
    *,
    paused: bool | None = None,
) -> Written:
    """Create or replace many schedules in one transaction: ``entries`` is shaped as
    ``beat_schedule`` is ({name: {"task": ..., "schedule": ...}}), or any iterable of
    (name, entry) pairs (a generator: read as it is written, ``WRITE_CHUNK`` at a time, so
    that a million entries never sit in memory at once; a name given twice takes its last
    entry); each may add a ``"timezone"`` (as ``add_schedule``'s). All or nothing: one bad
    entry raises ``InvalidSchedule`` naming it, and none is written. Entries that differ
    only in name, args and kwargs are checked as one (``codesync.ShapeCache``) and, on
    PostgreSQL, written by ``COPY``: 10,000 in about a second (benchmarks/README.md).

    Each new row's first fire is written with it (R33), computed once per distinct timing
    (``first_fire.FirstFires``): beat never has new rows to compute before its due work."""
    now = clock.now()
    shapes, zone = ShapeCache(), _default_zone()
    fires = FirstFires(now, lambda: beat_alive(now))
    pairs = iter(entries.items() if isinstance(entries, Mapping) else entries)
    created = replaced = unchanged = 0
    with db.atomic():
        # A chunk's entries each checked as it is taken (a name given twice: its last
        # entry): the caller's objects are dropped at once instead of being held for the
        # chunk, which made them live long enough for Python's full garbage collections to
        # scan them again and again (half of those passes; 15 % of the call's CPU).
        while parsed := {
            name: _parse(name, entry, shapes, zone)
            for name, entry in itertools.islice(pairs, WRITE_CHUNK)
        }:
            c, r, u = _write(list(parsed.values()), paused, now, fires)
            created, replaced, unchanged = created + c, replaced + r, unchanged + u
        if created >= ANALYZE_AFTER:
            _analyze_new_table()
    return Written(created, replaced, unchanged)


#: entries read, checked and written at a time by ``add_schedules`` (its memory's bound)
WRITE_CHUNK = 10_000
#: rows created by one ``add_schedules`` after which a table PostgreSQL has never analyzed
#: is analyzed before the call returns (``_analyze_new_table``)
ANALYZE_AFTER = 10_000


def _analyze_new_table() -> None:
    """PostgreSQL's advice after a bulk load ("Populating a Database": run ``ANALYZE``),
    for a schedule table it has no statistics of yet (``reltuples`` < 1: never analyzed).
    Until autovacuum analyzes it, up to a minute later, the planner takes it for a few rows:
    beat's read of the rows to fill sorted all of them at each slice (160 ms a slice at a
    million, the fill at 4 rows a second). A table it has statistics of is left to
    autovacuum: they scale with its size. Inside the caller's transaction, which ``ANALYZE``
    may be (its rows are counted)."""
    connection = db.connection()
    if connection.vendor != "postgresql":
        return  # SQLite's planner needs none; InnoDB keeps its own after 10 % changed
    table = Schedule._meta.db_table
    with connection.cursor() as cur:
        cur.execute("SELECT reltuples FROM pg_class WHERE oid = %s::regclass", [table])
        if cur.fetchone()[0] < 1:
            cur.execute(f"ANALYZE {connection.ops.quote_name(table)}")


def _write(
    parsed: list[CodeEntry], paused: bool | None, now: dt.datetime, fires: FirstFires
) -> tuple[int, int, int]:
    """One chunk of ``add_schedules``, inside its transaction: (created, replaced,
    unchanged)."""
    created: list[CodeEntry] = []
    replaced: list[Schedule] = []
    unchanged, changed = 0, set[str]()
    stored = _locked_rows([code.name for code in parsed])
    for code in parsed:
        row = stored.get(code.name)
        _refuse_passed_one_off(code, row, now)
        if row is None:
            created.append(code)
            continue
        _refuse_code_owned(row)
        before = _values(row)
        code.apply_to(row)
        if paused is not None:
            row.enabled = not paused
        if row.deleted_at is not None:
            row.deleted_at, row.enabled = None, paused is not True
        if _values(row) == before:
            unchanged += 1
            continue
        _edited(row, now, fires)
        after = zip(_COMPARED, before, _values(row), strict=True)
        changed |= {name for name, old, new in after if old != new}
        replaced.append(row)
    _create(created, paused is not True, now, fires)
    _rewrite(replaced, changed)
    return len(created), len(replaced), unchanged


def update_schedule(
    name: str,
    *,
    task: str = _UNSET,
    schedule: Any = _UNSET,
    args: Sequence[Any] = _UNSET,
    kwargs: Mapping[str, Any] = _UNSET,
    options: Mapping[str, Any] | None = None,
    relative: bool = _UNSET,
    timezone: str = _UNSET,
) -> ScheduleInfo:
    """Change what is given, keep the rest (a new crontab counts in the schedule's zone
    unless ``timezone`` is given). ``options`` are merged key by key into the schedule's
    (``options["durablebeat"]`` too); give a key None to clear it."""
    with db.atomic():
        row = _row(name, lock=True)
        _refuse_code_owned(row)
        entry = _entry_of(row)
        changes = {"task": task, "schedule": schedule, "relative": relative, "timezone": timezone}
        entry |= {key: value for key, value in changes.items() if value is not _UNSET}
        if args is not _UNSET:
            entry["args"] = list(args)
        if kwargs is not _UNSET:
            entry["kwargs"] = dict(kwargs)
        for key, value in (options or {}).items():
            if key == "durablebeat" and isinstance(value, Mapping):
                entry["options"]["durablebeat"] |= dict(value)
            else:
                entry["options"][key] = value
        entry["options"] = _without_none(entry["options"])
        # a new zone alone: the stored timing counted in it (_parse checks the zone first)
        rezone = timezone is not _UNSET and schedule is _UNSET
        code = _parse(name, entry, ShapeCache(), _default_zone(), rezone=rezone)
        _refuse_passed_one_off(code, row, clock.now())
        code.apply_to(row)
        row.save()  # the edit rules and the checks, as every save (models.Schedule.save)
    return ScheduleInfo.of(row, clock.now())


def pause_schedule(name: str, *, note: str | None = None) -> ScheduleInfo:
    """Stop firing until ``resume_schedule``; the slots meanwhile are not fired later.

    ``note``: who paused it and why, shown wherever the pause is (R36). Given for a
    schedule already paused, it replaces that pause's note, and a pause the schedule made
    itself after failures becomes this person's (``check`` no longer reports it)."""
    if note is not None:
        _refuse_bad_note(note)
    with db.atomic():
        row = _row(name, lock=True)
        if row.enabled or note is not None:
            row.enabled = False
            if note is not None:
                row.paused_note, row.paused_on_failure = note, None
            row.save()
    return ScheduleInfo.of(row, clock.now())


def resume_schedule(name: str) -> ScheduleInfo:
    """Fire again from the next slot (a next fire that passed while paused is computed
    afresh, not reported as missed). The pause's note and the count of failures in a row
    are cleared (R36)."""
    return _set_enabled(name, True)


def _refuse_bad_note(note: Any) -> None:
    if (problem := paused_note_error(note)) is not None:
        raise InvalidSchedule("paused_note", problem)


def run_now(name: str) -> str:
    """Send the schedule's task once now, outside its slots (a run with reason manual, as
    the admin's "run now"); returns the task id. The broker's error, if any, is raised."""
    claim = publishing.run_now(_row(name), by=RUN_NOW_API)  # report names it as such
    return claim.task_id


def delete_schedule(name: str, *, history: Literal["keep", "remove"]) -> None:
    """Delete the schedule; it never fires again. ``history="keep"``: its runs stay in the
    ledger (``report``, the admin's runs and timeline) and the schedule is kept, marked
    deleted; adding one of that name again takes it back, history and all.
    ``history="remove"``: the schedule and every run of it are removed."""
    if history not in ("keep", "remove"):
        raise InvalidSchedule(
            "history", f"must be 'keep' or 'remove', not {history!r} (schedule {name!r})"
        )
    with db.atomic():
        row = _row(name, lock=True)
        _refuse_code_owned(row)
        if history == "remove":
            row.delete()
            return
        row.deleted_at, row.enabled, row.next_fire_at = clock.now(), False, None
        row.save()


def get_schedule(name: str) -> ScheduleInfo:
    """The schedule ``name``, one deleted with its history kept too (``deleted_at`` set,
    ``next_fire`` "deleted"); ``ScheduleNotFound`` when there is none, or it was removed.
    The calls that change a schedule treat a deleted one as gone."""
    row = Schedule.objects.filter(name=name).first()
    if row is None:
        raise ScheduleNotFound(f"no schedule named {name!r}")
    return ScheduleInfo.of(row, clock.now())


def list_schedules(
    *,
    include_deleted: bool = False,
    name_prefix: str | None = None,
    task: str | None = None,
    enabled: bool | None = None,
    source: str | None = None,
    limit: int | None = None,
) -> Iterator[ScheduleInfo]:
    """The schedules by name, code's and the database's, one at a time (R33).

    An iterator, read ``db.PAGE`` rows a query (``db.by_name_pages``): a million schedules
    cost one page's memory on every backend, never a list of them all (``list(...)`` when
    a list is wanted). Each argument narrows it: ``name_prefix`` (names that start with it,
    case-sensitive, read through the name's index: ``"digest-"``), ``task`` (that task
    name), ``enabled`` (``True``: firing, ``False``: paused), ``source`` (``"database"`` or
    ``"code"``), ``limit`` (at most that many, the first by name). The arguments are
    checked when it is called, before a row is
    read: ``InvalidSchedule`` names the one at fault.
    """
    if limit is not None and (not isinstance(limit, int) or isinstance(limit, bool) or limit < 0):
        raise InvalidSchedule("limit", f"must be a whole number, 0 or more, not {limit!r}")
    if source is not None and source not in Source.values:
        raise InvalidSchedule("source", f"must be one of {Source.values}, not {source!r}")
    if enabled is not None and not isinstance(enabled, bool):
        raise InvalidSchedule("enabled", f"must be True, False or None, not {enabled!r}")
    for field, value in (("name_prefix", name_prefix), ("task", task)):
        if value is not None and not isinstance(value, str):
            raise InvalidSchedule(field, f"must be a string, not {value!r}")
    rows = Schedule.objects.order_by("name")
    if not include_deleted:
        rows = rows.filter(deleted_at__isnull=True)
    if name_prefix:
        rows = rows.filter(name__startswith=name_prefix)
    if task is not None:
        rows = rows.filter(task=task)
    if enabled is not None:
        rows = rows.filter(enabled=enabled)
    if source is not None:
        rows = rows.filter(source=source)
    return _infos(db.by_name_pages(rows, limit), clock.now())


def _infos(rows: Iterator[Schedule], now: dt.datetime) -> Iterator[ScheduleInfo]:
    for row in rows:
        yield ScheduleInfo.of(row, now)


# --- the one write path's pieces ----------------------------------------------------------


def _default_zone() -> str:
    from celery import current_app

    return celery_timezone(current_app)


def _parse(
    name: str, entry: Mapping[str, Any], shapes: ShapeCache, zone: str, rezone: bool = False
) -> CodeEntry:
    """An entry read as the code sync reads one (R20, R21, R25); ``InvalidSchedule``.
    ``zone``: the one a crontab counts in when the entry gives no ``"timezone"``;
    ``rezone``: the entry's schedule is a stored one, to count in its ``"timezone"``."""
    from django.core.exceptions import ImproperlyConfigured

    where = f"schedule {name!r}"
    entry = dict(entry)
    given = entry.pop("timezone", None)
    if given is not None:
        _check_zone(name, given)  # a typo is refused whatever the timing, as "timezone"
        if rezone:
            entry["schedule"] = _in_zone(entry["schedule"], given)
    zone = given or zone
    try:
        code = shapes.parse(name, entry, zone, where=where)
    except ImproperlyConfigured as exc:
        field = getattr(exc, "field", "schedule")
        problem = str(exc).removeprefix(f"{where}: ").removeprefix(f"{field}: ")
        raise InvalidSchedule(field, f"{problem} ({where})") from exc
    if isinstance(code.spec, timing.Custom):
        raise InvalidSchedule(
            "schedule", f"a custom schedule object lives in code: put it in beat_schedule ({where})"
        )
    if code.live is not None:
        field = _live_field(code)
        what = "link callbacks" if field == "options" else field
        raise InvalidSchedule(
            field,
            f"{what} must be JSON values here (a computed value or a Python object needs a "
            f"beat_schedule entry) ({where})",
        )
    if code.take_over:
        raise InvalidSchedule("options", f"take_over is for beat_schedule entries ({where})")
    return code


def _check_zone(name: str, zone: Any) -> None:
    """The ``timezone`` argument, refused as field ``timezone`` naming the schedule, from
    every call alike (add_schedule, add_schedules, update_schedule: ``_parse``)."""
    try:
        if isinstance(zone, str):
            _known_zone(zone)
        else:
            timing.zone_of(zone)
    except InvalidSchedule as exc:
        raise InvalidSchedule("timezone", f"{exc.message} (schedule {name!r})") from exc


@functools.lru_cache(maxsize=256)
def _known_zone(zone: str) -> None:
    """A zone name found once is not looked up again: ``add_schedules`` of a million
    entries in one zone checks it once (R33); a refused name raises and is not kept."""
    timing.zone_of(zone)


def _live_field(code: CodeEntry) -> str:
    """Which field holds a value only code can hold: args, kwargs, or a link in options."""
    from .beat import live

    if live.holds_code_values(code.args):
        return "args"
    if live.holds_code_values(code.kwargs):
        return "kwargs"
    return "options"


def _refuse_passed_one_off(code: CodeEntry, row: Schedule | None, now: dt.datetime) -> None:
    """R31 (issue 39): a one-off whose instant passed longer ago than
    ``DURABLEBEAT_ONE_OFF_LATE_WINDOW`` would only ever be recorded missed: refused, naming
    the field. Within the window it is taken and beat sends it at once, its run saying it
    was written after its instant (a one-off for "now" is always a little in the past by
    the time it is written). A schedule that already holds that instant is left alone (a
    retried call is idempotent)."""
    spec = code.spec
    if not isinstance(spec, timing.Clocked):
        return
    held = row is not None and row.deleted_at is None and row.kind == Kind.CLOCKED
    if held and row is not None and row.clocked_at == spec.at:
        return  # the instant it holds already: a retried call
    window = conf.settings.ONE_OFF_LATE_WINDOW
    past = now - spec.at
    if past > window:
        raise InvalidSchedule(
            "schedule",
            f"the one-off's instant {spec.at.isoformat()} passed {words.duration_words(past)} "
            f"ago, more than DURABLEBEAT_ONE_OFF_LATE_WINDOW ({words.duration_words(window)}): "
            f"beat would only record it missed (schedule {code.name!r})",
        )


def _rows(names: Iterable[str], lock: bool = False) -> dict[str, Schedule]:
    names = list(names)
    found: dict[str, Schedule] = {}
    for start in range(0, len(names), CHUNK):
        rows = Schedule.objects.filter(name__in=names[start : start + CHUNK])
        found |= {row.name: row for row in (rows.select_for_update() if lock else rows)}
    return found


def _locked_rows(names: list[str]) -> dict[str, Schedule]:
    """``_rows(names, lock=True)``. PostgreSQL: one query, the names one array, and each row
    made as the ORM makes it (each field's ``from_db_value``, the backend having no
    converters of its own, then ``from_db``) without its compiler: 10,000 rows in 0.4 s
    rather than 0.7 (benchmarks/README.md)."""
    from django.db.backends.base.operations import BaseDatabaseOperations

    connection = db.connection()
    own_converters = type(connection.ops).get_db_converters
    if connection.vendor != "postgresql" or (
        own_converters is not BaseDatabaseOperations.get_db_converters
    ):
        return _rows(names, lock=True)
    meta = Schedule._meta
    fields, quote = meta.concrete_fields, connection.ops.quote_name
    loads = [(i, f.from_db_value) for i, f in enumerate(fields) if hasattr(f, "from_db_value")]
    attnames = [f.attname for f in fields]
    sql = (
        f"SELECT {', '.join(quote(str(f.column)) for f in fields)} FROM {quote(meta.db_table)} "
        f"WHERE {quote(str(meta.get_field('name').column))} = ANY(%s) FOR UPDATE"
    )
    found: dict[str, Schedule] = {}
    with connection.cursor() as cur:
        cur.execute(sql, [names])
        for stored in cur.fetchall():
            values = list(stored)
            for i, load in loads:
                values[i] = load(values[i], None, connection)
            row = Schedule.from_db(connection.alias, attnames, values)
            found[row.name] = row
    return found


def _row(name: str, lock: bool = False) -> Schedule:
    row = _rows([name], lock).get(name)
    if row is None or row.deleted_at is not None:
        raise ScheduleNotFound(f"no schedule named {name!r}")
    return row


def _refuse_code_owned(row: Schedule) -> None:
    if row.source == Source.CODE and row.removed_from_code_at is None:
        raise InvalidSchedule(
            "name",
            f"schedule {row.name!r} is defined in beat_schedule: change it there (beat "
            "rewrites it from code at every boot)",
        )


#: what a replace compares to tell a row unchanged (what it writes, less what it always does)
_COMPARED = tuple(name for name in _WRITTEN if name not in _ALWAYS_WRITTEN)
_attrs = operator.attrgetter(*_COMPARED)


def _values(row: Schedule) -> tuple[Any, ...]:
    """The compared fields, each as it is stored: JSON by its text, so that ``1``, ``1.0``
    and ``True`` (equal in Python) count as the change they are in a task's arguments."""
    return tuple(
        json.dumps(v, sort_keys=True, default=repr) if isinstance(v, dict | list) else v
        for v in _attrs(row)
    )


def _create(codes: list[CodeEntry], enabled: bool, now: dt.datetime, fires: FirstFires) -> None:
    """Insert a new row for each of ``codes``, already checked (``parse_entry``), with its
    first fire (R33): on PostgreSQL by ``COPY``, each shape's row built once (``ShapeCache``:
    its entries differ only in ``OWN_FIELDS``), elsewhere by ``bulk_create`` (which would
    check them again)."""
    if not codes:
        return
    connection = db.connection()
    if not _copies(connection):
        rows = [_new_row(code, enabled, fires) for code in codes]
        Schedule.objects.bulk_create(rows, batch_size=CHUNK, _checked=True)
        return
    if any(isinstance(code.spec, timing.Interval) for code in codes):
        fires.beat_seen()  # its query before the COPY, which holds the connection
    fields = [f for f in Schedule._meta.concrete_fields if not f.primary_key]
    columns = _Columns(fields, connection)
    own = [(i, f) for i, f in enumerate(fields) if f.name in OWN_FIELDS]
    at = {f.name: i for i, f in enumerate(fields)}
    shapes: dict[int, tuple[list[Any], Schedule]] = {}

    def values(code: CodeEntry) -> list[Any]:
        if code.shape is None:
            return columns.of(_new_row(code, enabled, fires, now))
        if (shape := shapes.get(code.shape)) is None:
            row = _new_row(code, enabled, fires, now)
            shape = shapes[code.shape] = (columns.as_text(columns.of(row)), row)
        values = shape[0].copy()
        if code.encoded is None:
            for i, f in own:
                values[i] = columns.db_value(f, getattr(code, f.name))
        else:  # the JSON text the check made: COPY's text format hands it to jsonb's input
            values[at["name"]] = code.name
            values[at["args"]], values[at["kwargs"]] = code.encoded
        row = shape[1]
        if row.next_fire_at is not None:  # R35: a jittered first fire is the name's own
            slot = row.next_slot or row.next_fire_at
            sent = fires.sent_at(code.name, code.spec, slot, row.jitter)
            if sent != row.next_fire_at:
                values[at["next_fire_at"]] = columns.db_value(fields[at["next_fire_at"]], sent)
                values[at["next_slot"]] = columns.db_value(
                    fields[at["next_slot"]], slot if sent != slot else None
                )
        return values

    with connection.cursor() as cur:
        _copy(cur, Schedule._meta.db_table, fields, map(values, codes))
    wakeup.schedules_changed()  # where no trigger says it (R6)


def _new_row(
    code: CodeEntry, enabled: bool, fires: FirstFires, now: dt.datetime | None = None
) -> Schedule:
    """A new row of ``code`` with its first fire (R33); ``now``: its ``created_at`` and
    ``updated_at``, written past ``pre_save`` (``COPY``)."""
    row = Schedule(name=code.name, source=Source.DATABASE, enabled=enabled, error="")
    code.apply_to(row)
    fires.fill(row)
    if now is not None:
        row.created_at = row.updated_at = now
    return row


def _rewrite(rows: list[Schedule], changed: Iterable[str]) -> None:
    """Write the ``changed`` fields (of ``_COMPARED``: those that differ in any of the rows)
    and ``_ALWAYS_WRITTEN`` of rows already checked (``parse_entry``) and moved on by the
    edit rules. PostgreSQL: the rows are copied into a temporary table (``COPY``)
    and written by one ``UPDATE ... FROM`` it; elsewhere one UPDATE statement by primary
    key, executed for each row in one round of the driver's ``executemany``
    (``bulk_update`` builds a CASE per column and row: a minute for 10,000 schedules)."""
    if not rows:
        return
    meta = Schedule._meta
    written = {*changed, *_ALWAYS_WRITTEN}
    fields = [f for f in meta.concrete_fields if f.name in written]
    connection = db.connection()
    quote, pk = connection.ops.quote_name, meta.pk
    assert pk is not None
    table, key = quote(meta.db_table), quote(str(pk.column))
    with connection.cursor() as cur:
        if _copies(connection):
            columns = [quote(str(f.column)) for f in (pk, *fields)]
            cur.execute(
                f"CREATE TEMPORARY TABLE {_REPLACED} ON COMMIT DROP AS "
                f"SELECT {', '.join(columns)} FROM {table} WITH NO DATA"
            )
            copied = _Columns([pk, *fields], connection)
            _copy(cur, _REPLACED, copied.fields, map(copied.of, rows))
            cur.execute(
                f"UPDATE {table} AS s SET "
                + ", ".join(f"{c} = r.{c}" for c in columns[1:])
                + f" FROM {_REPLACED} AS r WHERE s.{key} = r.{key}"
            )
            cur.execute(f"DROP TABLE {_REPLACED}")  # another call in this transaction
        else:
            cur.executemany(
                f"UPDATE {table} SET "
                + ", ".join(f"{quote(str(f.column))} = %s" for f in fields)
                + f" WHERE {key} = %s",
                [
                    [f.get_db_prep_save(getattr(row, f.attname), connection) for f in fields]
                    + [row.pk]
                    for row in rows
                ],
            )
    for row in rows:
        row.remember_stored()
    wakeup.schedules_changed()  # where no trigger says it (R6)


#: the temporary table a replace is copied into (PostgreSQL)
_REPLACED = "durablebeat_api_replaced"


def _copies(connection: Any) -> bool:
    """Can rows be written by ``COPY`` here: PostgreSQL through psycopg 3."""
    if connection.vendor != "postgresql":
        return False
    from django.db.backends.postgresql.psycopg_any import is_psycopg3

    return bool(is_psycopg3)


def _copy(cur: Any, table: str, fields: list[Any], rows: Iterable[list[Any]]) -> None:
    """``COPY`` rows of values (``_Columns``) into the ``fields`` of ``table``."""
    quote = cur.db.ops.quote_name
    sql = f"COPY {quote(table)} ({', '.join(quote(str(f.column)) for f in fields)}) FROM STDIN"
    with cur.cursor.copy(sql) as copy:
        for values in rows:
            copy.write_row(values)


class _Columns:
    """A row's values for ``COPY`` into ``fields``, as Django's PostgreSQL backend gives them
    to psycopg: ``get_db_prep_save`` passes text, numbers, booleans, aware datetimes and
    timedeltas as they are and JSON through the backend's adapter (calling it per value was
    half of a ``bulk_create``'s time)."""

    def __init__(self, fields: list[Any], connection: Any) -> None:
        self.fields, self.ops = fields, connection.ops
        self._get = operator.attrgetter(*(f.attname for f in fields))
        self._json = [(i, f) for i, f in enumerate(fields) if isinstance(f, JSONField)]

    def of(self, row: Schedule) -> list[Any]:
        values = list(self._get(row))
        for i, field in self._json:
            values[i] = self.ops.adapt_json_value(values[i], field.encoder)
        return values

    def as_text(self, values: list[Any]) -> list[Any]:
        """``values`` (``of``) with each JSON one as its text, as psycopg's dumper would
        make it at each row: COPY's text format hands text to jsonb's input, and a shape's
        row is copied for every entry of it (a million, R33)."""
        for i, _ in self._json:
            values[i] = values[i].dumps(values[i].obj)
        return values

    def db_value(self, field: Any, value: Any) -> Any:
        if isinstance(field, JSONField):
            return self.ops.adapt_json_value(value, field.encoder)
        return value


def _edited(row: Schedule, now: dt.datetime, fires: FirstFires) -> None:
    """A replace written by ``_rewrite``, which does not go through ``save()``: what a save
    does to it, the edit rules (a timing change recomputes the next fire, written with the
    row: R33) and a fresh look by beat."""
    edit_rules(row, row.changed_fields(), False, now)
    fires.fill(row)
    row.error, row.updated_at = "", now


def _set_enabled(name: str, enabled: bool) -> ScheduleInfo:
    with db.atomic():
        row = _row(name, lock=True)
        if row.enabled != enabled:
            row.enabled = enabled
            row.save()
    return ScheduleInfo.of(row, clock.now())


def _entry_of(row: Schedule) -> dict[str, Any]:
    """A stored schedule as the ``beat_schedule`` entry that would make it."""
    options: dict[str, Any] = {
        option: getattr(row, name)
        for option, name in MESSAGE_OPTIONS.items()
        if getattr(row, name) not in ("", None)
    }
    if row.headers:
        options["headers"] = dict(row.headers)
    options["durablebeat"] = {
        "catch_up": row.catch_up,
        "catch_up_window": row.catch_up_window,
        "startup_grace": row.startup_grace,
        "overlap": row.overlap,
        "max_in_flight": row.max_in_flight,
        "terminate": bool(row.terminate),
        "jitter": row.jitter,
        "pause_after_failures": row.pause_after_failures,
        "retention": row.retention,
        "description": row.description,
    }
    spec = row.to_spec()
    return {
        "timezone": row.timezone,
        "task": row.task,
        "schedule": spec,
        "args": list(row.args),
        "kwargs": dict(row.kwargs),
        "options": options,
        "relative": isinstance(spec, timing.Interval) and spec.relative,
    }


def _in_zone(spec: timing.Spec, zone: str) -> timing.Spec:
    """A stored crontab or relative interval counted in another zone."""
    if isinstance(spec, timing.Crontab) or (isinstance(spec, timing.Interval) and spec.relative):
        return dataclasses.replace(spec, timezone=zone)
    return spec


def _without_none(options: dict[str, Any]) -> dict[str, Any]:
    own = {k: v for k, v in options.pop("durablebeat", {}).items() if v is not None}
    return {k: v for k, v in options.items() if v is not None} | {"durablebeat": own}
