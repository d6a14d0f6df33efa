"""Putting one claimed slot on the broker: the same message from beat and from "run now"."""

from __future__ import annotations

from typing import Any

from . import clock, ledger
from .models import Schedule


def send(app: Any, claim: ledger.Claim, producer: Any = None) -> None:
    """Publish ``claim``; raises whatever the broker raises."""
    options = {k: v for k, v in claim.message.options.items() if k != "headers"}
    app.send_task(
        claim.message.task,
        args=claim.message.args,
        kwargs=claim.message.kwargs,
        task_id=claim.task_id,
        headers=claim.headers(),
        producer=producer,
        **options,
    )


def run_now(schedule: Schedule, app: Any | None = None) -> ledger.Claim:
    """A manual fire (admin "run now", R19): a run with reason manual, then the message.

    The run is written first, like every fire (R3); a broker error propagates to the caller
    and leaves the run claimed, visible in the history.
    """
    if app is None:
        from celery import current_app

        app = current_app._get_current_object()
    now = clock.now()
    claim = ledger.claim_manual(schedule, None, now)
    send(app, claim)
    if claim.run_id is not None:
        ledger.mark_published([claim.run_id], clock.now())
    return claim
