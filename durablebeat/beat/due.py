"""What is due (R1, R2, R20, R21): the due query and the value the policy decides on
(``Due``, from a row). What firing it sends is ``messages``.

A row that cannot be read or moved on is set aside with its error (``set_aside``); which
errors are a row's and which are the database's is ``is_row_error``, and how a row's error
reads is ``describe_row_error``.
"""

from __future__ import annotations

import datetime as dt
import logging
from dataclasses import dataclass
from typing import Any

from django.core.exceptions import ImproperlyConfigured
from django.db import DatabaseError, DataError, IntegrityError, transaction
from django.db.models import QuerySet
from django.db.models.base import ModelState

from .. import conf, db, validation
from ..core import timing
from ..core.policy import Due
from ..models import MESSAGE_FIELDS, POLICY_FIELDS, TIMING_FIELDS, Schedule

logger = logging.getLogger("durablebeat")


ZERO = dt.timedelta(0)


@dataclass(frozen=True)
class Defaults:
    """The settings a row without its own values takes, read once per batch (each read of
    a setting is a parse, and a burst reads a thousand rows a batch)."""

    startup_grace: dt.timedelta
    catch_up_window: dt.timedelta
    jitter: dt.timedelta = ZERO

    @classmethod
    def now(cls) -> Defaults:
        s = conf.settings
        return cls(s.STARTUP_GRACE, s.CATCH_UP_WINDOW, s.JITTER)


def due_from_row(
    row: Schedule, custom: timing.Custom | None = None, defaults: Defaults | None = None
) -> Due:
    """The value the policy works on; raises ``timing.InvalidSchedule`` for a bad row,
    including a policy duration out of its range (written around the checks, R21): the
    policy adds them to instants, so they are bounded here as they are at entry.

    ``custom``: a custom schedule row's object, from this beat's code (R25): a row holds
    only its label. Its last run is read for it (Celery passes it to ``is_due``).
    ``defaults``: the settings as read for the batch (else read now)."""
    own_grace, own_window = row.startup_grace, row.catch_up_window
    if own_grace is not None and not ZERO <= own_grace <= conf.MAX_STARTUP_GRACE:
        raise timing.InvalidSchedule("startup_grace", f"out of its range: {own_grace}")
    if own_window is not None and not ZERO < own_window <= conf.MAX_CATCH_UP_WINDOW:
        raise timing.InvalidSchedule("catch_up_window", f"out of its range: {own_window}")
    own_keep = row.retention  # R32: the policy bounds catch-up by it (``Triage``)
    if own_keep is not None and not conf.MIN_RETENTION <= own_keep <= conf.MAX_RETENTION:
        raise timing.InvalidSchedule("retention", f"out of its range: {own_keep}")
    own_jitter = row.jitter
    if own_jitter is not None and not ZERO <= own_jitter <= conf.MAX_JITTER:
        raise timing.InvalidSchedule("jitter", f"out of its range: {own_jitter}")
    grace, window, jitter = own_grace, own_window, own_jitter
    if grace is None or not window or jitter is None:
        d = defaults or Defaults.now()
        grace = d.startup_grace if grace is None else grace
        window = window or d.catch_up_window
        jitter = d.jitter if jitter is None else jitter
    spec = row.to_spec()
    last_run_at = None
    if isinstance(spec, timing.Custom):
        if custom is None:
            raise timing.InvalidSchedule("custom_schedule", f"{spec.label} is not in this code")
        spec = custom
        last_run_at = _last_run(row.pk)
    return Due(
        id=row.pk,
        name=row.name,
        spec=spec,
        last_run_at=last_run_at,
        next_fire_at=row.next_fire_at,
        next_fire_reason=row.next_fire_reason,
        startup_grace=grace,
        catch_up=row.catch_up,
        catch_up_window=window,
        overlap=row.overlap,
        max_in_flight=row.max_in_flight,
        terminate=bool(row.terminate),
        buffered_slot=row.buffered_slot,
        jitter=jitter,
        next_slot=row.next_slot,
    )


#: what firing reads of a due row (``due_from_row``, ``Message.for_row``): a burst reads a
#: thousand rows per batch, and each timestamp column left out is a thousand parses saved
DUE_FIELDS = (
    "id",
    "name",
    "task",
    *MESSAGE_FIELDS,
    *TIMING_FIELDS,
    *POLICY_FIELDS,
    "next_fire_at",
    "next_fire_reason",
    "buffered_slot",
    "next_slot",
)


def _last_run(schedule_id: int) -> dt.datetime | None:
    """A custom schedule's last run as Celery's beat keeps it: when it last fired, else when
    it was first stored (Celery's is the beat's start). Read for custom rows only: the due
    query leaves these columns out."""
    fired, created = Schedule.objects.filter(pk=schedule_id).values_list(
        "last_fired_at", "created_at"
    )[0]
    return fired or created


def fetch_due(horizon: dt.datetime, limit: int, lock: bool = False) -> list[Schedule]:
    """What is due now or before ``horizon``, in order. Rows without a next fire are not
    here: they are filled after the due work (``fetch_unfilled``), never before it (R33).

    One probe of the partial index, never an ``OR`` with the rows to fill: an ``OR`` makes
    PostgreSQL use a bitmap scan, which never marks the index entries of dead row versions
    as dead, so each wake-up walked every slot fired since the last vacuum (idle cost
    growing with N). A plain ordered index scan stops at ``limit`` and prunes them as it
    goes.

    ``lock`` (inside a transaction): take the rows with ``FOR UPDATE SKIP LOCKED`` on
    PostgreSQL, MariaDB 10.6+ and MySQL 8, so that several beats on one burst each take a
    different batch instead of queueing behind one another's row locks (ignored where rows
    cannot be locked: SQLite serialises write transactions anyway)."""
    return _fetch(1, horizon, limit, lock)


def read_due(horizon: dt.datetime, limit: int) -> tuple[list[Schedule], dt.datetime | None]:
    """A tick's due read (R4, R33): the rows this beat takes (locked, ``fetch_due``) and the
    earliest next fire up to ``horizon``, another beat's held rows included
    (``first_due``), by which this beat wakes. Nothing due: one probe, no locked read."""
    first = first_due(horizon)
    if first is None:
        return [], None
    return fetch_due(horizon, limit, lock=True), first


def first_due(horizon: dt.datetime) -> dt.datetime | None:
    """The earliest next fire up to ``horizon``, read without a lock: what another beat
    holds (claiming it, or waiting for its instant, R28) counts too, which
    ``fetch_due(lock=True)`` passes over (SKIP LOCKED). Asked first: None, and the locked
    read is not needed (an idle tick is still two probes of the index)."""
    rows = _fetch(1, horizon, 1, False)
    return rows[0].next_fire_at if rows else None


def has_unfilled() -> bool:
    """Is there an enabled row without a next fire (R33: a raw SQL insert, a custom
    schedule, a new interval written while no beat ran)? Any one, in no order (an order
    asked of a table PostgreSQL has no statistics of yet sorted 200,000 such rows at every
    tick): an entry of ``durablebeat_unfilled_idx`` on PostgreSQL, which holds only such
    rows, elsewhere of the due index's NULLs."""
    sql, params = _compiled(0, _SENTINELS[0], 1, False)
    with db.connection().cursor() as cur:
        cur.execute(sql, params)
        return cur.fetchone() is not None


def fetch_unfilled(after: int, limit: int, lock: bool = False) -> list[Schedule]:
    """Up to ``limit`` enabled rows without a next fire whose primary key is above
    ``after``, by primary key: a slice of what beat fills after its due work (R33), the next
    slice after the largest key of this one. Read from ``after`` on through
    ``durablebeat_unfilled_idx`` (on SQLite and MariaDB/MySQL the due index, whose entries
    end with the key): the rows before it are not walked again. A row that loses
    its next fire behind the slices is found by the next pass. ``lock`` as
    ``fetch_due``'s."""
    query = _probe(0, _SENTINELS[0], limit, lock, after=after)
    sql, params = query.query.get_compiler(db.alias()).as_sql()
    with db.connection().cursor() as cur:
        cur.execute(sql, params)
        return _instances(cur)


def _fetch(probe: int, horizon: dt.datetime, limit: int, lock: bool) -> list[Schedule]:
    sql, params = _compiled(probe, horizon, limit, lock)
    with db.connection().cursor() as cur:
        cur.execute(sql, params)
        return _instances(cur)


def _instances(cur: Any) -> list[Schedule]:
    """The rows of the due query as ``Schedule`` instances with its columns loaded (the
    others deferred, read on access), as ``from_db`` builds them but without
    ``Model.__init__``'s walk over all the model's fields: a burst reads a thousand rows a
    batch, and that walk was most of the due query's time."""
    names, fetched = converted(cur)
    alias, new, rows = db.alias(), Schedule.__new__, []
    for values in fetched:
        row = new(Schedule)
        row.__dict__.update(zip(names, values, strict=True))
        row._state = ModelState()
        row._state.adding, row._state.db = False, alias
        rows.append(row)
    return rows


def converted(cur: Any) -> tuple[list[str], list[list[Any]]]:
    """What ``cur`` fetched from the schedule table, each value through the converters
    Django applies to its field (``values_list`` without compiling a query), and the
    attribute name of each column."""
    fetched = cur.fetchall()
    if not fetched:
        return [], []
    connection = db.connection()
    names, converting = _conversions(tuple(d[0] for d in cur.description))
    rows = []
    for values in fetched:
        values = list(values)
        for i, converters, col in converting:
            value = values[i]
            for convert in converters:
                value = convert(value, col, connection)
            values[i] = value
        rows.append(values)
    return names, rows


_BY_COLUMN = {f.column: f for f in Schedule._meta.concrete_fields}
#: per database and columns: the attribute names, and the converters of each column
_CONVERSIONS: dict[tuple[Any, ...], tuple[list[str], list[tuple[int, list[Any], Any]]]] = {}


def _conversions(columns: tuple[str, ...]) -> tuple[list[str], list[tuple[int, list[Any], Any]]]:
    connection = db.connection()
    key = (connection.alias, connection.vendor, columns)
    found = _CONVERSIONS.get(key)
    if found is None:
        fields = [_BY_COLUMN[c] for c in columns]
        converting = []
        for i, f in enumerate(fields):
            col = f.get_col(Schedule._meta.db_table)
            converters = connection.ops.get_db_converters(col) + f.get_db_converters(connection)
            if converters:
                converting.append((i, converters, col))
        found = _CONVERSIONS[key] = ([f.attname for f in fields], converting)
    return found


def _probe(
    probe: int, horizon: dt.datetime, n: int, lock: bool, after: int | None = None
) -> QuerySet[Schedule]:
    if probe == 0:  # rows to fill (R33): any (``has_unfilled``), or by key from ``after`` on
        query = _due_rows().filter(next_fire_at__isnull=True).order_by()
        if after is not None:
            query = query.filter(pk__gt=after).order_by("pk")
    else:
        query = _due_rows().filter(next_fire_at__lte=horizon).order_by("next_fire_at")
    if lock:
        query = query.select_for_update(**_skip_locked())
    return query[:n]


#: the due probes as SQL, compiled once per database, probe, lock and size: an idle beat
#: sends the same two every heartbeat, and compiling them was most of an idle tick's CPU
_COMPILED: dict[tuple[Any, ...], tuple[str, tuple[Any, ...], int | None]] = {}
_SENTINELS = (dt.datetime(2001, 1, 1, tzinfo=dt.UTC), dt.datetime(2002, 2, 2, tzinfo=dt.UTC))


def _compiled(probe: int, horizon: dt.datetime, n: int, lock: bool) -> tuple[str, list[Any]]:
    """The probe's SQL and its parameters for ``horizon``: compiled twice the first time,
    with two instants, to find which parameter is the horizon."""
    connection = db.connection()
    key = (connection.alias, connection.vendor, connection.settings_dict["NAME"], probe, lock, n)
    found = _COMPILED.get(key)
    if found is None:
        (sql, a), (again, b) = (
            _probe(probe, s, n, lock).query.get_compiler(connection.alias).as_sql()
            for s in _SENTINELS
        )
        moved = [i for i, (x, y) in enumerate(zip(a, b, strict=True)) if x != y]
        if sql != again or len(moved) > 1:  # not a shape this cache knows: no cache
            return _compiled_now(probe, horizon, n, lock)
        if len(_COMPILED) > 64:  # sizes vary with the batch setting: bounded
            _COMPILED.clear()
        found = _COMPILED[key] = (sql, tuple(a), moved[0] if moved else None)
    sql, params, at = found
    values = list(params)
    if at is not None:
        field = Schedule._meta.get_field("next_fire_at")
        values[at] = field.get_db_prep_value(horizon, connection, prepared=False)
    return sql, values


def _compiled_now(probe: int, horizon: dt.datetime, n: int, lock: bool) -> tuple[str, list[Any]]:
    sql, params = _probe(probe, horizon, n, lock).query.get_compiler(db.alias()).as_sql()
    return sql, list(params)


def probe_due(now: dt.datetime) -> None:
    """The due query as a claim runs it, locks and all, rolled back: at boot, an error that
    will recur on every tick (a locking clause the server refuses, a table or a privilege
    missing) shows here, before beat takes it for an outage (R23)."""
    with db.atomic():
        fetch_due(now, 1, lock=True)
        transaction.set_rollback(True, using=db.alias())


def _skip_locked() -> dict[str, Any]:
    """``select_for_update`` options for the due query that this server has (§1).

    SKIP LOCKED: PostgreSQL, MariaDB 10.6+, MySQL 8 (an older server queues behind the other
    beat's locks instead: slower, as correct). ``OF``: PostgreSQL and MySQL 8; Django refuses
    it on MariaDB (``NotSupportedError``), where plain ``FOR UPDATE`` locks the same rows
    because the due query joins no other table."""
    features = db.connection().features
    options: dict[str, Any] = {}
    if features.has_select_for_update_skip_locked:
        options["skip_locked"] = True
    if features.has_select_for_update_of:
        options["of"] = ("self",)
    return options


def _due_rows() -> QuerySet[Schedule]:
    return Schedule.objects.filter(enabled=True, error="").only(*DUE_FIELDS)


def is_row_error(exc: BaseException) -> bool:
    """R21: an exception about one row's values (an overflow, a type, a value the database
    refuses): that row is set aside and the rest of its batch goes on. Every other database
    error (unreachable, missing table, permissions) is about the database, which every row
    would meet: R5's outage path, R23. A setting out of range is nobody's row either."""
    if isinstance(exc, ImproperlyConfigured):
        return False
    return not isinstance(exc, DatabaseError) or isinstance(exc, DataError | IntegrityError)


def describe_row_error(exc: BaseException) -> str:
    """An exception as a row's ``error``: a refused field names itself (R20), anything
    else names its type."""
    if isinstance(exc, timing.InvalidSchedule):
        return str(exc)
    return f"{type(exc).__name__}: {exc}"


def set_aside(schedule_id: int, error: str) -> None:
    """R20/R21 by id: a row that raised at run time is set aside with its error (one line
    of text the database can store), shown by ``check`` and the admin."""
    text = validation.storable(error)[:2000] or "unusable row"
    Schedule.objects.filter(pk=schedule_id).update(error=text)
