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


#: the options whose value is a callback signature (or a list of them): the beat keeps them in
#: memory with the entry's values (``live.LiveValues``) and passes them on every publish, as
#: Celery's beat passes them to ``apply_async`` (R25); the admin shows them from the code
CALLBACK_OPTIONS = ("link", "link_error")


class BadCallback(ValueError):
    """A ``link``/``link_error`` value that is not a signature; the message names it."""


def callbacks(options: Mapping[str, Any]) -> dict[str, Any]:
    """{option: signature or list of signatures} of an entry's ``link``/``link_error``, each
    checked to be what Celery's ``apply_async`` takes (a ``Signature``, a signature dict with
    a ``task``, or a list of them). Raises ``BadCallback`` naming the option."""
    from celery.canvas import Signature

    found: dict[str, Any] = {}
    for key in CALLBACK_OPTIONS:
        value = options.get(key)
        if value is None:
            continue
        items = value if isinstance(value, list | tuple) else [value]
        if not items:
            continue
        for item in items:
            if not (isinstance(item, Signature) or (isinstance(item, Mapping) and "task" in item)):
                raise BadCallback(
                    f"{key}: {item!r:.80} must be a task signature (task.s(...), "
                    "signature('name', ...)) or a list of them, as Celery's apply_async takes"
                )
        shown = [Signature.from_dict(dict(i)) if not isinstance(i, Signature) else i for i in items]
        found[key] = shown if isinstance(value, list | tuple) else shown[0]
    return found


def take_publish_options(options: dict[str, Any]) -> tuple[tuple[str, ...], dict[str, Any]]:
    """Read out of an entry's ``options`` what is not a stored message option: returns (the
    superseded publish options it gave, its callbacks); kombu objects become their names.
    Raises ``BadCallback``."""
    superseded = tuple(sorted(k for k in SUPERSEDED_OPTIONS if options.pop(k, None) is not None))
    kombu_entities(options)
    links = callbacks(options)
    for key in CALLBACK_OPTIONS:
        options.pop(key, None)
    return superseded, links


def callbacks_shown(entry: Any) -> list[str]:
    """``link=record.s(1)``: the callbacks a code entry passes on every publish, for the admin."""
    options = entry.get("options") if isinstance(entry, Mapping) else None
    if not isinstance(options, Mapping):
        return []
    try:
        found = callbacks(options)
    except BadCallback:
        return []
    return [f"{key}={value!r:.200}" for key, value in found.items()]


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
