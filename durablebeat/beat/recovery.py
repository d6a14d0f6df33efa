"""Nothing lost when the broker blinks or a beat dies between claim and publish (R9, §2).

Two cases, both about a run that is claimed in the ledger but has no confirmed publish:

- *This boot* could not publish (broker down): the run stays claimed and the message is
  retried with backoff while the slot is still worth sending (delivery: inside its catch-up
  window; housekeeping: until the schedule's next slot), then it is recorded as missed.
- *An earlier boot* claimed it and died before confirming (R9): a delivery slot is re-sent
  once, with the same task id and slot, after ``catch_up_settle`` past the slot and inside
  its window; a housekeeping slot is recorded as missed. A confirmed publish is never re-sent.
"""

from __future__ import annotations

import datetime as dt
import logging
from dataclasses import dataclass

from .. import conf
from ..core import clock
from ..enums import Reason
from ..models import Run
from .claims import in_doubt_runs, mark_missed, mark_published, take_over
from .due import Claim, Message, describe_row_error, is_row_error
from .loop import Loop

logger = logging.getLogger("durablebeat")

FIRST_RETRY = dt.timedelta(seconds=1)
MAX_RETRY = dt.timedelta(seconds=30)
#: how often the loop looks for in-doubt runs of dead boots
IN_DOUBT_EVERY = dt.timedelta(seconds=30)


@dataclass
class PendingPublish:
    claim: Claim
    give_up_at: dt.datetime
    next_try: dt.datetime
    attempts: int = 1
    error: str = ""


class Retries:
    """Claims of this boot whose publish failed, in memory: a restart hands them to R9."""

    def __init__(self) -> None:
        self.pending: dict[str, PendingPublish] = {}

    def __len__(self) -> int:
        return len(self.pending)

    def add(self, claim: Claim, give_up_at: dt.datetime, now: dt.datetime, error: str) -> None:
        self.pending[claim.task_id] = PendingPublish(claim, give_up_at, now + FIRST_RETRY, 1, error)

    def next_wake(self) -> dt.datetime | None:
        return min((p.next_try for p in self.pending.values()), default=None)

    def run(self, loop: Loop, now: dt.datetime) -> None:
        """Try what is due; stop at the first outage (the broker is still down). A message
        refused for its own content fails its slot and the others are still tried (R21)."""
        published: list[int] = []
        refused: list[tuple[Claim, str]] = []
        for key, item in sorted(self.pending.items(), key=lambda kv: kv[1].claim.slot):
            if now >= item.give_up_at:
                self._give_up(loop, item, now)
                del self.pending[key]
                continue
            if item.next_try > now:
                continue
            failure = loop.try_publish(item.claim, now)
            if failure is None:
                if item.claim.run_id is not None:
                    published.append(item.claim.run_id)
                del self.pending[key]
                continue
            if not failure.outage:
                refused.append((item.claim, failure.error))
                del self.pending[key]
                continue
            item.attempts += 1
            item.error = failure.error
            item.next_try = now + min(MAX_RETRY, FIRST_RETRY * 2 ** (item.attempts - 1))
            for other in self.pending.values():  # one failure says the broker is down
                other.next_try = max(other.next_try, item.next_try)
            break
        mark_published(published, now)
        loop.unpublishable(refused, now)

    @staticmethod
    def _give_up(loop: Loop, item: PendingPublish, now: dt.datetime) -> None:
        detail = (
            f"broker unreachable: not published after {item.attempts} attempts ({item.error})"
        )[:300]
        if item.claim.run_id is not None:
            mark_missed([item.claim.run_id], detail, now)
        logger.error(
            "missed schedule=%s slot=%s reason=%s",
            item.claim.schedule,
            item.claim.slot.isoformat(),
            detail,
            extra={"event": "missed", "schedule": item.claim.schedule, "boot": str(loop.boot_id)},
        )


def give_up_at(
    slot: dt.datetime, next_fire_at: dt.datetime | None, delivery: bool, window: dt.timedelta
) -> dt.datetime:
    """How long a slot is worth sending: delivery inside its window, housekeeping until
    its schedule's next slot."""
    if delivery or next_fire_at is None:
        return clock.shift(slot, window)
    return next_fire_at


class InDoubtResend:
    """R9, a loop hook: settle the claims that dead boots left without a confirmed publish,
    looking at most every ``IN_DOUBT_EVERY``."""

    def __init__(self) -> None:
        self.looked_at: dt.datetime | None = None

    def __call__(self, loop: Loop, now: dt.datetime) -> None:
        last = self.looked_at
        if last is not None and now - last < IN_DOUBT_EVERY:
            return
        self.looked_at = now
        for run in in_doubt_runs(loop.boot_id, now):
            try:
                _settle_in_doubt(loop, run, now)
            except Exception as exc:  # R21: one run's values never stop the others
                if not is_row_error(exc):
                    raise
                logger.error(
                    "in-doubt run %s of schedule %s could not be settled: %s: %s",
                    run.pk,
                    run.schedule.name,
                    type(exc).__name__,
                    exc,
                    extra={"event": "in_doubt_failed", "schedule": run.schedule.name},
                )


def _settle_in_doubt(loop: Loop, run: Run, now: dt.datetime) -> None:
    s = conf.settings
    schedule = run.schedule
    window = schedule.catch_up_window or s.CATCH_UP_WINDOW
    if now < clock.shift(run.slot, s.CATCH_UP_SETTLE):
        return  # it may still be on its way: not before the settle time
    old_boot = run.boot_id
    if not schedule.catch_up or now - run.slot > window:
        why = "housekeeping is not re-sent" if not schedule.catch_up else "older than its window"
        detail = f"in doubt: boot {old_boot} died before confirming the publish; {why}"
        mark_missed([run.pk], detail[:300], now)
        logger.warning(
            "missed schedule=%s slot=%s reason=%s",
            schedule.name,
            run.slot.isoformat(),
            detail,
            extra={"event": "missed", "schedule": schedule.name},
        )
        return
    try:
        message = Message.for_row(schedule)
    except Exception as exc:  # R21: whatever the row raises, it alone is set aside
        if not is_row_error(exc):
            raise
        loop.set_aside(schedule.pk, schedule.name, describe_row_error(exc))
        return  # settled once the row is fixed, inside its window
    if not take_over(run.pk, old_boot, loop.boot_id):
        return  # another beat took it
    claim = Claim(
        run_id=run.pk,
        task_id=run.task_id or "",
        schedule_id=schedule.pk,
        schedule=schedule.name,
        slot=run.slot,
        reason=Reason.REPUBLISH,
        boot_id=loop.boot_id,
        message=message,
    )
    failure = loop.try_publish(claim, now)
    if failure is None:
        mark_published([run.pk], now)
    elif not failure.outage:
        loop.unpublishable([(claim, failure.error)], now)
    else:
        loop.retry_later(claim, clock.shift(run.slot, window), now, "broker unreachable")
