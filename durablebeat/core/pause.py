"""R36, pause on failure, the pure part: which run outcomes count, which reset the count,
the bound that applies to a schedule, and the note a pause carries.

A schedule with a bound pauses itself once that many of its runs in a row failed or were
lost. Only a run's final outcome moves the count, in the order those outcomes are written:

- ``failed`` and ``lost`` count one each. A lost run that a later completion turns into
  ``failed`` (R11: the later evidence wins) was already counted: it is not counted again.
- ``succeeded`` resets the count to 0, a lost run that turns out to have succeeded too.
- ``no_news`` (R22) does not count: the message may still be in a queue nobody consumes,
  which ``check`` reports as such, and a late start or completion still moves the run on
  (its ``failed`` then counts). ``skipped``, ``missed`` and ``replaced`` runs never ran
  their body (or were cut short by beat): they neither count nor reset.

No database here: the state strings are the run states' values (``enums.RunState``).
"""

from __future__ import annotations

import datetime as dt
import enum
from collections.abc import Sequence

#: the most a bound may be, per schedule and in the setting
MAX_PAUSE_AFTER_FAILURES = 10_000
#: the final outcomes that count as a failure, and the one that resets the count
COUNTED = frozenset({"failed", "lost"})
RESETS = frozenset({"succeeded"})
#: slots a pause's note names (the most recent ones); the rest are counted
NAMED_SLOTS = 5


class Step(enum.Enum):
    """What a run's final outcome does to its schedule's count of failures in a row."""

    COUNT = "count"  #: one more failure in a row
    RESET = "reset"  #: back to 0
    KEEP = "keep"  #: nothing: the run's body did not run, or the outcome is not final


def step(state: str, was: str | None = None) -> Step:
    """The step of a run that moved to ``state`` from ``was`` (None: not known, or
    in flight)."""
    if state in RESETS:
        return Step.RESET
    if state in COUNTED and was not in COUNTED:
        return Step.COUNT
    return Step.KEEP


def bound(own: int | None, default: int | None) -> int | None:
    """The number of failures in a row that pauses a schedule, or None (never): its own
    ``pause_after_failures``, else the setting's (``DURABLEBEAT_PAUSE_AFTER_FAILURES``);
    its own 0 is never, whatever the setting says."""
    if own is None:
        return default
    return own or None


def reached(count: int | None, limit: int | None) -> bool:
    """Does ``count`` failures in a row pause a schedule whose bound is ``limit``?"""
    return limit is not None and (count or 0) >= limit


def note(count: int, slots: Sequence[dt.datetime], last_state: str, last_at: dt.datetime) -> str:
    """The note an automatic pause carries: how many runs in a row, which (their slots,
    the ``NAMED_SLOTS`` most recent, oldest first) and when the last one ended."""
    shown = sorted(slots)[-NAMED_SLOTS:]
    named = ", ".join(_utc(slot) for slot in shown)
    which = (
        f"runs of slots {named}"
        if len(shown) == count
        else (f"the last {len(shown)} of their slots {named}" if shown else "their slots not found")
    )
    ended = "was lost" if last_state == "lost" else "failed"
    return (
        f"paused after {count} failures in a row (failed or lost): {which}; "
        f"the last {ended} at {_utc(last_at)}"
    )


def _utc(value: dt.datetime) -> str:
    return f"{value.astimezone(dt.UTC):%Y-%m-%d %H:%M:%S} UTC"
