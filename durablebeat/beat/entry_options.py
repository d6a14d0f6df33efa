"""The ``options`` of a ``beat_schedule`` entry beyond the stored message options (R24, R25):
those refused by name with why, Celery's publish options that beat's own publish supersedes,
and kombu ``Queue``/``Exchange`` objects read as Celery reads them."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

#: options Celery's beat would pass to ``apply_async`` that make no sense for a periodic
#: fire, each refused by name with the reason (R24); any other key not in
#: ``MESSAGE_OPTIONS`` is refused as unsupported
_PROCESS_OBJECT = "a live object of one process, which a stored schedule cannot hold"
_CANVAS = "Celery sets it for a task called from another task or a canvas; a fire has no parent"
REFUSED_OPTIONS = {
    "eta": (
        "one fixed instant, which every fire of a periodic schedule would share; use the "
        "schedule, or countdown to delay each message"
    ),
    "link": (
        "a callback signature is a canvas bound to the process that built it, and durablebeat "
        "carries no canvas on a schedule yet: call the next task at the end of the task's "
        "body, or make the scheduled task start a chain"
    ),
    "link_error": (
        "an errback signature is a canvas bound to the process that built it, and durablebeat "
        "carries no canvas on a schedule yet: handle the error in the task (on_failure), or "
        "watch the run's failed state (check finding no_success)"
    ),
    "task_id": "every fire gets its own id, the key of its run in the ledger (R3, R11)",
    "producer": _PROCESS_OBJECT,
    "publisher": _PROCESS_OBJECT,
    "connection": _PROCESS_OBJECT,
    "router": _PROCESS_OBJECT,
    "result_cls": _PROCESS_OBJECT,
    "add_to_parent": _CANVAS,
    "chain": _CANVAS,
    "chord": _CANVAS,
    "group_id": _CANVAS,
    "group_index": _CANVAS,
    "parent_id": _CANVAS,
    "root_id": _CANVAS,
    "reply_to": _CANVAS,
}
#: Celery's own publish options (``apply_async``'s retry, retry_policy, timeout,
#: confirm_timeout): accepted, and superseded by beat's publish (R5, R25), never silently:
#: the boot logs each entry that gives one (event ``code_option_superseded``), the admin
#: shows them on the schedule's page. Not passed on: a publish that retries or waits inside
#: the beat holds its loop (every other schedule, the heartbeat) while the broker is down,
#: where beat keeps the claim and publishes it again when the broker answers.
SUPERSEDED_OPTIONS = {
    "retry": "beat keeps a claim whose publish failed and publishes it again (R5)",
    "retry_policy": "beat keeps a claim whose publish failed and publishes it again (R5)",
    "timeout": "beat's publish waits the broker connection's own timeouts (R5)",
    "confirm_timeout": "beat's publish waits the broker connection's own timeouts (R5)",
}


def kombu_entities(options: dict[str, Any]) -> None:
    """A kombu ``Exchange`` or ``Queue`` object as the option, read as Celery's
    ``send_task_message`` reads it: the exchange's name (and its type), the queue's name
    (and its exchange and routing key, unless the entry gives its own). R25."""
    from kombu.entity import Exchange, Queue

    queue = options.get("queue")
    if isinstance(queue, Queue):
        options["queue"] = queue.name or ""
        if queue.exchange is not None and queue.exchange.name:
            options.setdefault("exchange", queue.exchange)
        if queue.routing_key:
            options.setdefault("routing_key", queue.routing_key)
    exchange = options.get("exchange")
    if isinstance(exchange, Exchange):
        options["exchange"] = exchange.name or ""
        if exchange.type and exchange.name:
            options.setdefault("exchange_type", exchange.type)


def superseded_options(entry: Any) -> list[str]:
    """The publish options of a ``beat_schedule`` entry that beat's own publish supersedes,
    each with why (the admin shows them on a code schedule's page, R25)."""
    options = entry.get("options") if isinstance(entry, Mapping) else None
    if not isinstance(options, Mapping):
        return []
    return [
        f"{key}={options[key]!r:.60}: {why}"
        for key, why in SUPERSEDED_OPTIONS.items()
        if options.get(key) is not None
    ]
