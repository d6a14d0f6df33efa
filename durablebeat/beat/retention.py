"""A bounded ledger (R32, issue 31): what is older than ``DURABLEBEAT_RETENTION`` is deleted,
a little at a time, by beat itself (a loop hook after the due work) and by ``durablebeat
prune`` (``ops.prune``).

What goes: finished runs, missed-slot records and incidents older than the cutoff, then the
boots that stopped before it and that nothing refers to any more. A schedule with a
retention of its own (``Schedule.retention``, shorter or longer) has its runs and missed-slot
records pruned at its own cutoff instead, even with the setting None; incidents and boots
follow the setting. What stays, whatever its
age: a run still in flight (claimed, published, started: the in-doubt resend and the reclaim
need it), the newest run of each schedule (its last-run facts: a one-off's only run, a
custom schedule's last run, R25), and a boot a row still names (in-doubt runs are found by
their dead boot, R9).

Each batch is one short transaction deleting at most ``batch`` rows by primary key (a list,
not a ``DELETE … LIMIT`` subquery, which MariaDB refuses): old rows only, which no claim
locks or waits on. The deleted slots are never fired again: backfill, catch-up and the
in-doubt resend stop at the same cutoff (``cutoff``), so R4's one run per slot holds in
effect after its run is gone. A schedule pruned at its own cutoff has its own mark
(``pruned_before(schedule_id)``), so that raising or clearing its retention later brings
none of its pruned slots back either.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import logging
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, TypeVar

from django.db import DatabaseError
from django.db.models import Exists, Model, OuterRef, Q, QuerySet

from .. import conf, db
from ..enums import FINAL_STATES, RunState
from ..models import Boot, Incident, Marker, MissedSlots, Run, Schedule
from ..words import absolute, duration_words
from . import dberrors
from .loop import Loop
from .reclaim import take_turn

logger = logging.getLogger("durablebeat")

_Row = TypeVar("_Row", bound=Model)

#: the Marker row whose compare-and-set elects one pruning round at a time across beats
ROUND_MARKER = "retention"
#: a pruning round at most this often, across all beats
ROUND_EVERY = dt.timedelta(seconds=10)
#: once a pass has ended finding nothing to delete, this beat looks again only this much
#: later: an idle beat's rounds were most of its idle CPU (issue 36), and what crosses the
#: cutoff meanwhile goes at most this late (a busy ledger, with rows to delete at every
#: round, keeps ``ROUND_EVERY``)
IDLE_ROUND_EVERY = dt.timedelta(minutes=5)
#: rows a batch deletes, in one transaction
BATCH = 500
#: most rows one round of beat deletes, and the longest it spends (beat prunes only when it
#: would sleep longer than that, and sleeps that much less: a fire is never delayed)
ROUND_ROWS = 5000
ROUND_SECONDS = 0.2
#: a run in these states may go; the others are in flight (R9, R13, R15)
DONE_STATES = (*FINAL_STATES, RunState.NO_NEWS)
#: the longest a batch waits for a row lock on PostgreSQL
LOCK_WAIT_MS = 200
#: beat's pass reads the runs from the oldest at most this often; the passes between start
#: at the last pass's cutoff (``RetentionRound.next_pass``)
FULL_PASS_EVERY = dt.timedelta(hours=1)
#: the Marker row holding the latest cutoff runs were pruned at (``pruned_before``); a
#: schedule pruned at its own retention has its own, this key and ``:<schedule id>``
PRUNED_MARKER = "retention_pruned_before"
#: what is pruned, in the order a round takes it (boots last: they go once nothing names them)
TABLES = ("runs", "missed slots", "incidents", "boots")


def cutoff(now: dt.datetime, retention: dt.timedelta | None = None) -> dt.datetime | None:
    """The instant before which the ledger is pruned (``retention``, else the setting);
    None when it is kept for ever."""
    keep = retention if retention is not None else conf.settings.RETENTION
    return None if keep is None else now - keep


def kept_for(own: dt.timedelta | None) -> dt.timedelta | None:
    """How long a schedule's runs are kept: its own retention, else the setting. Its own is
    taken within the setting's range: a row written around the checks (R21) never has its
    runs cut closer than a day."""
    return conf.settings.RETENTION if own is None else _in_range(own)


def _in_range(own: dt.timedelta) -> dt.timedelta:
    return min(max(own, conf.MIN_RETENTION), conf.MAX_RETENTION)


def _cut(now: dt.datetime, keep: dt.timedelta, floor: dt.timedelta | None) -> dt.datetime:
    """The cutoff ``keep`` gives at ``now``, never closer than ``floor`` (``--older-than``)."""
    return now - (keep if floor is None else max(keep, floor))


def _marker(schedule_id: int | None) -> str:
    return PRUNED_MARKER if schedule_id is None else f"{PRUNED_MARKER}:{schedule_id}"


def _pruned(before: dt.datetime, schedule_id: int | None = None) -> None:
    """Remember that runs (of ``schedule_id``, pruned at its own retention) before
    ``before`` may be gone (``pruned_before``), in the deleting transaction; the mark only
    moves on."""
    key = _marker(schedule_id)
    if not Marker.objects.filter(key=key, at__lt=before).update(at=before):
        Marker.objects.get_or_create(key=key, defaults={"at": before})


def pruned_before(schedule_id: int | None = None) -> dt.datetime | None:
    """The latest cutoff any prune deleted runs at (of ``schedule_id``, at its own
    retention): a slot before it may have lost its run, whatever the retention is now (a
    retention raised later brings nothing back)."""
    key = _marker(schedule_id)
    return Marker.objects.filter(key=key).values_list("at", flat=True).first()


def edge(now: dt.datetime, schedule: Schedule | None = None) -> dt.datetime | None:
    """Before this instant a slot (of ``schedule``) is never fired again: its retention's
    cutoff, or the latest one its runs were pruned at when that is later (R4 after its run
    is gone, R32): the ledger's (the setting's pruning, which took the schedule's runs too
    before it had a retention of its own) and the schedule's own."""
    if schedule is None:
        marks = [cutoff(now), pruned_before()]
    else:
        keys = [_marker(None), _marker(schedule.pk)]
        pruned = Marker.objects.filter(key__in=keys).values_list("at", flat=True)
        marks = [cutoff(now, kept_for(schedule.retention)), *pruned]
    found = [m for m in marks if m is not None]
    return max(found) if found else None


def own_retentions(now: dt.datetime, floor: dt.timedelta | None = None) -> dict[int, dt.datetime]:
    """{schedule id: cutoff} of the schedules with a retention of their own (deleted ones
    too: their runs stay); ``floor``: none closer than that (``prune --older-than``). Read
    by a plain SELECT: the schedule rows are never locked nor written here (claims lock
    them)."""
    rows = (
        Schedule.objects.filter(retention__isnull=False).order_by().values_list("pk", "retention")
    )
    return {pk: _cut(now, _in_range(own), floor) for pk, own in rows if own is not None}


def edge_note(since: dt.datetime, now: dt.datetime) -> str:
    """What report and the timeline say of a window that starts before the cutoff: the runs
    before it were deleted, not missing; empty when the window is within the retention.
    The setting's cutoff only: a note per schedule with a retention of its own would be
    noise on pages of many schedules; its own retention is on its page."""
    edge = cutoff(now)
    if edge is None or since >= edge:
        return ""
    keep = conf.settings.RETENTION
    assert keep is not None
    return (
        f"history before {absolute(edge)} is pruned (DURABLEBEAT_RETENTION = "
        f"{duration_words(keep)}): only in-flight runs and each schedule's newest run are "
        "kept from before it, so fewer fires there mean nothing"
    )


# --- one batch per table ----------------------------------------------------------------------


@contextlib.contextmanager
def _batch() -> Iterator[None]:
    """One batch's transaction. On PostgreSQL it waits at most ``LOCK_WAIT`` for a row lock
    (a worker writing an old run's outcome at that instant): pruning waits on nobody's lock
    for long, and the round ends there (``RetentionRound``), to go on in the next."""
    with db.atomic():
        connection = db.connection()
        if connection.vendor == "postgresql":
            with connection.cursor() as cursor:
                cursor.execute(f"SET LOCAL lock_timeout = '{LOCK_WAIT_MS}ms'")
        yield


def _free(rows: QuerySet[_Row]) -> QuerySet[_Row]:
    """``rows`` less those another transaction holds (a worker writing an old run's outcome,
    ``durablebeat prune`` beside beat's round), locked for this batch where the database
    can skip a lock (PostgreSQL, MariaDB 10.6+, MySQL 8): a batch never waits on one."""
    if db.connection().features.has_select_for_update_skip_locked:
        return rows.select_for_update(skip_locked=True)
    return rows


def _delete(model: type[_Row], ids: list[Any]) -> int:
    """One batch: the free rows of ``ids``, deleted in one short transaction."""
    if not ids:
        return 0
    with _batch():
        rows = model._default_manager.filter(pk__in=ids)
        free = list(_free(rows).values_list("pk", flat=True))
        return model._default_manager.filter(pk__in=free).delete()[0] if free else 0


@dataclass
class Pass:
    """One pass over the ledger at one cutoff per schedule, a batch at a time; it remembers
    where each table's scan is, so that the rows kept (in flight, newest) are read once per
    pass. ``before``: the setting's cutoff (None: kept for ever); ``own``: each schedule's
    with a retention of its own (``own_retentions``), whose runs are scanned by schedule."""

    before: dt.datetime | None
    batch: int = BATCH
    own: dict[int, dt.datetime] = field(default_factory=dict)
    #: the instant the cutoffs were taken at, and the ``floor`` they were taken with
    taken_at: dt.datetime | None = None
    floor: dt.timedelta | None = None
    #: per table, the last primary key looked at (tables scanned by primary key)
    after: dict[str, int] = field(default_factory=dict)
    #: the last run looked at, (claimed_at, pk)
    runs_after: tuple[dt.datetime, int] | None = None
    #: the schedules of ``own`` whose runs are still to scan, and the last slot looked at
    #: of the first one
    own_left: list[int] = field(init=False)
    own_after: dt.datetime | None = None
    #: tables with nothing left before the cutoff
    done: set[str] = field(default_factory=set)
    deleted: dict[str, int] = field(default_factory=lambda: dict.fromkeys(TABLES, 0))

    def __post_init__(self) -> None:
        self.own_left = sorted(self.own)
        if self.before is None:  # incidents and boots follow the setting only
            self.done |= {"incidents", "boots"} if self.own else set(TABLES)

    @classmethod
    def at(cls, now: dt.datetime, batch: int = BATCH, floor: dt.timedelta | None = None) -> Pass:
        """The pass due at ``now``: the setting's cutoff and each schedule's own; ``floor``:
        none closer than that (``prune --older-than``)."""
        keep = conf.settings.RETENTION
        before = None if keep is None else _cut(now, keep, floor)
        return cls(before, batch, own_retentions(now, floor), taken_at=now, floor=floor)

    @property
    def finished(self) -> bool:
        return self.done >= set(TABLES)

    @property
    def latest(self) -> dt.datetime | None:
        """The latest cutoff of the pass: no row newer than it goes."""
        cutoffs = [c for c in (self.before, *self.own.values()) if c is not None]
        return max(cutoffs) if cutoffs else None

    def next_own(self) -> None:
        """Done with the first schedule of ``own_left``: on to the next, from its oldest."""
        self.own_left.pop(0)
        self.own_after = None

    def step(self) -> int:
        """Delete one batch from the first table not done; the rows deleted."""
        for table in TABLES:
            if table not in self.done:
                n = _STEPS[table](self)
                self.deleted[table] += n
                return n
        return 0

    def _page(
        self, table: str, model: type[MissedSlots | Incident], at: str, *more: str
    ) -> list[tuple[Any, ...]]:
        """The next ``batch`` rows by primary key, as (pk, time, *more); the table is done
        once a page reaches the latest cutoff or the end. What is older than its cutoff
        goes, so the oldest ids are at the front, and they were written in time order (their
        time is the writer's now): no index on their time is needed."""
        latest = self.latest
        assert latest is not None  # else the table is done from the start
        page = list(
            model.objects.filter(pk__gt=self.after.get(table, 0))
            .order_by("pk")
            .values_list("pk", at, *more)[: self.batch]
        )
        if len(page) < self.batch or page[-1][1] >= latest:
            self.done.add(table)
        if page:
            self.after[table] = page[-1][0]
        return page


def _runs(p: Pass) -> int:
    """The runs of each schedule with a retention of its own, then the others'."""
    return _own_runs(p) if p.own_left else _setting_runs(p)


def _setting_runs(p: Pass) -> int:
    """Runs by their claim time's index, from where the pass is (a run kept is read once a
    pass, and old runs are found however their ids are ordered). A run of a schedule with a
    retention of its own is passed by (``_own_runs``'s): its schedule's current value, read
    with the page, decides, not the pass's list."""
    if p.before is None:
        p.done.add("runs")
        return 0
    runs = Run.objects.filter(claimed_at__lt=p.before)
    if p.runs_after is not None:
        at, pk = p.runs_after
        # the index's lower bound, which the OR alone does not give: without it each page
        # walked the index from the oldest run (the runs a longer retention keeps, again)
        runs = runs.filter(claimed_at__gte=at).filter(
            Q(claimed_at__gt=at) | Q(claimed_at=at, pk__gt=pk)
        )
    ordered = runs.order_by("claimed_at", "pk")
    page = list(ordered.values_list("claimed_at", "pk", "schedule__retention")[: p.batch])
    if len(page) < p.batch:
        p.done.add("runs")
    if not page:
        return 0
    p.runs_after = page[-1][:2]
    return _delete_runs([pk for _, pk, own in page if own is None], p.before)


def _own_runs(p: Pass) -> int:
    """The runs of the first schedule left with a retention of its own, by the one-run-per-
    slot index (it starts with the schedule): its old runs, however few or many, are a range
    of it. Its retention as it is now, read with each batch: raised since the pass began,
    the pass keeps what it now keeps; cleared (or the schedule gone), the setting's scan
    decides."""
    schedule_id = p.own_left[0]
    before = p.own[schedule_id]
    now_own = Schedule.objects.filter(pk=schedule_id).values_list("retention", flat=True)
    current = now_own.first()
    if current is None:
        p.next_own()
        return 0
    if p.taken_at is not None:
        before = min(before, _cut(p.taken_at, _in_range(current), p.floor))
    runs = Run.objects.filter(schedule_id=schedule_id, slot__lt=before)
    if p.own_after is not None:
        runs = runs.filter(slot__gt=p.own_after)
    page = list(runs.order_by("slot").values_list("slot", "pk")[: p.batch])
    if len(page) < p.batch:
        p.next_own()
    else:
        p.own_after = page[-1][0]
    return _delete_runs([pk for _, pk in page], before, schedule_id)


def _delete_runs(ids: list[int], before: dt.datetime, schedule_id: int | None = None) -> int:
    """One batch: the free runs of ``ids`` that may go at ``before`` (finished, slot and
    claim before it, not their schedule's newest), deleted in one short transaction that
    moves the pruned mark (the schedule's own with ``schedule_id``)."""
    if not ids:
        return 0
    newer = Run.objects.filter(schedule_id=OuterRef("schedule_id"), slot__gt=OuterRef("slot"))
    with _batch():
        ids = list(
            _free(Run.objects.filter(pk__in=ids))
            .filter(slot__lt=before, claimed_at__lt=before, state__in=DONE_STATES)
            .filter(Exists(newer))
            .values_list("pk", flat=True)
        )
        deleted = Run.objects.filter(pk__in=ids).delete()[0] if ids else 0
        if deleted:
            _pruned(before, schedule_id)
        return deleted


def _missed(p: Pass) -> int:
    """Missed-slot records older than their schedule's cutoff: its own, else the setting's
    (a schedule given a retention since the pass began: the next pass's)."""
    page = p._page("missed slots", MissedSlots, "recorded_at", "schedule_id", "schedule__retention")
    ids = []
    for pk, when, schedule_id, own in page:
        before = p.before if own is None else p.own.get(schedule_id)
        if before is not None and when < before:
            ids.append(pk)
    return _delete(MissedSlots, ids)


def _incidents(p: Pass) -> int:
    """Old incidents, but not one a boot still heard from recorded: a live beat's
    ``listen_deaf`` is recorded once a boot and read as long as it lives (R31)."""
    assert p.before is not None  # done from the start without the setting
    old = [pk for pk, when in p._page("incidents", Incident, "at") if when < p.before]
    live = Incident.objects.filter(pk__in=old, boot__heartbeat_at__gte=p.before)
    return _delete(Incident, sorted(set(old) - set(live.values_list("pk", flat=True))))


def _boots(p: Pass) -> int:
    """Boots last heard of before the cutoff that no run, missed-slot record or incident
    names (their ids are UUIDs: found by the heartbeat's index, not by primary key)."""
    named = [
        Exists(model.objects.filter(boot_id=OuterRef("pk")))
        for model in (Run, MissedSlots, Incident)
    ]
    assert p.before is not None  # done from the start without the setting
    ids = list(
        Boot.objects.filter(heartbeat_at__lt=p.before)
        .exclude(named[0])
        .exclude(named[1])
        .exclude(named[2])
        .order_by("heartbeat_at")
        .values_list("pk", flat=True)[: p.batch]
    )
    if len(ids) < p.batch:
        p.done.add("boots")
    return _delete(Boot, ids)


_STEPS: dict[str, Callable[[Pass], int]] = {
    "runs": _runs,
    "missed slots": _missed,
    "incidents": _incidents,
    "boots": _boots,
}


def prune_round(p: Pass, most_rows: int, in_time: Callable[[], bool] = lambda: True) -> int:
    """Batches of ``p`` until it is finished, ``most_rows`` are deleted or ``in_time()``
    says the time is up (asked between batches); the rows deleted."""
    deleted = 0
    while not p.finished and deleted < most_rows and in_time():
        deleted += p.step()
    return deleted


# --- the loop hook ----------------------------------------------------------------------------


@dataclass
class RetentionRound:
    """The beat loop hook, run after a tick's due work (``Engine.after_due``): a bounded
    round of pruning when this beat holds the shared turn (one beat at a time, R32)."""

    next_look: dt.datetime | None = None
    #: the pass in progress, continued by the next round
    current: Pass | None = None
    #: when the next pass reads the runs from the oldest again
    full_pass_at: dt.datetime | None = None
    rounds: int = 0
    seconds: float = ROUND_SECONDS
    most_rows: int = ROUND_ROWS

    def __call__(self, loop: Loop, now: dt.datetime) -> None:
        if self.next_look is not None and now < self.next_look:
            return
        self.next_look = now + ROUND_EVERY
        if cutoff(now) is None and not any_own():
            return  # kept for ever
        turn_again_at = take_turn(now, ROUND_EVERY, ROUND_MARKER)
        if turn_again_at is not None:
            self.next_look = turn_again_at
            return
        self.rounds += 1
        if self.current is None or self.current.finished:
            self.current = self.next_pass(now)
        ends = time.monotonic() + self.seconds
        try:
            n = prune_round(self.current, self.most_rows, lambda: time.monotonic() < ends)
        except DatabaseError as exc:
            if dberrors.is_unreachable(exc):
                raise  # the engine's outage path (R5)
            # a lock wait cut short, a conflict: not the database's outage; the next round
            # starts the pass again
            logger.warning(
                "pruning the ledger stopped for this round: %s",
                dberrors.describe(exc),
                extra={"event": "prune_stopped", "boot": str(loop.boot_id)},
            )
            self.current = None
            return
        if not n and self.current.finished:
            self.next_look = now + IDLE_ROUND_EVERY
        if n:
            before = self.current.before
            logger.info(
                "pruned %d ledger rows older than their retention (DURABLEBEAT_RETENTION: %s)",
                n,
                "None" if before is None else f"before {absolute(before)}",
                extra={"event": "pruned", "rows": n, "boot": str(loop.boot_id)},
            )

    def next_pass(self, now: dt.datetime) -> Pass:
        """The pass after ``current``. Every run claimed before a finished pass's cutoff
        was looked at by it, and what it kept (a run in flight or a schedule's newest then,
        one a longer retention of its own keeps, a locked one) mostly stays: the passes
        between two full ones (``FULL_PASS_EVERY``) start at that cutoff, so beat does not
        read the same kept runs every ``ROUND_EVERY`` (a year kept for one schedule:
        hundreds of thousands of runs a pass). A full pass frees what was kept since."""
        p = Pass.at(now)
        last = self.current
        if (
            last is not None
            and last.finished
            and last.before is not None
            and self.full_pass_at is not None
            and now < self.full_pass_at
        ):
            p.runs_after = (last.before, 0)  # from the last cutoff on, that instant included
        else:
            self.full_pass_at = now + FULL_PASS_EVERY
        return p


def any_own() -> bool:
    """A schedule with a retention of its own (asked only with the setting None)."""
    return Schedule.objects.filter(retention__isnull=False).exists()
