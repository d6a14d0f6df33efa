"""The worker side: what each fired task really did, and which workers are alive (R11-R15).

Connected by the app itself (``DurablebeatConfig.ready``) when a worker loads Django, so user
tasks carry no durablebeat code. Only messages durablebeat sent (they carry its headers) are
tracked; every other task costs one dictionary look-up.

The rule for the outcome (R12): the body decides. ``task_postrun`` says SUCCESS exactly when
the body returned normally, so the run is **succeeded** then, even when the soft time limit
fired during the body (the body caught it and went on; the run carries
``soft_time_limit_exceeded``) and even when the limit landed after the body returned, while
Celery was storing the result, and Celery itself stored FAILURE. Only an exception escaping
the body is **failed**. A hard time limit kills the process before any signal: the parent
stores FAILURE(TimeLimitExceeded) in the result backend, and beat reconciles it from there
(``beat.reclaim.reconcile_results``, R13).

A tracking write never fails the task, and is never dropped on the first error (R22): one
that fails (the database is cut) is kept, in order, in a bounded queue of this process and
written by a background thread when the database answers. So is one whose run is not in the
ledger yet: a fire beat sent from memory during a database outage is written by beat when
the database is back, and its start and completion follow it. Every write is a conditional
update, so writing one twice or late is harmless; a completion that arrives after the run
was marked lost or no news still wins (R11). A process that exits with writes still pending
logs each one it drops.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import logging
import math
import os
import signal
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from django.db import DatabaseError, close_old_connections

from .. import conf, db, dbclock, signals
from ..core import clock
from ..models import WorkerHeartbeat
from ..schema import pending as pending_migrations
from ..schema import words as missing_words
from . import completion
from .backlog import Write, backlog

logger = logging.getLogger("durablebeat")

#: the header every durablebeat message carries (``beat.messages.Claim.headers``)
HEADER = "durablebeat_schedule"
#: R34: the header of an ``overlap=replace`` schedule's message (``messages.REPLACEABLE``)
REPLACEABLE = "durablebeat_replaceable"
SOFT_SIGNAL = getattr(signal, "SIGUSR1", None)  # billiard's soft time limit signal
#: seconds between liveness writes while they fail
HEARTBEAT_RETRY = 2.0


@dataclass
class _Tracked:
    started_at: Any
    soft_fired: bool = False
    previous_handler: Any = None


_tracked: dict[str, _Tracked] = {}
#: the worker's main process, the one that writes the liveness row (set in pool children)
_main_pid: int | None = None


def is_ours(task: Any) -> bool:
    return _is_ours_request(getattr(task, "request", None))


def _is_ours_request(request: Any) -> bool:
    """A request object, or the message's request dict (``task_internal_error``)."""
    if request is None:
        return False
    if isinstance(request, Mapping):
        return bool(request.get(HEADER) or (request.get("headers") or {}).get(HEADER))
    if getattr(request, HEADER, None):
        return True
    return bool((getattr(request, "headers", None) or {}).get(HEADER))


def hard_time_limit(task: Any) -> float | None:
    """The hard limit the pool applies to this task: message, then task, then app. None for
    no limit, and for a value no database column holds (inf, NaN, not a number: MariaDB
    refuses inf, and the started write would be lost with it)."""
    limits = getattr(task.request, "timelimit", None) or (None, None)
    value = limits[0] or getattr(task, "time_limit", None) or task.app.conf.task_time_limit
    try:
        seconds = float(value) if value else None
    except (TypeError, ValueError):
        return None
    return seconds if seconds is not None and math.isfinite(seconds) and seconds > 0 else None


def worker_name(task: Any) -> str:
    return str(getattr(task.request, "hostname", None) or "")


def main_pid() -> int:
    return _main_pid if _main_pid is not None else os.getpid()


def _guarded(what: str, write: Any) -> bool:
    """Make one write that the next one replaces (the liveness row); a database error is
    logged, never raised. False when it failed."""
    try:
        close_old_connections()
        write()
    except DatabaseError as exc:
        with contextlib.suppress(DatabaseError):
            db.connection().close()
        _say_failed(what, exc)
        return False
    _missing.clear()
    return True


#: R32: durablebeat's migrations the database lacked at the last failed liveness write
_missing: list[str] = []


def _say_failed(what: str, exc: DatabaseError) -> None:
    """A failed liveness write, logged. On a database that lacks durablebeat's migrations (a
    deploy that started the worker before its ``migrate``), said once, not at every retry:
    the worker runs its tasks meanwhile and keeps their records until the columns are there
    (R22, R32)."""
    try:
        missing = pending_migrations()
    except DatabaseError:
        missing = []
    if not missing:
        logger.warning("could not record %s: %s", what, exc, extra={"event": "heartbeat_failed"})
    elif not _missing:  # once per wait, as beat says it
        logger.warning(
            "%s; the worker runs its tasks and keeps their records until then (R32)",
            missing_words(missing),
            extra={"event": "migrations_pending"},
        )
    _missing[:] = missing


def _record(what: str, event: completion.Started | completion.Finished) -> None:
    """Write one move of a run now, or keep it for later (R22); never raises into the task."""
    backlog.submit(Write(what, event))


def _announce(request: Any, event: completion.Finished) -> None:
    """R30: the run's outcome to the hook (``signals.run_finished``), from the headers
    beat gave its message."""
    if not signals.run_finished.receivers:
        return

    def header(name: str) -> Any:
        return getattr(request, name, None) or (getattr(request, "headers", None) or {}).get(name)

    slot = header("durablebeat_slot")
    run_id = header("durablebeat_run")
    signals.send(
        signals.run_finished,
        str(header(HEADER)),
        slot=dt.datetime.fromisoformat(slot) if isinstance(slot, str) else None,
        reason=str(header("durablebeat_reason") or ""),
        task_id=event.task_id,
        run_id=run_id if isinstance(run_id, int) else None,
        outcome="succeeded" if event.succeeded else "failed",
        error=event.error,
    )


# --- signal receivers --------------------------------------------------------------------


def on_prerun(sender: Any = None, task_id: str = "", task: Any = None, **_: Any) -> None:
    if task is None or not is_ours(task):
        return
    # R26: a pool process measures the database's clock at its first task, then when its
    # reading is older than a minute: no query per task. (Not before the pool forks: a
    # database that does not answer would hold the worker's start.)
    dbclock.refresh()
    now = clock.now()
    tracked = _Tracked(started_at=now)
    _tracked[task_id] = tracked
    _watch_soft_limit(tracked)
    event = completion.Started(task_id, now, worker_name(task), main_pid(), hard_time_limit(task))
    _record("the start", event)


def on_postrun(
    sender: Any = None,
    task_id: str = "",
    task: Any = None,
    retval: Any = None,
    state: str | None = None,
    **_: Any,
) -> None:
    tracked = _tracked.pop(task_id, None)
    if tracked is None:
        return
    _unwatch_soft_limit(tracked)
    if state not in ("SUCCESS", "FAILURE"):
        return  # RETRY, REJECTED, IGNORED: the run stays in flight; its next try reports
    from celery.exceptions import SoftTimeLimitExceeded

    failed = state == "FAILURE"
    error = f"{type(retval).__name__}: {retval}" if failed else ""
    event = completion.Finished(
        task_id,
        clock.now(),
        succeeded=not failed,
        started_at=tracked.started_at,
        soft_time_limit_exceeded=tracked.soft_fired or isinstance(retval, SoftTimeLimitExceeded),
        error=error,
    )
    _record("the completion", event)
    _announce(getattr(task, "request", None), event)


def on_revoked(
    sender: Any = None,
    request: Any = None,
    terminated: bool = False,
    signum: Any = None,
    expired: bool = False,
    **_: Any,
) -> None:
    """A message the worker dropped (past its ``expires``) or a task revoked: no body ran,
    or it was killed. Failed, with why, rather than published for ever, which would hold an
    ``overlap=skip`` schedule (R11, R14)."""
    if not _is_ours_request(request):
        return
    task_id = str(getattr(request, "id", "") or "")
    if expired:
        why = "expired before a worker started it (the schedule's expires option)"
    elif terminated:
        why = f"terminated by signal {signum}"
    else:
        why = "revoked before it started"
    event = completion.Finished(task_id, clock.now(), succeeded=False, error=f"REVOKED: {why}")
    _record("the revoke", event)
    _announce(request, event)


def on_internal_error(
    sender: Any = None, task_id: str = "", request: Any = None, exception: Any = None, **_: Any
) -> None:
    """Celery itself failed around the body (storing STARTED or the result in a result
    backend that is down, with ``task_track_started``): with no completion of the body the
    run would stay started for ever, holding an ``overlap=skip`` schedule (R22). Failed,
    with why, unless the body's own completion came first: that one wins (R12; completions
    are made in order, and nothing moves a finished run)."""
    if not _is_ours_request(request):
        return
    _tracked.pop(task_id, None)
    error = f"{type(exception).__name__}: {exception} (raised by Celery outside the task body)"
    event = completion.Finished(task_id, clock.now(), succeeded=False, error=error)
    _record("the internal error", event)


def _watch_soft_limit(tracked: _Tracked) -> None:
    """Note when billiard's soft-limit signal reaches this process during the body, then
    let billiard's own handler raise ``SoftTimeLimitExceeded`` as usual."""
    if SOFT_SIGNAL is None or threading.current_thread() is not threading.main_thread():
        return
    previous = signal.getsignal(SOFT_SIGNAL)
    if not callable(previous):
        return  # no soft limit handler here (solo or thread pool): nothing to watch

    def watch(signum: int, frame: Any) -> None:
        tracked.soft_fired = True
        previous(signum, frame)

    tracked.previous_handler = previous
    signal.signal(SOFT_SIGNAL, watch)


def _unwatch_soft_limit(tracked: _Tracked) -> None:
    if tracked.previous_handler is not None and SOFT_SIGNAL is not None:
        with contextlib.suppress(ValueError):
            signal.signal(SOFT_SIGNAL, tracked.previous_handler)


# --- worker liveness (R15) ----------------------------------------------------------------


def write_worker_heartbeat(
    worker: str,
    pid: int,
    now: Any,
    clock_offset: float | None = None,
    queues: list[str] | None = None,
) -> None:
    """The liveness row (R15), with this host's offset to the database's clock (R26) and
    the queues it consumes (``check``'s ``unconsumed_queue``; None: not known, left as is)."""
    defaults: dict[str, Any] = {"seen_at": now}
    if clock_offset is not None:
        defaults["clock_offset_seconds"] = clock_offset
    if queues is not None:
        defaults["queues"] = "\n".join(sorted(set(queues)))
    WorkerHeartbeat.objects.update_or_create(worker=worker[:255], pid=pid, defaults=defaults)


def consumed_queues(consumer: Any) -> list[str] | None:
    """The names of the queues a worker's consumer takes messages from now: its task
    consumer's (``-Q``, and what ``add_consumer``/``cancel_consumer`` changed since), else
    the app's ``consume_from``. None when the consumer does not say (never a guess)."""
    try:
        task_consumer = getattr(consumer, "task_consumer", None)
        queues = getattr(task_consumer, "queues", None)
        if queues is None:
            queues = consumer.app.amqp.queues.consume_from.values()
        return [str(q.name) for q in queues if getattr(q, "name", None)]
    except Exception:  # a consumer of another shape: the row says "not recorded"
        logger.debug("could not read the worker's queues", exc_info=True)
        return None


class _Heartbeat(threading.Thread):
    """Writes the worker's liveness row every ``WORKER_HEARTBEAT_INTERVAL``."""

    def __init__(self, worker: str, pid: int, consumer: Any = None) -> None:
        super().__init__(name="durablebeat-heartbeat", daemon=True)
        self.worker, self.pid, self.consumer = worker, pid, consumer
        self.stopping = threading.Event()

    def run(self) -> None:
        while not self.stopping.is_set():
            wait = conf.settings.WORKER_HEARTBEAT_INTERVAL.total_seconds()
            if not _guarded("the worker heartbeat", self._write):
                # Back soon after the database returns, before beat takes this worker's
                # silence during the outage for its death (R15, R22).
                wait = min(wait, HEARTBEAT_RETRY)
            self.stopping.wait(wait)
        with contextlib.suppress(DatabaseError):
            db.connection().close()

    def _write(self) -> None:
        offset = dbclock.sync()  # R26: measured with each liveness write; never raises
        queues = None if self.consumer is None else consumed_queues(self.consumer)
        write_worker_heartbeat(self.worker, self.pid, clock.now(), offset, queues)


_heartbeat: _Heartbeat | None = None


def on_worker_ready(sender: Any = None, **_: Any) -> None:
    """The worker consumes: its liveness row from now on, with its queues (``sender`` is
    the worker's consumer)."""
    global _heartbeat
    hostname = str(getattr(sender, "hostname", "") or "")
    if _heartbeat is None and hostname:
        _heartbeat = _Heartbeat(hostname, os.getpid(), sender)
        _heartbeat.start()


def on_worker_shutdown(sender: Any = None, **_: Any) -> None:
    if _heartbeat is not None:
        _heartbeat.stopping.set()
    backlog.drain()


def on_received(sender: Any = None, request: Any = None, **_: Any) -> None:
    """R34: a message whose run a later slot replaced is discarded, as Celery discards a
    revoked one. Beat revokes a replaced run, but a revoke reaches only the workers running
    when it is sent: a message that waited in the queue while none ran (a deploy, a
    crash) would start beside its replacement. Asked of the ledger for the messages of
    ``overlap=replace`` schedules only, before the pool runs them; a database that does
    not answer lets the message run (R5, fail open)."""
    headers = getattr(request, "request_dict", None) or {}
    run_id = headers.get("durablebeat_run")
    if not headers.get(REPLACEABLE) or run_id is None:
        return
    try:
        replaced = completion.is_replaced(int(run_id))
    except (DatabaseError, TypeError, ValueError):
        return
    if replaced:
        from celery.worker import state

        state.revoked.add(request.id)  # the pool's own check discards it (task_revoked)
        logger.warning(
            "replaced before it started, discarded: schedule=%s task_id=%s",
            headers.get(HEADER),
            request.id,
            extra={"event": "replaced_discarded", "schedule": headers.get(HEADER)},
        )


def on_process_shutdown(**_: Any) -> None:
    """A pool process exits: write what it kept, or log each write it drops (R22)."""
    backlog.drain()


def on_worker_init(**_: Any) -> None:
    """In the worker's main process, before the pool forks: pool children inherit the pid,
    so a run is attributed to the main process, whose liveness row says it lives."""
    global _main_pid
    _main_pid = os.getpid()


def connect() -> None:
    """Connect the receivers (idempotent)."""
    from celery import signals

    for sig, receiver in (
        (signals.task_prerun, on_prerun),
        (signals.task_postrun, on_postrun),
        (signals.task_revoked, on_revoked),
        (signals.task_received, on_received),
        (signals.task_internal_error, on_internal_error),
        (signals.worker_ready, on_worker_ready),
        (signals.worker_shutdown, on_worker_shutdown),
        (signals.worker_process_shutdown, on_process_shutdown),
        (signals.worker_init, on_worker_init),
    ):
        sig.connect(receiver, weak=False, dispatch_uid=f"durablebeat.{receiver.__name__}")
