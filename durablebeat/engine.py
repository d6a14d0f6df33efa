"""The beat loop's logic, one ``tick(now)`` at a time, with time passed in.

``schedulers.DurableScheduler`` adapts this to Celery; tests drive it directly with a fake
publisher and moved time. While the database answers, the database decides everything
(SPEC §1). While it does not, beat keeps firing the code-defined schedules from memory and
writes what it did once the database is back (R5, fail open).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import logging
import os
import socket
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from django.db import DatabaseError, close_old_connections, connection, transaction

from . import clock, conf, ledger, notify, recovery, timing
from .codesync import CodeEntry
from .codesync import sync as sync_code
from .enums import Reason
from .policy import Defer, Due, Fire, Miss, decide

logger = logging.getLogger("durablebeat")

Publisher = Callable[[ledger.Claim], None]
#: a context in which publishes are buffered and sent together on a clean exit (kombu's
#: ``Producer.batch``); its exit raises when the buffered messages could not be sent
PublishBatch = Callable[[], contextlib.AbstractContextManager[Any]]
#: claims published per batch: the first message of a burst waits for this many, the
#: broker sees one round trip for them
PUBLISH_GROUP = 200
#: the first batch of a burst (then ``DURABLEBEAT_BATCH_SIZE``): its slots wait for one
#: small claim instead of a thousand
FIRST_BATCH = 10
#: hooks run by the loop while the database answers, e.g. orphan reclaim (R15)
Hook = Callable[["Engine", dt.datetime], None]


@dataclass
class _Planned:
    """A code-defined schedule as beat remembers it, for firing while the database is down."""

    entry: CodeEntry
    next_fire_at: dt.datetime | None
    reason: str = Reason.SCHEDULED


@dataclass
class _OutageFire:
    schedule: str
    slot: dt.datetime
    reason: str
    task_id: str
    published_at: dt.datetime | None
    next_fire_at: dt.datetime | None


@dataclass
class Engine:
    code_entries: list[CodeEntry]
    publish: Publisher
    publish_batch: PublishBatch = contextlib.nullcontext
    boot_id: uuid.UUID = field(default_factory=uuid.uuid4)
    hostname: str = field(default_factory=socket.gethostname)
    pid: int = field(default_factory=os.getpid)
    hooks: list[Hook] = field(default_factory=list)

    db_ok: bool = False
    booted: bool = False
    caught_up: set[int] = field(default_factory=set)
    plan: dict[str, _Planned] = field(default_factory=dict)
    outage_fires: list[_OutageFire] = field(default_factory=list)
    retries: recovery.Retries = field(default_factory=recovery.Retries)
    #: when ``recovery.resend_in_doubt`` last looked for in-doubt claims
    in_doubt_looked_at: dt.datetime | None = None
    _last_db_try: dt.datetime | None = None
    _last_heartbeat: dt.datetime | None = None
    _db_failures: int = 0
    _bad_logged: set[tuple[int, str]] = field(default_factory=set)
    #: since when every tick has found a full batch due (a burst larger than one batch)
    _backlog_since: dt.datetime | None = None

    # --- the loop ---------------------------------------------------------------------

    def tick(self, now: dt.datetime) -> float:
        """Do what is due at ``now``; return seconds until beat should look again."""
        clock.check_aware(now, "now")
        s = conf.settings
        if not self.db_ok:
            retry = self._last_db_try is None or now - self._last_db_try >= s.DB_RETRY_INTERVAL
            if retry:
                self._connect(now)
        if self.db_ok:
            try:
                return self._tick_db(now)
            except DatabaseError as exc:
                self._lost_db(now, exc)
        return self._tick_memory(now)

    def close(self, now: dt.datetime) -> None:
        if self.db_ok:
            try:
                ledger.stop_boot(self.boot_id, now)
            except DatabaseError:
                logger.warning("could not record beat stop", exc_info=True)

    # --- with the database -------------------------------------------------------------

    def _connect(self, now: dt.datetime) -> None:
        self._last_db_try = now
        try:
            close_old_connections()
            connection.ensure_connection()
            notify.mark_beat_session()  # this beat's own writes wake no beat
            ledger.register_boot(self.boot_id, self.hostname, self.pid, now)
            sync_code(self.code_entries, now)
            self._reconcile_outage(now)
        except DatabaseError as exc:
            connection.close()
            if self.plan == {} and not self.booted:
                self._plan_from_code(now)
            self.db_ok = False
            self._db_failures += 1
            if self._db_failures == 1 or self._db_failures % 30 == 0:
                logger.error(
                    "database unreachable (%d tries), firing code-defined schedules from "
                    "memory: %s",
                    self._db_failures,
                    exc,
                    extra={"event": "db_unreachable", "boot": str(self.boot_id)},
                )
            return
        self._db_failures = 0
        self.db_ok, self.booted, self._last_heartbeat = True, True, now
        self.plan = {e.name: _Planned(e, None) for e in self.code_entries}
        self._refresh_plan()
        logger.info(
            "beat boot %s on %s:%d: database reachable, %d code schedules synced",
            self.boot_id,
            self.hostname,
            self.pid,
            len(self.code_entries),
            extra={"event": "boot", "boot": str(self.boot_id)},
        )

    def _lost_db(self, now: dt.datetime, exc: Exception) -> None:
        self.db_ok = False
        self._last_db_try = now
        with contextlib.suppress(DatabaseError):
            connection.close()
        logger.error(
            "database error, firing code-defined schedules from memory until it answers: %s",
            exc,
            extra={"event": "db_lost", "boot": str(self.boot_id)},
        )

    def _tick_db(self, now: dt.datetime) -> float:
        s = conf.settings
        if self._last_heartbeat is None or now - self._last_heartbeat >= s.HEARTBEAT_INTERVAL:
            if not ledger.heartbeat(self.boot_id, now):
                ledger.register_boot(self.boot_id, self.hostname, self.pid, now)
            self._last_heartbeat = now
            self._refresh_plan()
        if self.retries:
            self.retries.run(self, now)
        recovery.resend_in_doubt(self, now)
        for hook in self.hooks:
            hook(self, now)
        horizon = now + dt.timedelta(seconds=s.MAX_INTERVAL)
        # A burst starts with a small batch, so that its first slots go out at once, and
        # goes on in full ones.
        limit = s.BATCH_SIZE if self._backlog_since is not None else min(s.BATCH_SIZE, FIRST_BATCH)
        fires: list[tuple[Due, Fire, ledger.Message]] = []
        claims: list[ledger.Claim] = []
        try:
            # One transaction per batch: the due rows are read (and, on PostgreSQL, locked:
            # another beat takes the next batch), decided, and the whole batch claimed.
            with transaction.atomic():
                rows = ledger.fetch_due(now, horizon, limit, lock=True)
                wake = self._decide(rows, now, fires)
                if fires:
                    claims = ledger.claim(fires, self.boot_id, now)
        except DatabaseError as exc:
            if not fires:
                raise
            # R5: the claim write failed; the slots still go out, the ledger catches up later.
            self._fire_unclaimed(fires, now, exc)
            return 0.0
        if fires:
            self._publish(fires, claims, now)
        if len(rows) >= limit and (rows[-1].next_fire_at is None or rows[-1].next_fire_at <= now):
            # A full batch of due slots: there may be more behind it. (A full batch whose
            # last row is still to come is not a backlog: beat sleeps until its first.)
            self._backlog_since = self._backlog_since or now
            return 0.0
        self._backlog_since = None
        retry_at = self.retries.next_wake()
        if retry_at is not None:
            wake = retry_at if wake is None else min(wake, retry_at)
        if wake is None:
            return s.MAX_INTERVAL
        return max(0.0, min(s.MAX_INTERVAL, (wake - now).total_seconds()))

    def _decide(
        self,
        rows: list[Any],
        now: dt.datetime,
        fires: list[tuple[Due, Fire, ledger.Message]],
    ) -> dt.datetime | None:
        """Sort the batch: what fires now goes into ``fires``; defers and misses are written
        at once. Returns the earliest next fire seen, to sleep until."""
        late_after = conf.settings.LATE_AFTER
        if self._backlog_since is not None:
            # A burst bigger than one batch: its last slots are late because this beat was
            # busy firing the first ones, not because no beat ran (R7, R8); they fire as
            # scheduled instead of taking a startup grace or being counted as missed.
            late_after += now - self._backlog_since
        wake: dt.datetime | None = None
        for row in rows:
            if row.next_fire_at is not None and row.next_fire_at > now:
                wake = row.next_fire_at if wake is None else min(wake, row.next_fire_at)
                continue
            try:
                due = ledger.due_from_row(row)
                message = ledger.Message.for_row(row)
                action = decide(due, now, late_after, due.id in self.caught_up)
            except (timing.InvalidSchedule, ValueError) as exc:
                self._bad_row(row, str(exc))
                continue
            if isinstance(action, Fire):
                fires.append((due, action, message))
            elif isinstance(action, Defer):
                if ledger.apply_defer(due, action) and action.next_fire_at is not None:
                    wake = action.next_fire_at if wake is None else min(wake, action.next_fire_at)
            elif isinstance(action, Miss):
                ledger.apply_miss(due, action, self.boot_id, now)
        return wake

    def _fire_unclaimed(
        self, fires: list[tuple[Due, Fire, ledger.Message]], now: dt.datetime, exc: Exception
    ) -> None:
        """R5: the database failed at the claim: publish anyway, write the ledger later."""
        self._lost_db(now, exc)
        for due, fire, message in fires:
            claim = ledger.Claim(
                None,
                str(uuid.uuid4()),
                due.id,
                due.name,
                fire.slot,
                fire.reason,
                self.boot_id,
                message,
            )
            published = self.try_publish(claim, now) is None
            self.outage_fires.append(
                _OutageFire(
                    due.name,
                    fire.slot,
                    fire.reason,
                    claim.task_id,
                    now if published else None,
                    fire.next_fire_at,
                )
            )
            if due.name in self.plan:
                self.plan[due.name].next_fire_at = fire.next_fire_at

    def _publish(
        self,
        fires: list[tuple[Due, Fire, ledger.Message]],
        claims: list[ledger.Claim],
        now: dt.datetime,
    ) -> None:
        """Publish what was claimed, after commit (R3), ``PUBLISH_GROUP`` claims per broker
        round trip; one write confirms what went out."""
        by_id = {due.id: (due, fire) for due, fire, _ in fires}
        for due, fire in by_id.values():
            if fire.reason == Reason.CATCH_UP:
                self.caught_up.add(due.id)
        for claim in claims:
            planned = self.plan.get(claim.schedule)
            if planned is not None:
                planned.next_fire_at = by_id[claim.schedule_id or 0][1].next_fire_at
        published: list[int] = []
        error: str | None = None
        for start in range(0, len(claims), PUBLISH_GROUP):
            group = claims[start : start + PUBLISH_GROUP]
            sent: list[ledger.Claim] = []
            if error is None:
                sent, error = self._send_group(group)
            for claim in group[len(sent) :]:
                # Not sent (the broker refused it, or one before it): keep it claimed and
                # retry while it is worth sending (recovery.Retries) instead of dropping it.
                due, fire = by_id[claim.schedule_id or 0]
                give_up = recovery.give_up_at(
                    fire.slot, fire.next_fire_at, due.catch_up, due.catch_up_window
                )
                self.retries.add(claim, give_up, now, error or "not sent")
            for claim in sent:
                self._log_fire(claim)
                if claim.run_id is not None:
                    published.append(claim.run_id)
        ledger.mark_published(published, now)

    def _send_group(self, group: list[ledger.Claim]) -> tuple[list[ledger.Claim], str | None]:
        """Send claims in one batch; returns those sent, and the error that stopped the
        rest. A batch whose sending failed counts as not sent: it is retried (kombu cannot
        say which of its messages the broker took)."""
        sent: list[ledger.Claim] = []
        error: str | None = None
        try:
            with self.publish_batch():
                for claim in group:
                    error = self._send(claim)
                    if error is not None:
                        break
                    sent.append(claim)
        except Exception as exc:  # the batch's send at its exit
            cause = f" ({exc.__cause__})" if exc.__cause__ is not None else ""
            error = f"{type(exc).__name__}: {exc}{cause}"
            logger.error(
                "publish of a batch of %d failed: %s",
                len(sent),
                error,
                extra={"event": "publish_failed", "count": len(sent)},
            )
            sent = []
        return sent, error

    def try_publish(self, claim: ledger.Claim, now: dt.datetime) -> str | None:
        """Publish one claim; the broker's error as text, or None when it went out."""
        error = self._send(claim)
        if error is None:
            self._log_fire(claim)
        return error

    def _send(self, claim: ledger.Claim) -> str | None:
        try:
            self.publish(claim)
        except Exception as exc:  # the broker's errors are many; beat must not die of any
            logger.error(
                "publish failed schedule=%s slot=%s: %s",
                claim.schedule,
                claim.slot.isoformat(),
                exc,
                extra={"event": "publish_failed", "schedule": claim.schedule},
            )
            return f"{type(exc).__name__}: {exc}"
        return None

    @staticmethod
    def _log_fire(claim: ledger.Claim) -> None:
        logger.info(
            "fire schedule=%s slot=%s reason=%s boot=%s task_id=%s",
            claim.schedule,
            claim.slot.isoformat(),
            claim.reason,
            claim.boot_id,
            claim.task_id,
            extra={
                "event": "fire",
                "schedule": claim.schedule,
                "slot": claim.slot.isoformat(),
                "reason": claim.reason,
                "boot": str(claim.boot_id),
            },
        )

    def _bad_row(self, row: object, message: str) -> None:
        from .models import Schedule

        assert isinstance(row, Schedule)
        key = (row.pk, message)
        if key not in self._bad_logged:
            self._bad_logged.add(key)
            logger.error(
                "schedule %s is invalid and is skipped (other schedules keep firing): %s",
                row.name,
                message,
                extra={"event": "bad_schedule", "schedule": row.name},
            )
        ledger.mark_bad(row, message)

    def _refresh_plan(self) -> None:
        """Keep the memory of code schedules close to the database, for an outage: a
        schedule disabled or set aside as bad there is not fired from memory either."""
        from .models import Schedule

        stored = Schedule.objects.filter(name__in=list(self.plan)).values_list(
            "name", "next_fire_at", "next_fire_reason", "enabled", "error"
        )
        for name, next_fire_at, reason, enabled, error in stored:
            planned = self.plan[name]
            planned.next_fire_at = next_fire_at if enabled and not error else None
            planned.reason = reason

    def _reconcile_outage(self, now: dt.datetime) -> None:
        done = 0
        while self.outage_fires:
            f = self.outage_fires[0]
            ledger.reconcile_outage_fire(
                f.schedule,
                f.slot,
                f.reason,
                f.task_id,
                f.published_at,
                f.next_fire_at,
                self.boot_id,
                now,
            )
            self.outage_fires.pop(0)  # written: not again if the database drops mid-way
            done += 1
        if done:
            logger.info(
                "ledger reconciled after database outage: %d fires written",
                done,
                extra={"event": "outage_reconciled", "count": done},
            )
        # Each fire moved its schedule's next fire on (never back); a schedule that did not
        # fire keeps what is stored, even when memory planned a grace at a boot without the
        # database.

    # --- without the database ----------------------------------------------------------

    def _plan_from_code(self, now: dt.datetime) -> None:
        """R5 at boot: code entries only; intervals at now + grace, others at their next slot."""
        for e in self.code_entries:
            if isinstance(e.spec, timing.Interval):
                grace = (
                    e.startup_grace if e.startup_grace is not None else conf.settings.STARTUP_GRACE
                )
                self.plan[e.name] = _Planned(e, now + grace, Reason.STARTUP_GRACE)
            else:
                self.plan[e.name] = _Planned(e, timing.next_slot(e.spec, now))

    def _tick_memory(self, now: dt.datetime) -> float:
        s = conf.settings
        wake = now + dt.timedelta(seconds=s.MAX_INTERVAL)
        retry_at = (self._last_db_try or now) + s.DB_RETRY_INTERVAL
        wake = min(wake, retry_at)
        for name, planned in self.plan.items():
            slot = planned.next_fire_at
            if slot is None:
                continue
            if slot > now:
                wake = min(wake, slot)
                continue
            e = planned.entry
            message = ledger.Message.for_entry(e)
            claim = ledger.Claim(
                None, str(uuid.uuid4()), None, name, slot, planned.reason, self.boot_id, message
            )
            published = self.try_publish(claim, now) is None
            planned.next_fire_at = timing.advance(e.spec, slot, now)
            planned.reason = Reason.SCHEDULED
            self.outage_fires.append(
                _OutageFire(
                    name,
                    slot,
                    claim.reason,
                    claim.task_id,
                    now if published else None,
                    planned.next_fire_at,
                )
            )
            if planned.next_fire_at is not None:
                wake = min(wake, planned.next_fire_at)
        return max(0.0, (wake - now).total_seconds())
