"""The worker's tracking writes that could not be made yet, kept and made later (R22).

A run's state must not hang on one write. A start or a completion that meets a database
error (a cut, a failover, a restart) is kept here, in order, and a background thread of the
worker process writes it once the database answers. So is one whose run is not in the
ledger yet: beat writes the fires it sent from memory during an outage when the database
is back (R5), and the worker's news of those runs must wait for that.

Bounded: at most ``MAX_KEPT`` writes (the oldest is dropped first, and logged), and a write
whose run is still absent ``ABSENT_FOR`` after the database first answered is dropped (not
a durablebeat run after all, or one whose fire was never written). Every write is a
conditional update keyed on the task id (``completion``), so making one twice, or late, is
harmless; the order of one task's writes is kept.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from django.db import DatabaseError, DataError, IntegrityError, close_old_connections

from .. import db
from ..models import Run
from . import completion

logger = logging.getLogger("durablebeat")

#: most writes one worker process keeps
MAX_KEPT = 10_000
#: how long a write waits for its run to appear once the database answers, in seconds
ABSENT_FOR = 600.0
#: first wait after a failed pass, and the longest (seconds): the database is looked at
#: again this often while it is down
FIRST_WAIT, LONGEST_WAIT = 0.5, 2.0
#: the wait while only runs not written yet are waited for (seconds)
ABSENT_WAIT = 1.0

Event = completion.Started | completion.Finished


@dataclass
class Write:
    """One move of a run, as the worker saw it."""

    what: str  #: "the start", "the completion", ... for the log
    event: Event
    absent_since: float | None = None  #: when the database first answered without its run

    @property
    def task_id(self) -> str:
        return self.event.task_id


#: what one try of a write came to
DONE, RETRY, ABSENT, REFUSED = "done", "retry", "absent", "refused"


def apply(event: Event) -> bool:
    """Make the write; False when it moved nothing."""
    if isinstance(event, completion.Started):
        return completion.start(event)
    return completion.finish(event)


def try_write(write: Write, make: Callable[[Event], bool] = apply) -> str:
    """DONE (made, or nothing left to move), RETRY (the database failed: try again later),
    ABSENT (no run with that task id yet) or REFUSED (the write itself can never be made:
    the database refuses its values, or it cannot even be encoded; logged, never retried,
    so that one bad write never holds up the ones behind it)."""
    try:
        close_old_connections()
        if make(write.event) or Run.objects.filter(task_id=write.task_id).exists():
            return DONE
        return ABSENT
    except (DataError, IntegrityError) as exc:
        _refused(write, exc)
        return REFUSED
    except DatabaseError as exc:
        with contextlib.suppress(DatabaseError):
            db.connection().close()
        logger.warning(
            "could not record %s of task %s now, kept to write when the database answers: %s",
            write.what,
            write.task_id,
            exc,
            extra={"event": "tracking_kept", "task_id": write.task_id},
        )
        return RETRY
    except Exception as exc:  # not the database's: this write's own values
        _refused(write, exc)
        return REFUSED


def _refused(write: Write, exc: BaseException) -> None:
    logger.error(
        "dropped %s of task %s: the database cannot take it: %s: %s",
        write.what,
        write.task_id,
        type(exc).__name__,
        exc,
        extra={"event": "tracking_dropped", "task_id": write.task_id},
    )


class Backlog:
    """Writes kept by one process, and the thread that makes them (started on demand).

    No database write is made while the lock is held: a database that hangs (a connect to a
    host that does not answer) holds up only the write that meets it, never the tasks that
    keep theirs behind it."""

    def __init__(
        self,
        make: Callable[[Event], bool] = apply,
        clock: Callable[[], float] = time.monotonic,
        max_kept: int = MAX_KEPT,
        absent_for: float = ABSENT_FOR,
        background: bool = True,
    ) -> None:
        """``background``: a thread makes what is kept (tests call ``flush`` instead)."""
        self.make, self.clock = make, clock
        self.max_kept, self.absent_for, self.background = max_kept, absent_for, background
        self._reset()

    def _reset(self) -> None:
        self.kept: deque[Write] = deque()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._stopping = threading.Event()
        self._in_pass = 0  #: writes taken out by the pass under way

    def __len__(self) -> int:
        with self._lock:
            return len(self.kept) + self._in_pass

    def submit(self, write: Write) -> None:
        """Make ``write`` now, or keep it behind the ones already kept (their order holds)."""
        with self._lock:
            if self.kept or self._in_pass:
                self._keep(write)
                return
        outcome = try_write(write, self.make)
        if outcome in (DONE, REFUSED):
            return
        if outcome == ABSENT:
            write.absent_since = self.clock()
        with self._lock:
            self._keep(write)

    def _keep(self, write: Write) -> None:
        """With the lock held."""
        if len(self.kept) >= self.max_kept:
            self._drop(self.kept.popleft(), f"more than {self.max_kept} writes kept")
        self.kept.append(write)
        if self.background:
            self._ensure_thread()

    def flush(self) -> str:
        """One pass over what is kept, in order; RETRY when the database still fails, ABSENT
        when writes wait for their runs, DONE when nothing is left."""
        with self._lock:
            if self._in_pass:
                return RETRY  # another pass is under way
            batch, self.kept = self.kept, deque()
            self._in_pass = len(batch)
        left: deque[Write] = deque(batch)
        outcome = RETRY
        try:
            left, outcome = self._pass(batch)
        finally:
            with self._lock:
                left.extend(self.kept)  # kept while the pass went on: behind the rest
                self.kept = left
                self._in_pass = 0
        return outcome

    def _pass(self, batch: deque[Write]) -> tuple[deque[Write], str]:
        waiting: set[str] = set()  # tasks with an earlier write still kept: keep their order
        left: deque[Write] = deque()
        made, failed = 0, False
        while batch:
            write = batch.popleft()
            if write.task_id in waiting:
                left.append(write)
                continue
            outcome = try_write(write, self.make)
            if outcome == RETRY:
                failed = True
                left.append(write)
                left.extend(batch)
                batch.clear()
                break
            if outcome in (DONE, REFUSED):
                made += outcome == DONE
                continue
            now = self.clock()
            if write.absent_since is None:
                write.absent_since = now
            if now - write.absent_since > self.absent_for:
                self._drop(write, f"no run with this task id after {self.absent_for:g} s")
                continue
            waiting.add(write.task_id)
            left.append(write)
        if made:
            logger.info(
                "wrote %d kept tracking writes (%d still kept)",
                made,
                len(left),
                extra={"event": "tracking_written", "count": made},
            )
        if not left:
            return left, DONE
        return left, RETRY if failed else ABSENT

    @staticmethod
    def _drop(write: Write, why: str) -> None:
        logger.error(
            "dropped %s of task %s: %s",
            write.what,
            write.task_id,
            why,
            extra={"event": "tracking_dropped", "task_id": write.task_id},
        )

    def _ensure_thread(self) -> None:
        """With the lock held."""
        if self._thread is None or not self._thread.is_alive():
            self._stopping.clear()
            self._thread = threading.Thread(
                target=self._run, name="durablebeat-tracking", daemon=True
            )
            self._thread.start()

    def _run(self) -> None:
        wait = FIRST_WAIT
        try:
            while not self._stopping.wait(wait):
                try:
                    outcome = self.flush()
                except Exception:  # never let the thread die with writes kept
                    logger.exception("tracking pass failed", extra={"event": "tracking_failed"})
                    outcome = RETRY
                if outcome == DONE:
                    with self._lock:
                        if not self.kept and not self._in_pass:
                            self._thread = None
                            return
                    wait = FIRST_WAIT  # kept meanwhile
                elif outcome == ABSENT:
                    wait = ABSENT_WAIT
                else:
                    wait = min(LONGEST_WAIT, wait * 2)
        finally:
            with contextlib.suppress(DatabaseError):
                db.connection().close()

    def drain(self, timeout: float = 5.0) -> None:
        """At exit: one last pass, and a line for every write that is dropped."""
        self._stopping.set()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout)  # a pass under way finishes first
        if len(self):
            self.flush()
        with self._lock:
            for write in self.kept:
                self._drop(write, "the worker process is exiting")
            self.kept.clear()

    def after_fork(self) -> None:
        """A forked pool process starts with nothing kept and no thread."""
        self._reset()


backlog = Backlog()
os.register_at_fork(after_in_child=backlog.after_fork)
