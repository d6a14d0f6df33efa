"""Is a run still alive? What the orphan reclaim round (``reclaim``) and a skip schedule's
claim (``claims``) both ask before they give up on an earlier run: whether a started run is
dead (R15), and the write that marks a published run ``no_news`` (R22).

Both callers are the beat loop's, so this lives in beat/; the worker side only writes the
evidence (its liveness rows, ``worker.tracking``) and never reads it back.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Iterable, Mapping, Sequence

from .. import conf
from ..core.policy import StartedRun, no_news_bound, reclaim_reason
from ..enums import RunState
from ..models import Run, WorkerHeartbeat

logger = logging.getLogger("durablebeat")


def no_news_detail(run: Run, bound: dt.timedelta) -> str:
    sent = run.published_at or run.claimed_at
    return (
        f"no news since {sent.isoformat(timespec='seconds')}: no worker started it within "
        f"{bound.total_seconds():g} s (message lost, or its queue not consumed); it no "
        "longer holds its schedule (R22)"
    )[:300]


def mark_no_news_runs(runs: Sequence[Run]) -> int:
    """Published runs past their no-news bound: ``no_news`` with why. Only from published
    (compare-and-set): a start or a completion that came meanwhile wins (R11). This round's
    and the claim's (``beat.claims``, a skip schedule's own runs) write."""
    s = conf.settings
    moved = 0
    for run in runs:
        bound = no_news_bound(
            getattr(run, "expire_seconds", None), s.NO_NEWS_AFTER, getattr(run, "countdown", None)
        )
        moved += Run.objects.filter(pk=run.pk, state=RunState.PUBLISHED).update(
            state=RunState.NO_NEWS, detail=no_news_detail(run, bound)
        )
        name = getattr(run, "schedule_name", None) or run.schedule_id
        logger.warning(
            "no news schedule=%s slot=%s task_id=%s: no worker started it within %g s",
            name,
            run.slot.isoformat(),
            run.task_id,
            bound.total_seconds(),
            extra={"event": "no_news", "schedule": name, "task_id": run.task_id},
        )
    return moved


# --- is a started run dead? (R15): the reclaim's and the overlap skip's evidence ------------


def _worker_key(run: Run) -> tuple[str, int]:
    return run.worker, run.worker_pid or 0


def worker_seen_at(runs: Iterable[Run]) -> dict[tuple[str, int], dt.datetime]:
    """The last liveness write of each run's worker process that has one, by (worker, pid)."""
    wanted = {_worker_key(run) for run in runs}
    if not wanted:
        return {}
    rows = WorkerHeartbeat.objects.filter(worker__in={w for w, _ in wanted})
    return {
        (w, p): at for w, p, at in rows.values_list("worker", "pid", "seen_at") if (w, p) in wanted
    }


def dead_reason(
    run: Run, seen: Mapping[tuple[str, int], dt.datetime], now: dt.datetime
) -> str | None:
    """Why a started run is dead (its worker silent past ``WORKER_DEAD_AFTER``, or past its
    hard time limit plus ``RECLAIM_MARGIN``), or None with no evidence that it is (R15).
    ``seen``: ``worker_seen_at`` of the runs asked about."""
    if run.started_at is None:  # never started: nothing to judge
        return None
    s = conf.settings
    view = StartedRun(run.started_at, run.worker, run.worker_pid, run.hard_time_limit)
    seen_at = seen.get(_worker_key(run))
    return reclaim_reason(view, seen_at, now, s.WORKER_DEAD_AFTER, s.RECLAIM_MARGIN)
