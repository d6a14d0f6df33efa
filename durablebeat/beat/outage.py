"""Writing what beat fired from memory while the database was unreachable (R5)."""

from __future__ import annotations

import collections
import datetime as dt
import logging
import uuid
from dataclasses import dataclass

from django.db import IntegrityError, transaction

from ..enums import Reason, RunState
from ..models import (
    Run,
    Schedule,
)
from .boots import incident
from .due import is_row_error

logger = logging.getLogger("durablebeat")


@dataclass
class OutageFire:
    """A fire beat sent from memory, kept until the ledger can be written (R5)."""

    schedule: str
    slot: dt.datetime
    reason: str
    task_id: str
    published_at: dt.datetime | None
    next_fire_at: dt.datetime | None


def write_fires(fires: collections.deque[OutageFire], boot_id: uuid.UUID, now: dt.datetime) -> int:
    """Write the fires kept in memory, oldest first, each taken off once written (not again
    if the database drops mid-way). Returns how many."""
    done = 0
    while fires:
        f = fires[0]
        try:
            reconcile_outage_fire(
                f.schedule,
                f.slot,
                f.reason,
                f.task_id,
                f.published_at,
                f.next_fire_at,
                boot_id,
                now,
            )
        except Exception as exc:
            if not is_row_error(exc):
                raise
            # R21: one fire the ledger refuses never holds the rest of the reconciliation.
            logger.exception(
                "could not write fire schedule=%s slot=%s from the outage: %s",
                f.schedule,
                f.slot.isoformat(),
                exc,
                extra={"event": "outage_reconcile_failed", "schedule": f.schedule},
            )
        fires.popleft()
        done += 1
    if done:
        logger.info(
            "ledger reconciled after database outage: %d fires written",
            done,
            extra={"event": "outage_reconciled", "count": done},
        )
    return done


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
