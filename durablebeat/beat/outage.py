"""Beat's memory for a database outage (R5): the code schedules it fires while the database
is unreachable, and the fires it sent so, written into the ledger once the database is back.
Bounded (R21): at most one fire per schedule every ``MEMORY_MIN_GAP``, at most
``MAX_OUTAGE_FIRES`` fires kept; what is dropped is said in the log."""

from __future__ import annotations

import collections
import datetime as dt
import logging
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from django.db import IntegrityError

from .. import conf, db
from ..core import jitter, policy, timing
from ..core.custom import custom_next
from ..enums import Reason, RunState
from ..models import (
    Run,
    Schedule,
)
from .boots import incident
from .codesync import CodeEntry
from .due import converted, describe_row_error, is_row_error
from .messages import Message, ToFire

logger = logging.getLogger("durablebeat")

#: while the database is down, a code schedule fires from memory at most this often (R21):
#: a sub-second interval must not flood the broker; the slots in between are dropped, logged
MEMORY_MIN_GAP = dt.timedelta(seconds=1)
#: fires from memory kept for the ledger while the database is down (R5, R21): beyond this
#: the oldest are dropped (they went out; only their record is lost), logged
MAX_OUTAGE_FIRES = 20_000
#: what ``OutageMemory.refresh`` reads of each code schedule
_REFRESHED = (
    "name",
    "next_fire_at",
    "next_slot",
    "next_fire_reason",
    "enabled",
    "error",
    "last_fired_at",
    "created_at",
)
#: how often a dropping outage memory says so in the log
DROP_LOG_EVERY = dt.timedelta(seconds=60)


@dataclass(frozen=True, kw_only=True)
class OutageFire:
    """A fire beat sent from memory, kept until the ledger can be written (R5). Built by
    keyword: two optional instants side by side."""

    schedule: str
    slot: dt.datetime
    reason: str
    task_id: str
    #: when the broker took it; None: it was not sent (the run is written as claimed)
    published_at: dt.datetime | None
    #: the schedule's next fire after it, moved forward in the ledger if it is behind
    next_fire_at: dt.datetime | None


@dataclass
class Planned:
    """A code-defined schedule as beat remembers it, for firing while the database is down."""

    entry: CodeEntry
    next_fire_at: dt.datetime | None
    reason: str = Reason.SCHEDULED
    #: a custom schedule's last run, which its ``is_due`` is asked with (R25): when it last
    #: fired, else when it was stored, or the boot without the database (Celery's beat start)
    last_run_at: dt.datetime | None = None


@dataclass(frozen=True)
class MemoryDue:
    """A code schedule due from memory: its slot, and its next fire once this one is sent."""

    name: str
    slot: dt.datetime
    reason: str
    message: Message
    next_fire_at: dt.datetime | None


@dataclass
class OutageMemory:
    """What beat remembers for a database outage (R5): the code schedules' next fires (kept
    close to the database while it answers), the fires sent from memory until the ledger can
    be written, and what it dropped to stay bounded (R21)."""

    plan: dict[str, Planned] = field(default_factory=dict)
    #: fires sent without a claim, oldest first, until the database is back
    fires: collections.deque[OutageFire] = field(default_factory=collections.deque)
    #: slots and fire records dropped since the log last said so, and when it said so
    _dropped: int = 0
    _drop_logged_at: dt.datetime | None = None
    #: ``refresh``'s query for the plan's names, compiled once (SQL, parameters)
    _stored: tuple[tuple[str, ...], str, tuple[Any, ...]] | None = None

    # --- while the database answers ------------------------------------------------------

    def plan_with_db(self, entries: list[CodeEntry]) -> None:
        """Remember the code schedules, with their next fires as the database has them."""
        self.plan = {e.name: Planned(e, None) for e in entries}
        self.refresh()

    def refresh(self) -> None:
        """Keep the memory of code schedules close to the database, for an outage: a
        schedule disabled or set aside as bad there is not fired from memory either. With
        every heartbeat: the query is compiled once for the plan's names."""
        if not self.plan:
            return
        names = tuple(self.plan)
        if self._stored is None or self._stored[0] != names:
            stored = Schedule.objects.filter(name__in=names).values_list(*_REFRESHED)
            sql, params = stored.query.get_compiler(stored.db).as_sql()
            self._stored = (names, sql, tuple(params))
        with db.connection().cursor() as cur:
            cur.execute(self._stored[1], self._stored[2])
            _, rows = converted(cur)
        for name, next_fire_at, next_slot, reason, enabled, error, fired, created in rows:
            planned = self.plan[name]
            # from memory a slot goes at the slot itself, its jitter not applied (R5, R35)
            next_fire_at = _slot_of(planned.entry, next_fire_at, next_slot)
            planned.next_fire_at = next_fire_at if enabled and not error else None
            planned.reason = reason
            planned.last_run_at = fired or created

    def moved_on(
        self, name: str, next_fire_at: dt.datetime | None, fired_at: dt.datetime | None = None
    ) -> None:
        """A schedule fired at ``fired_at`` and moved on: so does its memory (a name not in
        code: nothing); its last run is then ``fired_at``, as the row's ``last_fired_at``."""
        planned = self.plan.get(name)
        if planned is not None:
            planned.next_fire_at = next_fire_at
            planned.last_run_at = fired_at or planned.last_run_at

    def write(self, boot_id: uuid.UUID, now: dt.datetime) -> None:
        """The database is back: write the kept fires into the ledger, say what was dropped."""
        write_fires(self.fires, boot_id, now)
        self.say_dropped(now, force=True)
        # Each fire moved its schedule's next fire on (never back); a schedule that did not
        # fire keeps what is stored, even when memory planned a grace at a boot without the
        # database.

    # --- without the database ----------------------------------------------------------

    def plan_from_code(self, entries: list[CodeEntry], now: dt.datetime) -> None:
        """R5 at boot: code entries only; intervals at now + grace, others at their next slot."""
        for e in entries:
            try:
                if isinstance(e.spec, timing.Interval):
                    grace = (
                        e.startup_grace
                        if e.startup_grace is not None
                        else conf.settings.STARTUP_GRACE
                    )
                    first = policy.grace_slot(e.spec, now, grace)
                    self.plan[e.name] = Planned(e, first, Reason.STARTUP_GRACE)
                elif isinstance(e.spec, timing.Custom):  # R25: asked, as with the database
                    due, ask_again = custom_next(e.spec, now, now)
                    self.plan[e.name] = Planned(e, now if due else ask_again, last_run_at=now)
                else:
                    self.plan[e.name] = Planned(e, timing.next_slot(e.spec, now))
            except Exception as exc:  # R21: one entry never stops the others
                _bad(e.name, exc)
                self.plan[e.name] = Planned(e, None)

    def due(self, now: dt.datetime) -> Iterator[MemoryDue]:
        """The schedules due at ``now``, one at a time: the caller fires each and says so
        (``fired``) before the next. A schedule that cannot be fired is skipped from now on
        (R21), the others keep firing."""
        for name, planned in self.plan.items():
            slot = planned.next_fire_at
            if slot is None or slot > now:
                continue
            try:
                spec = planned.entry.spec
                nxt: dt.datetime | None
                if isinstance(spec, timing.Custom):
                    # R25: asked at its planned time, as the engine asks it; "not due" only
                    # moves its next question on
                    due, nxt = custom_next(spec, planned.last_run_at or slot, now)
                    if not due:
                        planned.next_fire_at = nxt
                        continue
                else:
                    nxt = self._next(spec, slot, now)
                message = Message.for_entry(planned.entry)
            except Exception as exc:
                _bad(name, exc)
                planned.next_fire_at = None
                continue
            yield MemoryDue(name, slot, planned.reason, message, nxt)

    def fired(self, due: MemoryDue, task_id: str, published_at: dt.datetime | None) -> None:
        """``due`` went out at ``published_at`` (None: not sent): move its schedule on, keep
        the fire for the ledger."""
        planned = self.plan[due.name]
        planned.next_fire_at = due.next_fire_at
        planned.reason = Reason.SCHEDULED
        planned.last_run_at = published_at or due.slot  # Celery's beat: when it was sent
        self.remember(
            OutageFire(
                schedule=due.name,
                slot=due.slot,
                reason=due.reason,
                task_id=task_id,
                published_at=published_at,
                next_fire_at=due.next_fire_at,
            )
        )

    def sent_unclaimed(
        self, sent: ToFire, task_id: str, published_at: dt.datetime | None, now: dt.datetime
    ) -> None:
        """A slot decided with the database whose claim could not be written (R5), sent at
        ``published_at`` (None: not sent): kept for the ledger; its memory moves on."""
        fire = sent.fire
        following = fire.following  # memory keeps slots (R35)
        self.remember(
            OutageFire(
                schedule=sent.due.name,
                slot=fire.slot,
                reason=fire.reason,
                task_id=task_id,
                published_at=published_at,
                next_fire_at=following,
            ),
        )
        self.moved_on(sent.due.name, following, now)

    def next_fire(self) -> dt.datetime | None:
        """The earliest next fire in memory, None when nothing is planned."""
        planned = [p.next_fire_at for p in self.plan.values() if p.next_fire_at is not None]
        return min(planned, default=None)

    def _next(self, spec: timing.Spec, slot: dt.datetime, now: dt.datetime) -> dt.datetime | None:
        """The next fire from memory: on the schedule's grid, and not sooner than
        ``MEMORY_MIN_GAP`` (R21: the slots in between are dropped and counted)."""
        nxt = timing.advance(spec, slot, now)
        floor = now + MEMORY_MIN_GAP
        if nxt is None or nxt >= floor:
            return nxt
        later = timing.advance(spec, slot, floor - dt.timedelta(microseconds=1))
        if isinstance(spec, timing.Interval) and later is not None:
            self._dropped += max(0, (later - nxt) // spec.every)
        else:
            self._dropped += 1
        return later

    def remember(self, fire: OutageFire) -> None:
        """Keep a fire for the ledger; a full memory drops its oldest (R21)."""
        if len(self.fires) >= MAX_OUTAGE_FIRES:
            self.fires.popleft()
            self._dropped += 1
        self.fires.append(fire)

    def say_dropped(self, now: dt.datetime, force: bool = False) -> None:
        """What the outage memory dropped, in one log event, at most every
        ``DROP_LOG_EVERY`` (and when the database is back)."""
        if not self._dropped:
            return
        last = self._drop_logged_at
        if not force and last is not None and now - last < DROP_LOG_EVERY:
            return
        logger.warning(
            "outage memory dropped %d fire(s) or slot(s): at most one fire per schedule "
            "every %ss from memory, and at most %d fires kept for the ledger",
            self._dropped,
            MEMORY_MIN_GAP.total_seconds(),
            MAX_OUTAGE_FIRES,
            extra={"event": "outage_memory_dropped", "count": self._dropped},
        )
        self._dropped, self._drop_logged_at = 0, now


def _bad(name: str, exc: Exception) -> None:
    logger.error(
        "schedule %s cannot be fired from memory and is skipped: %s",
        name,
        describe_row_error(exc),
        extra={"event": "bad_schedule", "schedule": name},
    )


def write_fires(fires: collections.deque[OutageFire], boot_id: uuid.UUID, now: dt.datetime) -> int:
    """Write the fires kept in memory, oldest first, each taken off once written (not again
    if the database drops mid-way). Returns how many."""
    done = 0
    while fires:
        f = fires[0]
        try:
            reconcile_outage_fire(f, boot_id, now)
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


def _slot_of(
    entry: CodeEntry, at: dt.datetime | None, slot: dt.datetime | None
) -> dt.datetime | None:
    """The slot a code schedule's stored next fire sends (R35), as the engine reads it."""
    try:
        return jitter.slot_of(entry.spec, at, slot)
    except Exception:  # R21: a schedule the math refuses keeps its stored next fire
        return at


def reconcile_outage_fire(fire: OutageFire, boot_id: uuid.UUID, now: dt.datetime) -> bool:
    """R5: write a fire that went out while the database was unreachable. False when the
    slot already had a run (another beat fired it too: logged as an incident)."""
    schedule_name, slot, published_at = fire.schedule, fire.slot, fire.published_at
    next_fire_at = fire.next_fire_at
    with db.atomic():
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
            with db.atomic():
                Run.objects.create(
                    schedule=row,
                    slot=slot,
                    boot_id=boot_id,
                    reason=fire.reason,
                    state=RunState.PUBLISHED if published_at else RunState.CLAIMED,
                    task_id=fire.task_id,
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
