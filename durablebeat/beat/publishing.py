"""Putting one claimed slot on the broker: the same message from beat and from "run now"."""

from __future__ import annotations

import datetime as dt
from typing import Any

from kombu.exceptions import OperationalError

from ..core import clock
from ..models import Schedule
from .claims import claim_backfill, claim_manual, mark_published
from .due import Claim

#: a publish that raises one of these found the broker unreachable (R5: the claim is kept
#: and retried); anything else is about the message itself (R21: its slot fails). kombu
#: raises ``OperationalError`` for a connection it could not (re)establish.
BROKER_UNAVAILABLE: tuple[type[BaseException], ...] = (OSError, OperationalError)


def broker_errors(connection: Any) -> tuple[type[BaseException], ...]:
    """``BROKER_UNAVAILABLE`` and the transport's own connection and channel errors (redis'
    ``ConnectionError``, AMQP's channel errors...), read from a kombu connection without
    connecting. A plain Python error a transport lists (kombu's virtual transports list
    ``KeyError``) says nothing about the broker: a message's own content raises those."""
    own = tuple(connection.connection_errors) + tuple(connection.channel_errors)
    return BROKER_UNAVAILABLE + tuple(
        e
        for e in own
        if isinstance(e, type) and (e.__module__ != "builtins" or issubclass(e, OSError))
    )


def send(app: Any, claim: Claim, producer: Any = None) -> None:
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


def run_now(schedule: Schedule, app: Any | None = None) -> Claim:
    """A manual fire (admin "run now", R19): a run with reason manual, then the message.

    The run is written first, like every fire (R3); a broker error propagates to the caller
    and leaves the run claimed, visible in the history.
    """
    claim = claim_manual(schedule, None, clock.now())
    _publish(claim, app)
    return claim


def backfill_slot(schedule: Schedule, slot: dt.datetime, app: Any | None = None) -> Claim | None:
    """A missed slot fired now (R27), through the path "run now" takes: the run for that
    slot first (None when the slot already has one: it is left alone), then the message."""
    claim = claim_backfill(schedule, slot, clock.now())
    if claim is not None:
        _publish(claim, app)
    return claim


def _publish(claim: Claim, app: Any | None) -> None:
    if app is None:
        from celery import current_app

        app = current_app._get_current_object()
    send(app, claim)
    if claim.run_id is not None:
        mark_published([claim.run_id], clock.now())
