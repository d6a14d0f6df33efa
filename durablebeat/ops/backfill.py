"""Backfill (R27): fire the slots of a range that no beat fired, each once, later.

``manage.py durablebeat backfill NAME --from … --to …`` and the admin's action on missed-slot
ranges call ``backfill``. Each slot of the schedule's own grid in the range goes out through
the path "run now" takes (``publishing.backfill_slot``): its run first, reason ``backfill``,
then the message. The one-run-per-slot constraint decides (R3, R4): a slot that already has
a run, fired, skipped or missed, is left alone and said, and so is one another backfill or a
beat took meanwhile. A slot older than the schedule's retention (its own, else
``DURABLEBEAT_RETENTION``), or than any cutoff its runs were pruned at, is left alone
too (R32): its run may have been pruned. Nothing else changes: the schedule's next fire
stays where it is.
"""

from __future__ import annotations

import datetime as dt
import itertools
from dataclasses import dataclass, field
from typing import Any

from ..beat import publishing, retention
from ..core import timing
from ..models import Run, Schedule

#: most slots one backfill fires (R21): a range beyond it is refused, not cut short
MAX_BACKFILL_SLOTS = 10_000


class BackfillRefused(ValueError):
    """A backfill that would make no sense as asked: nothing has been written."""


@dataclass
class Backfill:
    """What a backfill fired (or, dry, would fire) and what it left alone, with why."""

    schedule: str
    dry_run: bool
    fired: list[dt.datetime] = field(default_factory=list)
    left_alone: list[tuple[dt.datetime, str]] = field(default_factory=list)

    def lines(self) -> list[str]:
        verb = "would fire" if self.dry_run else "fired"
        said = [
            f"{self.schedule}: {verb} {len(self.fired)} slot(s), left alone {len(self.left_alone)}"
        ]
        said += [f"  {verb} {slot.isoformat()}" for slot in self.fired]
        said += [f"  left alone {slot.isoformat()}: {why}" for slot, why in self.left_alone]
        return said


def slots(
    row: Schedule, since: dt.datetime, until: dt.datetime, now: dt.datetime
) -> list[dt.datetime]:
    """The schedule's slots in [since, until], refused when the range makes no sense."""
    if since > until:
        raise BackfillRefused(f"--from ({since.isoformat()}) is after --to ({until.isoformat()})")
    if until > now:
        raise BackfillRefused(
            f"--to ({until.isoformat()}) is in the future: a backfill fires past slots only; "
            "the schedule fires its coming slots itself"
        )
    spec = row.to_spec()
    if isinstance(spec, timing.Interval):
        raise BackfillRefused(
            f"{row.name} is an interval schedule: its slots are not missed but fired once "
            "late (R7), so there is nothing to backfill; use run now"
        )
    if isinstance(spec, timing.Custom):
        raise BackfillRefused(
            f"{row.name} is a custom schedule: only its object knows its slots, and it "
            "fires late ones once instead of counting them missed (R25); use run now"
        )
    found = list(
        itertools.islice(
            timing.slots_between(spec, since - dt.timedelta(microseconds=1), until),
            MAX_BACKFILL_SLOTS + 1,
        )
    )
    if len(found) > MAX_BACKFILL_SLOTS:
        raise BackfillRefused(
            f"{row.name}: the range holds more than {MAX_BACKFILL_SLOTS:,} slots; "
            "backfill a shorter range at a time"
        )
    return found


def backfill(
    name: str,
    since: dt.datetime,
    until: dt.datetime,
    now: dt.datetime,
    *,
    dry_run: bool = False,
    app: Any = None,
) -> Backfill:
    """Fire each slot of ``name`` in [since, until] that has no run, once; ``dry_run``:
    only say which. Raises ``BackfillRefused`` (nothing written) for an unknown or bad
    schedule, a reversed or future range, an interval schedule, or more than
    ``MAX_BACKFILL_SLOTS`` slots. A broker error part-way stops it, the slots fired so far
    kept (run it again: they are left alone)."""
    row = Schedule.objects.filter(name=name).first()
    if row is None:
        raise BackfillRefused(f"no schedule named {name!r}")
    if row.error:
        raise BackfillRefused(f"{name}: beat cannot use this schedule: {row.error}")
    wanted = slots(row, since, until, now)
    ran = dict(
        Run.objects.filter(schedule=row, slot__gte=since, slot__lte=until).values_list(
            "slot", "state"
        )
    )
    result = Backfill(name, dry_run)
    edge = retention.edge(now, row)
    for slot in wanted:
        if edge is not None and slot < edge:
            # R32: its run, if it had one, may have been pruned: a fire now could be its second
            result.left_alone.append((slot, f"before the ledger's pruned edge {edge.isoformat()}"))
        elif slot in ran:
            result.left_alone.append((slot, f"it has a run already ({ran[slot]})"))
        elif dry_run:
            result.fired.append(slot)
        elif publishing.backfill_slot(row, slot, app) is None:
            result.left_alone.append((slot, "a run for it was written meanwhile"))
        else:
            result.fired.append(slot)
    return result
