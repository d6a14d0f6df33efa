"""Orphan reclaim, a beat loop hook (R13, R15, R22).

A run whose worker died stays "started" for ever, and under ``overlap=skip`` its schedule
skips for ever: the 13-day silent stop behind §4. So every beat runs this as a loop
hook, at most every ``GC_INTERVAL`` across all beats and restarts (the last round's time is
a row in the database, taken by compare-and-set), in three steps:

1. **Reconcile** (R13): runs with no worker news for ``UNCONFIRMED_AFTER``, and runs
   reclaimed lately, are looked up in the result backend; a recorded success or failure
   is applied (a hard time limit kill is only ever recorded there). Lost runs that turn out
   to have completed become succeeded or failed: the later evidence wins (R11).
2. **Reclaim** (R15): a started run is marked lost only on evidence that it is dead: its
   worker's liveness row is older than ``WORKER_DEAD_AFTER``, or it has run past its hard
   time limit plus ``RECLAIM_MARGIN``. A run whose worker is alive and within its limit is
   never touched.
3. **No news** (R22): a run published but never started names no worker, so it is not
   reclaimed; past its no-news bound it is marked ``no_news`` (a message lost by the
   broker, or a queue nobody consumes), which ``check`` reports and which no longer holds
   an ``overlap=skip`` schedule. A start or completion that comes later still wins.

Whether a started run is dead and the no-news write are also what a claim asks before it
skips for an earlier run (``beat.claims``): both are in ``liveness``.
"""

from __future__ import annotations

import datetime as dt
import logging
import uuid
from dataclasses import dataclass
from typing import Any

from django.db import DatabaseError, IntegrityError
from django.db.models import F, Q

from .. import conf, db
from ..core.policy import news_overdue, no_news_bound
from ..enums import RunState
from ..models import Incident, Marker, Run, WorkerHeartbeat
from ..overlap import release_kept
from ..pausing import Ended, after_runs
from ..worker import completion
from .liveness import dead_reason, mark_no_news_runs, worker_seen_at
from .loop import Loop

logger = logging.getLogger("durablebeat")

#: the Marker row whose compare-and-set elects one reclaim round at a time
ROUND_MARKER = "orphan_reclaim"
#: most runs looked up in the result backend, and reclaimed, in one round
ROUND_LIMIT = 500
#: how long after its reclaim a lost run is still looked up in the result backend
LOST_RECHECK_FOR = dt.timedelta(hours=24)
#: liveness rows of worker processes silent this long are deleted (each start adds one)
FORGET_WORKERS_AFTER = dt.timedelta(days=7)


# --- the loop hook ---------------------------------------------------------------------------


@dataclass
class OrphanReclaim:
    """The beat loop hook: one round when this beat holds the shared turn."""

    next_look: dt.datetime | None = None
    rounds: int = 0

    def __call__(self, loop: Loop, now: dt.datetime) -> None:
        if self.next_look is not None and now < self.next_look:
            return
        every = conf.settings.GC_INTERVAL
        turn_again_at = take_turn(now, every)
        if turn_again_at is not None:
            self.next_look = turn_again_at  # another beat (or an earlier boot) had it
            return
        self.next_look = now + every
        self.rounds += 1
        try:
            run_round(now, loop.boot_id)
        except DatabaseError:
            raise  # the engine falls back to memory and retries the database
        except Exception:  # a bug here must never stop the firing
            logger.exception("orphan reclaim failed", extra={"event": "reclaim_failed"})


def take_turn(now: dt.datetime, every: dt.timedelta, key: str = ROUND_MARKER) -> dt.datetime | None:
    """Compare-and-set on the shared marker ``key``: None when this beat runs the round now,
    else when the next round is due. (The retention's pruning takes its turn here too.)"""
    if Marker.objects.filter(key=key, at__lte=now - every).update(at=now):
        return None
    try:
        with db.atomic():
            Marker.objects.create(key=key, at=now)
        return None
    except IntegrityError:
        pass
    last = Marker.objects.filter(key=key).values_list("at", flat=True).first()
    if last is None:
        return now  # deleted meanwhile: look again on the next tick
    return min(last, now) + every


def run_round(now: dt.datetime, boot_id: uuid.UUID | None) -> tuple[int, int]:
    """Reconcile, then reclaim; returns (runs reconciled, runs reclaimed).

    A result backend that fails does not hold up the reclaim: a completion it reports
    later still overrides lost (R11; lost runs are looked up again for a while)."""
    try:
        reconciled = reconcile_results(now)
    except DatabaseError:
        raise  # our own database: the engine falls back to memory
    except Exception:
        logger.exception(
            "result backend reconciliation failed; the reclaim goes on",
            extra={"event": "reconcile_failed"},
        )
        reconciled = 0
    done = reconciled, reclaim(now, boot_id)
    no_news_round(now)
    # A run of a forgotten worker reads as "no liveness row": still evidence of death.
    WorkerHeartbeat.objects.filter(seen_at__lt=now - FORGET_WORKERS_AFTER).delete()
    return done


# --- step 1: the result backend (R13) --------------------------------------------------------


def reconcile_results(now: dt.datetime, app: Any = None) -> int:
    s = conf.settings
    if not s.RESULT_RECONCILE:
        return 0
    backend = _backend(app)
    if backend is None:
        return 0
    quiet_since = now - s.UNCONFIRMED_AFTER
    unconfirmed = Q(state=RunState.PUBLISHED, published_at__lte=quiet_since) | Q(
        state=RunState.STARTED, started_at__lte=quiet_since
    )
    lately_lost = Q(state=RunState.LOST, finished_at__gte=now - LOST_RECHECK_FOR) | Q(
        state=RunState.NO_NEWS, claimed_at__gte=now - LOST_RECHECK_FOR
    )
    task_ids = [
        task_id
        for task_id in Run.objects.filter(unconfirmed | lately_lost)
        .exclude(task_id=None)
        .order_by("claimed_at")
        .values_list("task_id", flat=True)[:ROUND_LIMIT]
        if task_id is not None
    ]
    done = failed = 0
    for task_id in task_ids:
        try:
            event = _finished_from_backend(backend, task_id, now)
        except DatabaseError:
            raise
        except Exception as exc:  # one result the backend cannot give must not stop the rest
            failed += 1
            if failed == 1:
                logger.warning(
                    "result backend lookup failed task_id=%s: %s",
                    task_id,
                    exc,
                    extra={"event": "reconcile_lookup_failed", "task_id": task_id},
                )
            continue
        if event is not None and completion.finish(event):
            done += 1
            logger.info(
                "reconciled task_id=%s state=%s from the result backend",
                task_id,
                RunState.SUCCEEDED if event.succeeded else RunState.FAILED,
                extra={"event": "reconciled", "task_id": task_id},
            )
    return done


def _backend(app: Any) -> Any:
    from celery.backends.base import DisabledBackend

    if app is None:
        from celery import current_app

        app = current_app._get_current_object()
    backend = app.backend
    return None if isinstance(backend, DisabledBackend) else backend


def _finished_from_backend(backend: Any, task_id: str, now: dt.datetime) -> Any:
    meta = backend.get_task_meta(task_id)
    status = meta.get("status")
    if status not in ("SUCCESS", "FAILURE", "REVOKED"):
        return None
    done_at = meta.get("date_done") or now
    if isinstance(done_at, str):
        done_at = dt.datetime.fromisoformat(done_at)
    if done_at.tzinfo is None:
        done_at = done_at.replace(tzinfo=dt.UTC)
    if status == "SUCCESS":
        return completion.Finished(task_id, done_at, succeeded=True, from_backend=True)
    result = meta.get("result")
    error = f"{type(result).__name__}: {result}" if isinstance(result, BaseException) else ""
    error = error or f"{status}: {result!r}"
    return completion.Finished(task_id, done_at, succeeded=False, error=error, from_backend=True)


# --- step 2: reclaim (R15) -------------------------------------------------------------------


def reclaim(now: dt.datetime, boot_id: uuid.UUID | None) -> int:
    runs = list(
        Run.objects.filter(state=RunState.STARTED, started_at__isnull=False)
        .select_related("schedule")
        .order_by("started_at")[:ROUND_LIMIT]
    )
    if not runs:
        return 0
    seen = worker_seen_at(runs)
    reclaimed: list[str] = []
    ended: list[int] = []
    lost: list[Ended] = []
    for run in runs:
        why = dead_reason(run, seen, now)
        if why is None:
            continue
        # Compare-and-set: a completion that arrived meanwhile wins.
        moved = Run.objects.filter(
            pk=run.pk, state=RunState.STARTED, started_at=run.started_at
        ).update(state=RunState.LOST, finished_at=now, detail=f"reclaimed: {why}"[:300])
        if moved:
            ended.append(run.schedule_id)
            lost.append(Ended(run.schedule_id, run.schedule.pause_after_failures, RunState.LOST))
            reclaimed.append(f"{run.schedule.name} slot {run.slot.isoformat()}: {why}")
            logger.warning(
                "lost schedule=%s slot=%s task_id=%s reason=%s",
                run.schedule.name,
                run.slot.isoformat(),
                run.task_id,
                why,
                extra={"event": "lost", "schedule": run.schedule.name},
            )
    release_kept(ended, now)  # R34: a slot kept behind a lost run goes now
    after_runs(lost, now)  # R36: a lost run counts as a failure in a row
    if reclaimed:
        Incident.objects.create(
            kind="reclaim",
            detail="\n".join(reclaimed[:20]),
            count=len(reclaimed),
            at=now,
            boot_id=boot_id,
        )
        logger.warning(
            "reclaim count=%d: runs whose worker is gone or past their hard limit are lost",
            len(reclaimed),
            extra={"event": "reclaim", "count": len(reclaimed)},
        )
    return len(reclaimed)


# --- step 3: no news (R22) ------------------------------------------------------------------


def no_news_round(now: dt.datetime) -> int:
    """Published runs of any schedule past their no-news bound become ``no_news``, so that
    ``check``, ``status`` and the admin say so for ``overlap=allow`` schedules too (a skip
    schedule's own are marked as soon as its next slot is claimed)."""
    s = conf.settings
    # Past NO_NEWS_AFTER, or with an expiry (a shorter bound, checked per run), oldest first.
    candidates = (
        Run.objects.filter(state=RunState.PUBLISHED, published_at__isnull=False)
        .annotate(
            expire_seconds=F("schedule__expire_seconds"),
            countdown=F("schedule__countdown"),
            schedule_name=F("schedule__name"),
        )
        .filter(Q(published_at__lt=now - s.NO_NEWS_AFTER) | Q(expire_seconds__isnull=False))
        .order_by("published_at")[:ROUND_LIMIT]
    )
    overdue = [
        run
        for run in candidates
        if run.published_at is not None
        and news_overdue(
            run.published_at,
            no_news_bound(run.expire_seconds, s.NO_NEWS_AFTER, run.countdown),
            now,
        )
    ]
    moved = mark_no_news_runs(overdue)
    if moved:  # R34: a slot kept behind a run past its no-news bound goes now
        release_kept((run.schedule_id for run in overdue), now)
    return moved
