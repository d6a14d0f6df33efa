"""What to do with a schedule that is due: pure decisions, time passed in (§1, §2).

The engine turns rows into ``Due`` values, asks ``decide`` and carries out the answer in the
database. Nothing here reads the clock or the database.
"""

from __future__ import annotations

import datetime as dt
import enum
import functools
import math
from dataclasses import dataclass, replace
from zoneinfo import ZoneInfo

from . import clock, jitter, solar, timing
from .custom import custom_next
from .enums import Overlap, Reason
from .relative import relative_first


@dataclass(frozen=True)
class Due:
    """What the scheduler needs to know of one schedule row."""

    id: int
    name: str
    spec: timing.Spec
    #: the stored next fire: the instant its slot is sent (R1; with a jitter, R35, later
    #: than the slot)
    next_fire_at: dt.datetime | None
    next_fire_reason: str
    startup_grace: dt.timedelta
    catch_up: bool
    catch_up_window: dt.timedelta
    overlap: str = Overlap.SKIP
    #: ``overlap=allow``: at most this many runs in flight (None: no bound, R34)
    max_in_flight: int | None = None
    #: ``overlap=replace``: the run replaced is terminated, not only revoked (R34)
    terminate: bool = False
    #: ``overlap=buffer_one``: the slot kept behind the run in flight (R34)
    buffered_slot: dt.datetime | None = None
    #: a custom schedule's last run, as Celery's beat passes it to ``is_due``: the last slot
    #: fired, or when the schedule was first stored (Celery's boot time) (R25)
    last_run_at: dt.datetime | None = None
    #: R35: each slot is sent at slot + a delay in [0, jitter) (zero: at the slot)
    jitter: dt.timedelta = dt.timedelta(0)
    #: R35: the slot ``next_fire_at`` sends, when it was jittered (None: it is the slot)
    next_slot: dt.datetime | None = None

    @functools.cached_property
    def slot(self) -> dt.datetime | None:
        """The slot the next fire sends (R4's key): a jittered instant's own slot."""
        return jitter.slot_of(self.spec, self.next_fire_at, self.next_slot)


@dataclass(frozen=True)
class Fire:
    """Claim ``slot``, move next fire to ``next_fire_at`` (None: a one-off is done), publish."""

    slot: dt.datetime
    reason: str
    next_fire_at: dt.datetime | None
    missed: MissedRange | None = None
    #: a one-off found this long after its slot, past ``late_after``: it fires once, late,
    #: and its run says so (R31)
    late: dt.timedelta | None = None
    #: R35: the slot ``next_fire_at`` sends, when jittered (None: it is the slot)
    next_slot: dt.datetime | None = None

    @property
    def following(self) -> dt.datetime | None:
        """The schedule's next slot (``next_fire_at`` is when it is sent, R35)."""
        return self.next_slot or self.next_fire_at


@dataclass(frozen=True)
class Defer:
    """Write a next fire without firing now: a startup grace, or a new schedule's first slot."""

    next_fire_at: dt.datetime | None
    reason: str
    #: R35: the slot ``next_fire_at`` sends, when jittered (None: it is the slot)
    next_slot: dt.datetime | None = None


@dataclass(frozen=True)
class MissedRange:
    """Slots that passed while no beat could fire them (R8): counted, not stored one by one."""

    count: int
    first: dt.datetime
    last: dt.datetime


@dataclass(frozen=True)
class Miss:
    """Record missed slots and move next fire past them without firing."""

    missed: MissedRange
    next_fire_at: dt.datetime | None
    #: R35: the slot ``next_fire_at`` sends, when jittered (None: it is the slot)
    next_slot: dt.datetime | None = None


Action = Fire | Defer | Miss

#: counting missed slots stops here; a schedule missed more than this says "at least"
MAX_MISSED_COUNT = 100_000


def decide(
    due: Due,
    now: dt.datetime,
    late_after: dt.timedelta,
    caught_up: bool,
    one_off_window: dt.timedelta = dt.timedelta(0),
    reach: dt.timedelta | None = None,
) -> Action:
    """The one decision for a due schedule.

    ``late_after``: a slot older than this was not fired in time (no beat ran, none could
    reach the database, or a running one woke late): it is *missed*.
    ``caught_up``: this boot already fired a catch-up for this schedule (R8: at most one).
    ``one_off_window``: a one-off older than ``late_after`` but within this fires once,
    late (R31: its one slot is never lost silently to lateness).
    ``reach``: the ledger's retention (None: kept for ever). A slot older than it is never
    caught up nor fired late: its run may have been pruned, and firing it would be a second
    fire of that slot (R4, R32).
    """
    if reach is not None:
        if due.catch_up_window > reach:  # rare: a comparison per row of a burst, not a copy
            due = replace(due, catch_up_window=reach)
        one_off_window = min(one_off_window, reach)
    action = _decide(due, now, late_after, caught_up, one_off_window)
    spec = due.spec
    if isinstance(spec, timing.Solar) and action.next_fire_at is None:
        # R21: no sun event within the polar search bound: the row is set aside with why,
        # rather than searched again at every tick
        raise timing.InvalidSchedule(
            "solar_event",
            f"no {spec.event.replace('_', ' ')} at {spec.place()} within "
            f"{solar.MAX_SEARCH_DAYS} days",
        )
    return jittered(due, action)


def jittered(due: Due, action: Action) -> Action:
    """R35: the next fire the action writes is its slot's jittered instant, the slot kept
    beside it. A custom schedule object decides its own instants (R25): none jittered."""
    slot = action.next_fire_at
    if not due.jitter or slot is None or isinstance(due.spec, timing.Custom):
        return action
    at = jitter.instant(due.name, due.spec, slot, due.jitter)
    return replace(action, next_fire_at=at, next_slot=slot) if at != slot else action


def _decide(
    due: Due,
    now: dt.datetime,
    late_after: dt.timedelta,
    caught_up: bool,
    one_off_window: dt.timedelta,
) -> Action:
    spec = due.spec
    if due.next_fire_reason == Reason.BUFFERED and due.next_fire_at is not None:
        return _release(due, due.next_fire_at)
    if isinstance(spec, timing.Custom):
        return _ask_custom(due, spec, now)
    slot = due.slot
    if due.next_fire_at is None or slot is None:
        return _first_fire(due, now, late_after, caught_up, one_off_window)
    if now - due.next_fire_at <= late_after:  # late counts from the instant it was due (R35)
        return Fire(slot, due.next_fire_reason, timing.advance(spec, slot, now))
    if isinstance(spec, timing.Interval):
        # R7: an overdue interval slot fires once, after the startup grace, then continues
        # on the grid that starts there (a relative one: on its chain, R25).
        return Defer(grace_slot(spec, now, due.startup_grace), Reason.STARTUP_GRACE)
    assert not isinstance(spec, timing.Custom)
    return _missed(due, spec, slot, now, caught_up, late_after, one_off_window)


def _release(due: Due, ended_at: dt.datetime) -> Action:
    """R34: the run a ``buffer_one`` schedule's kept slot waited for ended at ``ended_at``
    (its end moved the next fire there, reason ``buffered``): the kept slot goes, and the
    next fire is the schedule's first slot after that end, the one the move put off (every
    slot up to the end was decided when it came). Whether the slot may go now is the
    claim's question (``overlap_step``: another run may be in flight)."""
    following = timing.advance(due.spec, due.buffered_slot or ended_at, ended_at)
    if due.buffered_slot is None:  # nothing kept any more (paused, resumed, edited)
        return Defer(following, Reason.SCHEDULED)
    return Fire(due.buffered_slot, Reason.BUFFERED, following)


def grace_slot(spec: timing.Interval, now: dt.datetime, grace: dt.timedelta) -> dt.datetime:
    """R2: a new or overdue interval's next fire, after the startup grace; a relative one
    keeps Celery's rounding (the first rounded slot at or after ``now + grace``, R25)."""
    if spec.relative:
        return relative_first(spec.every, ZoneInfo(spec.timezone), now, grace)
    return now + grace


def _ask_custom(due: Due, spec: timing.Custom, now: dt.datetime) -> Action:
    """R25: a custom schedule object is asked what Celery's beat asks it, ``is_due(last run)``.
    Due: the stored next fire (or now, for a new one) is the slot, claimed once across beats
    (R4), and the next fire is when the object says to ask again. Not due: ask again then.
    Late slots are not counted as missed: the object alone knows its slots."""
    due_now, ask_again = custom_next(spec, due.last_run_at or now, now)
    if due.next_fire_at is None:
        return Defer(now if due_now else ask_again, Reason.SCHEDULED)
    if due_now:
        return Fire(due.next_fire_at, due.next_fire_reason, ask_again)
    return Defer(ask_again, Reason.SCHEDULED)


def _first_fire(
    due: Due,
    now: dt.datetime,
    late_after: dt.timedelta,
    caught_up: bool,
    one_off_window: dt.timedelta,
) -> Action:
    spec = due.spec
    if isinstance(spec, timing.Clocked) and spec.at <= now:
        if now - spec.at <= late_after:
            return Fire(spec.at, Reason.SCHEDULED, None)
        return _missed(due, spec, spec.at, now, caught_up, late_after, one_off_window)
    assert not isinstance(spec, timing.Custom)  # decide asks a custom schedule itself
    at, reason = first_fire(spec, now, due.startup_grace)
    return Defer(at, reason)


@functools.lru_cache(maxsize=1024)
def first_fire(
    spec: timing.Interval | timing.Crontab | timing.Clocked | timing.Solar,
    now: dt.datetime,
    grace: dt.timedelta,
) -> tuple[dt.datetime | None, str]:
    """A new schedule's first fire and its reason, as beat writes it for a row that has none
    (R2) and as a writer stores it when the row's write commits (R33): an interval's after
    the startup grace (a relative one: the first rounded slot at or after it, R25); a
    crontab's or sun event's next slot after ``now``; a one-off's own instant (None: no
    slot left within the search bounds). Remembered for the last distinct arguments: beat
    filling a slice of rows written alike computes it once (it never reads the clock)."""
    if isinstance(spec, timing.Interval):
        return grace_slot(spec, now, grace), Reason.STARTUP_GRACE
    if isinstance(spec, timing.Clocked):
        return spec.at, Reason.SCHEDULED
    return timing.next_slot(spec, now), Reason.SCHEDULED


def _missed(
    due: Due,
    spec: timing.Crontab | timing.Clocked | timing.Solar,
    first_due: dt.datetime,
    now: dt.datetime,
    caught_up: bool,
    late_after: dt.timedelta,
    one_off_window: dt.timedelta = dt.timedelta(0),
) -> Action:
    """R8: slots in [first_due, now] were missed; a delivery schedule fires the latest once,
    a one-off its only slot within ``one_off_window`` (R31), late.

    The range recorded is exact (R27): a slot that fires now, as catch-up or because it is
    only late (due less than ``late_after`` ago), is not in it."""
    since = first_due - dt.timedelta(microseconds=1)
    missed = _slots(spec, since, now)
    next_fire = timing.next_slot(spec, now)
    if missed is None:  # the stored time was not on the grid (timing changed): just move on
        return Defer(next_fire, Reason.SCHEDULED)
    latest = missed.last
    sent_at = jitter.instant(due.name, spec, latest, due.jitter)
    if now < sent_at:  # R35: the latest slot's instant has not come: it goes then
        before = _slots(spec, since, latest - dt.timedelta(microseconds=1))
        return Defer(latest, Reason.SCHEDULED) if before is None else Miss(before, latest)
    if now - sent_at <= late_after:
        reason = Reason.SCHEDULED  # only late: it fires as scheduled, the rest are missed
    elif due.catch_up and not caught_up and now - latest <= due.catch_up_window:
        reason = Reason.CATCH_UP
    elif isinstance(spec, timing.Clocked) and now - latest <= one_off_window:
        return Fire(latest, Reason.SCHEDULED, next_fire, late=now - latest)
    else:
        return Miss(missed, next_fire)
    before = _slots(spec, since, latest - dt.timedelta(microseconds=1))
    return Fire(latest, reason, next_fire, missed=before)


def _slots(
    spec: timing.Crontab | timing.Clocked | timing.Solar, since: dt.datetime, until: dt.datetime
) -> MissedRange | None:
    """The slots in (since, until] as a range, or None when there is none; counting stops at
    ``MAX_MISSED_COUNT``."""
    last = timing.latest_slot(spec, since, until)
    if last is None:
        return None
    count = 0
    first = last
    for slot in timing.slots_between(spec, since, until):
        if count == 0:
            first = slot
        count += 1
        if count >= MAX_MISSED_COUNT:
            break
    return MissedRange(count, first, last)


# --- a fire while runs are in flight (R14, R34) ---------------------------------------------


class Step(enum.StrEnum):
    """What the claim does with a slot that is due, given the runs of its schedule in flight."""

    FIRE = "fire"  #: send the slot
    SKIP = "skip"  #: record it skipped, with the run(s) in flight that held it
    BUFFER = "buffer"  #: keep it; it is sent when the run in flight ends
    #: send the kept slot (its run ended) and keep this one behind it
    RELEASE_AND_BUFFER = "release_and_buffer"
    RELEASE = "release"  #: the run ended: send the kept slot
    #: the move of a run's end, with a run still in flight (or nothing kept): move on to
    #: the next slot, keeping what is kept
    HOLD = "hold"
    REPLACE = "replace"  #: revoke the runs in flight (they end ``replaced``), send the slot


def overlap_step(due: Due, reason: str, in_flight: int) -> Step:
    """R14, R34: a due slot of ``due`` (fired for ``reason``) while ``in_flight`` of its runs
    are alive (``claims`` counts them: started on a live worker, or sent within the no-news
    bound)."""
    kept = due.buffered_slot is not None and due.overlap == Overlap.BUFFER_ONE
    if reason == Reason.BUFFERED:
        return Step.RELEASE if kept and not in_flight else Step.HOLD
    if due.overlap == Overlap.SKIP:
        return Step.SKIP if in_flight else Step.FIRE
    if due.overlap == Overlap.REPLACE:
        return Step.REPLACE if in_flight else Step.FIRE
    if due.overlap == Overlap.BUFFER_ONE:
        if in_flight:
            return Step.SKIP if kept else Step.BUFFER
        return Step.RELEASE_AND_BUFFER if kept else Step.FIRE
    bound = due.max_in_flight  # allow
    return Step.SKIP if bound and in_flight >= bound else Step.FIRE


# --- is an earlier run still alive? (R14, R15, R22) ---------------------------------------


@dataclass(frozen=True)
class StartedRun:
    """What the reclaim decision needs to know of one started run."""

    started_at: dt.datetime
    worker: str
    worker_pid: int | None
    hard_time_limit: float | None


def reclaim_reason(
    run: StartedRun,
    worker_seen_at: dt.datetime | None,
    now: dt.datetime,
    dead_after: dt.timedelta,
    margin: dt.timedelta,
) -> str | None:
    """Why ``run`` is dead, or None when there is no evidence that it is (R15). A hard
    limit that is no number of seconds (infinite, NaN, negative: written around the worker)
    counts as none."""
    limit = hard_limit(run.hard_time_limit)
    if limit is not None and now > clock.shift(clock.shift(run.started_at, limit), margin):
        return (
            f"ran past its hard time limit ({run.hard_time_limit:g} s) plus the reclaim "
            f"margin ({margin.total_seconds():g} s)"
        )
    who = f"worker {run.worker or '?'} (pid {run.worker_pid})"
    if worker_seen_at is None:
        if now - run.started_at > dead_after:
            return f"{who} has written no liveness row since the run started"
        return None
    if now - worker_seen_at > dead_after:
        return f"{who} silent since {worker_seen_at.isoformat(timespec='seconds')}"
    return None


def hard_limit(value: float | None) -> dt.timedelta | None:
    """A run's hard time limit as a duration, or None for no limit: a value that is no
    number of seconds (NaN, zero, negative: written around the worker) is none. One longer
    than a timedelta holds (1e308, infinity) never runs out: ``timedelta.max``, so a longer
    limit is never taken for a shorter one."""
    if value is None or math.isnan(value) or value <= 0:
        return None
    try:
        return dt.timedelta(seconds=value)
    except OverflowError:  # more seconds than a timedelta holds
        return dt.timedelta.max


def no_news_bound(
    expire_seconds: float | None, no_news_after: dt.timedelta, countdown: float | None = None
) -> dt.timedelta:
    """How long after its publish a run with no worker news still counts as on its way
    (R22): ``no_news_after`` after the message's ETA (its publish, or its publish plus the
    schedule's ``countdown``, R25: no worker starts it before), or the message's expiry
    when that is sooner (past it, no worker will start the message)."""
    bound = no_news_after
    if countdown is not None and countdown > 0:
        bound += dt.timedelta(seconds=countdown)
    if expire_seconds is not None and 0 < expire_seconds < bound.total_seconds():
        return dt.timedelta(seconds=expire_seconds)
    return bound


def news_overdue(sent_at: dt.datetime, bound: dt.timedelta, now: dt.datetime) -> bool:
    """A claimed or published run whose worker news is overdue: it no longer blocks."""
    return now - sent_at > bound
