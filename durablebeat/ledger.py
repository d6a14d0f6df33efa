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

from django.db import IntegrityError, transaction
from django.db.models import F, Q
from django.db.models.functions import Coalesce

from . import conf
from .enums import IN_FLIGHT_STATES, Overlap, Reason, RunState, Source
from .models import Boot, Incident, MissedSlots, Run, Schedule
from .policy import Defer, Due, Fire, Miss

if TYPE_CHECKING:
    from .codesync import CodeEntry

logger = logging.getLogger("durablebeat")

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
        options: dict[str, Any] = {}
        if row.queue:
            options["queue"] = row.queue
        if row.routing_key:
            options["routing_key"] = row.routing_key
        if row.priority is not None:
            options["priority"] = row.priority
        if row.expire_seconds is not None:
            options["expires"] = row.expire_seconds
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
    """The value the policy works on; raises ``timing.InvalidSchedule`` for a bad row."""
    s = conf.settings
    return Due(
        id=row.pk,
        name=row.name,
        task=row.task,
        spec=row.to_spec(),
        next_fire_at=row.next_fire_at,
        next_fire_reason=row.next_fire_reason,
        startup_grace=row.startup_grace if row.startup_grace is not None else s.STARTUP_GRACE,
        catch_up=row.catch_up,
        catch_up_window=row.catch_up_window or s.CATCH_UP_WINDOW,
        overlap=row.overlap,
        from_code=row.source == Source.CODE,
    )


def fetch_due(now: dt.datetime, horizon: dt.datetime, limit: int) -> list[Schedule]:
    """One indexed query: what is due (or new) now, plus what comes due before ``horizon``."""
    return list(
        Schedule.objects.filter(
            Q(next_fire_at__lte=horizon) | Q(next_fire_at__isnull=True), enabled=True
        )
        .filter(error="")
        .order_by(F("next_fire_at").asc(nulls_first=True))[:limit]
    )


def mark_bad(row: Schedule, message: str) -> None:
    """R20: a bad row is set aside with its error; it never blocks the others."""
    Schedule.objects.filter(pk=row.pk).update(error=message[:2000])


def register_boot(boot_id: uuid.UUID, hostname: str, pid: int, now: dt.datetime) -> None:
    from . import __version__

    Boot.objects.update_or_create(
        pk=boot_id,
        defaults={"hostname": hostname, "pid": pid, "heartbeat_at": now, "version": __version__},
        create_defaults={
            "hostname": hostname,
            "pid": pid,
            "started_at": now,
            "heartbeat_at": now,
            "version": __version__,
        },
    )


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


def _in_flight(schedule_ids: Iterable[int]) -> dict[int, Run]:
    runs = Run.objects.filter(schedule_id__in=list(schedule_ids), state__in=IN_FLIGHT_STATES)
    return {r.schedule_id: r for r in runs.order_by("slot")}


def _skip_reason(run: Run) -> str:
    reason = f"previous run (slot {run.slot.isoformat()}, task {run.task_id}) is still {run.state}"
    if run.worker:
        reason += f" on {run.worker}"
    return reason[:300]


def claim(
    fires: Sequence[tuple[Due, Fire, Message]], boot_id: uuid.UUID, now: dt.datetime
) -> list[Claim]:
    """R3 + R4 + R14 for a batch: in one transaction, for each due slot, compare-and-set the
    next fire and insert its run (or its skipped entry). The caller publishes after commit."""
    claims: list[Claim] = []
    with transaction.atomic():
        skip_ids = [d.id for d, _, _ in fires if d.overlap == Overlap.SKIP]
        busy = _in_flight(skip_ids) if skip_ids else {}
        for due, fire, message in fires:
            changes: dict[str, Any] = {
                "next_fire_at": fire.next_fire_at,
                "next_fire_reason": Reason.SCHEDULED,
            }
            if fire.next_fire_at is None:
                changes["enabled"] = False
            blocker = busy.get(due.id) if fire.reason != Reason.MANUAL else None
            if blocker is None:
                changes |= {"last_fired_at": now, "stuck_since": None, "stuck_reason": ""}
            else:
                changes |= {"stuck_since": Coalesce(F("stuck_since"), now)}
                changes |= {"stuck_reason": _skip_reason(blocker)}
            if not _cas(due, **changes):
                continue  # another beat has this slot
            if fire.missed is not None:
                _record_missed(due, fire.missed, boot_id, now, NO_BEAT)
            made = _insert_run(due, fire, boot_id, now, blocker)
            if made is not None:
                claims.append(
                    Claim(
                        made.pk,
                        made.task_id or "",
                        due.id,
                        due.name,
                        fire.slot,
                        fire.reason,
                        boot_id,
                        message,
                    )
                )
    return claims


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
    """A "run now": a run through the same ledger, reason manual, no change to next fire."""
    run = Run.objects.create(
        schedule=row,
        slot=now,
        boot_id=boot_id,
        reason=Reason.MANUAL,
        claimed_at=now,
        task_id=str(uuid.uuid4()),
    )
    return Claim(
        run.pk,
        run.task_id or "",
        row.pk,
        row.name,
        now,
        Reason.MANUAL,
        boot_id or uuid.UUID(int=0),
        Message.for_row(row),
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


def advance_to_at_least(name: str, next_fire_at: dt.datetime, reason: str) -> None:
    """After an outage: a schedule fired from memory never moves back in the database."""
    Schedule.objects.filter(
        Q(next_fire_at__lt=next_fire_at) | Q(next_fire_at__isnull=True), name=name, enabled=True
    ).update(next_fire_at=next_fire_at, next_fire_reason=reason)


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
