"""The database side of firing: the due query, claims, misses, boots (R1-R4, R8, R14, R16).

Every write that decides who fires is a compare-and-set on ``next_fire_at`` inside a
transaction that also inserts the run, and the run is unique on (schedule, slot): a zero-row
update or an ``IntegrityError`` means another beat has that slot.
"""

from __future__ import annotations

import datetime as dt
import logging
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from django.core.exceptions import ImproperlyConfigured
from django.db import DatabaseError, DataError, IntegrityError, connection, transaction
from django.db.models import F, Q, QuerySet
from django.db.models.functions import Coalesce

from . import conf, timing, validation
from .completion import storable
from .enums import IN_FLIGHT_STATES, Overlap, Reason, RunState, Source
from .models import (
    MESSAGE_FIELDS,
    MESSAGE_OPTIONS,
    POLICY_FIELDS,
    TIMING_FIELDS,
    Boot,
    Incident,
    MissedSlots,
    Run,
    Schedule,
    WorkerHeartbeat,
)
from .policy import (
    Defer,
    Due,
    Fire,
    Miss,
    StartedRun,
    news_overdue,
    no_news_bound,
    reclaim_reason,
)

if TYPE_CHECKING:
    from .codesync import CodeEntry

logger = logging.getLogger("durablebeat")

ZERO = dt.timedelta(0)
NO_BEAT = "no beat could fire it (none running, or the database unreachable)"


@dataclass(frozen=True)
class Message:
    """What goes to the broker for one schedule, besides the run's own identity."""

    task: str
    args: list[Any] = field(default_factory=list)
    kwargs: dict[str, Any] = field(default_factory=dict)
    options: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def for_row(cls, row: Schedule) -> Message:
        """Raises ``timing.InvalidSchedule`` when a stored JSON field has the wrong shape."""
        validation.check_message_shapes(row)
        # Every apply_async option the schedule holds, on every fire (R24); an empty one is
        # left out, so the task's or the app's own default applies as under Celery's beat.
        options: dict[str, Any] = {
            option: value
            for option, name in MESSAGE_OPTIONS.items()
            if (value := getattr(row, name)) is not None and value != ""
        }
        return cls(row.task, list(row.args), dict(row.kwargs), options | {"headers": row.headers})

    @classmethod
    def for_entry(cls, entry: CodeEntry) -> Message:
        row = Schedule(name=entry.name)
        entry.apply_to(row)
        return cls.for_row(row)


@dataclass(frozen=True)
class Claim:
    """A slot this beat owns and must publish."""

    run_id: int | None
    task_id: str
    schedule_id: int | None
    schedule: str
    slot: dt.datetime
    reason: str
    boot_id: uuid.UUID
    message: Message

    def headers(self) -> dict[str, Any]:
        return {
            **self.message.options.get("headers", {}),
            "durablebeat_schedule": self.schedule,
            "durablebeat_slot": self.slot.isoformat(),
            "durablebeat_reason": self.reason,
            "durablebeat_boot": str(self.boot_id),
            "durablebeat_run": self.run_id,
        }


def due_from_row(row: Schedule) -> Due:
    """The value the policy works on; raises ``timing.InvalidSchedule`` for a bad row,
    including a policy duration out of its range (written around the checks, R21): the
    policy adds them to instants, so they are bounded here as they are at entry."""
    s = conf.settings
    own_grace, own_window = row.startup_grace, row.catch_up_window
    if own_grace is not None and not ZERO <= own_grace <= validation.MAX_STARTUP_GRACE:
        raise timing.InvalidSchedule("startup_grace", f"out of its range: {own_grace}")
    if own_window is not None and not ZERO < own_window <= validation.MAX_CATCH_UP_WINDOW:
        raise timing.InvalidSchedule("catch_up_window", f"out of its range: {own_window}")
    grace = own_grace if own_grace is not None else s.STARTUP_GRACE
    window = own_window or s.CATCH_UP_WINDOW
    return Due(
        id=row.pk,
        name=row.name,
        task=row.task,
        spec=row.to_spec(),
        next_fire_at=row.next_fire_at,
        next_fire_reason=row.next_fire_reason,
        startup_grace=grace,
        catch_up=row.catch_up,
        catch_up_window=window,
        overlap=row.overlap,
        from_code=row.source == Source.CODE,
    )


#: what firing reads of a due row (``due_from_row``, ``Message.for_row``): a burst reads a
#: thousand rows per batch, and each timestamp column left out is a thousand parses saved
DUE_FIELDS = (
    "id",
    "name",
    "task",
    *MESSAGE_FIELDS,
    *TIMING_FIELDS,
    "source",
    *POLICY_FIELDS,
    "next_fire_at",
    "next_fire_reason",
)


def fetch_due(
    now: dt.datetime, horizon: dt.datetime, limit: int, lock: bool = False
) -> list[Schedule]:
    """What is new (no next fire yet), then what is due now or before ``horizon``, in order.

    Two probes of the partial index, not one ``OR``: an ``OR`` makes PostgreSQL use a
    bitmap scan, which never marks the index entries of dead row versions as dead, so each
    wake-up walked every slot fired since the last vacuum (idle cost growing with N). A
    plain ordered index scan stops at ``limit`` and prunes them as it goes.

    ``lock`` (inside a transaction): take the rows with ``FOR UPDATE SKIP LOCKED`` on
    PostgreSQL, MariaDB 10.6+ and MySQL 8, so that several beats on one burst each take a
    different batch instead of queueing behind one another's row locks (ignored where rows
    cannot be locked: SQLite serialises write transactions anyway)."""
    rows: list[Schedule] = []
    for query in (
        _due_rows().filter(next_fire_at__isnull=True).order_by("pk"),
        _due_rows().filter(next_fire_at__lte=horizon).order_by("next_fire_at"),
    ):
        if len(rows) >= limit:
            break
        if lock:
            query = query.select_for_update(**_skip_locked())
        rows += query[: limit - len(rows)]
    return rows


def probe_due(now: dt.datetime) -> None:
    """The due query as a claim runs it, locks and all, rolled back: at boot, an error that
    will recur on every tick (a locking clause the server refuses, a table or a privilege
    missing) shows here, before beat takes it for an outage (R23)."""
    with transaction.atomic():
        fetch_due(now, now, 1, lock=True)
        transaction.set_rollback(True)


def _skip_locked() -> dict[str, Any]:
    """``select_for_update`` options for the due query that this server has (SPEC §1).

    SKIP LOCKED: PostgreSQL, MariaDB 10.6+, MySQL 8 (an older server queues behind the other
    beat's locks instead: slower, as correct). ``OF``: PostgreSQL and MySQL 8; Django refuses
    it on MariaDB (``NotSupportedError``), where plain ``FOR UPDATE`` locks the same rows
    because the due query joins no other table."""
    features = connection.features
    options: dict[str, Any] = {}
    if features.has_select_for_update_skip_locked:
        options["skip_locked"] = True
    if features.has_select_for_update_of:
        options["of"] = ("self",)
    return options


def _due_rows() -> QuerySet[Schedule]:
    return Schedule.objects.filter(enabled=True, error="").only(*DUE_FIELDS)


def mark_bad(row: Schedule, message: str) -> None:
    """R20: a bad row is set aside with its error; it never blocks the others."""
    Schedule.objects.filter(pk=row.pk).update(error=message[:2000])


def register_boot(boot_id: uuid.UUID, hostname: str, pid: int, now: dt.datetime) -> None:
    from . import __version__

    # An update, else an insert (not update_or_create's create_defaults: Django 5.0+ only;
    # Django 4.2 is supported). A boot id is this process's own: no other writer races it.
    fields = {"hostname": hostname, "pid": pid, "heartbeat_at": now, "version": __version__}
    if not Boot.objects.filter(pk=boot_id).update(**fields):
        Boot.objects.create(pk=boot_id, started_at=now, **fields)


def heartbeat(boot_id: uuid.UUID, now: dt.datetime) -> int:
    return Boot.objects.filter(pk=boot_id).update(heartbeat_at=now)


def stop_boot(boot_id: uuid.UUID, now: dt.datetime) -> None:
    Boot.objects.filter(pk=boot_id).update(heartbeat_at=now, stopped_at=now)


def _cas(due: Due, **changes: Any) -> bool:
    """Move a schedule on only if nobody else did since we read it (R4)."""
    return bool(Schedule.objects.filter(pk=due.id, next_fire_at=due.next_fire_at).update(**changes))


def apply_defer(due: Due, action: Defer) -> bool:
    changes: dict[str, Any] = {
        "next_fire_at": action.next_fire_at,
        "next_fire_reason": action.reason,
    }
    if action.next_fire_at is None:
        changes["enabled"] = False  # a one-off with no slot left is done
    return _cas(due, **changes)


def apply_miss(due: Due, action: Miss, boot_id: uuid.UUID, now: dt.datetime) -> bool:
    with transaction.atomic():
        changes: dict[str, Any] = {
            "next_fire_at": action.next_fire_at,
            "next_fire_reason": Reason.SCHEDULED,
        }
        if action.next_fire_at is None:
            changes["enabled"] = False
        if not _cas(due, **changes):
            return False
        _record_missed(due, action.missed, boot_id, now, NO_BEAT)
        return True


def _record_missed(due: Due, missed: Any, boot_id: uuid.UUID, now: dt.datetime, why: str) -> None:
    MissedSlots.objects.create(
        schedule_id=due.id,
        boot_id=boot_id,
        count=missed.count,
        first_slot=missed.first,
        last_slot=missed.last,
        reason=why,
        recorded_at=now,
    )
    logger.warning(
        "missed schedule=%s count=%d first=%s last=%s reason=%s",
        due.name,
        missed.count,
        missed.first.isoformat(),
        missed.last.isoformat(),
        why,
        extra={"event": "missed", "schedule": due.name, "count": missed.count},
    )


def _in_flight(schedule_ids: Iterable[int], now: dt.datetime) -> dict[int, Run]:
    """R14 + R22: the latest run of each schedule with evidence that it is alive: started
    on a worker that is alive and within its hard time limit, or claimed or published and
    still inside the no-news bound. A published run past the bound is marked ``no_news``
    here, so a lost write or a lost message never holds a schedule for ever."""
    s = conf.settings
    runs = list(
        Run.objects.filter(schedule_id__in=list(schedule_ids), state__in=IN_FLIGHT_STATES)
        .annotate(expire_seconds=F("schedule__expire_seconds"), schedule_name=F("schedule__name"))
        .order_by("slot")
    )
    started = [r for r in runs if r.state == RunState.STARTED]
    seen = worker_seen_at({(r.worker, r.worker_pid or 0) for r in started}) if started else {}
    live: dict[int, Run] = {}
    overdue: list[Run] = []
    for run in runs:
        if run.state == RunState.STARTED and run.started_at is not None:
            view = StartedRun(run.started_at, run.worker, run.worker_pid, run.hard_time_limit)
            seen_at = seen.get((run.worker, run.worker_pid or 0))
            dead = reclaim_reason(view, seen_at, now, s.WORKER_DEAD_AFTER, s.RECLAIM_MARGIN)
            if dead is None:
                live[run.schedule_id] = run
            continue  # a dead worker's run is the orphan reclaim's to mark lost (R15)
        bound = no_news_bound(run.expire_seconds, s.NO_NEWS_AFTER)
        if not news_overdue(run.published_at or run.claimed_at, bound, now):
            live[run.schedule_id] = run
        elif run.state == RunState.PUBLISHED:
            overdue.append(run)
        # A claimed run past the bound stays claimed: its publish is retried, or settled
        # as in doubt (R9); it just no longer blocks.
    mark_no_news(overdue, now)
    return live


def worker_seen_at(workers: Iterable[tuple[str, int]]) -> dict[tuple[str, int], dt.datetime]:
    """The last liveness write of each (worker, pid) asked for that has one (R15)."""
    wanted = set(workers)
    rows = WorkerHeartbeat.objects.filter(worker__in={w for w, _ in wanted})
    return {
        (w, p): at for w, p, at in rows.values_list("worker", "pid", "seen_at") if (w, p) in wanted
    }


def no_news_detail(run: Run, bound: dt.timedelta) -> str:
    sent = run.published_at or run.claimed_at
    return (
        f"no news since {sent.isoformat(timespec='seconds')}: no worker started it within "
        f"{bound.total_seconds():g} s (message lost, or its queue not consumed); it no "
        "longer holds its schedule (R22)"
    )[:300]


def mark_no_news(runs: Sequence[Run], now: dt.datetime) -> int:
    """Published runs past their no-news bound: ``no_news`` with why. Only from published
    (compare-and-set): a start or a completion that came meanwhile wins (R11)."""
    s = conf.settings
    moved = 0
    for run in runs:
        bound = no_news_bound(getattr(run, "expire_seconds", None), s.NO_NEWS_AFTER)
        moved += Run.objects.filter(pk=run.pk, state=RunState.PUBLISHED).update(
            state=RunState.NO_NEWS, detail=no_news_detail(run, bound)
        )
        name = getattr(run, "schedule_name", None) or run.schedule_id
        logger.warning(
            "no news schedule=%s slot=%s task_id=%s: no worker started it within %g s",
            name,
            run.slot.isoformat(),
            run.task_id,
            bound.total_seconds(),
            extra={"event": "no_news", "schedule": name, "task_id": run.task_id},
        )
    return moved


def _skip_reason(run: Run) -> str:
    reason = f"previous run (slot {run.slot.isoformat()}, task {run.task_id}) is still {run.state}"
    if run.worker:
        reason += f" on {run.worker}"
    return reason[:300]


def claim(
    fires: Sequence[tuple[Due, Fire, Message]],
    boot_id: uuid.UUID,
    now: dt.datetime,
    bad: list[tuple[Due, Exception]] | None = None,
) -> list[Claim]:
    """R3 + R4 + R14 for a batch: in one transaction, for each due slot, compare-and-set the
    next fire and insert its run (or its skipped entry). The caller publishes after commit.

    The common case (a slot on its grid, not blocked by a run in flight) is set-based: the
    rows are locked in id order, moved on by one ``UPDATE ... FROM (VALUES ...)`` whose
    ``WHERE next_fire_at = <as read>`` is the compare-and-set, and their runs inserted by one
    ``INSERT``; a batch costs a handful of statements whatever its size. The rest (skips,
    catch-ups with missed slots, one-offs) go one by one as before.

    ``bad`` (R21): when given, a batch that raises an error about its rows' values (see
    ``is_row_error``) is claimed again one slot at a time, each in its own savepoint; a slot
    that raises there is left out and reported in ``bad``, the others are claimed. An error
    about the database itself (unreachable, schema) propagates as before (R5)."""
    if bad is None:
        return _claim_batch(fires, boot_id, now)
    try:
        return _claim_batch(fires, boot_id, now)
    except Exception as exc:
        if not is_row_error(exc):
            raise
        logger.warning(
            "claim of a batch of %d failed, claiming one by one: %s: %s",
            len(fires),
            type(exc).__name__,
            exc,
            extra={"event": "claim_split", "count": len(fires)},
        )
    claims: list[Claim] = []
    for one in fires:
        try:
            claims += _claim_batch([one], boot_id, now)
        except Exception as exc:
            if not is_row_error(exc):
                raise
            bad.append((one[0], exc))
    return claims


def is_row_error(exc: BaseException) -> bool:
    """R21: an exception about one row's values (an overflow, a type, a value the database
    refuses): that row is set aside and the rest of its batch goes on. Every other database
    error (unreachable, missing table, permissions) is about the database, which every row
    would meet: R5's outage path, R23. A setting out of range is nobody's row either."""
    if isinstance(exc, ImproperlyConfigured):
        return False
    return not isinstance(exc, DatabaseError) or isinstance(exc, DataError | IntegrityError)


def set_aside(schedule_id: int, error: str) -> None:
    """R20/R21 by id: a row that raised at run time is set aside with its error (one line
    of text the database can store), shown by ``check`` and the admin."""
    text = storable(error)[:2000] or "unusable row"
    Schedule.objects.filter(pk=schedule_id).update(error=text)


#: how a run whose message the broker client refused begins its detail (``check`` finds it)
UNPUBLISHABLE = "not published, the message was refused"


def mark_unpublishable(run_ids: Sequence[int], error: str, now: dt.datetime) -> None:
    """R21: the broker client refused these claimed slots' message for its own content (not
    an outage): each run fails with why, and its schedule's last outcome says so, so that
    the run history, the admin and ``check`` show it. The slot is not retried."""
    if not run_ids:
        return
    error = storable(error)
    detail = f"{UNPUBLISHABLE}: {error}"[:300]
    with transaction.atomic():
        runs = Run.objects.filter(pk__in=list(run_ids), state=RunState.CLAIMED)
        schedule_ids = list(runs.values_list("schedule_id", flat=True))
        runs.update(state=RunState.FAILED, detail=detail, error=error, finished_at=now)
        Schedule.objects.filter(pk__in=schedule_ids).exclude(last_failed_at__gt=now).update(
            last_failed_at=now, last_outcome=RunState.FAILED
        )


def _claim_batch(
    fires: Sequence[tuple[Due, Fire, Message]], boot_id: uuid.UUID, now: dt.datetime
) -> list[Claim]:
    """``claim`` of one batch in one savepoint: all of it, or nothing and an exception."""
    claims: dict[int, Claim] = {}
    with transaction.atomic():
        _lock_in_order([d.id for d, _, _ in fires])
        skip_ids = [d.id for d, _, _ in fires if d.overlap == Overlap.SKIP]
        busy = _in_flight(skip_ids, now) if skip_ids else {}
        bulk: list[tuple[Due, Fire, Message]] = []
        for due, fire, message in fires:
            blocker = busy.get(due.id) if fire.reason != Reason.MANUAL else None
            if blocker is None and _plain(due, fire):
                bulk.append((due, fire, message))
                continue
            made = _claim_one(due, fire, boot_id, now, blocker)
            if made is not None:
                claims[due.id] = _claim_of(made, due, fire, boot_id, message)
        many = _claim_many_pg if connection.vendor == "postgresql" else _claim_many
        for chunk_start in range(0, len(bulk), BULK_CHUNK):
            chunk = bulk[chunk_start : chunk_start + BULK_CHUNK]
            won = many([(d, f) for d, f, _ in chunk], boot_id, now)
            for due, fire, message in chunk:
                if due.id in won:
                    run_id, task_id = won[due.id]
                    claims[due.id] = Claim(
                        run_id, task_id, due.id, due.name, fire.slot, fire.reason, boot_id, message
                    )
    return [claims[d.id] for d, _, _ in fires if d.id in claims]


def _claim_many(
    pairs: Sequence[tuple[Due, Fire]], boot_id: uuid.UUID, now: dt.datetime
) -> dict[int, tuple[int | None, str]]:
    """Compare-and-set, then insert the runs of the slots won: two statements. Returns
    (run id, task id) by schedule id for the slots this beat now owns."""
    won = _cas_many(pairs, now)
    mine = [(d, f) for d, f in pairs if d.id in won]
    runs = _insert_runs(mine, boot_id, now)
    if not connection.features.can_return_rows_from_bulk_insert:
        _read_back_ids([r for r in runs if r is not None])
    return {
        d.id: (run.pk, run.task_id or "")
        for (d, _), run in zip(mine, runs, strict=True)
        if run is not None
    }


def _read_back_ids(runs: Sequence[Run]) -> None:
    """MySQL's multi-row ``INSERT`` returns no ids (MariaDB 10.5+ and the others do): read
    them back by task id, unique per run, so that the claims can be confirmed (R3)."""
    missing = {r.task_id: r for r in runs if r.pk is None}
    if missing:
        found = Run.objects.filter(task_id__in=list(missing)).values_list("task_id", "pk")
        for task_id, pk in found:
            missing[task_id].pk = pk


def _claim_many_pg(
    pairs: Sequence[tuple[Due, Fire]], boot_id: uuid.UUID, now: dt.datetime
) -> dict[int, tuple[int | None, str]]:
    """``_claim_many`` in one PostgreSQL statement: the compare-and-set ``UPDATE`` and the
    runs' ``INSERT ... ON CONFLICT (schedule, slot) DO NOTHING`` as data-modifying CTEs,
    the batch passed as six arrays. A slot moved on whose run already existed (fired
    during an outage and reconciled) is not fired again, as in ``_insert_run``."""
    if not pairs:
        return {}
    task_ids = [str(uuid.uuid4()) for _ in pairs]
    schedule = connection.ops.quote_name(Schedule._meta.db_table)
    run_table = connection.ops.quote_name(Run._meta.db_table)
    per_slot = {"schedule_id": "v.sid", "slot": "v.slot", "reason": "v.reason"}
    per_slot["task_id"] = "v.task_id"
    per_batch = {"boot_id": boot_id, "state": RunState.CLAIMED, "claimed_at": now}
    columns: list[str] = []
    values: list[str] = []
    insert_params: list[Any] = []
    for f in Run._meta.concrete_fields:
        if f.primary_key:
            continue
        columns.append(connection.ops.quote_name(f.column))
        if f.attname in per_slot:
            values.append(per_slot[f.attname])
        else:  # every other column as Django would write it (defaults of later fields too)
            values.append("%s")
            value = per_batch.get(f.attname, f.get_default())
            insert_params.append(f.get_db_prep_save(value, connection))
    sql = f"""
        WITH v AS (
            SELECT * FROM unnest(
                %s::bigint[], %s::timestamptz[], %s::timestamptz[], %s::timestamptz[],
                %s::text[], %s::text[]
            ) AS v(sid, was, nxt, slot, reason, task_id)
        ), moved AS (
            UPDATE {schedule} SET next_fire_at = v.nxt, next_fire_reason = %s,
                last_fired_at = %s, stuck_since = NULL, stuck_reason = ''
            FROM v WHERE {schedule}.id = v.sid AND {schedule}.next_fire_at = v.was
            RETURNING {schedule}.id
        ), ins AS (
            INSERT INTO {run_table} ({", ".join(columns)})
            SELECT {", ".join(values)} FROM moved JOIN v ON v.sid = moved.id
            ON CONFLICT (schedule_id, slot) DO NOTHING
            RETURNING id, schedule_id
        )
        SELECT moved.id, ins.id FROM moved LEFT JOIN ins ON ins.schedule_id = moved.id
    """
    params: list[Any] = [
        [d.id for d, _ in pairs],
        [d.next_fire_at for d, _ in pairs],
        [f.next_fire_at for _, f in pairs],
        [f.slot for _, f in pairs],
        [f.reason for _, f in pairs],
        task_ids,
        Reason.SCHEDULED,
        now,
        *insert_params,
    ]
    task_of = {d.id: t for (d, _), t in zip(pairs, task_ids, strict=True)}
    name_of = {d.id: (d.name, f.slot) for d, f in pairs}
    won: dict[int, tuple[int | None, str]] = {}
    with connection.cursor() as cur:
        cur.execute(sql, params)
        for schedule_id, run_id in cur.fetchall():
            if run_id is None:
                name, slot = name_of[schedule_id]
                logger.warning(
                    "slot already has a run, not fired again: schedule=%s slot=%s",
                    name,
                    slot.isoformat(),
                    extra={"event": "duplicate_prevented", "schedule": name},
                )
                continue
            won[schedule_id] = (run_id, task_of[schedule_id])
    return won


#: most rows in one set-based statement (bounded by the database's parameter limits)
BULK_CHUNK = 2000
#: the vendors with ``UPDATE ... FROM ... RETURNING`` (not MariaDB, not MySQL)
UPDATE_FROM_RETURNING = ("postgresql", "sqlite")


def _plain(due: Due, fire: Fire) -> bool:
    """A slot the set-based path handles: read and written times known, nothing missed."""
    return due.next_fire_at is not None and fire.next_fire_at is not None and not fire.missed


def _claim_of(run: Run, due: Due, fire: Fire, boot_id: uuid.UUID, message: Message) -> Claim:
    return Claim(
        run.pk, run.task_id or "", due.id, due.name, fire.slot, fire.reason, boot_id, message
    )


def _lock_in_order(ids: list[int]) -> None:
    """Lock the batch's rows in id order (PostgreSQL, MariaDB, MySQL): two beats claiming
    overlapping batches then queue instead of deadlocking; the compare-and-set decides who
    fires. (SQLite has no row locks: it serialises whole write transactions.)"""
    if ids and connection.features.has_select_for_update:
        list(Schedule.objects.filter(pk__in=ids).order_by("pk").select_for_update().values("pk"))


def _claim_one(
    due: Due, fire: Fire, boot_id: uuid.UUID, now: dt.datetime, blocker: Run | None
) -> Run | None:
    changes: dict[str, Any] = {
        "next_fire_at": fire.next_fire_at,
        "next_fire_reason": Reason.SCHEDULED,
    }
    if fire.next_fire_at is None:
        changes["enabled"] = False
    if blocker is None:
        changes |= {"last_fired_at": now, "stuck_since": None, "stuck_reason": ""}
    else:
        changes |= {"stuck_since": Coalesce(F("stuck_since"), now)}
        changes |= {"stuck_reason": _skip_reason(blocker)}
    if not _cas(due, **changes):
        return None  # another beat has this slot
    if fire.missed is not None:
        _record_missed(due, fire.missed, boot_id, now, NO_BEAT)
    return _insert_run(due, fire, boot_id, now, blocker)


def _cas_many(pairs: Sequence[tuple[Due, Fire]], now: dt.datetime) -> set[int]:
    """The compare-and-set of many slots in one statement; the ids it moved on (R3, R4)."""
    if not pairs:
        return set()
    if connection.vendor not in UPDATE_FROM_RETURNING:
        return _cas_many_locked(pairs, now)
    ops = connection.ops
    pg = connection.vendor == "postgresql"
    row = "(%s::bigint, %s::timestamptz, %s::timestamptz)" if pg else "(%s, %s, %s)"
    params: list[Any] = []
    for due, fire in pairs:
        params += [
            due.id,
            ops.adapt_datetimefield_value(due.next_fire_at),
            ops.adapt_datetimefield_value(fire.next_fire_at),
        ]
    table = connection.ops.quote_name(Schedule._meta.db_table)
    sql = (
        f"WITH v(sid, was, nxt) AS (VALUES {', '.join([row] * len(pairs))}) "
        f"UPDATE {table} SET next_fire_at = v.nxt, next_fire_reason = %s, "
        "last_fired_at = %s, stuck_since = NULL, stuck_reason = '' "
        f"FROM v WHERE {table}.id = v.sid AND {table}.next_fire_at = v.was RETURNING id"
    )
    params += [Reason.SCHEDULED, ops.adapt_datetimefield_value(now)]
    with connection.cursor() as cur:
        cur.execute(sql, params)
        return {int(r[0]) for r in cur.fetchall()}


def _cas_many_locked(pairs: Sequence[tuple[Due, Fire]], now: dt.datetime) -> set[int]:
    """``_cas_many`` where ``UPDATE`` returns no rows (MariaDB, MySQL): the compare is a
    locking read of the rows still at the next fire this beat read, the set one ``UPDATE``
    of exactly those. The rows stay locked to this transaction from the read to its commit,
    so no other beat can move one in between (R4): the read says which ids moved on."""
    was = {d.id: d.next_fire_at for d, _ in pairs}
    current = (
        Schedule.objects.filter(pk__in=list(was)).order_by("pk").select_for_update()
    ).values_list("pk", "next_fire_at")
    won = {pk for pk, at in current if at is not None and at == was[pk]}
    if not won:
        return set()
    ops = connection.ops
    table = ops.quote_name(Schedule._meta.db_table)
    cases: list[str] = []
    params: list[Any] = []
    for due, fire in pairs:
        if due.id in won:
            cases.append("WHEN %s THEN %s")
            params += [due.id, ops.adapt_datetimefield_value(fire.next_fire_at)]
    ids = sorted(won)
    sql = (
        f"UPDATE {table} SET next_fire_at = CASE id {' '.join(cases)} END, "
        "next_fire_reason = %s, last_fired_at = %s, stuck_since = NULL, stuck_reason = '' "
        f"WHERE id IN ({', '.join(['%s'] * len(ids))})"
    )
    params += [Reason.SCHEDULED, ops.adapt_datetimefield_value(now), *ids]
    with connection.cursor() as cur:
        cur.execute(sql, params)
    return won


def _insert_runs(
    pairs: Sequence[tuple[Due, Fire]], boot_id: uuid.UUID, now: dt.datetime
) -> list[Run | None]:
    """Insert the runs of slots just won, in one statement; one by one only when a slot
    already has a run (fired during an outage and reconciled), so that it is not fired
    again while the rest still are."""
    runs = [
        Run(
            schedule_id=due.id,
            slot=fire.slot,
            boot_id=boot_id,
            reason=fire.reason,
            claimed_at=now,
            task_id=str(uuid.uuid4()),
        )
        for due, fire in pairs
    ]
    if not runs:
        return []
    try:
        with transaction.atomic():
            return list(Run.objects.bulk_create(runs))
    except IntegrityError:
        return [_insert_run(due, fire, boot_id, now, None) for due, fire in pairs]


def _insert_run(
    due: Due, fire: Fire, boot_id: uuid.UUID, now: dt.datetime, blocker: Run | None
) -> Run | None:
    run = Run(
        schedule_id=due.id,
        slot=fire.slot,
        boot_id=boot_id,
        reason=fire.reason,
        claimed_at=now,
    )
    if blocker is not None:
        run.state, run.detail = RunState.SKIPPED, _skip_reason(blocker)
        run.finished_at = now
    else:
        run.task_id = str(uuid.uuid4())
    try:
        with transaction.atomic():
            run.save()
    except IntegrityError:
        # The slot has a run already (fired during a database outage and reconciled): the
        # advance above stands, the slot is not fired again.
        logger.warning(
            "slot already has a run, not fired again: schedule=%s slot=%s",
            due.name,
            fire.slot.isoformat(),
            extra={"event": "duplicate_prevented", "schedule": due.name},
        )
        return None
    if blocker is not None:
        logger.warning(
            "skipped schedule=%s slot=%s reason=%s",
            due.name,
            fire.slot.isoformat(),
            run.detail,
            extra={"event": "skip", "schedule": due.name, "slot": fire.slot.isoformat()},
        )
        return None
    return run


def claim_manual(row: Schedule, boot_id: uuid.UUID | None, now: dt.datetime) -> Claim:
    """A "run now": a run through the same ledger, reason manual, no change to next fire.

    The schedule's last fire moves (the admin and ``status`` show that it went out)."""
    message = Message.for_row(row)  # a bad row is refused before anything is written
    with transaction.atomic():
        run = Run.objects.create(
            schedule=row,
            slot=now,
            boot_id=boot_id,
            reason=Reason.MANUAL,
            claimed_at=now,
            task_id=str(uuid.uuid4()),
        )
        Schedule.objects.filter(pk=row.pk).update(last_fired_at=now)
    return Claim(
        run.pk,
        run.task_id or "",
        row.pk,
        row.name,
        now,
        Reason.MANUAL,
        boot_id or uuid.UUID(int=0),
        message,
    )


def mark_published(run_ids: Sequence[int], now: dt.datetime) -> None:
    if run_ids:
        # state=claimed only: a fast worker may have moved the run on already.
        Run.objects.filter(pk__in=list(run_ids), state=RunState.CLAIMED).update(
            state=RunState.PUBLISHED, published_at=now, publish_attempts=F("publish_attempts") + 1
        )


def incident(
    kind: str, detail: str, now: dt.datetime, boot_id: uuid.UUID | None, count: int = 1
) -> None:
    Incident.objects.create(kind=kind, detail=detail, count=count, at=now, boot_id=boot_id)


def reconcile_outage_fire(
    schedule_name: str,
    slot: dt.datetime,
    reason: str,
    task_id: str,
    published_at: dt.datetime | None,
    next_fire_at: dt.datetime | None,
    boot_id: uuid.UUID,
    now: dt.datetime,
) -> bool:
    """R5: write a fire that went out while the database was unreachable. False when the
    slot already had a run (another beat fired it too: logged as an incident)."""
    with transaction.atomic():
        row = Schedule.objects.select_for_update().filter(name=schedule_name).first()
        if row is None:
            return False
        if next_fire_at is not None and (
            row.next_fire_at is None or row.next_fire_at < next_fire_at
        ):
            Schedule.objects.filter(pk=row.pk).update(
                next_fire_at=next_fire_at, next_fire_reason=Reason.SCHEDULED, last_fired_at=slot
            )
        try:
            with transaction.atomic():
                Run.objects.create(
                    schedule=row,
                    slot=slot,
                    boot_id=boot_id,
                    reason=reason,
                    state=RunState.PUBLISHED if published_at else RunState.CLAIMED,
                    task_id=task_id,
                    claimed_at=slot if slot < now else now,
                    published_at=published_at,
                    publish_attempts=1 if published_at else 0,
                )
        except IntegrityError:
            incident(
                "duplicate_during_outage",
                f"{schedule_name} slot {slot.isoformat()} was fired by another beat too "
                "while the database was unreachable",
                now,
                boot_id,
            )
            return False
    return True


def mark_missed(run_ids: Sequence[int], detail: str, now: dt.datetime) -> None:
    """A claimed slot that could not go out while it was worth sending."""
    Run.objects.filter(pk__in=list(run_ids), state=RunState.CLAIMED).update(
        state=RunState.MISSED, detail=detail[:300], finished_at=now
    )


def in_doubt_runs(
    current_boot: uuid.UUID, stale_before: dt.datetime, limit: int = 500
) -> list[Run]:
    """R9: runs claimed by a boot that is gone (stopped or silent) and never confirmed."""
    dead = (
        Q(boot__isnull=True)
        | Q(boot__stopped_at__isnull=False)
        | Q(boot__heartbeat_at__lt=stale_before)
    )
    return list(
        Run.objects.filter(dead, state=RunState.CLAIMED)
        .exclude(boot_id=current_boot)
        .select_related("schedule")
        .order_by("claimed_at")[:limit]
    )


def take_over(run_id: int, old_boot: uuid.UUID | None, new_boot: uuid.UUID) -> bool:
    """Compare-and-set: only one beat re-sends an in-doubt run."""
    return bool(
        Run.objects.filter(pk=run_id, state=RunState.CLAIMED, boot_id=old_boot).update(
            boot_id=new_boot, reason=Reason.REPUBLISH
        )
    )
