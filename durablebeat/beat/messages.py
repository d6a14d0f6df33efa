"""What firing a slot sends (R3, R24, R25): the broker message of a schedule, a slot
decided to fire with the message it sends (``ToFire``), and the claim that carries it, a
slot this beat owns and must publish."""

from __future__ import annotations

import datetime as dt
import sys
import uuid
from dataclasses import dataclass, field, replace
from typing import Any

import celery

if sys.version_info >= (3, 14):
    from uuid import uuid7
else:
    from uuid6 import uuid7

from .. import validation
from ..core import timing
from ..core.policy import Due, Fire
from ..models import MESSAGE_OPTIONS, Schedule
from .codesync import CodeEntry

#: Celery 5.5 and later mark each message its beat sends (``Scheduler.apply_async``); a
#: message of durablebeat carries the same mark where the installed Celery would (R30)
CELERY_BEAT_TASK = tuple(celery.VERSION[:2]) >= (5, 5)


def new_task_id() -> str:
    """The task id of a fire, written to its run before the message goes (R3): a UUID
    version 7, which begins with the time it was made, so each claim adds its runs at the
    end of the unique ``task_id`` index rather than at a random leaf of it. With a year of
    runs (issue 31) a random UUID's insert read and dirtied a leaf of a table-sized index
    for every fire; Celery takes any string as a task id, and tools beside it a UUID."""
    return str(uuid7())


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


@dataclass(frozen=True, kw_only=True)
class ToFire:
    """One due row the policy said to fire now (``Triage.decide``): the schedule as read,
    the policy's answer, and the message its slot sends. What ``claims.claim`` claims."""

    due: Due
    fire: Fire
    message: Message


#: R34: the header of a message whose run a later slot may replace (``overlap=replace``):
#: the worker that receives it asks the ledger first (``worker.tracking.on_received``)
REPLACEABLE = "durablebeat_replaceable"


@dataclass(frozen=True, kw_only=True)
class Claim:
    """A slot this beat owns and must publish. Built by keyword: many fields, several of
    one type."""

    run_id: int | None
    task_id: str
    schedule_id: int | None
    schedule: str
    slot: dt.datetime
    reason: str
    boot_id: uuid.UUID
    message: Message
    #: the schedule's timing, for the hook (R30); None where the sender does not have it
    spec: timing.Spec | None = None
    #: R34, ``overlap=replace``: the task ids of the runs this slot replaced, revoked
    #: before it is sent; ``terminate``: their bodies are terminated, not only revoked
    replaces: tuple[str, ...] = ()
    terminate: bool = False
    #: R34: the schedule's overlap is ``replace``: the message says so (``headers``), so
    #: that a worker discards it should its run be replaced before it starts
    replaceable: bool = False

    def with_arguments(
        self, args: list[Any], kwargs: dict[str, Any], callbacks: dict[str, Any] | None = None
    ) -> Claim:
        """This claim sending ``args``/``kwargs`` (and ``link``/``link_error``): a code
        entry's values of one send (R25)."""
        options = self.message.options | (callbacks or {})
        return replace(
            self, message=replace(self.message, args=args, kwargs=kwargs, options=options)
        )

    def headers(self) -> dict[str, Any]:
        """The message's headers: the schedule's own, durablebeat's, and Celery's beat's
        conventions (R30): ``celery_beat_task`` (Celery 5.5+) and django-celery-beat's
        ``periodic_task_name``, which django-celery-results stores with the result."""
        beat_task = {"celery_beat_task": True} if CELERY_BEAT_TASK else {}
        return {
            **self.message.options.get("headers", {}),
            **beat_task,
            "periodic_task_name": self.schedule,
            "durablebeat_schedule": self.schedule,
            "durablebeat_slot": self.slot.isoformat(),
            "durablebeat_reason": self.reason,
            "durablebeat_boot": str(self.boot_id),
            "durablebeat_run": self.run_id,
            **({REPLACEABLE: True} if self.replaceable else {}),
        }

    def hook_args(self) -> dict[str, Any]:
        """What the hook's signals say of this fire (``signals``, R30)."""
        return {
            "slot": self.slot,
            "reason": self.reason,
            "task_id": self.task_id,
            "run_id": self.run_id,
        }
