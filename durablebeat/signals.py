"""The hook a monitor wires itself to (R30): a Django signal per fire and per outcome.

Each is sent with ``sender=None`` (a receiver picks its schedules by ``schedule``) and these
keyword arguments:

- ``schedule``: the schedule's name; ``slot``: the instant it fires for (aware); ``reason``:
  why it fires (``scheduled``, ``catch_up``, ``manual``...); ``task_id``: the message's id;
  ``run_id``: its run in the ledger (None for a fire made while the database was down).
- ``before_publish`` (beat, each message of a fire about to go out) and ``fired`` (once it
  went out) add ``spec``: the schedule's timing (``core.timing``: ``Interval``,
  ``Crontab``, ``Clocked``, ``Solar`` or ``Custom``), or None where the sender does not
  have it (a resend, run now). A ``before_publish`` receiver may return a mapping: its
  items are added to that message's headers (the Sentry integration adds its monitor's).
- ``run_finished`` (the worker, when the run's task ended; beat, when the broker refused
  the message) adds ``outcome`` (``succeeded`` or ``failed``) and ``error`` (why, or "").
- ``schedule_paused`` (whoever wrote the run's final state that paused it: the worker, or
  beat's reclaim round; R36) is sent once, when a schedule pauses itself after
  ``failures`` runs in a row failed or were lost, after the pause commits, with ``note``
  (the pause's note: which runs, when the last one ended) and ``at`` (when it paused); not
  the fire's arguments above. A person's pause sends nothing.

Receivers run in the process that sends, synchronously, inside the send: keep them short
(a ping with a timeout). One that raises is logged and never stops a fire or a run. With
no receiver connected a send costs one attribute read (R28). docs/monitoring.md has an
example.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from django.dispatch import Signal

logger = logging.getLogger("durablebeat")

before_publish = Signal()
fired = Signal()
run_finished = Signal()
schedule_paused = Signal()


def send(signal: Signal, schedule: str, **kwargs: Any) -> list[Any]:
    """Send ``signal`` for ``schedule``; the receivers' answers. One that raised is logged
    and left out: a monitor's failure is never the fire's."""
    if not signal.receivers:
        return []
    answers = []
    sent: list[tuple[Any, Any]]
    try:
        sent = signal.send_robust(None, schedule=schedule, **kwargs)
    except Exception as exc:  # Django's log of a receiver's error needs its __qualname__
        sent = [(signal, exc)]
    for receiver, answer in sent:
        if isinstance(answer, Exception):
            logger.warning(
                "hook %s failed for schedule=%s: %s",
                getattr(receiver, "__qualname__", receiver),
                schedule,
                answer,
                extra={"event": "hook_failed", "schedule": schedule},
            )
        else:
            answers.append(answer)
    return answers


def extra_headers(schedule: str, **kwargs: Any) -> dict[str, Any]:
    """What ``before_publish``'s receivers add to a message's headers."""
    headers: dict[str, Any] = {}
    for answer in send(before_publish, schedule, **kwargs):
        if isinstance(answer, Mapping):
            headers.update(answer)
    return headers
