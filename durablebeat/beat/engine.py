"""The beat loop's logic, one ``tick(now)`` at a time, with time passed in.

``schedulers.DurableScheduler`` adapts this to Celery; tests drive it directly with a fake
publisher and moved time. While the database answers, the database decides everything
(§1). While it does not, beat keeps firing the code-defined schedules from memory
(``outage.OutageMemory``) and writes what it did once the database is back (R5, fail open).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import logging
import os
import socket
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import InitVar, dataclass, field

from django.db import DatabaseError

from .. import conf, db
from ..core import clock, timing
from ..enums import Kind, Reason
from ..validation import known_task_names
from . import dberrors, dispatch, publishing
from . import due as due_query
from .claims import claim_or_split, mark_published
from .codesync import CodeEntry
from .due import describe_row_error, is_row_error
from .hooks import after_due_hooks, default_hooks
from .loop import Hook, Refused
from .messages import Claim, Message, ToFire, new_task_id
from .outage import OutageMemory
from .retries import Retries, give_up_at
from .session import Session
from .triage import Triage

logger = logging.getLogger("durablebeat")

#: the first batch of a burst (then ``DURABLEBEAT_BATCH_SIZE``): its slots wait for one
#: small claim instead of a thousand
FIRST_BATCH = 10
#: the shortest sleep ``tick`` returns when it fired nothing (R21): a row that cannot be
#: moved on, or a setting of zero, never turns the loop into a busy one
MIN_SLEEP = 0.1
#: the shortest sleep until a slot still ahead: a sub-second interval (Celery's beat runs
#: ``schedule=0.5`` twice a second) wakes for each of its own slots (R25); a wake that is
#: not ahead sleeps ``MIN_SLEEP`` (R21)
MIN_WAKE = 0.001
#: the shortest sleep ahead that makes room for the work after the due work (its rounds
#: take at most ``retention.ROUND_SECONDS``)
AFTER_DUE_MIN_SLEEP = 0.5
#: R33: the fill of rows without a next fire, after the due work: rows per slice (one
#: transaction), the time a round of slices may take (at most half the sleep ahead), and
#: the shortest sleep ahead that makes room for one
FILL_SLICE = 25
FILL_SECONDS = 0.05
FILL_MIN_SLEEP = 0.05


@dataclass
class Engine:
    """The beat loop. Its public surface: ``tick`` and ``close`` for the scheduler; for its
    hooks (``loop.Loop``) ``boot_id``, ``try_publish``, ``unpublishable``, ``retry_later``
    and ``set_aside``. The rest is its own state, touched by nothing outside this module."""

    code_entries: list[CodeEntry]
    #: the broker side, handed to the engine's ``Dispatcher`` (``dispatch.py``)
    publish: InitVar[dispatch.Publisher]
    publish_batch: InitVar[dispatch.PublishBatch] = contextlib.nullcontext
    #: R34: revokes what an ``overlap=replace`` slot replaced (``dispatch.Revoker``)
    revoke: InitVar[dispatch.Revoker | None] = None
    boot_id: uuid.UUID = field(default_factory=uuid.uuid4)
    hostname: str = field(default_factory=socket.gethostname)
    pid: int = field(default_factory=os.getpid)
    #: run in order after the publish retries while the database answers (``hooks``)
    hooks: list[Hook] = field(default_factory=default_hooks)
    #: run after a tick's due work when beat is about to sleep (``hooks.after_due_hooks``)
    after_due: list[Hook] = field(default_factory=after_due_hooks)
    #: the exceptions that mean "the broker is unreachable" (``publishing.broker_errors``)
    broker_errors: InitVar[tuple[type[BaseException], ...]] = publishing.BROKER_UNAVAILABLE
    #: R26: measures this host's offset to the database's clock (``dbclock.sync``) and
    #: returns it in seconds for the boot row; None (the default, for tests that drive
    #: ``tick`` with their own instants): no measurement, nothing recorded
    sync_clock: InitVar[Callable[[], float | None] | None] = None
    #: the scheduler's: called once a batch is claimed, before the claim commits. A tick
    #: the scheduler runs ahead of the clock (``schedulers.LEAD``) waits there for its
    #: instant, so that a claim is never committed before its slot and its publish follows
    #: the commit at once (R3: a beat stopped in between leaves the slot in doubt, R9)
    hold: Callable[[], None] | None = None

    #: the code schedules and the fires sent while the database is down (R5)
    memory: OutageMemory = field(default_factory=OutageMemory)
    retries: Retries = field(default_factory=Retries)
    #: since when every tick has found a full batch due (a burst larger than one batch)
    _backlog_since: dt.datetime | None = None
    #: where the fill of rows without a next fire is (a primary key; 0: from the start)
    _fill_after: int = 0
    #: rows the fill's current pass (from the first key to the table's end) moved on
    _fill_moved: int = 0
    #: the seconds a row of the last slice took to fill (sizes the next slice)
    _fill_row_seconds: float = 0.0
    #: the boot, the reconnects and the heartbeat (R5, R17, R23, R26)
    session: Session = field(init=False)
    #: decides each batch of due rows; sets bad rows aside (R21)
    triage: Triage = field(init=False)
    #: what puts claims on the broker (R3, R5, R21, R25)
    dispatcher: dispatch.Dispatcher = field(init=False)

    def __post_init__(
        self,
        publish: dispatch.Publisher,
        publish_batch: dispatch.PublishBatch,
        revoke: dispatch.Revoker | None,
        broker_errors: tuple[type[BaseException], ...],
        sync_clock: Callable[[], float | None] | None,
    ) -> None:
        self.session = Session(
            self.boot_id, self.hostname, self.pid, self.code_entries, self.memory, sync_clock
        )
        customs = {e.name: e.spec for e in self.code_entries if isinstance(e.spec, timing.Custom)}
        self.triage = Triage(self.boot_id, customs, known_task_names())
        for entry in self.code_entries:  # R29: said once, at boot; sent by name all the same
            self.triage.say_unregistered(entry.name, entry.task, "beat_schedule's entry")
        live = {e.name: e.live for e in self.code_entries if e.live is not None}
        self.dispatcher = dispatch.Dispatcher(publish, publish_batch, broker_errors, live, revoke)

    @property
    def db_ok(self) -> bool:
        """The database answered the last tick (else beat fires from memory, R5)."""
        return self.session.ok

    # --- the loop ---------------------------------------------------------------------

    def tick(self, now: dt.datetime, woken_on_change: bool = False) -> float:
        """Do what is due at ``now``; return seconds until beat should look again.

        ``woken_on_change``: the caller sleeps on a channel that a schedule change wakes
        (LISTEN, the broker's wake-up), so with nothing due beat need not poll every
        ``MAX_INTERVAL``: it sleeps until the next due slot or its next heartbeat."""
        clock.check_aware(now, "now")
        session = self.session
        if not session.ok and session.retry_due(now):
            now = session.connect(now)
        if session.ok:
            try:
                return self._tick_db(now, woken_on_change)
            except DatabaseError as exc:
                session.lost(now, exc)
        return self._tick_memory(now)

    def close(self, now: dt.datetime) -> None:
        self.session.close(now)

    # --- with the database -------------------------------------------------------------

    def _tick_db(self, now: dt.datetime, woken_on_change: bool) -> float:
        s = conf.settings
        if self.retries:
            self._run_hook(self.retries.run, now)
        for hook in self.hooks:
            self._run_hook(hook, now)
        # A burst starts with a small batch, so that its first slots go out at once, and
        # goes on in full ones.
        limit = s.BATCH_SIZE if self._backlog_since is not None else min(s.BATCH_SIZE, FIRST_BATCH)
        limit = max(1, limit)
        fires: tuple[ToFire, ...] = ()
        claims: list[Claim] = []
        try:
            # One transaction per batch: the due rows are read (and, on PostgreSQL, locked:
            # another beat takes the next batch), decided, and the whole batch claimed. The
            # heartbeat rides in it: an idle beat commits once per heartbeat, not five times.
            with db.atomic():
                now = self.session.heartbeat(now)
                # How long beat may sleep when nothing is due (and how far ahead it looks
                # for what is): until its next heartbeat when a change wakes it anyway (R17:
                # never more than an interval between two), else the polling bound.
                idle = s.MAX_INTERVAL
                if woken_on_change:
                    idle = max(MIN_SLEEP, self.session.next_heartbeat_in(now))
                horizon = now + dt.timedelta(seconds=idle)
                rows, first = due_query.read_due(horizon, limit)
                # R33: rows without a next fire wait for the due work (``_fill``); asked
                # here, in the due transaction, so an idle tick costs no more statements
                unfilled = due_query.has_unfilled()
                decided = self.triage.decide(rows, now, self._late_after(now))
                fires, wake = decided.fires, decided.wake
                seen = rows[0].next_fire_at if rows else None
                if first is not None and (seen is None or first < seen):
                    # R4: a row another beat holds was passed over (SKIP LOCKED): look again
                    # when it is due, not at the next heartbeat, so that this beat takes its
                    # slots at once should that beat die holding them (an interval's slots
                    # in between were never fired, nor counted)
                    wake = first if wake is None else min(wake, first)
                if decided.interrupted is not None:
                    raise decided.interrupted
                if fires:
                    claimed = claim_or_split(fires, self.boot_id, now)
                    claims = claimed.claims
                    for due, exc in claimed.refused:  # R21: set aside, the rest is claimed
                        self.set_aside(due.id, due.name, describe_row_error(exc))
                    if claims and self.hold is not None:
                        self.hold()
        except DatabaseError as exc:
            if not fires or dberrors.will_recur(exc):
                raise
            # R5: the claim write failed; the slots still go out, the ledger catches up later.
            self._fire_unclaimed(fires, now, exc)
            return 0.0
        claimed_ids = {c.schedule_id for c in claims}
        for f in fires:
            if f.due.id not in claimed_ids:
                # Skipped (R14) or another beat's (R4): the row moved on all the same, and so
                # does memory, which would otherwise fire that slot if the database went away
                # before the next heartbeat refreshes it (R5).
                self.memory.moved_on(f.due.name, f.fire.following)
        if claims:
            # The first batch of a burst, or of any tick: its first message leaves at once.
            self._publish(fires, claims, now, first_alone=self._backlog_since is None)
        last = rows[-1].next_fire_at if rows else None
        if len(rows) >= limit and last is not None and last <= now:
            # A full batch of due slots: there may be more behind it. (A full batch whose
            # last row is still to come is not a backlog: beat sleeps until its first.)
            self._backlog_since = self._backlog_since or now
            # R21: straight on only when this batch fired; a batch that fired nothing (all
            # deferred, set aside, or taken by another beat) never makes a busy loop.
            return 0.0 if claims else MIN_SLEEP
        self._backlog_since = None
        retry_at = self.retries.next_wake()
        if retry_at is not None:
            wake = retry_at if wake is None else min(wake, retry_at)
        delay = max(MIN_SLEEP, idle) if wake is None else sleep_until(wake, now, idle)
        if unfilled:
            delay = self._fill(now, delay)
        return self._after_due(now, delay)

    def _fill(self, now: dt.datetime, delay: float) -> float:
        """R33: rows without a next fire (a raw SQL insert, a custom schedule, a new
        interval written while no beat ran), decided as the due rows are, after the due
        work: slices of at most ``FILL_SLICE`` rows for at most ``FILL_SECONDS`` (or half
        the sleep ahead), each slice in a transaction of its own and sized to the time
        left, so the next slot does not wait on one. Returns the sleep: sooner when a
        filled row is due sooner, and none when rows are left and this round moved some on
        (the next tick's due work comes first, then the next slice). Walks the table by
        primary key, so a row it cannot move on (another code's custom schedule, R25) is
        passed, not re-read."""
        if delay < FILL_MIN_SLEEP:
            return delay
        started = time.monotonic()
        budget = min(FILL_SECONDS, delay / 2)
        wake: dt.datetime | None = None
        moved = 0
        while True:
            fires: tuple[ToFire, ...] = ()
            claims: list[Claim] = []
            # a slice sized to the time left, by what a row took so far (a loaded machine
            # takes longer per row: the slice shrinks, the next slot does not wait)
            per_row, left = self._fill_row_seconds, budget - (time.monotonic() - started)
            size = FILL_SLICE if not per_row else max(1, min(FILL_SLICE, int(left / per_row)))
            sliced = time.monotonic()
            after = self._fill_after
            with db.atomic():
                rows = due_query.fetch_unfilled(after, size, lock=True)
                decided = self.triage.decide(rows, now, self._late_after(now))
                fires = decided.fires
                if decided.wake is not None:
                    wake = decided.wake if wake is None else min(wake, decided.wake)
                if decided.interrupted is not None:
                    raise decided.interrupted
                if fires:
                    claimed = claim_or_split(fires, self.boot_id, now)
                    claims = claimed.claims
                    for due, exc in claimed.refused:
                        self.set_aside(due.id, due.name, describe_row_error(exc))
            if claims:
                self._publish(fires, claims, now)
            if rows:
                self._fill_row_seconds = (time.monotonic() - sliced) / len(rows)
            customs = self.triage.customs
            slice_moved = sum(1 for r in rows if r.kind != Kind.CUSTOM or r.name in customs)
            moved += slice_moved
            self._fill_moved += slice_moved
            more = True
            if len(rows) < size:
                # the end of the table: start over, for the rows that lost their next fire
                # behind the slices, unless this pass started there or moved none on (rows
                # beat cannot move on, R25: the next pass waits for the next tick, R21)
                more = bool(after) and self._fill_moved > 0
                self._fill_after, self._fill_moved = 0, 0
            else:
                self._fill_after = max(row.pk for row in rows)
            if not more or time.monotonic() - started >= budget:
                break
        if wake is not None:
            delay = min(delay, sleep_until(wake, now, delay))
        if more and (moved or not self._fill_after):
            # more to fill (or a pass that moved rows on to start over): straight on, after
            # the next tick's due work; a round or a pass that moves nothing on sleeps (R21)
            return 0.0
        return delay

    def _after_due(self, now: dt.datetime, delay: float) -> float:
        """Work that may wait (the retention's pruning, R32): after the due work, and only
        when beat is about to sleep at least ``AFTER_DUE_MIN_SLEEP``. The scheduler counts
        the sleep from the tick's instant (``schedulers``), so its time comes off the sleep
        and no fire waits for it."""
        if delay >= AFTER_DUE_MIN_SLEEP:
            for hook in self.after_due:
                self._run_hook(hook, now)
        return delay

    def _run_hook(self, hook: Hook, now: dt.datetime) -> None:
        """A hook that fails for its own reasons is logged; firing goes on (R21). A database
        error that is not about one row's values is the database's: R5's path."""
        try:
            hook(self, now)
        except Exception as exc:
            if not is_row_error(exc):
                raise
            logger.exception(
                "beat hook %s failed: %s",
                getattr(hook, "__name__", type(hook).__name__),
                exc,
                extra={"event": "hook_failed", "boot": str(self.boot_id)},
            )

    def _late_after(self, now: dt.datetime) -> dt.timedelta:
        late_after = conf.settings.LATE_AFTER
        if self._backlog_since is not None:
            # A burst bigger than one batch: its last slots are late because this beat was
            # busy firing the first ones, not because no beat ran (R7, R8); they fire as
            # scheduled instead of taking a startup grace or being counted as missed.
            late_after += now - self._backlog_since
        return late_after

    def _fire_unclaimed(self, fires: Sequence[ToFire], now: dt.datetime, exc: Exception) -> None:
        """R5: the database failed at the claim: publish anyway, write the ledger later."""
        self.session.lost(now, exc)
        for f in fires:
            due, fire = f.due, f.fire
            task_id, published_at = self._send_unrecorded(
                due.id, due.name, fire.slot, fire.reason, f.message, now
            )
            self.memory.sent_unclaimed(f, task_id, published_at, now)

    def _send_unrecorded(
        self,
        schedule_id: int | None,
        name: str,
        slot: dt.datetime,
        reason: str,
        message: Message,
        now: dt.datetime,
    ) -> tuple[str, dt.datetime | None]:
        """R5: publish a slot that has no run in the ledger (the database is down); its task
        id, and when it went out (None: it did not), for the outage memory to write later."""
        claim = Claim(
            run_id=None,
            task_id=new_task_id(),
            schedule_id=schedule_id,
            schedule=name,
            slot=slot,
            reason=reason,
            boot_id=self.boot_id,
            message=message,
        )
        published = self.try_publish(claim, now) is None
        return claim.task_id, now if published else None

    def _publish(
        self,
        fires: Sequence[ToFire],
        claims: list[Claim],
        now: dt.datetime,
        first_alone: bool = False,
    ) -> None:
        """Publish what was claimed, after commit (R3); one write confirms what went out. A
        message refused for its own content fails its slot only (R21); a broker outage
        keeps the unsent claims for retry (R5)."""
        by_id = {f.due.id: f for f in fires}
        for f in fires:
            if f.fire.reason == Reason.CATCH_UP:
                self.triage.caught_up.add(f.due.id)
        for claim in claims:
            self.memory.moved_on(claim.schedule, by_id[claim.schedule_id or 0].fire.following, now)
        out = self.dispatcher.dispatch(claims, first_alone)
        for claim in out.unsent:
            # Not sent (the broker is unreachable): keep it claimed and retry while it is
            # worth sending (``retries``) instead of dropping it.
            unsent = by_id[claim.schedule_id or 0]
            due, fire = unsent.due, unsent.fire
            give_up = give_up_at(fire.slot, fire.following, due.catch_up, due.catch_up_window)
            self.retry_later(claim, give_up, now, out.outage or "not sent")
        mark_published([c.run_id for c in out.sent if c.run_id is not None], now)
        self.unpublishable(out.refused, now)

    def unpublishable(self, refused: list[tuple[Claim, str]], now: dt.datetime) -> None:
        """R21: fail the runs of claims whose message was refused for its own content."""
        dispatch.fail_refused(refused, now)

    def retry_later(
        self, claim: Claim, give_up_at: dt.datetime, now: dt.datetime, error: str
    ) -> None:
        """Keep a claim the broker did not take (R5): retried with backoff until
        ``give_up_at``, then recorded as missed."""
        self.retries.add(claim, give_up_at, now, error)

    def try_publish(self, claim: Claim, now: dt.datetime) -> Refused | None:
        """Publish one claim; why it did not go out, or None when it went out."""
        return self.dispatcher.send_one(claim)

    def set_aside(self, schedule_id: int, name: str, why: str) -> None:
        """R20, R21: set a row aside with its error (``Triage.set_aside``)."""
        self.triage.set_aside(schedule_id, name, why)

    # --- without the database ----------------------------------------------------------

    def _tick_memory(self, now: dt.datetime) -> float:
        """R5: fire the code schedules due in memory; the ledger is written when the
        database is back (``Session.connect``)."""
        for due in self.memory.due(now):
            task_id, published_at = self._send_unrecorded(
                None, due.name, due.slot, due.reason, due.message, now
            )
            self.memory.fired(due, task_id, published_at)
        self.memory.say_dropped(now)
        s = conf.settings
        wake = now + dt.timedelta(seconds=s.MAX_INTERVAL)
        wake = min(wake, (self.session.last_try or now) + s.DB_RETRY_INTERVAL)
        planned = self.memory.next_fire()
        if planned is not None:
            wake = min(wake, planned)
        return sleep_until(wake, now, s.MAX_INTERVAL)


def sleep_until(wake: dt.datetime, now: dt.datetime, most: float) -> float:
    """The sleep until ``wake``, at most ``most`` seconds (``MAX_INTERVAL``): ``MIN_WAKE``
    at least while the wake is ahead, ``MIN_SLEEP`` when it is not (nothing to wait for is
    no reason to spin, R21)."""
    ahead = (wake - now).total_seconds()
    if ahead <= 0:
        return MIN_SLEEP
    return max(MIN_WAKE, min(max(most, MIN_SLEEP), ahead))
