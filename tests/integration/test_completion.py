"""§3 and §4 against a real database: run moves (R11, R12), the result backend (R13),
overlap and stuck (R14, R16), orphan reclaim and its throttle (R15). Time is passed in; the
real worker and beat processes are in tests/e2e/test_completion.py."""

from __future__ import annotations

import datetime as dt
import logging
import uuid

import pytest
from celery.exceptions import TimeLimitExceeded
from django.db import OperationalError

from durablebeat.beat import reclaim
from durablebeat.enums import RunState
from durablebeat.models import Incident, Run, Schedule, WorkerHeartbeat
from durablebeat.worker import completion, tracking
from durablebeat.worker.backlog import Backlog
from project.celery import app

pytestmark = pytest.mark.django_db(transaction=True)

S = dt.timedelta(seconds=1)
DEAD_AFTER = 120 * S  # the defaults of WORKER_DEAD_AFTER and RECLAIM_MARGIN
MARGIN = 60 * S


@pytest.fixture
def job(make_schedule, t0):
    return make_schedule("job", every=60, overlap="skip", next_fire_at=t0)


@pytest.fixture
def flight(make_run, job, t0):
    """A run in flight: published at t0, as beat leaves it."""

    def make(state: str = RunState.PUBLISHED, **fields) -> Run:
        fields.setdefault("published_at", t0)
        return make_run(job, fields.pop("slot", t0), state=state, **fields)

    return make


def _start(run: Run, at: dt.datetime, worker: str = "w1@host", pid: int = 10, hard=None) -> bool:
    return completion.start(completion.Started(run.task_id, at, worker, pid, hard))


def _finish(run: Run, at: dt.datetime, ok: bool = True, **kw) -> bool:
    return completion.finish(completion.Finished(run.task_id, at, succeeded=ok, **kw))


# --- run moves (R11, R12) ------------------------------------------------------------------


def test_success_moves_last_completed_at_and_records_the_run(flight, job, t0):
    run = flight()
    assert _start(run, t0 + 1 * S, hard=30.0)
    assert _finish(run, t0 + 9 * S, soft_time_limit_exceeded=True)
    run.refresh_from_db()
    assert run.state == RunState.SUCCEEDED
    assert (run.started_at, run.finished_at) == (t0 + 1 * S, t0 + 9 * S)
    assert (run.worker, run.worker_pid, run.hard_time_limit) == ("w1@host", 10, 30.0)
    assert run.soft_time_limit_exceeded
    job.refresh_from_db()
    assert job.last_completed_at == t0 + 9 * S
    assert job.last_outcome == RunState.SUCCEEDED


def test_failure_moves_last_failed_at_never_last_completed_at(flight, job, t0):
    run = flight()
    assert _finish(run, t0 + 5 * S, ok=False, error="RuntimeError: boom")
    run.refresh_from_db()
    job.refresh_from_db()
    assert (run.state, run.error) == (RunState.FAILED, "RuntimeError: boom")
    assert job.last_completed_at is None
    assert (job.last_failed_at, job.last_outcome) == (t0 + 5 * S, RunState.FAILED)


def test_late_success_moves_last_completed_at_however_late(flight, job, t0):
    run = flight()
    late = t0 + dt.timedelta(days=3)
    assert _finish(run, late)
    job.refresh_from_db()
    assert job.last_completed_at == late


def test_an_older_completion_reported_late_moves_no_time_back(flight, job, t0):
    """R11: the run of slot t0 is reconciled after the run of slot t0 + 60 s finished; the
    run is recorded, the schedule keeps its newer completion and outcome."""
    old, new = flight(slot=t0), flight(slot=t0 + 60 * S)
    assert _finish(new, t0 + 70 * S)
    assert _finish(old, t0 + 30 * S, ok=False, error="RuntimeError: boom")
    job.refresh_from_db()
    assert (job.last_completed_at, job.last_outcome) == (t0 + 70 * S, RunState.SUCCEEDED)
    assert job.last_failed_at == t0 + 30 * S  # the first failure seen is still a failure
    assert Run.objects.get(pk=old.pk).state == RunState.FAILED
    older = flight(slot=t0 - 60 * S)
    assert _finish(older, t0 - 50 * S)
    job.refresh_from_db()
    assert (job.last_completed_at, job.last_outcome) == (t0 + 70 * S, RunState.SUCCEEDED)


def test_completion_after_lost_wins(flight, t0):
    run = flight(RunState.LOST, finished_at=t0 + 200 * S, detail="reclaimed: worker silent")
    assert _finish(run, t0 + 300 * S)
    run.refresh_from_db()
    assert run.state == RunState.SUCCEEDED and run.detail == ""


def test_a_redelivered_run_is_attributed_to_the_worker_that_runs_it_now(flight, t0):
    run = flight()
    assert _start(run, t0 + S, worker="dead@host", pid=1)
    assert _start(run, t0 + 200 * S, worker="alive@host", pid=2)
    run.refresh_from_db()
    assert (run.worker, run.worker_pid, run.started_at) == ("alive@host", 2, t0 + 200 * S)


def test_a_finished_run_never_moves_again(flight, t0):
    run = flight()
    assert _finish(run, t0 + 5 * S)
    assert not _finish(run, t0 + 6 * S, ok=False, error="late FAILURE")
    assert not _start(run, t0 + 7 * S)
    run.refresh_from_db()
    assert run.state == RunState.SUCCEEDED and run.finished_at == t0 + 5 * S


def test_a_task_id_that_is_not_a_run_changes_nothing(flight, t0):
    flight()
    event = completion.Finished(str(uuid.uuid4()), t0, succeeded=True)
    assert not completion.finish(event)
    assert Schedule.objects.get(name="job").last_completed_at is None


class _FakeRequest:
    hostname = "w1@host"
    timelimit = (None, None)
    headers = {"durablebeat_schedule": "job"}


class _FakeTask:
    request = _FakeRequest()
    time_limit = None
    app = app


def test_a_failed_tracking_write_never_fails_the_task_and_is_kept(flight, monkeypatch, caplog):
    run = flight()
    kept = Backlog(background=False)
    monkeypatch.setattr(tracking, "backlog", kept)

    def database_down(event):
        raise OperationalError("server closed the connection unexpectedly")

    monkeypatch.setattr(completion, "start", database_down)
    monkeypatch.setattr(completion, "finish", database_down)
    with caplog.at_level(logging.WARNING, logger="durablebeat"):
        tracking.on_prerun(task_id=run.task_id, task=_FakeTask())
        tracking.on_postrun(task_id=run.task_id, task=_FakeTask(), retval=1, state="SUCCESS")
    assert [r.event for r in caplog.records] == ["tracking_kept"]  # the second waits behind
    assert [w.what for w in kept.kept] == ["the start", "the completion"]
    run.refresh_from_db()
    assert run.state == RunState.PUBLISHED
    monkeypatch.undo()  # the database answers again (R22)
    assert kept.flush() == "done"
    run.refresh_from_db()
    assert run.state == RunState.SUCCEEDED and run.worker == "w1@host"


# --- the result backend (R13) ----------------------------------------------------------------


def test_hard_limit_kill_is_reconciled_from_the_result_backend_not_reclaimed(flight, t0):
    """The worker is gone too: reconciliation runs first, so the run is failed, not lost."""
    run = flight(RunState.STARTED, started_at=t0, worker="w1@host", worker_pid=10)
    app.backend.mark_as_failure(run.task_id, TimeLimitExceeded(2))
    now = t0 + dt.timedelta(hours=1)
    assert reclaim.run_round(now, None) == (1, 0)
    run.refresh_from_db()
    assert run.state == RunState.FAILED
    assert "TimeLimitExceeded" in run.error
    assert Schedule.objects.get(name="job").last_completed_at is None


def test_a_lost_run_that_the_backend_saw_succeed_becomes_succeeded(flight, t0):
    run = flight(RunState.LOST, finished_at=t0 + 300 * S)
    app.backend.mark_as_done(run.task_id, "ok")
    assert reclaim.reconcile_results(t0 + 600 * S, app) == 1
    run.refresh_from_db()
    assert run.state == RunState.SUCCEEDED


def test_a_run_with_recent_worker_news_is_not_looked_up(flight, t0, settings):
    settings.DURABLEBEAT_UNCONFIRMED_AFTER = 300
    run = flight(RunState.STARTED, started_at=t0, worker="w1@host", worker_pid=10)
    app.backend.mark_as_done(run.task_id, "ok")
    assert reclaim.reconcile_results(t0 + 200 * S, app) == 0
    assert reclaim.reconcile_results(t0 + 301 * S, app) == 1


def test_a_result_the_backend_cannot_give_stops_neither_the_others_nor_the_reclaim(
    flight, t0, monkeypatch, caplog
):
    """R13 then R15: one lookup that raises (a result the backend cannot decode) leaves the
    other runs reconciled; a backend that fails altogether does not hold up the reclaim."""
    broken = flight(RunState.STARTED, slot=t0 - 60 * S, started_at=t0 - 60 * S, worker="w1@host")
    done = flight(RunState.STARTED, started_at=t0, worker="w1@host", worker_pid=10)
    app.backend.mark_as_done(done.task_id, "ok")
    real = app.backend.get_task_meta

    def meta(task_id, *args, **kwargs):
        if task_id == broken.task_id:
            raise ValueError("cannot decode the stored result")
        return real(task_id, *args, **kwargs)

    monkeypatch.setattr(app.backend, "get_task_meta", meta)
    now = t0 + dt.timedelta(hours=1)  # w1 has no liveness row: its runs are orphans
    with caplog.at_level(logging.WARNING, logger="durablebeat"):
        assert reclaim.run_round(now, None) == (1, 1)
    assert Run.objects.get(pk=done.pk).state == RunState.SUCCEEDED
    assert Run.objects.get(pk=broken.pk).state == RunState.LOST
    assert "reconcile_lookup_failed" in [r.event for r in caplog.records]

    def down(*args, **kwargs):
        raise ConnectionError("Error 111 connecting to the result backend")

    monkeypatch.setattr(reclaim, "reconcile_results", down)
    orphan = flight(RunState.STARTED, slot=t0 + 60 * S, started_at=t0, worker="w1@host")
    assert reclaim.run_round(now + dt.timedelta(hours=1), None) == (0, 1)
    assert Run.objects.get(pk=orphan.pk).state == RunState.LOST


# --- reclaim (R15) ---------------------------------------------------------------------------


def _heartbeat(worker: str, pid: int, at: dt.datetime) -> None:
    WorkerHeartbeat.objects.create(worker=worker, pid=pid, seen_at=at)


def test_run_of_a_silent_worker_is_reclaimed_as_lost_with_an_incident(flight, t0):
    run = flight(RunState.STARTED, started_at=t0, worker="w1@host", worker_pid=10)
    _heartbeat("w1@host", 10, t0 + 30 * S)
    now = t0 + 30 * S + DEAD_AFTER + S
    assert reclaim.reclaim(now, None) == 1
    run.refresh_from_db()
    assert run.state == RunState.LOST and run.finished_at == now
    assert "silent since" in run.detail
    incident = Incident.objects.get(kind="reclaim")
    assert incident.count == 1 and "job" in incident.detail


def test_run_of_a_live_worker_within_its_limit_is_never_touched(flight, t0):
    run = flight(
        RunState.STARTED, started_at=t0, worker="w1@host", worker_pid=10, hard_time_limit=None
    )
    now = t0 + dt.timedelta(days=2)  # very long, but the worker says it is alive
    _heartbeat("w1@host", 10, now - 10 * S)
    assert reclaim.reclaim(now, None) == 0
    run.refresh_from_db()
    assert run.state == RunState.STARTED
    assert not Incident.objects.exists()


def test_run_past_its_hard_limit_plus_margin_is_reclaimed_even_on_a_live_worker(flight, t0):
    run = flight(
        RunState.STARTED, started_at=t0, worker="w1@host", worker_pid=10, hard_time_limit=30
    )
    _heartbeat("w1@host", 10, t0 + 500 * S)
    assert reclaim.reclaim(t0 + 30 * S + MARGIN, None) == 0  # not past it yet
    assert reclaim.reclaim(t0 + 30 * S + MARGIN + S, None) == 1
    run.refresh_from_db()
    assert "hard time limit" in run.detail


def test_the_same_worker_name_restarted_does_not_keep_an_orphan_alive(flight, t0):
    """A worker restarted under the same node name is a new process: the old pid is gone."""
    flight(RunState.STARTED, started_at=t0, worker="w1@host", worker_pid=10)
    now = t0 + DEAD_AFTER + 10 * S
    _heartbeat("w1@host", 11, now)
    assert reclaim.reclaim(now, None) == 1


def test_a_round_forgets_workers_silent_for_a_week(t0):
    _heartbeat("old@host", 1, t0 - reclaim.FORGET_WORKERS_AFTER - S)
    _heartbeat("recent@host", 2, t0 - DEAD_AFTER)
    reclaim.run_round(t0, None)
    assert list(WorkerHeartbeat.objects.values_list("worker", flat=True)) == ["recent@host"]


def test_published_run_never_started_is_not_reclaimed(flight, t0):
    flight(RunState.PUBLISHED)
    assert reclaim.reclaim(t0 + dt.timedelta(days=1), None) == 0


def test_reclaim_round_is_shared_across_beats_and_restarts(make_engine, t0):
    """R15: at most one round per GC_INTERVAL, whoever runs it, whatever restarts."""
    every = dt.timedelta(minutes=5)
    first, second = reclaim.OrphanReclaim(), reclaim.OrphanReclaim()
    engine = make_engine(hooks=[])
    first(engine, t0)
    second(engine, t0 + 60 * S)  # another beat, or this one restarted
    assert (first.rounds, second.rounds) == (1, 0)
    assert second.next_look == t0 + every
    restarted = reclaim.OrphanReclaim()
    restarted(engine, t0 + every - S)
    assert restarted.rounds == 0
    restarted(engine, t0 + every)
    assert restarted.rounds == 1


def test_the_beat_loop_runs_the_reclaim_itself(make_engine, flight, t0):
    """R15: no command to remember; ticking the engine is enough."""
    run = flight(RunState.STARTED, started_at=t0, worker="gone@host", worker_pid=1)
    engine = make_engine()
    engine.tick(t0 + DEAD_AFTER + S)
    run.refresh_from_db()
    assert run.state == RunState.LOST


# --- overlap and stuck (R14, R16) -----------------------------------------------------------


def test_stuck_since_is_kept_when_the_skip_reason_changes_and_cleared_on_fire(
    make_engine, flight, publisher, job, t0
):
    blocker = flight(slot=t0 - 60 * S)
    engine = make_engine(hooks=[])
    engine.tick(t0)
    job.refresh_from_db()
    assert job.stuck_since == t0 and "still published" in job.stuck_reason
    assert Run.objects.get(schedule=job, slot=t0).state == RunState.SKIPPED
    _start(blocker, t0 + 30 * S, worker="w9@host")
    engine.tick(t0 + 60 * S)
    job.refresh_from_db()
    assert job.stuck_since == t0  # kept, though the reason changed
    assert "still started on w9@host" in job.stuck_reason
    assert len(job.stuck_reason) <= 300
    _finish(blocker, t0 + 90 * S)
    engine.tick(t0 + 120 * S)
    job.refresh_from_db()
    assert job.stuck_since is None and job.stuck_reason == ""
    assert publisher.slots("job") == [t0 + 120 * S]


def test_overlap_allow_fires_while_a_run_is_in_flight(make_engine, flight, publisher, job, t0):
    Schedule.objects.filter(pk=job.pk).update(overlap="allow")
    flight(slot=t0 - 60 * S)
    make_engine(hooks=[]).tick(t0)
    assert publisher.slots("job") == [t0]
    assert Schedule.objects.get(pk=job.pk).stuck_since is None
