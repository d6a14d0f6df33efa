"""Nothing lost when a beat dies between claim and publish (R9, §2), a beat loop hook.

*An earlier boot* claimed a run and died before confirming its publish: a delivery slot is
re-sent once, with the same task id and slot, after ``catch_up_settle`` past the slot and
inside its window; a housekeeping slot is recorded as missed. A confirmed publish is never
re-sent. (This boot's own unsent claims are ``retries``'.)
"""

from __future__ import annotations

import datetime as dt
import logging

from .. import conf
from ..core import clock
from ..enums import Reason
from ..models import Run
from .claims import in_doubt_runs, mark_missed, mark_published, take_over
from .due import describe_row_error, is_row_error
from .loop import Loop
from .messages import Claim, Message
from .retention import kept_for

logger = logging.getLogger("durablebeat")

#: how often the loop looks for in-doubt runs of dead boots
IN_DOUBT_EVERY = dt.timedelta(seconds=30)


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
    window, beyond = schedule.catch_up_window or s.CATCH_UP_WINDOW, "older than its window"
    reach = kept_for(schedule.retention)
    if reach is not None and window > reach:
        # R32: a slot older than the ledger keeps is never sent again (its run may be gone)
        own = schedule.retention is not None
        window, beyond = reach, f"older than {'its retention' if own else 'DURABLEBEAT_RETENTION'}"
    if now < clock.shift(run.slot, s.CATCH_UP_SETTLE):
        return  # it may still be on its way: not before the settle time
    old_boot = run.boot_id
    if not schedule.catch_up or now - run.slot > window:
        why = "housekeeping is not re-sent" if not schedule.catch_up else beyond
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
        spec = schedule.to_spec()  # for the hook (R30): a monitor checks the resend in
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
        spec=spec,
    )
    failure = loop.try_publish(claim, now)
    if failure is None:
        mark_published([run.pk], now)
    elif not failure.outage:
        loop.unpublishable([(claim, failure.error)], now)
    else:
        loop.retry_later(claim, clock.shift(run.slot, window), now, "broker unreachable")
