"""R35: the instant a jittered slot is sent, derived from the schedule and the slot.

A schedule with a ``jitter`` sends each slot at slot + a delay in [0, jitter). The delay is
not drawn at random: it is a hash of the schedule's name and the slot, so every beat and
every restart picks the same instant, and the delays of many schedules sharing a slot (a
digest per customer at 08:00) spread evenly over the jitter. It is capped below the next
slot: a slot is never sent at or after the one that follows it.
"""

from __future__ import annotations

import datetime as dt
import hashlib

from . import timing

_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
_MICROSECOND = dt.timedelta(microseconds=1)
_SPREAD = 2**64  # the hash's range: its first 8 bytes as an unsigned integer


def delay(name: str, slot: dt.datetime, span: dt.timedelta) -> dt.timedelta:
    """A delay in [0, span), whole microseconds, the same for the same name and slot
    whatever zone the slot is written in."""
    micros = span // _MICROSECOND
    if micros <= 0:
        return dt.timedelta(0)
    key = f"{name}\0{(slot - _EPOCH) // _MICROSECOND}".encode()
    drawn = int.from_bytes(hashlib.blake2b(key, digest_size=8).digest(), "big")
    return dt.timedelta(microseconds=drawn * micros // _SPREAD)


def instant(name: str, spec: timing.Spec, slot: dt.datetime, jitter: dt.timedelta) -> dt.datetime:
    """When ``slot`` of schedule ``name`` is sent: slot + a delay in [0, jitter), and before
    the schedule's next slot (a one-off has none: the jitter alone bounds it)."""
    if jitter <= dt.timedelta(0):
        return slot
    following = timing.advance(spec, slot, slot)
    span = jitter if following is None else min(jitter, following - slot)
    return slot + delay(name, slot, span)


def slot_of(
    spec: timing.Spec, at: dt.datetime | None, slot: dt.datetime | None
) -> dt.datetime | None:
    """The slot a stored next fire ``at`` sends: ``slot`` (stored beside it) while ``at``
    lies between that slot and the one after it, as every jittered instant does (whatever
    the jitter was when it was stored), else ``at`` itself. A writer that moved the next fire
    on without knowing of the slot (the previous release's beat, raw SQL) left one that no
    longer fits: it is ignored, never fired in place of the next."""
    if slot is None or at is None or isinstance(spec, timing.Custom) or not slot <= at:
        return at
    following = timing.advance(spec, slot, slot)
    return slot if following is None or at < following else at
