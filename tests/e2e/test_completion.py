"""§3 and §4 with real processes: what really ran (R11-R13), orphans (R15), stuck (R16).

Workers run with short liveness and reclaim settings so that a dead worker is noticed in
seconds; every wait is on a condition in the database, bounded.
"""

from __future__ import annotations

import datetime as dt

import pytest

from durablebeat.beat.reclaim import ROUND_MARKER
from durablebeat.enums import RunState
from durablebeat.models import Boot, Incident, Marker, Run, Schedule, WorkerHeartbeat
from tests.e2eapp.models import Execution

from .harness import Cluster, wait_until

pytestmark = [pytest.mark.e2e]

TASKS = "tests.e2eapp.tasks"
FAST_RECLAIM = {
    "DURABLEBEAT_GC_INTERVAL": "1",
    "DURABLEBEAT_WORKER_HEARTBEAT_INTERVAL": "1",
    "DURABLEBEAT_WORKER_DEAD_AFTER": "4",
    "DURABLEBEAT_RECLAIM_MARGIN": "2",
    "DURABLEBEAT_UNCONFIRMED_AFTER": "1",
}
FINAL = (RunState.SUCCEEDED, RunState.FAILED, RunState.LOST)
#: the long-task test's worker-dead threshold, in seconds
DEAD_AFTER = 8
DEAD = dt.timedelta(seconds=DEAD_AFTER)


def _once(task: str, *args: object, **policy: object) -> dict[str, object]:
    """A schedule that fires once, one second after beat boots, then not for an hour."""
    return {
        "task": f"{TASKS}.{task}",
        "every": 3600,
        "args": list(args),
        "durablebeat": {"startup_grace": 1, **policy},
    }


def _run(schedule: str) -> Run | None:
    return Run.objects.filter(schedule__name=schedule).order_by("slot").first()


def _final(schedule: str) -> Run | None:
    run = _run(schedule)
    return run if run is not None and run.state in FINAL else None


def _beat_ran_past(proc_boots: int, seconds: float) -> bool:
    """The newest boot has been alive ``seconds`` past its start (heartbeats every 2 s)."""
    boots = list(Boot.objects.order_by("started_at"))
    if len(boots) < proc_boots:
        return False
    last = boots[-1]
    return last.heartbeat_at - last.started_at >= dt.timedelta(seconds=seconds)


def test_time_limits_end_in_the_state_the_body_earned_and_restarts_fire_nothing_again(
    cluster: Cluster,
):
    """R12/R13: past its soft limit but returned -> succeeded (flagged); soft limit escaped
    -> failed; hard limit kill -> failed, reconciled from the result backend, never lost."""
    # The pool notices a hard limit within a second or so and writes the failure from its
    # timeout thread; the margin leaves room for that on a loaded machine (R13's margin).
    cluster.settings = FAST_RECLAIM | {"DURABLEBEAT_RECLAIM_MARGIN": "10"}
    cluster.beat_schedule = {
        "outlive-soft": _once("outlive_soft_limit", 3),
        "escape-soft": _once("escape_soft_limit", 5),
        "hard-killed": _once("outlive_hard_limit", 10),
    }
    worker = cluster.worker(concurrency=3)
    wait_until(lambda: "ready" in worker.log(), 60, what="worker ready")
    beat = cluster.beat()
    names = list(cluster.beat_schedule)
    wait_until(lambda: all(_final(n) for n in names), 60, what="three runs final")

    outlived = _final("outlive-soft")
    assert outlived is not None
    assert outlived.state == RunState.SUCCEEDED
    assert outlived.soft_time_limit_exceeded
    assert outlived.worker and outlived.started_at and outlived.finished_at
    schedule = Schedule.objects.get(name="outlive-soft")
    assert schedule.last_completed_at == outlived.finished_at
    assert schedule.last_outcome == RunState.SUCCEEDED

    escaped = _final("escape-soft")
    assert escaped is not None
    assert escaped.state == RunState.FAILED
    assert "SoftTimeLimitExceeded" in escaped.error
    escaped_schedule = Schedule.objects.get(name="escape-soft")
    assert escaped_schedule.last_completed_at is None
    assert escaped_schedule.last_failed_at == escaped.finished_at

    killed = _final("hard-killed")
    assert killed is not None
    assert killed.state == RunState.FAILED, killed.detail
    assert "TimeLimitExceeded" in killed.error
    assert Schedule.objects.get(name="hard-killed").last_completed_at is None

    # Three deploys: each new beat lives past the startup grace; nothing fires again.
    for n in range(2, 5):
        assert beat.terminate() == 0
        beat = cluster.beat()
        wait_until(lambda n=n: _beat_ran_past(n, 4), 40, what=f"beat boot {n} past its grace")
    assert Run.objects.filter(schedule__name="outlive-soft").count() == 1
    assert Execution.objects.filter(schedule="outlive-soft").count() == 1
    assert Run.objects.count() == 3
    assert not Incident.objects.filter(kind="reclaim").exists()


def test_worker_killed_mid_task_blocks_skip_schedule_only_until_reclaim(cluster: Cluster):
    """R14-R16: the orphan's schedule skips (stuck since its first skip, reason kept), the
    reclaim marks the orphan lost once its worker is silent, then the schedule fires again."""
    cluster.settings = FAST_RECLAIM
    cluster.beat_schedule = {
        "sync": {
            "task": f"{TASKS}.sleep_then_record",
            "every": 3,
            "args": [120],
            "durablebeat": {"startup_grace": 1, "overlap": "skip"},
        }
    }
    doomed = cluster.worker(concurrency=1)
    wait_until(lambda: "ready" in doomed.log(), 60, what="worker ready")
    cluster.beat()
    orphan = wait_until(
        lambda: Run.objects.filter(schedule__name="sync", state=RunState.STARTED).first(),
        30,
        what="a started run",
    )
    # (a worker slow to start the orphan makes the first skips "still published")
    stuck = wait_until(
        lambda: Schedule.objects.filter(
            name="sync", stuck_since__isnull=False, stuck_reason__contains="still started"
        ).first(),
        30,
        what="a fire skipped behind the started run",
    )
    first_stuck = stuck.stuck_since
    assert "still started" in stuck.stuck_reason and orphan.worker in stuck.stuck_reason
    doomed.kill()

    def reclaimed_while_stuck_since_kept() -> bool:
        row = Schedule.objects.get(name="sync")
        orphan.refresh_from_db()
        # Once the worker is past its dead threshold the firing side may count the orphan
        # out of flight before a reclaim round marks it lost (rounds are throttled): the
        # schedule fires again, which ends this stuck stretch; only until then is it kept.
        refired = (
            Run.objects.filter(schedule__name="sync", slot__gt=orphan.slot)
            .exclude(state=RunState.SKIPPED)
            .exists()
        )
        if orphan.state != RunState.LOST and not refired:
            assert row.stuck_since == first_stuck, "stuck_since moved while still skipping"
        return orphan.state == RunState.LOST

    wait_until(reclaimed_while_stuck_since_kept, 40, what="the orphan reclaimed as lost")
    assert "reclaimed" in orphan.detail and orphan.finished_at is not None
    assert Incident.objects.filter(kind="reclaim", count__gte=1).exists()
    skipped = Run.objects.filter(schedule__name="sync", state=RunState.SKIPPED)
    assert skipped.exists() and all(r.slot > orphan.slot for r in skipped)

    rescuer = cluster.worker(concurrency=1)
    wait_until(lambda: "ready" in rescuer.log(), 60, what="second worker ready")
    fresh = wait_until(
        lambda: Run.objects.filter(
            schedule__name="sync", slot__gt=orphan.slot, state=RunState.STARTED
        ).first(),
        30,
        what="the schedule firing again",
    )
    assert fresh.worker != orphan.worker or fresh.worker_pid != orphan.worker_pid
    row = Schedule.objects.get(name="sync")
    assert row.stuck_since is None or row.stuck_since > first_stuck


def test_long_task_on_a_live_worker_is_never_reclaimed(cluster: Cluster):
    """R15: reclaim rounds run every second while a 20 s task runs on a live worker; none
    touches it, and it ends succeeded."""
    # A worker silent for 8 s is dead: a liveness write (every second) stalled a few
    # seconds on a loaded machine is not a death.
    cluster.settings = FAST_RECLAIM | {"DURABLEBEAT_WORKER_DEAD_AFTER": str(DEAD_AFTER)}
    cluster.beat_schedule = {"long": _once("sleep_then_record", 20)}
    worker = cluster.worker(concurrency=1)
    wait_until(lambda: "ready" in worker.log(), 60, what="worker ready")
    cluster.beat()
    states: set[str] = set()
    rounds_while_running: list[dt.datetime] = []

    def finished() -> Run | None:
        run = _run("long")
        if run is not None:
            states.add(run.state)
            if run.state == RunState.STARTED and run.started_at is not None:
                marker = Marker.objects.filter(key=ROUND_MARKER).first()
                if marker is not None and marker.at - run.started_at >= DEAD:
                    rounds_while_running.append(marker.at)
        return _final("long")

    run = wait_until(finished, 60, what="the long run final")
    assert run.state == RunState.SUCCEEDED
    assert RunState.LOST not in states
    assert RunState.STARTED in states
    assert not Incident.objects.filter(kind="reclaim").exists()
    # Rounds ran while it was running and the worker-dead threshold had passed since its
    # start: a reclaim that ignored the worker's liveness would have taken the run.
    assert rounds_while_running, "no reclaim round ran while the long task was running"
    assert WorkerHeartbeat.objects.filter(worker=run.worker, pid=run.worker_pid).exists()


def test_a_message_that_expired_in_the_queue_fails_the_run_it_does_not_hold_it(
    cluster: Cluster,
):
    """R11/R14: no worker was up while the slot's message waited past its ``expires``; the
    worker that comes up drops it. The run ends failed with why (from the worker's revoke
    signal: result reconciliation is off here), not published for ever, which would hold
    this ``overlap=skip`` schedule."""
    from durablebeat.core import clock

    cluster.settings = {"DURABLEBEAT_RESULT_RECONCILE": "0"}
    cluster.beat_schedule = {
        "expiring": {**_once("record"), "options": {"expires": 2}},
    }
    cluster.beat()
    run = wait_until(
        lambda: Run.objects.filter(schedule__name="expiring", state=RunState.PUBLISHED).first(),
        30,
        what="the run published",
    )
    wait_until(lambda: clock.now() > run.published_at + dt.timedelta(seconds=3), 10, what="expiry")
    worker = cluster.worker(concurrency=1)
    wait_until(lambda: "ready" in worker.log(), 60, what="worker ready")
    failed = wait_until(lambda: _final("expiring"), 30, what="the run final")
    assert failed.state == RunState.FAILED
    assert "expired" in failed.error
    assert not Execution.objects.filter(schedule="expiring").exists()
    assert Schedule.objects.get(name="expiring").last_failed_at == failed.finished_at
