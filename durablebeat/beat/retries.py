"""Nothing lost when the broker blinks (R5, §2): publish retries of this boot's claims.

*This boot* could not publish (broker down): the run stays claimed and the message is
retried with backoff while the slot is still worth sending (delivery: inside its catch-up
window; housekeeping: until the schedule's next slot), then it is recorded as missed. The
claims an *earlier* boot left unconfirmed are ``resend``'s (R9).
"""

from __future__ import annotations

import datetime as dt
import logging
from dataclasses import dataclass

from ..core import clock
from .claims import mark_missed, mark_published
from .loop import Loop
from .messages import Claim

logger = logging.getLogger("durablebeat")

FIRST_RETRY = dt.timedelta(seconds=1)
MAX_RETRY = dt.timedelta(seconds=30)


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
