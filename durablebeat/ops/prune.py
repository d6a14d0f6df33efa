"""``durablebeat prune``: the first cleanup of a large ledger (R32, issue 31).

Beat prunes a little each round (``beat.retention``); a ledger that grew for a year before
retention existed is cleaned once by this command, in the same batches (one short
transaction each, at most ``--batch-size`` rows), saying its progress as it goes. It never
cuts closer than ``DURABLEBEAT_RETENTION``, nor a schedule's runs closer than its own
retention: backfill, catch-up and the in-doubt resend reach back that far, and a slot whose
run is gone within their reach could fire twice.
"""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Callable
from dataclasses import dataclass

from django.db.models import Exists, OuterRef, QuerySet

from .. import conf
from ..beat import retention
from ..models import Boot, Incident, MissedSlots, Run
from ..words import absolute, duration_words

#: most rows a transaction of the command deletes (``--batch-size``)
MAX_BATCH = 10_000
#: a progress line at most this often, in seconds
PROGRESS_EVERY = 5.0
#: schedule ids per query of ``--dry-run``'s counts (under every database's parameter limit)
CHUNK = 500


class PruneRefused(ValueError):
    """A prune that would break a promise as asked: nothing has been deleted."""


@dataclass(frozen=True)
class Plan:
    now: dt.datetime
    #: ``--older-than``: no row closer than this goes, whatever the retention
    floor: dt.timedelta | None
    batch: int
    dry_run: bool

    def start(self) -> retention.Pass:
        return retention.Pass.at(self.now, self.batch, self.floor)


def plan(now: dt.datetime, older_than: dt.timedelta | None, batch: int, dry_run: bool) -> Plan:
    """The cutoffs (``older_than``, at least the retention, which it defaults to; each
    schedule's own retention, at least ``older_than``) and the batch; refused with no
    retention set anywhere, or one that would be cut short."""
    if not 1 <= batch <= MAX_BATCH:
        raise PruneRefused(f"--batch-size must be from 1 to {MAX_BATCH:,}, got {batch}")
    keep = conf.settings.RETENTION
    if keep is None and not retention.any_own():
        raise PruneRefused(
            "DURABLEBEAT_RETENTION is None (the ledger is kept for ever) and no schedule has "
            "a retention of its own: set it first; backfill, catch-up and the in-doubt resend "
            "stop at it, so that a slot whose run is pruned never fires again"
        )
    if keep is not None and older_than is not None and older_than < keep:
        raise PruneRefused(
            f"--older-than {duration_words(older_than)} is shorter than DURABLEBEAT_RETENTION "
            f"({duration_words(keep)}): backfill, catch-up and the in-doubt resend reach back "
            "that far, and a slot whose run is gone could fire again. Lower the setting "
            "first (and let the beats restart with it)"
        )
    return Plan(now, older_than, batch, dry_run)


def would_delete(
    before: dt.datetime | None, own: dict[int, dt.datetime] | None = None
) -> dict[str, int]:
    """What a prune at ``before`` (the setting's cutoff) and ``own`` (each schedule's with a
    retention of its own) would delete now, per table (``--dry-run``); a boot is counted
    when it stopped before the cutoff and only rows older than it name it, none of them a
    run of a schedule with its own retention."""
    newer = Run.objects.filter(schedule_id=OuterRef("schedule_id"), slot__gt=OuterRef("slot"))
    done = Run.objects.filter(state__in=retention.DONE_STATES).filter(Exists(newer))

    def runs(rows: QuerySet[Run], cut: dt.datetime) -> int:
        return rows.filter(claimed_at__lt=cut, slot__lt=cut).count()

    def missed(rows: QuerySet[MissedSlots], cut: dt.datetime) -> int:
        return rows.filter(recorded_at__lt=cut).count()

    counts = dict.fromkeys(retention.TABLES, 0)
    if before is not None:
        counts["runs"] = runs(done.filter(schedule__retention__isnull=True), before)
        setting_missed = MissedSlots.objects.filter(schedule__retention__isnull=True)
        counts["missed slots"] = missed(setting_missed, before)
        counts["incidents"] = (
            Incident.objects.filter(at__lt=before).exclude(boot__heartbeat_at__gte=before).count()
        )
        counts["boots"] = _boots(before).count()
    by_cutoff: dict[dt.datetime, list[int]] = {}
    for schedule_id, cut in (own or {}).items():
        by_cutoff.setdefault(cut, []).append(schedule_id)
    for cut, ids in by_cutoff.items():
        for i in range(0, len(ids), CHUNK):
            chunk = ids[i : i + CHUNK]
            counts["runs"] += runs(done.filter(schedule_id__in=chunk), cut)
            counts["missed slots"] += missed(MissedSlots.objects.filter(schedule_id__in=chunk), cut)
    return counts


def _boots(before: dt.datetime) -> QuerySet[Boot]:
    """The boots ``would_delete`` counts."""
    named_later = [
        Exists(Run.objects.filter(boot_id=OuterRef("pk"), claimed_at__gte=before)),
        Exists(Run.objects.filter(boot_id=OuterRef("pk")).exclude(state__in=retention.DONE_STATES)),
        Exists(Run.objects.filter(boot_id=OuterRef("pk"), schedule__retention__isnull=False)),
        Exists(MissedSlots.objects.filter(boot_id=OuterRef("pk"), recorded_at__gte=before)),
        Exists(Incident.objects.filter(boot_id=OuterRef("pk"), at__gte=before)),
    ]
    boots = Boot.objects.filter(heartbeat_at__lt=before)
    for named in named_later:
        boots = boots.exclude(named)
    return boots


def prune(
    p: Plan,
    say: Callable[[str], None],
    clock: Callable[[], float] = time.monotonic,
) -> dict[str, int]:
    """Delete (or, dry, count) what is older than the plan's cutoffs, saying progress
    through ``say``; the rows deleted (or that would be) per table."""
    run = p.start()
    where = "" if run.before is None else f" before {absolute(run.before)}"
    say(
        f"{'would prune' if p.dry_run else 'pruning'} the ledger{where}, "
        f"at most {p.batch:,} rows a transaction"
    )
    if run.own:
        setting = "" if run.before is not None else " (DURABLEBEAT_RETENTION is None: no other)"
        say(
            f"  {len(run.own):,} schedule(s) with a retention of their own: their runs and "
            f"missed slots at its cutoff{setting}"
        )
    if p.dry_run:
        counts = would_delete(run.before, run.own)
        for table, n in counts.items():
            say(f"  {table}: {n:,} would be deleted")
        say("  kept whatever its age: runs in flight, each schedule's newest run")
        return counts
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
