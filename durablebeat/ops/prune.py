"""``durablebeat prune``: the first cleanup of a large ledger (R32, issue 31).

Beat prunes a little each round (``beat.retention``); a ledger that grew for a year before
retention existed is cleaned once by this command, in the same batches (one short
transaction each, at most ``--batch-size`` rows), saying its progress as it goes. It never
cuts closer than ``DURABLEBEAT_RETENTION``: backfill, catch-up and the in-doubt resend
reach back that far, and a slot whose run is gone within their reach could fire twice.
"""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Callable
from dataclasses import dataclass

from django.db.models import Exists, OuterRef

from .. import conf
from ..beat import retention
from ..models import Boot, Incident, MissedSlots, Run
from ..words import absolute, duration_words

#: most rows a transaction of the command deletes (``--batch-size``)
MAX_BATCH = 10_000
#: a progress line at most this often, in seconds
PROGRESS_EVERY = 5.0


class PruneRefused(ValueError):
    """A prune that would break a promise as asked: nothing has been deleted."""


@dataclass(frozen=True)
class Plan:
    before: dt.datetime
    batch: int
    dry_run: bool


def plan(now: dt.datetime, older_than: dt.timedelta | None, batch: int, dry_run: bool) -> Plan:
    """The cutoff (``older_than``, at least the retention, which it defaults to) and the
    batch; refused with no retention set, or one that would be cut short."""
    if not 1 <= batch <= MAX_BATCH:
        raise PruneRefused(f"--batch-size must be from 1 to {MAX_BATCH:,}, got {batch}")
    keep = conf.settings.RETENTION
    if keep is None:
        raise PruneRefused(
            "DURABLEBEAT_RETENTION is None (the ledger is kept for ever): set it first; "
            "backfill, catch-up and the in-doubt resend stop at it, so that a slot whose run "
            "is pruned never fires again"
        )
    older_than = keep if older_than is None else older_than
    if older_than < keep:
        raise PruneRefused(
            f"--older-than {duration_words(older_than)} is shorter than DURABLEBEAT_RETENTION "
            f"({duration_words(keep)}): backfill, catch-up and the in-doubt resend reach back "
            "that far, and a slot whose run is gone could fire again. Lower the setting "
            "first (and let the beats restart with it)"
        )
    return Plan(now - older_than, batch, dry_run)


def would_delete(before: dt.datetime) -> dict[str, int]:
    """What a prune at ``before`` would delete now, per table (``--dry-run``); a boot is
    counted when it stopped before the cutoff and only rows older than it name it."""
    newer = Run.objects.filter(schedule_id=OuterRef("schedule_id"), slot__gt=OuterRef("slot"))
    runs = (
        Run.objects.filter(claimed_at__lt=before, slot__lt=before, state__in=retention.DONE_STATES)
        .filter(Exists(newer))
        .count()
    )
    named_later = [
        Exists(Run.objects.filter(boot_id=OuterRef("pk"), claimed_at__gte=before)),
        Exists(Run.objects.filter(boot_id=OuterRef("pk")).exclude(state__in=retention.DONE_STATES)),
        Exists(MissedSlots.objects.filter(boot_id=OuterRef("pk"), recorded_at__gte=before)),
        Exists(Incident.objects.filter(boot_id=OuterRef("pk"), at__gte=before)),
    ]
    boots = Boot.objects.filter(heartbeat_at__lt=before)
    for named in named_later:
        boots = boots.exclude(named)
    return {
        "runs": runs,
        "missed slots": MissedSlots.objects.filter(recorded_at__lt=before).count(),
        "incidents": Incident.objects.filter(at__lt=before)
        .exclude(boot__heartbeat_at__gte=before)
        .count(),
        "boots": boots.count(),
    }


def prune(
    p: Plan,
    say: Callable[[str], None],
    clock: Callable[[], float] = time.monotonic,
) -> dict[str, int]:
    """Delete (or, dry, count) what is older than the plan's cutoff, saying progress through
    ``say``; the rows deleted (or that would be) per table."""
    say(
        f"{'would prune' if p.dry_run else 'pruning'} the ledger before {absolute(p.before)}, "
        f"at most {p.batch:,} rows a transaction"
    )
    if p.dry_run:
        counts = would_delete(p.before)
        for table, n in counts.items():
            say(f"  {table}: {n:,} would be deleted")
        say("  kept whatever its age: runs in flight, each schedule's newest run")
        return counts
    run = retention.Pass(p.before, batch=p.batch)
    started = last_said = clock()
    while not run.finished:
        table = next(t for t in retention.TABLES if t not in run.done)
        run.step()
        at = clock()
        if table in run.done:
            say(f"  {table}: {run.deleted[table]:,} deleted ({at - started:.1f} s)")
        elif at - last_said >= PROGRESS_EVERY:
            say(f"  {table}: {run.deleted[table]:,} deleted so far ({at - started:.1f} s)")
        else:
            continue
        last_said = at
    say(f"done: {sum(run.deleted.values()):,} rows deleted in {clock() - started:.1f} s")
    return dict(run.deleted)
