"""A schedule's queue that no worker consumes (issue 39): ``check``'s ``unconsumed_queue``.

A schedule that sends to queue ``mail`` while every worker consumes only ``celery`` fires on
time, and its message waits in the broker for ever; the run ledger sees only a run published
that no worker starts, which ``no_news`` says after ``NO_NEWS_AFTER``. This finder says it
as soon as it is sure, from three sources, each read in bounded time:

- the ledger: runs published and not started (or marked no news) for at least
  ``WORKER_HEARTBEAT_INTERVAL`` (a message taken within that is not a finding), the newest
  ``SAMPLE`` of them through the runs' (state, claimed_at) index: what is waiting, since
  when, and from which schedules. No read of the schedules table: ``check`` costs what it
  shows, not what the table holds. Nothing waiting: nothing else is read.
- the workers' liveness rows (R15): each live worker records the queues it consumes
  (``worker.tracking``). A live worker that recorded none (a release before 0020) may
  consume anything: the rows then clear every queue.
- the broker, where it can tell, under ``PROBE_TIMEOUT`` (a broker down or slow makes this
  finder say nothing: the broker's own trouble shows as unresolved runs): AMQP (RabbitMQ)
  counts a queue's messages and consumers (a passive ``queue_declare``); Redis counts its
  messages (kombu's virtual ``queue_declare``: every priority step's list) and shows the
  oldest ones, so that a message counted is known to be one of these runs', not one left
  over from elsewhere.

A queue is reported when one of its waiting runs' messages is in it now and nobody consumes
it: the broker's count of consumers is 0 (AMQP), or (the other transports) no live worker
row lists it. Where the broker cannot tell, ``no_news`` is the rule that says it.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import logging
import threading
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from django.db.models import QuerySet

from .. import conf
from ..enums import RunState
from ..models import Run, WorkerHeartbeat
from ..words import ago
from .findings import Finding

logger = logging.getLogger("durablebeat")

#: the newest waiting runs read from the ledger: a bounded read whatever the backlog
SAMPLE = 500
#: the longest the broker is asked for, connection included (seconds)
PROBE_TIMEOUT = 2.0
#: messages read at a Redis queue's oldest end, per priority step, to match the runs
PEEK = 200
#: schedules named in a finding; the others are counted
NAMED = 5


@dataclass
class Waiting:
    """One queue's runs whose messages have waited at least the bound, from the ledger."""

    queue: str
    #: the oldest one's send (plus its countdown)
    since: dt.datetime
    #: task id -> (its schedule's name, its send)
    runs: dict[str, tuple[str, dt.datetime]] = field(default_factory=dict)

    def schedules(self) -> list[str]:
        return sorted({name for name, _ in self.runs.values()})


@dataclass(frozen=True)
class Depth:
    """What the broker says of one queue: its messages, its consumers (None: the transport
    does not count them), and the task ids seen at its oldest end (None: not shown)."""

    messages: int
    consumers: int | None = None
    oldest_ids: frozenset[str] | None = None


# --- the ledger ---------------------------------------------------------------------------


def waiting(now: dt.datetime, bound: dt.timedelta, app: Any) -> dict[str, Waiting]:
    """The runs whose message has waited at least ``bound`` for a worker, by queue."""
    cut = now - bound
    routes: dict[str, str | None] = {}
    found: dict[str, Waiting] = {}
    for run in waiting_runs(now, cut):
        schedule = run.schedule
        queue = schedule.queue or _routed(app, schedule.task, schedule.exchange, routes)
        sent = run.published_at
        if queue is None or sent is None or run.task_id is None:
            continue
        # A countdown holds the message back on purpose (R25): it waits from its eta.
        with contextlib.suppress(OverflowError, ValueError, TypeError):
            sent += dt.timedelta(seconds=schedule.countdown or 0)
        if sent > cut:
            continue
        group = found.setdefault(queue, Waiting(queue, sent))
        group.since = min(group.since, sent)
        group.runs[run.task_id] = (schedule.name, sent)
    return found


def waiting_runs(now: dt.datetime, cut: dt.datetime) -> list[Run]:
    """The newest ``SAMPLE`` runs published by ``cut`` that no worker started, and as many
    marked no news since (their messages may wait still), within ``CHECK_LOOKBACK``: per
    state, a range of the runs' (state, claimed_at) index read backwards and cut at the
    sample, whatever the ledger holds."""
    return [run for state in WAITING for run in waiting_query(state, now, cut)]


#: the states of a run whose message may be waiting in its queue
WAITING = (RunState.PUBLISHED, RunState.NO_NEWS)


def waiting_query(state: str, now: dt.datetime, cut: dt.datetime) -> QuerySet[Run]:
    """One state's: equal on the index's first column, ordered by its second."""
    return (
        Run.objects.filter(
            state=state,
            claimed_at__gte=now - conf.settings.CHECK_LOOKBACK,
            claimed_at__lte=cut,
            published_at__lte=cut,
            started_at__isnull=True,
            task_id__isnull=False,
        )
        .select_related("schedule")
        .only(
            "task_id",
            "published_at",
            "schedule__name",
            "schedule__task",
            "schedule__queue",
            "schedule__exchange",
            "schedule__countdown",
        )
        .order_by("-state", "-claimed_at")[:SAMPLE]
    )


def _routed(app: Any, task: str, exchange: str, cache: dict[str, str | None]) -> str | None:
    """The queue Celery routes ``task`` to when a schedule names none (``task_routes``, else
    ``task_default_queue``), as ``send_task`` does for beat (``beat.publishing``). None when
    an exchange of its own decides (its bindings are the broker's) or the router fails."""
    if exchange:
        return None
    if task not in cache:
        try:
            queue = app.amqp.router.route({}, task)["queue"]
            cache[task] = str(getattr(queue, "name", queue)) or None
        except Exception:  # a router of the project's that raises: no guess
            logger.debug("check: no route for %s", task, exc_info=True)
            cache[task] = None
    return cache[task]


# --- the workers --------------------------------------------------------------------------


def consumed(now: dt.datetime) -> set[str] | None:
    """The queues live workers record consuming; None when a live worker recorded none (a
    release before 0020): it may consume any of them."""
    fresh = now - conf.settings.WORKER_DEAD_AFTER
    names: set[str] = set()
    for queues in WorkerHeartbeat.objects.filter(seen_at__gte=fresh).values_list(
        "queues", flat=True
    ):
        if queues is None:
            return None
        names.update(q for q in queues.splitlines() if q)
    return names


# --- the broker ---------------------------------------------------------------------------


class BrokerSilent(Exception):
    """The broker did not answer within ``PROBE_TIMEOUT``, or refused the question."""


def counts_consumers(app: Any) -> bool:
    """The broker counts each queue's consumers itself (AMQP), read from the transport's
    class without connecting. A transport kombu cannot load is ``BrokerSilent``."""
    try:
        with app.connection_for_read() as conn:
            return bool(conn.transport.driver_type == "amqp")
    except Exception as exc:
        raise BrokerSilent(f"{type(exc).__name__}: {exc}") from exc


def probe(
    app: Any, queues: Iterable[str], amqp: bool, timeout: float | None = None
) -> dict[str, Depth]:
    """Each queue's depth, asked of ``app``'s broker in a thread given ``timeout`` in all: a
    client library's own retries (redis-py's backoff) cannot hold ``check`` longer. Raises
    ``BrokerSilent`` when it does not answer in time or fails."""
    timeout = PROBE_TIMEOUT if timeout is None else timeout
    wanted = sorted(set(queues))
    result: dict[str, Depth] = {}
    failure: list[BaseException] = []

    def ask() -> None:
        try:
            result.update(_depths(app, wanted, amqp, timeout))
        except BaseException as exc:  # carried to the caller's thread
            failure.append(exc)

    worker = threading.Thread(target=ask, name="durablebeat-queue-probe", daemon=True)
    worker.start()
    worker.join(timeout)
    if worker.is_alive():
        raise BrokerSilent(f"no answer within {timeout:g} s")
    if failure:
        raise BrokerSilent(f"{type(failure[0]).__name__}: {failure[0]}") from failure[0]
    return result


def _depths(app: Any, queues: list[str], amqp: bool, timeout: float) -> dict[str, Depth]:
    options = (
        {"read_timeout": timeout, "write_timeout": timeout}
        if amqp
        else {"socket_timeout": timeout, "socket_connect_timeout": timeout}
    )
    with app.connection_for_read(connect_timeout=timeout, transport_options=options) as conn:
        conn.ensure_connection(max_retries=0)
        return {queue: _depth(conn, queue, amqp) for queue in queues}


def _depth(conn: Any, queue: str, amqp: bool) -> Depth:
    """One queue, on a channel of its own: AMQP closes a channel on a passive declare of a
    queue that does not exist (no such queue: nothing waits in it)."""
    channel = conn.channel()
    try:
        try:
            declared = channel.queue_declare(queue=queue, passive=True)
        except conn.channel_errors:
            return Depth(0, 0 if amqp else None, frozenset())
        if amqp:
            return Depth(declared.message_count, declared.consumer_count)
        return Depth(declared.message_count, None, _oldest_ids(channel, queue))
    finally:
        with contextlib.suppress(Exception):
            channel.close()


def _oldest_ids(channel: Any, queue: str) -> frozenset[str] | None:
    """The task ids of the oldest ``PEEK`` messages of each priority step of a Redis queue
    (kombu pushes at the head and workers pop at the tail: the tail is the oldest). kombu
    has no API to look at a message without taking it, so its Redis client reads the lists
    its own ``_q_for_pri`` names. None on another virtual transport."""
    client = getattr(channel, "client", None)
    key_for = getattr(channel, "_q_for_pri", None)
    if client is None or key_for is None or not hasattr(client, "lrange"):
        return None
    ids: set[str] = set()
    for key in dict.fromkeys(key_for(queue, p) for p in channel.priority_steps):
        for raw in client.lrange(key, -PEEK, -1):
            ids.update(_task_id(raw))
    return frozenset(ids)


def _task_id(raw: Any) -> list[str]:
    """A kombu Redis message's task id (Celery's protocol 2 header, else the correlation
    id); none for what is not one."""
    try:
        message = json.loads(raw)
        headers = message.get("headers") or {}
        props = message.get("properties") or {}
        found = headers.get("id") or props.get("correlation_id")
    except (ValueError, TypeError, AttributeError):
        return []
    return [found] if isinstance(found, str) else []


# --- the finding --------------------------------------------------------------------------


def unconsumed(
    waits: dict[str, Waiting], workers: set[str] | None, depths: dict[str, Depth]
) -> list[Waiting]:
    """The queues whose waiting runs' messages are in the broker with nobody consuming them,
    pure: ``workers`` is what live workers record (None: not all of them did)."""
    found = []
    for queue, group in sorted(waits.items()):
        depth = depths.get(queue)
        if depth is None or depth.messages <= 0:
            continue  # not asked, or nothing waits there now
        if depth.consumers is not None:
            if depth.consumers > 0:
                continue  # the broker counts a consumer: slow, not unconsumed
        elif workers is None or queue in workers:
            continue  # a live worker takes it, or may (its release records no queues)
        if depth.oldest_ids is not None:
            seen = {tid: group.runs[tid] for tid in group.runs if tid in depth.oldest_ids}
            if not seen:
                continue  # what waits there is not these runs' messages
            group = Waiting(queue, min(sent for _, sent in seen.values()), seen)
        found.append(group)
    return found


def find_unconsumed_queues(now: dt.datetime, app: Any = None) -> list[Finding]:
    """Issue 39: a schedule's queue holds its messages and no worker consumes it (a worker
    started without that queue in ``-Q``). Silent when nothing has waited the bound, when a
    live worker consumes the queue or may (it records no queues), and when the broker
    cannot tell: ``no_news`` says it then, after its own bound (R22)."""
    app = _app(app)
    waits = waiting(now, conf.settings.WORKER_HEARTBEAT_INTERVAL, app)
    if not waits:
        return []
    workers = consumed(now)
    try:
        amqp = counts_consumers(app)
        asked = _in_question(waits, workers, amqp)
        depths = probe(app, asked, amqp) if asked else {}
    except BrokerSilent as exc:
        logger.info(
            "check: the broker could not say which queues hold messages (%s)",
            exc,
            extra={"event": "queue_probe_failed"},
        )
        return []
    return [
        _finding(group, depths[group.queue], workers, now, app)
        for group in unconsumed(waits, workers, depths)
    ]


def _in_question(waits: dict[str, Waiting], workers: set[str] | None, amqp: bool) -> list[str]:
    """The queues to ask the broker about. Without its count of consumers, the rows clear a
    queue a live worker lists, and every queue when a live worker recorded none."""
    if amqp:
        return list(waits)
    if workers is None:
        return []
    return [q for q in waits if q not in workers]


def _finding(
    group: Waiting, depth: Depth, workers: set[str] | None, now: dt.datetime, app: Any
) -> Finding:
    names = group.schedules()
    shown = ", ".join(names[:NAMED]) + (
        f" and {len(names) - NAMED} more" if len(names) > NAMED else ""
    )
    if depth.consumers is not None:
        nobody = "the broker counts no consumer on it"
    elif workers:
        nobody = f"no live worker consumes it (they consume {', '.join(sorted(workers))})"
    else:
        nobody = "no live worker consumes it (no worker's liveness row is fresh)"
    main = getattr(app, "main", None) or "<your app>"
    also = ",".join([*sorted(workers or ()), group.queue])
    # the ledger's runs are its sample of what waits (AMQP shows no message's id, so some
    # may have been taken since): never more of them than the broker counts
    ours = min(depth.messages, len(group.runs))
    return Finding(
        "unconsumed_queue",
        f"queue {group.queue!r}: {depth.messages} message(s) waiting, {ours} of "
        f"them sent by schedules ({shown}), the oldest {ago(group.since, now)} ago "
        f"({group.since:%Y-%m-%d %H:%M:%S} UTC); {nobody}, so they never run. Fix: start a "
        f"worker that consumes it (celery -A {main} worker -Q {group.queue}), or add it to a "
        f"worker's -Q (-Q {also})",
    )


def _app(app: Any | None) -> Any:
    if app is None:
        from celery import current_app

        app = current_app._get_current_object()
    return app
