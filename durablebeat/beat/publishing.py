"""Putting one claimed slot on the broker: the same message from beat and from "run now"."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Mapping
from typing import Any

from kombu.exceptions import OperationalError

from .. import signals
from ..core import clock
from ..enums import RUN_NOW_ADMIN, Source
from ..models import Schedule
from . import entry_options, live
from .claims import claim_backfill, claim_manual, mark_published
from .messages import Claim

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


#: what Celery's ``send_task`` reads from ``app.conf`` for each message it sends (Celery
#: 5.3 to 5.7; a key a later version adds is read as before, only not kept)
PER_MESSAGE_CONF = (
    "task_always_eager",
    "task_default_queue",
    "task_send_sent_event",
    "timezone",
    "task_repr_maxlevels",
    "broker_pool_acquire_timeout",
)


def keep_per_message_conf(app: Any) -> Callable[[], None]:
    """Read once the settings Celery reads for every message, and keep them in the app's
    own changes, where each later read finds them first; returns what undoes it.

    With the configuration in Django's settings (``config_from_object("django.conf:settings",
    namespace="CELERY")``, as most projects have it) each read misses Django's settings
    under two or three names before it reaches Celery's default: ~10 us a read, eight reads
    a message, a quarter of what a message costs beat (R28). The values kept are the ones
    Celery would read; beat's process does not change its configuration while it runs."""
    read = {}
    for key in PER_MESSAGE_CONF:
        try:
            read[key] = app.conf[key]
        except KeyError:
            continue
    changes = app.conf.changes  # after a read: the configuration is loaded, not pending
    kept = {key: value for key, value in read.items() if key not in changes}
    changes.update(kept)

    def undo() -> None:
        for key, value in kept.items():
            if key in changes and changes[key] is value:
                del changes[key]

    return undo


def send(app: Any, claim: Claim, producer: Any = None) -> None:
    """Publish ``claim``; raises whatever the broker raises.

    A message still holding the stored form of values only code has (R25) is refused: the
    task would get the markers instead of the values (the engine, and ``run_now``, put the
    code entry's values in before they get here)."""
    message = claim.message
    if live.holds_code_values(message.args) or live.holds_code_values(message.kwargs):
        raise live.SendTimeValueError(
            f"schedule {claim.schedule!r}: its args/kwargs hold values only its "
            "beat_schedule entry has (computed at send time, or not JSON); they are sent "
            "with that entry's values, which this process does not have"
        )
    options = {k: v for k, v in claim.message.options.items() if k != "headers"}
    headers = claim.headers()
    if signals.before_publish.receivers:  # R30: a monitor's headers (R28: else no cost)
        headers |= signals.extra_headers(claim.schedule, spec=claim.spec, **claim.hook_args())
    app.send_task(
        claim.message.task,
        args=claim.message.args,
        kwargs=claim.message.kwargs,
        task_id=claim.task_id,
        headers=headers,
        producer=producer,
        **options,
    )


#: what a code entry puts into a message in place of its row's values (R25): args, kwargs
#: and its link/link_error callbacks
Sendable = tuple[list[Any], dict[str, Any], dict[str, Any]]


def run_now(schedule: Schedule, app: Any | None = None, *, by: str = RUN_NOW_ADMIN) -> Claim:
    """A manual fire (admin "run now", R19; ``durablebeat.api.run_now``): a run with
    reason manual, ``by`` in its detail (``RUN_NOW_ADMIN``, ``RUN_NOW_API``), then the
    message.

    The run is written first, like every fire (R3); a broker error propagates to the caller
    and leaves the run claimed, visible in the history.
    """
    app = _app(app)
    values = _code_values(app, schedule)  # computed, or refused, before any run is written
    return _publish(claim_manual(schedule, None, clock.now(), by), values, app)


def backfill_slot(schedule: Schedule, slot: dt.datetime, app: Any | None = None) -> Claim | None:
    """A missed slot fired now (R27), through the path "run now" takes: the run for that
    slot first (None when the slot already has one: it is left alone), then the message."""
    app = _app(app)
    values = _code_values(app, schedule)
    claim = claim_backfill(schedule, slot, clock.now())
    return None if claim is None else _publish(claim, values, app)


def _app(app: Any | None) -> Any:
    if app is None:
        from celery import current_app

        app = current_app._get_current_object()
    return app


def _publish(claim: Claim, values: Sendable | None, app: Any) -> Claim:
    """Send ``claim`` with the code entry's values, if any; the claim as sent."""
    if values is not None:
        claim = claim.with_arguments(*values)
    send(app, claim)
    if claim.run_id is not None:
        mark_published([claim.run_id], clock.now())
    signals.send(signals.fired, claim.schedule, spec=claim.spec, **claim.hook_args())
    return claim


def _code_values(app: Any, schedule: Schedule) -> Sendable | None:
    """A code schedule whose row holds the stored form of its args/kwargs, or whose entry
    links callbacks (R25): the values of one send, from the app's ``beat_schedule`` entry of
    that name, as the beat sends them. None for any other schedule (its row's values are the
    message's). A row whose markers this process cannot replace is refused: the task would
    get the markers."""
    entry = (app.conf.beat_schedule or {}).get(schedule.name)
    if schedule.source == Source.CODE and isinstance(entry, Mapping):
        options = entry.get("options")
        callbacks = entry_options.callbacks(options) if isinstance(options, Mapping) else {}
        code = live.split(entry.get("args") or (), entry.get("kwargs") or {}, callbacks)[2]
        if code is not None:
            return (*code.evaluate(), code.callbacks)
    if live.holds_code_values(schedule.args) or live.holds_code_values(schedule.kwargs):
        raise live.SendTimeValueError(
            f"its args/kwargs hold values only its beat_schedule entry has, and this "
            f"process's Celery app has no entry {schedule.name!r}"
        )
    return None
