"""A batch of due rows decided (R2, R7, R8, R10, R14, R21, R25): what fires now, to be
claimed; what is deferred or missed, written at once; the earliest next fire seen, to
sleep until. A row that cannot be read, decided or moved on is set aside with its error,
and the rest of the batch goes on (R21).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import logging
import uuid
from dataclasses import dataclass, field
from typing import Any

from django.db import DatabaseError

from .. import conf, db
from ..core import timing
from ..core.policy import Defer, Fire, Miss, decide
from ..enums import Kind
from ..validation import is_external_task, typo_hint
from . import dberrors
from . import due as due_query
from .claims import apply_defer, apply_miss
from .due import describe_row_error, due_from_row, is_row_error
from .messages import Message, ToFire

logger = logging.getLogger("durablebeat")


_NOTHING = contextlib.nullcontext()


@dataclass(frozen=True, kw_only=True)
class Decided:
    """What ``Triage.decide`` makes of a batch of due rows (defers and misses are written
    as they are decided)."""

    #: the slots to claim and publish now, in the batch's order
    fires: tuple[ToFire, ...]
    #: the earliest next fire seen, to sleep until; None: nothing ahead in this batch
    wake: dt.datetime | None
    #: a database error (not about one row) that stopped the batch after ``fires`` were
    #: decided: they still go out (R5, the engine's ``_fire_unclaimed``), then it is raised
    interrupted: DatabaseError | None = None


@dataclass
class Triage:
    """Decides batches for one beat: its custom schedule objects, the schedules it caught
    up this boot (R8: once), and the bad rows it has already said."""

    boot_id: uuid.UUID
    #: the custom schedule objects of this beat's code, by schedule name (R25)
    customs: dict[str, timing.Custom] = field(default_factory=dict)
    #: the task names this beat's Celery app has registered (None: it cannot know): a row
    #: naming another task is sent by name, as Celery's beat sends it, and said once per
    #: schedule and boot (R29, R25); never set aside for it
    tasks: frozenset[str] | None = None
    #: schedules caught up in this boot (their next catch-up is not a boot's)
    caught_up: set[int] = field(default_factory=set)
    _said: set[tuple[int, str]] = field(default_factory=set)
    #: the schedules whose unregistered task this boot has said (by name)
    _said_unregistered: set[str] = field(default_factory=set)

    def say_unregistered(self, name: str, task: str, where: str) -> None:
        """R29: one line per schedule and boot: its task is not registered here, and beat
        sends it by name all the same (a task another codebase's workers serve, or a typo
        that ``check`` names, W007). Nothing for a name ``DURABLEBEAT_EXTERNAL_TASKS``
        matches: served elsewhere on purpose, sent by name without a word."""
        if self.tasks is None or task in self.tasks or name in self._said_unregistered:
            return
        self._said_unregistered.add(name)  # said, or known external: asked once per boot
        if is_external_task(task):
            return
        logger.warning(
            "unregistered task schedule=%s task=%s sent by name, as Celery's beat sends it "
            "(%s; a worker that has not registered it either refuses it)%s",
            name,
            task,
            where,
            typo_hint(task, self.tasks),
            extra={"event": "unregistered_task", "schedule": name, "task": task},
        )

    def decide(self, rows: list[Any], now: dt.datetime, late_after: dt.timedelta) -> Decided:
        """Sort the batch. Only a database error that is not about a row stops it (R5):
        raised, or, once some slots were decided to fire, returned with them as
        ``interrupted``."""
        fires: list[ToFire] = []
        wake: dt.datetime | None = None
        defaults = due_query.Defaults.now()
        one_off_window = conf.settings.ONE_OFF_LATE_WINDOW  # R31
        keep = conf.settings.RETENTION  # R32: no slot older than the ledger keeps fires
        for row in rows:
            try:
                if row.next_fire_at is not None and row.next_fire_at > now:
                    wake = _earlier(wake, row.next_fire_at)
                    continue
                if self.tasks is not None and row.task not in self.tasks:
                    self.say_unregistered(row.name, row.task, "not registered in this beat")
                if row.kind == Kind.CUSTOM and row.name not in self.customs:
                    # R25: its object lives in another version of the code (a rolling
                    # deploy): left to a beat that has it, never set aside for it
                    self._not_here(row.name)
                    continue
                # R25, R21: a custom object's is_due is the project's code; what it raises (a
                # query of its own that fails too) is this row's error, in a savepoint that
                # keeps the batch's transaction usable for the other rows
                asking = db.atomic() if row.kind == Kind.CUSTOM else _NOTHING
                with asking:
                    due = due_from_row(row, self.customs.get(row.name), defaults)
                    message = Message.for_row(row)
                    caught_up = due.id in self.caught_up
                    # its own retention (in range: ``due_from_row``), else the setting's
                    reach = keep if row.retention is None else row.retention
                    action = decide(due, now, late_after, caught_up, one_off_window, reach)
                _check_moves_on(action, now)
                if isinstance(action, Fire):
                    fires.append(ToFire(due=due, fire=action, message=message))
                    # its next slot may come before MAX_INTERVAL (a sub-second interval,
                    # R25): beat wakes for it as Celery's beat does
                    wake = _earlier(wake, action.next_fire_at)
                    continue
                with db.atomic():  # a savepoint: a refused write spoils no batch
                    if isinstance(action, Defer):
                        if apply_defer(due, action):
                            wake = _earlier(wake, action.next_fire_at)
                    else:
                        apply_miss(due, action, self.boot_id, now)
            except Exception as exc:
                object_raised = row.kind == Kind.CUSTOM and not dberrors.is_unreachable(exc)
                if is_row_error(exc) or object_raised:
                    self.set_aside(row.pk, row.name, describe_row_error(exc))
                    continue
                if fires and isinstance(exc, DatabaseError):
                    return Decided(fires=tuple(fires), wake=wake, interrupted=exc)
                raise
        return Decided(fires=tuple(fires), wake=wake)

    def set_aside(self, schedule_id: int, name: str, why: str) -> None:
        """R20, R21: set a row aside with its error, in a savepoint of its own; said once."""
        if (schedule_id, why) not in self._said:
            self._said.add((schedule_id, why))
            logger.error(
                "schedule %s is invalid and is skipped (other schedules keep firing): %s",
                name,
                why,
                extra={"event": "bad_schedule", "schedule": name},
            )
        try:
            with db.atomic():
                due_query.set_aside(schedule_id, why)
        except Exception as exc:
            if not is_row_error(exc):
                raise
            logger.exception(
                "could not set schedule %s aside: %s",
                name,
                exc,
                extra={"event": "bad_schedule", "schedule": name},
            )

    def _not_here(self, name: str) -> None:
        if (0, f"custom:{name}") not in self._said:
            self._said.add((0, f"custom:{name}"))
            logger.warning(
                "custom schedule %s is not in this beat's beat_schedule; a beat whose code "
                "has it fires it",
                name,
                extra={"event": "custom_not_here", "schedule": name},
            )


def _earlier(wake: dt.datetime | None, at: dt.datetime | None) -> dt.datetime | None:
    if at is None:
        return wake
    return at if wake is None else min(wake, at)


def _check_moves_on(action: Fire | Defer | Miss, now: dt.datetime) -> None:
    """R21: an action that would leave the row's next fire in the past would find it due
    again at once, for ever: the row is bad, not the loop's to spin on."""
    nxt = action.next_fire_at
    if nxt is not None and nxt < now:
        raise timing.InvalidSchedule(
            "next_fire_at", f"cannot move on: its next fire would be {nxt.isoformat()}, past"
        )
