"""``durablebeat report --since 48h`` (R18): what fired, in words.

The report counts real fires (runs that went to the broker, not skipped or missed slots)
per boot and per reason over a window, lists the boots with their times, and flags any
schedule that fired more than 1.5x what its period allows in that window: the "daily job
ran 43 times in a day" signature.
"""

from __future__ import annotations

import datetime as dt
import itertools
import math
import uuid
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import Any

from django.db.models import Count, Q, Window

from ..beat import retention
from ..core import timing
from ..enums import RUN_NOW_ADMIN, RUN_NOW_API, RUN_NOW_DETAILS, Kind, Reason, RunState
from ..models import TIMING_FIELDS, Boot, MissedSlots, Run, Schedule
from ..words import absolute, duration_words, one_line

#: a schedule is flagged when it fired more than this many times what its period allows
OVERFIRE_RATIO = 1.5
#: the schedules named in "fires per schedule" unless ``--limit`` says otherwise (R33)
DEFAULT_LIMIT = 50
#: counting a crontab's slots in the window stops here (every second for 48 h is ~170k)
MAX_SLOTS_COUNTED = 1_000_000
#: the flagged schedules whose counts and names one query reads (R33)
NAMES_CHUNK = 500
_SECOND = dt.timedelta(seconds=1)


@dataclass(frozen=True)
class BootLine:
    """One boot in the window: its times and what it fired, by reason."""

    id: uuid.UUID | None
    label: str
    started_at: dt.datetime | None
    ended_at: dt.datetime | None
    stopped: bool
    fires: dict[str, int]
    skipped: int
    missed_slots: int
    #: fires revoked for a newer slot (R34, ``overlap=replace``): among ``fires``
    replaced: int = 0

    @property
    def total(self) -> int:
        return sum(self.fires.values())


@dataclass(frozen=True)
class Overfire:
    """A schedule that fired far more than its period allows (R18)."""

    schedule: str
    fired: int
    allowed: int
    by_reason: dict[str, int]
    #: why the period's allowance could not be computed (then ``allowed`` is 0)
    error: str = ""

    @property
    def ratio(self) -> float:
        return self.fired / self.allowed if self.allowed else math.inf


@dataclass(frozen=True)
class Report:
    since: dt.datetime
    until: dt.datetime
    boots: list[BootLine]
    by_reason: dict[str, int]
    by_schedule: dict[str, int]
    overfired: list[Overfire] = field(default_factory=list)
    #: schedules among ``by_schedule`` deleted with their history kept (R29)
    deleted: frozenset[str] = frozenset()
    #: the window starts before the retention's cutoff: what it says of the runs before it
    #: (R32); empty when the whole window is kept
    pruned: str = ""
    #: how many schedules fired in the window; ``by_schedule`` holds the ``limit`` that
    #: fired most (R33: a million customers' digests are not a million lines)
    schedules_fired: int | None = None

    @property
    def more_schedules(self) -> int:
        """Schedules that fired but are not in ``by_schedule``."""
        if self.schedules_fired is None:
            return 0
        return max(0, self.schedules_fired - len(self.by_schedule))

    @property
    def total(self) -> int:
        return sum(self.by_reason.values())

    def as_dict(self) -> dict[str, Any]:
        return {
            "since": self.since.isoformat(),
            "until": self.until.isoformat(),
            "total_fires": self.total,
            "fires_by_reason": self.by_reason,
            "fires_by_schedule": self.by_schedule,
            "schedules_fired": (
                len(self.by_schedule) if self.schedules_fired is None else self.schedules_fired
            ),
            "deleted_schedules": sorted(self.deleted),
            "pruned": self.pruned,
            "boots": [
                {
                    "id": str(b.id) if b.id else None,
                    "label": b.label,
                    "started_at": b.started_at.isoformat() if b.started_at else None,
                    "ended_at": b.ended_at.isoformat() if b.ended_at else None,
                    "stopped": b.stopped,
                    "fires": b.fires,
                    "total": b.total,
                    "skipped": b.skipped,
                    "missed_slots": b.missed_slots,
                    "replaced": b.replaced,
                }
                for b in self.boots
            ],
            "overfired": [
                {
                    "schedule": o.schedule,
                    "fired": o.fired,
                    "allowed": o.allowed,
                    "by_reason": o.by_reason,
                    "error": o.error,
                }
                for o in self.overfired
            ],
        }


def fires_in(since: dt.datetime, until: dt.datetime) -> Any:
    """Real fires in the window: runs that got a message (a task id), by when claimed."""
    return Run.objects.filter(
        claimed_at__gt=since, claimed_at__lte=until, task_id__isnull=False
    ).exclude(state__in=(RunState.SKIPPED, RunState.MISSED))


def allowed_fires(spec: timing.Spec, since: dt.datetime, until: dt.datetime) -> int:
    """The most fires the schedule's period allows in (since, until]."""
    if isinstance(spec, timing.Interval) and spec.relative and spec.every >= _SECOND:
        # R25: Celery's rounding fires a relative interval on its own chain (a 90-minute
        # one hourly): its slots are counted, one more for a slot at the window's start (a
        # sub-second one is not rounded: it moves on by its interval)
        return _chain_slots(spec, since, until) + 1
    if isinstance(spec, timing.Interval):
        return int((until - since) / spec.every) + 1
    if isinstance(spec, timing.Clocked):
        return 1
    if isinstance(spec, timing.Custom):  # its slots are the object's: nothing to count against
        return MAX_SLOTS_COUNTED
    slots = timing.slots_between(spec, since, until)
    return max(1, sum(1 for _ in itertools.islice(slots, MAX_SLOTS_COUNTED)))


def _chain_slots(spec: timing.Interval, since: dt.datetime, until: dt.datetime) -> int:
    """The slots of a relative interval's chain from ``since`` in (since, until]."""
    count, slot = 0, timing.advance(spec, since, since)
    while slot is not None and slot <= until and count < MAX_SLOTS_COUNTED:
        count += 1
        slot = timing.advance(spec, slot, slot)
    return max(1, count)


def find_overfired(since: dt.datetime, until: dt.datetime) -> list[Overfire]:
    """R18: schedules whose scheduler-made fires exceed 1.5x what their period allows.

    Manual fires and backfills are a person's doing and are not counted against the schedule.

    What a period allows is worked out once per distinct timing among the window's fires,
    and each schedule's count is compared with its own timing's allowance as one grouped
    query streams by (R33): only the flagged schedules are read again, by the chunk. The
    smallest allowance prunes the groups (``HAVING``) but never decides: a weekly schedule
    among a million daily ones lowers the bar of the query, not of the daily rows. A
    timing whose allowance cannot be computed names its rows that fired (R21), and does
    not lower the bar of the others.
    """
    fired = fires_in(since, until).exclude(reason__in=(Reason.MANUAL, Reason.BACKFILL))
    # A one-off allows one fire: its own query, so that a few thousand one-offs (each its
    # own timing) neither cost a computation each nor lower every other row's bar.
    # (a subquery, not a join: the window's runs are not joined to a million schedules)
    one_offs = Schedule.objects.filter(kind=Kind.CLOCKED).values("pk")
    once = fired.filter(schedule_id__in=one_offs)
    flagged: dict[int, int | Exception] = {
        c["schedule_id"]: 1
        for c in once.values("schedule_id").annotate(n=Count("id")).filter(n__gt=1).order_by()
    }
    periodic = fired.exclude(schedule_id__in=one_offs)
    timing_of = [f"schedule__{f}" for f in TIMING_FIELDS]
    allowed_by: dict[tuple[Any, ...], int | Exception | None] = {}
    for key in periodic.values_list(*timing_of).distinct().order_by():
        try:
            spec = Schedule(**dict(zip(TIMING_FIELDS, key, strict=True))).to_spec()
            allowed_by[key] = allowed_fires(spec, since, until)
        except timing.InvalidSchedule:
            allowed_by[key] = None  # beat sets the row aside; check's bad_row says so
        except Exception as exc:  # R21: named in the report, the others still counted
            allowed_by[key] = exc
    bars = [math.floor(OVERFIRE_RATIO * a) for a in allowed_by.values() if isinstance(a, int)]
    if bars:
        groups = periodic.values("schedule_id", *timing_of).annotate(n=Count("id"))
        for c in groups.filter(n__gt=min(bars)).order_by().iterator():
            allowed = allowed_by.get(tuple(c[f] for f in timing_of))
            if isinstance(allowed, int) and c["n"] > OVERFIRE_RATIO * allowed:
                flagged[c["schedule_id"]] = allowed
    for key, allowed in allowed_by.items():
        if isinstance(allowed, Exception):  # the rows of this timing that fired at all
            rows = periodic.filter(**dict(zip(timing_of, key, strict=True)))
            for schedule_id in rows.values_list("schedule_id", flat=True).distinct().order_by():
                flagged[schedule_id] = allowed
    per_schedule: dict[int, dict[str, int]] = defaultdict(dict)
    names: dict[int, str] = {}
    ids = list(flagged)
    for start in range(0, len(ids), NAMES_CHUNK):
        counts = fired.filter(schedule_id__in=ids[start : start + NAMES_CHUNK])
        for c in (
            counts.values("schedule_id", "schedule__name", "reason")
            .annotate(n=Count("id"))
            .order_by()
        ):
            per_schedule[c["schedule_id"]][c["reason"]] = c["n"]
            names[c["schedule_id"]] = c["schedule__name"]
    found = []
    for pk in sorted(names, key=names.__getitem__):
        allowed, reasons = flagged[pk], per_schedule[pk]
        if isinstance(allowed, Exception):
            found.append(Overfire(names[pk], sum(reasons.values()), 0, reasons, error=str(allowed)))
        else:
            found.append(Overfire(names[pk], sum(reasons.values()), allowed, reasons))
    return found


def _boot_lines(since: dt.datetime, until: dt.datetime) -> list[BootLine]:
    fires = fires_in(since, until).values("boot_id", "reason").annotate(n=Count("id"))
    by_boot: dict[uuid.UUID | None, dict[str, int]] = defaultdict(dict)
    for f in fires:
        by_boot[f["boot_id"]][f["reason"]] = f["n"]
    skipped: Counter[uuid.UUID | None] = Counter()
    replaced: Counter[uuid.UUID | None] = Counter()
    for boot_id, state in Run.objects.filter(
        state__in=(RunState.SKIPPED, RunState.REPLACED), claimed_at__gt=since, claimed_at__lte=until
    ).values_list("boot_id", "state"):
        (skipped if state == RunState.SKIPPED else replaced)[boot_id] += 1
    missed: Counter[uuid.UUID | None] = Counter()
    for boot_id, count in MissedSlots.objects.filter(
        recorded_at__gt=since, recorded_at__lte=until
    ).values_list("boot_id", "count"):
        missed[boot_id] += count
    boots = Boot.objects.filter(
        Q(started_at__lte=until)
        & (Q(heartbeat_at__gte=since) | Q(pk__in=[b for b in by_boot if b is not None]))
    ).order_by("started_at")
    lines = [
        BootLine(
            b.pk,
            f"{b.hostname}:{b.pid}",
            b.started_at,
            b.stopped_at or b.heartbeat_at,
            b.stopped_at is not None,
            by_boot.get(b.pk, {}),
            skipped.get(b.pk, 0),
            missed.get(b.pk, 0),
            replaced.get(b.pk, 0),
        )
        for b in boots
    ]
    if None in by_boot or skipped.get(None):
        # What no boot fired: a "run now" (the admin's or the API's), a backfill, or fires
        # whose boot row is gone, said as what it was.
        lines.append(
            BootLine(
                None,
                _no_boot_label(since, until),
                None,
                None,
                False,
                by_boot.get(None, {}),
                skipped.get(None, 0),
                missed.get(None, 0),
                replaced.get(None, 0),
            )
        )
    return lines


#: what fired with no boot, in words, in the order the label lists them
_NO_BOOT_WORDS = {
    RUN_NOW_ADMIN: "run now (admin)",
    RUN_NOW_API: "run now (API)",
    Reason.MANUAL: "run now",
    Reason.BACKFILL: "backfill",
    "": "its boot row gone",
}


def _no_boot_label(since: dt.datetime, until: dt.datetime) -> str:
    """The label of the fires no boot made: ``"no boot: run now (API), backfill"``. A run
    now's detail says who asked (``RUN_NOW_DETAILS``); one that lost it (a run written by
    an earlier release, or marked lost or no news) is "run now"."""
    found = set()
    kinds = fires_in(since, until).filter(boot_id__isnull=True).values_list("reason", "detail")
    for reason, detail in kinds.order_by().distinct():
        if reason == Reason.MANUAL:
            found.add(detail if detail in RUN_NOW_DETAILS else Reason.MANUAL)
        else:
            found.add(Reason.BACKFILL if reason == Reason.BACKFILL else "")
    said = [words for key, words in _NO_BOOT_WORDS.items() if key in found]
    return f"no boot: {', '.join(said)}" if said else "no boot"


def build_report(
    since: dt.datetime,
    until: dt.datetime,
    now: dt.datetime | None = None,
    *,
    limit: int = DEFAULT_LIMIT,
) -> Report:
    """The report of [since, until]; ``now`` (else ``until``) places the retention's cutoff.
    ``limit``: the schedules that fired most, at most that many (the rest are counted)."""
    fires = fires_in(since, until)
    by_reason = {
        r["reason"]: r["n"] for r in fires.values("reason").annotate(n=Count("id")).order_by()
    }
    # the limit that fired most, and (a window over the groups) how many fired at all
    # (the name in the same query: a schedule removed since is not looked up again)
    per_schedule = fires.values("schedule_id", "schedule__name").annotate(
        n=Count("id"), groups=Window(Count("*"))
    )
    top = list(per_schedule.order_by("-n", "schedule_id")[:limit])
    by_schedule = dict(
        sorted(((r["schedule__name"], r["n"]) for r in top), key=lambda kv: (-kv[1], kv[0]))
    )
    fired = top[0]["groups"] if top else 0
    return Report(
        since=since,
        until=until,
        boots=_boot_lines(since, until),
        by_reason={r: by_reason[r] for r in Reason.values if r in by_reason},
        by_schedule=by_schedule,
        overfired=find_overfired(since, until),
        deleted=frozenset(
            Schedule.objects.filter(name__in=by_schedule, deleted_at__isnull=False).values_list(
                "name", flat=True
            )
        ),
        pruned=retention.edge_note(since, now or until),
        schedules_fired=fired,
    )


def _reasons(counts: dict[str, int]) -> str:
    if not counts:
        return "no fires"
    labels = dict(Reason.choices)
    return ", ".join(f"{counts[r]} {labels[r].lower()}" for r in Reason.values if counts.get(r))


def format_report(report: Report) -> str:
    span = duration_words(report.until - report.since)
    lines = [
        f"durablebeat report: {absolute(report.since)} to {absolute(report.until)} ({span})",
        f"{report.total} fires: {_reasons(report.by_reason)}",
        *([f"note: {report.pruned}"] if report.pruned else []),
        "",
        f"boots ({sum(1 for b in report.boots if b.id is not None)}):",
    ]
    for b in report.boots:
        if b.id is None:
            times = ""
        else:
            end = (
                f"stopped {absolute(b.ended_at)}"
                if b.stopped
                else f"last seen {absolute(b.ended_at)}"
            )
            times = f" started {absolute(b.started_at)}, {end};"
        extra = ""
        if b.skipped:
            extra += f"; {b.skipped} skipped"
        if b.missed_slots:
            extra += f"; {b.missed_slots} slots missed"
        if b.replaced:
            extra += f"; {b.replaced} replaced by a newer slot"
        short = str(b.id)[:8] if b.id else "-"
        lines.append(f"  {short} {b.label}:{times} {b.total} fires ({_reasons(b.fires)}){extra}")
    lines.append("")
    if report.more_schedules:
        lines.append(
            f"fires per schedule (the {len(report.by_schedule):,} that fired most, "
            f"of {report.schedules_fired:,}):"
        )
    else:
        lines.append("fires per schedule:")
    for name, n in report.by_schedule.items():
        lines.append(f"  {name}{' (deleted)' if name in report.deleted else ''}: {n}")
    if not report.by_schedule:
        lines.append("  (none)")
    elif report.more_schedules:
        lines.append(f"  and {report.more_schedules:,} more schedules (report --limit N)")
    lines.append("")
    if report.overfired:
        lines.append(f"FLAGGED: fired more than {OVERFIRE_RATIO:g}x what the period allows:")
        for o in report.overfired:
            if o.error:
                allows = f"what its period allows cannot be computed: {o.error}"
            else:
                allows = f"its period allows {o.allowed} ({o.ratio:.1f}x; {_reasons(o.by_reason)})"
            lines.append(f"  {o.schedule}: fired {o.fired} times, {allows}")
    else:
        lines.append(f"no schedule fired more than {OVERFIRE_RATIO:g}x what its period allows")
    return "\n".join(one_line(line) for line in lines)  # names and hosts hold anything
