"""The reclaim decision alone (R15): evidence of death, or nothing is touched."""

from __future__ import annotations

import datetime as dt
import math

from durablebeat.core.policy import StartedRun, hard_limit, reclaim_reason

T0 = dt.datetime(2026, 3, 2, 12, 0, tzinfo=dt.UTC)
S = dt.timedelta(seconds=1)
DEAD, MARGIN = 120 * S, 60 * S


def _run(hard: float | None = None) -> StartedRun:
    return StartedRun(started_at=T0, worker="w@h", worker_pid=7, hard_time_limit=hard)


def test_live_worker_within_no_limit_is_never_reclaimed_however_long():
    now = T0 + dt.timedelta(days=30)
    assert reclaim_reason(_run(), now - S, now, DEAD, MARGIN) is None


def test_silent_worker_is_evidence_only_past_the_dead_threshold():
    seen = T0 + 10 * S
    assert reclaim_reason(_run(), seen, seen + DEAD, DEAD, MARGIN) is None
    why = reclaim_reason(_run(), seen, seen + DEAD + S, DEAD, MARGIN)
    assert why is not None and "w@h" in why and "silent since" in why


def test_no_liveness_row_counts_only_after_the_dead_threshold_from_the_start():
    assert reclaim_reason(_run(), None, T0 + DEAD, DEAD, MARGIN) is None
    assert reclaim_reason(_run(), None, T0 + DEAD + S, DEAD, MARGIN) is not None


def test_hard_limit_plus_margin_reclaims_even_a_live_worker():
    limit = 30 * S
    at_edge = T0 + limit + MARGIN
    assert reclaim_reason(_run(30), at_edge, at_edge, DEAD, MARGIN) is None
    why = reclaim_reason(_run(30), at_edge + S, at_edge + S, DEAD, MARGIN)
    assert why is not None and "hard time limit (30 s)" in why


def test_a_nonsense_limit_is_none_and_one_beyond_a_timedelta_never_runs_out():
    for nonsense in (None, math.nan, 0.0, -5.0, -1e308):
        assert hard_limit(nonsense) is None, nonsense
    assert hard_limit(30) == 30 * S
    assert hard_limit(1e308) == hard_limit(math.inf) == dt.timedelta.max
