"""Who fires a due slot (R3, R4, R8, R14, R16): the claim of a batch, with a one-by-one
fallback when a row refuses; overlap skips and their evidence (the runs in flight, no-news);
defers and misses; a manual "run now"; the publish's outcome written back.

Every write that decides who fires is a compare-and-set on ``next_fire_at`` inside a
transaction that also inserts the run, and the run is unique on (schedule, slot): a zero-row
update or an ``IntegrityError`` means another beat has that slot. The set-based statements
for the common case are in ``batch_claim``.
"""

from __future__ import annotations

import datetime as dt
import logging
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from django.db import IntegrityError
from django.db.models import F, QuerySet
from django.db.models.functions import Coalesce

from .. import conf, db
from ..core import timing
from ..core.policy import (
    Defer,
    Due,
    Fire,
    Miss,
    Step,
    news_overdue,
    no_news_bound,
    overlap_step,
)
from ..enums import IN_FLIGHT_STATES, RUN_NOW_ADMIN, Failure, Overlap, Reason, RunState
from ..models import (
    MissedSlots,
    Run,
    Schedule,
)
from ..overlap import release_kept
from ..pausing import Ended, after_runs
from ..validation import storable
from . import batch_claim
from .boots import dead_q, why_late
from .due import is_row_error
from .liveness import dead_reason, mark_no_news_runs, worker_seen_at
from .messages import Claim, Message, ToFire, new_task_id

logger = logging.getLogger("durablebeat")


def _cas(due: Due, **changes: Any) -> bool:
    """Move a schedule on only if nobody else did since we read it (R4)."""
    return bool(Schedule.objects.filter(pk=due.id, next_fire_at=due.next_fire_at).update(**changes))


def apply_defer(due: Due, action: Defer) -> bool:
    changes: dict[str, Any] = {
        "next_fire_at": action.next_fire_at,
        "next_slot": action.next_slot,
        "next_fire_reason": action.reason,
    }
    if action.next_fire_at is None:
        changes["enabled"] = False  # a one-off with no slot left is done
    return _cas(due, **changes)


def apply_miss(due: Due, action: Miss, boot_id: uuid.UUID, now: dt.datetime) -> bool:
    with db.atomic():
        changes: dict[str, Any] = {
            "next_fire_at": action.next_fire_at,
            "next_slot": action.next_slot,
            "next_fire_reason": Reason.SCHEDULED,
        }
        if action.next_fire_at is None:
            changes["enabled"] = False
        if not _cas(due, **changes):
            return False
        _record_missed(due, action.missed, boot_id, now)
        return True


def _one_off(due: Due) -> tuple[int | None, dt.datetime | None]:
    """``why_late``'s one-off arguments: the schedule's id when it is a one-off (its slot
    may predate its write), and the next fire its row held when beat found it."""
    if isinstance(due.spec, timing.Clocked):
        return due.id, due.slot
    return None, None


def _record_missed(due: Due, missed: Any, boot_id: uuid.UUID, now: dt.datetime) -> None:
    why = why_late(missed.last, now, *_one_off(due))  # R31: true, whatever the path
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


def in_flight_runs(schedule_ids: Iterable[int]) -> QuerySet[Run]:
    """The runs in flight of these schedules, through the index of the runs in flight
    (unordered: an ORDER BY slot leads SQLite's planner to a schedule's every run)."""
    return Run.objects.filter(
        batch_claim.ids_in("schedule_id", list(schedule_ids)), state__in=IN_FLIGHT_STATES
    ).order_by()


def _in_flight(schedule_ids: Iterable[int], now: dt.datetime) -> dict[int, list[Run]]:
    """R14 + R22 + R34: each schedule's runs with evidence that they are alive, oldest slot
    first: started on a worker that is alive and within its hard time limit, or claimed or
    published and still inside the no-news bound. A published run past the bound is marked
    ``no_news`` here, so a lost write or a lost message never holds a schedule for ever."""
    s = conf.settings
    runs = sorted(
        in_flight_runs(schedule_ids).annotate(
            expire_seconds=F("schedule__expire_seconds"),
            countdown=F("schedule__countdown"),
            schedule_name=F("schedule__name"),
        ),
        key=lambda r: r.slot,
    )
    seen = worker_seen_at(r for r in runs if r.state == RunState.STARTED)
    live: dict[int, list[Run]] = {}
    overdue: list[Run] = []
    for run in runs:
        if run.state == RunState.STARTED and run.started_at is not None:
            if dead_reason(run, seen, now) is None:
                live.setdefault(run.schedule_id, []).append(run)
            continue  # a dead worker's run is the orphan reclaim's to mark lost (R15)
        bound = no_news_bound(run.expire_seconds, s.NO_NEWS_AFTER, run.countdown)
        if not news_overdue(run.published_at or run.claimed_at, bound, now):
            live.setdefault(run.schedule_id, []).append(run)
        elif run.state == RunState.PUBLISHED:
            overdue.append(run)
        # A claimed run past the bound stays claimed: its publish is retried, or settled
        # as in doubt (R9); it just no longer blocks.
    mark_no_news_runs(overdue)
    return live


def _skip_reason(due: Due, live: list[Run]) -> str:
    """Why a slot is skipped: the run(s) in flight that held it (R14, R34)."""
    run = live[-1]
    reason = f"previous run (slot {run.slot.isoformat()}, task {run.task_id}) is still {run.state}"
    if run.worker:
        reason += f" on {run.worker}"
    if due.overlap == Overlap.ALLOW:
        reason = f"{len(live)} runs in flight (max_in_flight {due.max_in_flight}); latest: {reason}"
    elif due.overlap == Overlap.BUFFER_ONE and due.buffered_slot is not None:
        kept = due.buffered_slot.isoformat()
        reason = f"slot {kept} is already kept (overlap=buffer_one) behind: {reason}"
    return reason[:300]


@dataclass(frozen=True, kw_only=True)
class Claimed:
    """What ``claim_or_split`` claimed, and the slots it left out (R21)."""

    claims: list[Claim]
    #: the slots whose rows refused the claim, each with the error its row raised
    refused: list[tuple[Due, Exception]]


def claim(fires: Sequence[ToFire], boot_id: uuid.UUID, now: dt.datetime) -> list[Claim]:
    """R3 + R4 + R14 + R34 for a batch: in one transaction, for each due slot,
    compare-and-set the next fire and insert its run (or its skipped entry, or keep it
    behind the run in flight). The caller publishes after commit (and revokes what a
    ``replace`` replaced first).

    The common case (a slot on its grid, not held by a run in flight) is set-based: the
    rows, locked by the due query (or here, in id order, where the server cannot skip
    locked rows: ``batch_claim.lock_in_order``), are moved on by one statement whose
    ``WHERE next_fire_at = <as read>`` is the compare-and-set, and their runs inserted by one
    ``INSERT``; a batch costs a handful of statements whatever its size. The rest (overlap
    steps other than a plain fire, catch-ups with missed slots, one-offs) go one by one.

    All of the batch in one savepoint, or nothing and an exception."""
    claims: dict[int, Claim] = {}
    with db.atomic():
        batch_claim.lock_in_order([f.due.id for f in fires])
        watched = [f.due.id for f in fires if _watched(f.due)]
        live = _in_flight(watched, now) if watched else {}
        bulk: list[ToFire] = []
        for f in fires:
            runs = live.get(f.due.id, []) if f.fire.reason != Reason.MANUAL else []
            step = overlap_step(f.due, f.fire.reason, len(runs))
            if step == Step.FIRE and f.due.buffered_slot is None and _plain(f.due, f.fire):
                bulk.append(f)
                continue
            made = _claim_step(f, step, runs, boot_id, now)
            if made is not None:
                claims[f.due.id] = made
        many = (
            batch_claim.claim_many_pg
            if db.connection().vendor == "postgresql"
            else batch_claim.claim_many
        )
        for chunk_start in range(0, len(bulk), batch_claim.BULK_CHUNK):
            chunk = bulk[chunk_start : chunk_start + batch_claim.BULK_CHUNK]
            won = many(chunk, boot_id, now)
            for f in chunk:
                if f.due.id in won:
                    run_id, task_id = won[f.due.id]
                    claims[f.due.id] = _claim_of(run_id, task_id, f, boot_id)
    return [claims[f.due.id] for f in fires if f.due.id in claims]


def _watched(due: Due) -> bool:
    """Whether a due slot asks for its schedule's runs in flight (R14, R34): every policy
    but an unbounded ``allow`` with nothing kept."""
    unbounded = due.overlap == Overlap.ALLOW and not due.max_in_flight
    return not unbounded or due.buffered_slot is not None or due.next_fire_reason == Reason.BUFFERED


def _claim_step(
    f: ToFire, step: Step, live: list[Run], boot_id: uuid.UUID, now: dt.datetime
) -> Claim | None:
    """One slot's overlap step (``core.policy.overlap_step``) carried out: its claim, or None
    when nothing is sent (skipped, kept, another beat's)."""
    due, fire = f.due, f.fire
    if step in (Step.BUFFER, Step.HOLD):
        kept = fire.slot if step == Step.BUFFER else _still_kept(due)
        _keep(due, fire, kept, live, boot_id, now)
        return None
    if step == Step.SKIP:
        _claim_one(due, fire, boot_id, now, _skip_reason(due, live), _still_kept(due))
        return None
    if step in (Step.RELEASE, Step.RELEASE_AND_BUFFER):
        assert due.buffered_slot is not None  # overlap_step: only with a kept slot
        sent = replace(fire, slot=due.buffered_slot, reason=Reason.BUFFERED, late=None)
        keep = fire.slot if step == Step.RELEASE_AND_BUFFER else None
        f = ToFire(due=due, fire=sent, message=f.message)
        made = _claim_one(due, sent, boot_id, now, kept=keep)
        return None if made is None else _claim_of(made.pk, made.task_id, f, boot_id)
    made = _claim_one(due, fire, boot_id, now)
    if made is None:
        return None
    claimed = _claim_of(made.pk, made.task_id, f, boot_id)
    if step == Step.REPLACE:
        replaced = _replace(due, live, fire.slot, now)
        claimed = replace(claimed, replaces=tuple(replaced), terminate=due.terminate)
    return claimed


def _still_kept(due: Due) -> dt.datetime | None:
    """The slot a schedule keeps as it moves on: its kept slot under ``buffer_one``; one
    left from before its overlap was changed is dropped (R34)."""
    return due.buffered_slot if due.overlap == Overlap.BUFFER_ONE else None


def _keep(
    due: Due,
    fire: Fire,
    kept: dt.datetime | None,
    live: list[Run],
    boot_id: uuid.UUID,
    now: dt.datetime,
) -> None:
    """Move the row on to its next fire without sending anything, keeping ``kept`` (R34):
    a slot kept behind the run in flight, or a run's end that came while another is
    still in flight (its kept slot stays for that one's end)."""
    changes: dict[str, Any] = {
        "next_fire_at": fire.next_fire_at,
        "next_slot": fire.next_slot,
        "next_fire_reason": Reason.SCHEDULED,
        "buffered_slot": kept,
    }
    if fire.next_fire_at is None:
        changes["enabled"] = False
    if not _cas(due, **changes):
        return  # another beat has this slot
    if fire.missed is not None:
        _record_missed(due, fire.missed, boot_id, now)
    if kept is not None and kept != due.buffered_slot and live:
        run = live[-1]
        logger.info(
            "kept schedule=%s slot=%s: sent when run (slot %s, task %s) ends",
            due.name,
            kept.isoformat(),
            run.slot.isoformat(),
            run.task_id,
            extra={"event": "buffered", "schedule": due.name, "slot": kept.isoformat()},
        )


def _replace(due: Due, live: list[Run], slot: dt.datetime, now: dt.datetime) -> list[str]:
    """R34: the runs in flight end ``replaced`` (compare-and-set on their state: a
    completion that came meanwhile wins); returns the task ids to revoke."""
    revoked: list[str] = []
    detail = f"replaced by slot {slot.isoformat()} (overlap=replace)"
    for run in live:
        if Run.objects.filter(pk=run.pk, state=run.state).update(
            state=RunState.REPLACED, finished_at=now, detail=detail[:300]
        ):
            if run.task_id:  # a run claimed but not yet published has no task to revoke
                revoked.append(run.task_id)
            logger.warning(
                "replaced schedule=%s slot=%s task_id=%s by slot %s",
                due.name,
                run.slot.isoformat(),
                run.task_id,
                slot.isoformat(),
                extra={"event": "replaced", "schedule": due.name, "task_id": run.task_id},
            )
    return [task_id for task_id in revoked if task_id]


def claim_or_split(fires: Sequence[ToFire], boot_id: uuid.UUID, now: dt.datetime) -> Claimed:
    """``claim``, and when the batch raises an error about its rows' values (R21, see
    ``is_row_error``) the batch claimed again one slot at a time, each in its own savepoint:
    a slot that raises there is left out and named in ``refused``, the others are claimed.
    An error about the database itself (unreachable, schema) propagates (R5)."""
    try:
        return Claimed(claims=claim(fires, boot_id, now), refused=[])
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
    refused: list[tuple[Due, Exception]] = []
    for one in fires:
        try:
            claims += claim([one], boot_id, now)
        except Exception as exc:
            if not is_row_error(exc):
                raise
            refused.append((one.due, exc))
    return Claimed(claims=claims, refused=refused)


#: how a run whose message the broker client refused begins its detail (the admin's words;
#: ``check`` finds such a run by its ``failure``)
UNPUBLISHABLE = "not published, the message was refused"


def mark_unpublishable(run_ids: Sequence[int], error: str, now: dt.datetime) -> None:
    """R21: the broker client refused these claimed slots' message for its own content (not
    an outage): each run fails with why, and its schedule's last outcome says so, so that
    the run history, the admin and ``check`` show it. The slot is not retried."""
    if not run_ids:
        return
    error = storable(error)
    detail = f"{UNPUBLISHABLE}: {error}"[:300]
    with db.atomic():
        runs = Run.objects.filter(pk__in=list(run_ids), state=RunState.CLAIMED)
        found = list(runs.values_list("schedule_id", "schedule__pause_after_failures"))
        schedule_ids = [schedule_id for schedule_id, _ in found]
        runs.update(
            state=RunState.FAILED,
            failure=Failure.UNPUBLISHABLE,
            detail=detail,
            error=error,
            finished_at=now,
        )
        Schedule.objects.filter(pk__in=schedule_ids).exclude(last_failed_at__gt=now).update(
            last_failed_at=now, last_outcome=RunState.FAILED
        )
        release_kept(schedule_ids, now)  # R34
        # R36: a message refused every time is a failure every time
        after_runs((Ended(sid, own, RunState.FAILED) for sid, own in found), now)


def _plain(due: Due, fire: Fire) -> bool:
    """A slot the set-based path handles: read and written times known, nothing missed."""
    return due.next_fire_at is not None and fire.next_fire_at is not None and not fire.missed


def _claim_of(run_id: int | None, task_id: str | None, f: ToFire, boot_id: uuid.UUID) -> Claim:
    return Claim(
        run_id=run_id,
        task_id=task_id or "",
        schedule_id=f.due.id,
        schedule=f.due.name,
        slot=f.fire.slot,
        reason=f.fire.reason,
        boot_id=boot_id,
        message=f.message,
        spec=f.due.spec,
        replaceable=f.due.overlap == Overlap.REPLACE,
    )


def _claim_one(
    due: Due,
    fire: Fire,
    boot_id: uuid.UUID,
    now: dt.datetime,
    skipped: str | None = None,
    kept: dt.datetime | None = None,
) -> Run | None:
    """Claim one slot (or record it ``skipped``, with why), moving the row on and leaving
    ``kept`` as its kept slot (R34)."""
    changes: dict[str, Any] = {
        "next_fire_at": fire.next_fire_at,
        "next_slot": fire.next_slot,
        "next_fire_reason": Reason.SCHEDULED,
    }
    if fire.next_fire_at is None:
        changes["enabled"] = False
    if kept != due.buffered_slot:
        changes["buffered_slot"] = kept
    if skipped is None:
        changes |= {"last_fired_at": now, "stuck_since": None, "stuck_reason": ""}
    else:
        changes |= {"stuck_since": Coalesce(F("stuck_since"), now)}
        changes |= {"stuck_reason": skipped}
    if not _cas(due, **changes):
        return None  # another beat has this slot
    if fire.missed is not None:
        _record_missed(due, fire.missed, boot_id, now)
    late = ""
    if fire.late is not None:  # R31: a one-off fired late says so, and why
        late = f"fired late: {why_late(fire.slot, now, *_one_off(due))}"
        logger.warning(
            "late schedule=%s slot=%s: %s",
            due.name,
            fire.slot.isoformat(),
            late,
            extra={"event": "late", "schedule": due.name},
        )
    return batch_claim.insert_run(due, fire, boot_id, now, skipped, late)


def claim_manual(
    row: Schedule, boot_id: uuid.UUID | None, now: dt.datetime, detail: str = RUN_NOW_ADMIN
) -> Claim:
    """A "run now": a run through the same ledger, reason manual, no change to next fire;
    ``detail`` says who asked (``RUN_NOW_ADMIN``, ``RUN_NOW_API``).

    The schedule's last fire moves (the admin and ``status`` show that it went out)."""
    message = Message.for_row(row)  # a bad row is refused before anything is written
    with db.atomic():
        run = Run.objects.create(
            schedule=row,
            slot=now,
            boot_id=boot_id,
            reason=Reason.MANUAL,
            detail=detail,
            claimed_at=now,
            task_id=new_task_id(),
        )
        Schedule.objects.filter(pk=row.pk).update(last_fired_at=now)
    return _claim_of_run(run, row, message)


def claim_backfill(row: Schedule, slot: dt.datetime, now: dt.datetime) -> Claim | None:
    """A missed slot fired later by a person (R27): a run for that very slot, reason
    backfill, no change to next fire. None when the slot already has a run: the
    one-run-per-slot constraint decides (R3, R4), whoever wrote it first."""
    message = Message.for_row(row)  # a bad row is refused before anything is written
    try:
        with db.atomic():
            run = Run.objects.create(
                schedule=row,
                slot=slot,
                reason=Reason.BACKFILL,
                claimed_at=now,
                task_id=new_task_id(),
            )
    except IntegrityError:
        return None
    return _claim_of_run(run, row, message)


def _claim_of_run(run: Run, row: Schedule, message: Message) -> Claim:
    """The claim of a run a person asked for (run now, backfill): written outside any beat
    boot, so its boot id is the zero UUID when the run names none."""
    return Claim(
        run_id=run.pk,
        task_id=run.task_id or "",
        schedule_id=row.pk,
        schedule=row.name,
        slot=run.slot,
        reason=run.reason,
        boot_id=run.boot_id or uuid.UUID(int=0),
        message=message,
    )


def mark_published(run_ids: Sequence[int], now: dt.datetime) -> None:
    if run_ids:
        # state=claimed only: a fast worker may have moved the run on already.
        Run.objects.filter(batch_claim.ids_in("pk", run_ids), state=RunState.CLAIMED).update(
            state=RunState.PUBLISHED, published_at=now, publish_attempts=F("publish_attempts") + 1
        )


def mark_missed(run_ids: Sequence[int], detail: str, now: dt.datetime) -> None:
    """A claimed slot that could not go out while it was worth sending."""
    runs = Run.objects.filter(pk__in=list(run_ids), state=RunState.CLAIMED)
    with db.atomic():
        ended = list(runs.values_list("schedule_id", flat=True))
        runs.update(state=RunState.MISSED, detail=detail[:300], finished_at=now)
        release_kept(ended, now)  # R34: a slot kept behind it goes now


def in_doubt_runs(current_boot: uuid.UUID, now: dt.datetime, limit: int = 500) -> list[Run]:
    """R9: runs claimed by a boot that is gone (stopped or silent) and never confirmed.
    Most looks find none: a cheap question first (building the full query was most of an
    idle beat's CPU)."""
    others = Run.objects.filter(state=RunState.CLAIMED).exclude(boot_id=current_boot)
    if not others.exists():
        return []
    return list(
        others.filter(dead_q(now)).select_related("schedule").order_by("claimed_at")[:limit]
    )


def take_over(run_id: int, old_boot: uuid.UUID | None, new_boot: uuid.UUID) -> bool:
    """Compare-and-set: only one beat re-sends an in-doubt run."""
    runs = Run.objects.filter(pk=run_id, state=RunState.CLAIMED)
    runs = runs.filter(boot_id=old_boot) if old_boot else runs.filter(boot__isnull=True)
    return bool(runs.update(boot_id=new_boot, reason=Reason.REPUBLISH))
