"""Custom schedule objects from code (R25): a ``celery.schedules.BaseSchedule`` subclass, or
anything with Celery's ``is_due(last_run_at)``. The beat asks the object what Celery's beat
asks it and stores the answer as the next fire; nothing here reads the clock itself (the
object may read its own: it is handed its last run on this host's clock, as Celery's beat
hands it).
"""

from __future__ import annotations

import dataclasses
import re
from datetime import UTC, datetime, timedelta
from typing import Any

from .clock import check_aware, offset, shift
from .errors import InvalidSchedule

__all__ = ["CLOCK_SLACK", "MIN_CUSTOM_WAIT", "Custom", "custom_label", "custom_next"]

#: the shortest wait a custom schedule's answer turns into: an object that answers "due,
#: check again in 0 s" must not make a busy loop (R21)
MIN_CUSTOM_WAIT = timedelta(seconds=1)
#: the shortest "ask again" of an answer "not due": the next fire moves on, however little
_MIN_ASK = timedelta(milliseconds=1)
#: how far two readings of the offset to the database's clock may disagree (each is wrong
#: by at most half its round trip, R26): a run stamped at the object's own instant through
#: one reading (another beat's, or this one's before it measured again) and handed back
#: through another may land that much before the instant, which the object would read as
#: that instant's run still to come (two beats: two fires in one slot, 1 s apart)
CLOCK_SLACK = timedelta(milliseconds=20)


@dataclasses.dataclass(frozen=True)
class Custom:
    """A schedule object from code (a ``celery.schedules.BaseSchedule`` subclass, or anything
    with Celery's ``is_due(last_run_at)``). The object lives in the beat's memory, code being
    its source of truth; a row keeps only ``label`` (R25). Equal when the labels are."""

    label: str
    schedule: Any = dataclasses.field(default=None, compare=False, repr=False)


def custom_label(schedule_: object) -> str:
    """How a row names a custom schedule object: its class path and its repr, in one line."""
    cls = type(schedule_)
    try:
        shown = repr(schedule_)
    except Exception:  # a repr that fails must not stop the boot: the class names it
        shown = f"<{cls.__qualname__}>"
    # a default repr names a memory address, new at every boot: the row would look changed
    text = re.sub(r" at 0x[0-9a-fA-F]+", "", " ".join(shown.split()))
    return f"{cls.__module__}.{cls.__qualname__}: {text}"[:300]


def custom_next(spec: Custom, last_run_at: datetime, now: datetime) -> tuple[bool, datetime]:
    """Ask the object ``is_due(last_run_at)`` and turn its answer ``(due, next_seconds)``
    into (due, the instant to ask again: after a due answer, at least ``MIN_CUSTOM_WAIT``
    after ``now``).
    Anything the object raises goes up to the caller, which sets the row aside (R21); an
    answer that is not Celery's shape is refused naming the schedule."""
    if spec.schedule is None:
        raise InvalidSchedule("schedule", f"custom schedule {spec.label} is not loaded")
    # The object reads its own clock, this host's, as under Celery's beat, which passes the
    # last run on that clock too: the last run, stamped on the database's clock (R26), is
    # handed over on this host's. A few ms of difference otherwise made "last run 56.996"
    # (just before 57 on the object's clock) read as "the run of 57 is still to come".
    # ``CLOCK_SLACK`` later still: the stamp's reading and this one may differ by that much.
    host_last_run = shift(shift(check_aware(last_run_at, "last_run_at"), -offset()), CLOCK_SLACK)
    answer = spec.schedule.is_due(host_last_run)
    try:
        due, seconds = answer
        wait = timedelta(seconds=float(seconds))
    except (TypeError, ValueError, OverflowError) as exc:
        raise InvalidSchedule(
            "schedule", f"{spec.label}.is_due() must return (is_due, next_seconds), got {answer!r}"
        ) from exc
    # "not due, ask again in 0.2 s" is taken as said (the object reads its own clock, a few
    # ms apart from beat's ``now``, and the slot is when it says); "due, ask again in 0 s"
    # waits MIN_CUSTOM_WAIT, or the same slot would come due again at once
    floor = MIN_CUSTOM_WAIT if due else _MIN_ASK
    return bool(due), check_aware(now, "now").astimezone(UTC) + max(wait, floor)
