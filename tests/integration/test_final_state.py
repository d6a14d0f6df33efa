"""R22 against a real database: every run reaches a final state or ``no_news`` within a
bound, ``overlap=skip`` skips only on evidence of a live run, and the worker keeps the
tracking writes that fail. Time is passed in; the real processes, a database cut and a lost
broker message are in tests/e2e/test_final_state.py."""

from __future__ import annotations

import datetime as dt
import logging
import threading

import pytest
from django.db import DataError, OperationalError
from django.test import override_settings

from durablebeat.beat import reclaim
from durablebeat.enums import RunState
from durablebeat.models import Run, Schedule, WorkerHeartbeat
from durablebeat.ops import health
from durablebeat.worker import backlog, completion, tracking
from tests.e2e.harness import wait_until

pytestmark = pytest.mark.django_db(transaction=True)

S = dt.timedelta(seconds=1)
MIN = dt.timedelta(minutes=1)
BOUND = 120 * S  # DURABLEBEAT_NO_NEWS_AFTER's default


@pytest.fixture
def job(make_schedule, t0):
    return make_schedule("job", every=60, overlap="skip", next_fire_at=t0)


@pytest.fixture
def previous(make_run, job, t0):
    """The run of the slot before t0, in the state a test gives it."""

    def make(state: str = RunState.PUBLISHED, **fields) -> Run:
        return make_run(job, t0 - MIN, state=state, **fields)

    return make


def _tick(make_engine, at: dt.datetime):
    make_engine(hooks=[]).tick(at)


def _state_of_slot(job, slot) -> str:
    return Run.objects.get(schedule=job, slot=slot).state


# --- overlap=skip skips only on evidence of a live run (R14, R22) ---------------------------


def test_published_run_inside_the_bound_still_blocks(make_engine, previous, publisher, job, t0):
    previous(published_at=t0 - BOUND)
    _tick(make_engine, t0)
    assert publisher.slots("job") == []
    assert _state_of_slot(job, t0) == RunState.SKIPPED


def test_published_run_past_the_bound_stops_blocking_and_is_marked_no_news(
    make_engine, previous, publisher, job, t0
):
    """A lost message (or a tracking write lost for good) must not hold the schedule."""
    stale = previous(published_at=t0 - BOUND - S)
    _tick(make_engine, t0)
    assert publisher.slots("job") == [t0]
    stale.refresh_from_db()
    assert stale.state == RunState.NO_NEWS
    assert stale.detail.startswith(f"no news since {(t0 - BOUND - S).isoformat()}")
    job.refresh_from_db()
    assert job.stuck_since is None
    assert [f.code for f in health.findings(t0)] == ["no_news"]


def test_a_message_expiry_shorter_than_the_bound_is_the_bound(
    make_engine, previous, publisher, job, t0
):
    Schedule.objects.filter(pk=job.pk).update(expire_seconds=20)
    previous(published_at=t0 - 21 * S)
    _tick(make_engine, t0)
    assert publisher.slots("job") == [t0]


@override_settings(DURABLEBEAT_NO_NEWS_AFTER=600)
def test_the_bound_is_a_setting(make_engine, previous, publisher, t0):
    previous(published_at=t0 - 5 * MIN)
    _tick(make_engine, t0)
    assert publisher.slots("job") == []


def test_started_on_a_live_worker_blocks_however_long(make_engine, previous, publisher, t0):
    previous(RunState.STARTED, started_at=t0 - dt.timedelta(hours=5), worker="w@h", worker_pid=3)
    WorkerHeartbeat.objects.create(worker="w@h", pid=3, seen_at=t0 - 10 * S)
    _tick(make_engine, t0)
    assert publisher.slots("job") == []


def test_started_on_a_worker_gone_silent_does_not_block(make_engine, previous, publisher, t0):
    run = previous(RunState.STARTED, started_at=t0 - 10 * MIN, worker="w@h", worker_pid=3)
    WorkerHeartbeat.objects.create(worker="w@h", pid=3, seen_at=t0 - 121 * S)
    _tick(make_engine, t0)
    assert publisher.slots("job") == [t0]
    run.refresh_from_db()
    assert run.state == RunState.STARTED  # lost is the orphan reclaim's word (R15)


def test_started_past_its_hard_limit_does_not_block(make_engine, previous, publisher, t0):
    previous(
        RunState.STARTED, started_at=t0 - 200 * S, worker="w@h", worker_pid=3, hard_time_limit=60
    )
    WorkerHeartbeat.objects.create(worker="w@h", pid=3, seen_at=t0)
    _tick(make_engine, t0)
    assert publisher.slots("job") == [t0]


def test_claimed_past_the_bound_stops_blocking_but_stays_claimed_for_its_retry(
    make_engine, previous, publisher, t0
):
    """Its publish is retried, or settled as in doubt (R9): only its hold ends."""
    run = previous(RunState.CLAIMED, claimed_at=t0 - BOUND - S)
    _tick(make_engine, t0)
    assert publisher.slots("job") == [t0]
    run.refresh_from_db()
    assert run.state == RunState.CLAIMED


def test_late_news_of_a_no_news_run_still_wins(previous, job, t0):
    """R11: a start and a completion that come after the bound move it on."""
    run = previous(RunState.NO_NEWS, published_at=t0 - 10 * MIN)
    assert completion.start(completion.Started(run.task_id, t0, "w@h", 3, None))
    assert completion.finish(completion.Finished(run.task_id, t0 + S, succeeded=True))
    run.refresh_from_db()
    job.refresh_from_db()
    assert run.state == RunState.SUCCEEDED
    assert job.last_completed_at == t0 + S


def test_reclaim_round_marks_no_news_for_overlap_allow_too(previous, job, t0):
    Schedule.objects.filter(pk=job.pk).update(overlap="allow")
    stale = previous(published_at=t0 - BOUND - S)
    fresh = Run.objects.create(
        schedule=job, slot=t0, state=RunState.PUBLISHED, claimed_at=t0, published_at=t0
    )
    reclaim.run_round(t0, None)
    assert Run.objects.get(pk=stale.pk).state == RunState.NO_NEWS
    assert Run.objects.get(pk=fresh.pk).state == RunState.PUBLISHED


# --- the worker keeps what it could not write (R22) -----------------------------------------


class _Database:
    """completion's writes, through a switch that cuts them."""

    def __init__(self) -> None:
        self.up = False

    def __call__(self, event):
        if not self.up:
            raise OperationalError("connection refused (test)")
        return backlog.apply(event)


def _started(run: Run, at: dt.datetime) -> backlog.Write:
    return backlog.Write("the start", completion.Started(run.task_id, at, "w@h", 3, None))


def _finished(run: Run, at: dt.datetime) -> backlog.Write:
    event = completion.Finished(run.task_id, at, succeeded=True, started_at=at - S)
    return backlog.Write("the completion", event)


def test_writes_kept_during_a_cut_are_made_in_order_when_it_ends(previous, job, t0):
    run = previous()
    database = _Database()
    kept = backlog.Backlog(make=database, background=False)
    kept.submit(_started(run, t0))
    kept.submit(_finished(run, t0 + 5 * S))
    assert len(kept) == 2
    assert kept.flush() == backlog.RETRY
    database.up = True
    assert kept.flush() == backlog.DONE
    run.refresh_from_db()
    assert (run.state, run.worker, run.finished_at) == (RunState.SUCCEEDED, "w@h", t0 + 5 * S)
    job.refresh_from_db()
    assert job.last_completed_at == t0 + 5 * S


def test_a_write_whose_run_is_not_written_yet_waits_for_it(job, t0, make_run):
    """A fire sent from memory during an outage is written by beat when the database is
    back; the worker's news of it arrives first and must wait, without holding others."""
    now = [0.0]
    kept = backlog.Backlog(background=False, clock=lambda: now[0], absent_for=60)
    ghost = Run(task_id="sent-during-the-outage")
    kept.submit(_finished(ghost, t0))
    other = make_run(job, t0 - MIN, state=RunState.PUBLISHED)
    kept.submit(_finished(other, t0))  # behind it, another task: not held up
    assert Run.objects.get(pk=other.pk).state == RunState.PUBLISHED  # order: kept behind
    assert kept.flush() == backlog.ABSENT
    assert Run.objects.get(pk=other.pk).state == RunState.SUCCEEDED
    make_run(job, t0, state=RunState.PUBLISHED, task_id="sent-during-the-outage")
    now[0] = 30.0
    assert kept.flush() == backlog.DONE
    assert Run.objects.get(task_id="sent-during-the-outage").state == RunState.SUCCEEDED


def test_a_write_whose_run_never_appears_is_dropped_after_a_while_and_logged(t0, caplog):
    now = [0.0]
    kept = backlog.Backlog(background=False, clock=lambda: now[0], absent_for=60)
    kept.submit(_finished(Run(task_id="nobody"), t0))
    now[0] = 61.0
    with caplog.at_level(logging.ERROR, logger="durablebeat"):
        assert kept.flush() == backlog.DONE
    assert [r.event for r in caplog.records] == ["tracking_dropped"]


def test_kept_writes_are_bounded_the_oldest_dropped_first(previous, t0, caplog):
    run = previous()
    kept = backlog.Backlog(make=_Database(), background=False, max_kept=2)
    with caplog.at_level(logging.ERROR, logger="durablebeat"):
        for i in range(3):
            kept.submit(_finished(run, t0 + i * S))
    assert [w.event.at for w in kept.kept] == [t0 + S, t0 + 2 * S]
    assert [r.event for r in caplog.records] == ["tracking_dropped"]


def test_what_is_still_kept_at_exit_is_logged_write_by_write(previous, t0, caplog):
    run = previous()
    kept = backlog.Backlog(make=_Database(), background=False)
    kept.submit(_started(run, t0))
    kept.submit(_finished(run, t0 + S))
    with caplog.at_level(logging.ERROR, logger="durablebeat"):
        kept.drain()
    dropped = [r.getMessage() for r in caplog.records if r.event == "tracking_dropped"]
    assert len(dropped) == 2 and all(run.task_id in line for line in dropped)
    assert len(kept) == 0


def test_the_background_thread_writes_them_once_the_database_answers(previous, t0):
    run = previous()
    database = _Database()
    kept = backlog.Backlog(make=database)
    kept.submit(_finished(run, t0))
    assert len(kept) == 1
    database.up = True
    wait_until(lambda: len(kept) == 0, 10, interval=0.1, what="the kept write made")
    assert Run.objects.get(pk=run.pk).state == RunState.SUCCEEDED
    wait_until(
        lambda: not any(t.name == "durablebeat-tracking" for t in threading.enumerate()),
        10,
        what="the thread ends when nothing is kept",
    )


# --- Celery failing around the body (R12, R22) ----------------------------------------------


def _ours(run: Run) -> dict[str, object]:
    """The request dict ``task_internal_error`` carries for a durablebeat message."""
    return {"id": run.task_id, "durablebeat_schedule": "job"}


def test_celery_failing_before_the_body_ends_the_run_failed_not_started_for_ever(
    previous, monkeypatch
):
    """A result backend that is down fails the message before its body (task_track_started):
    without this the run stays started while its worker lives, holding the schedule."""
    run = previous(RunState.STARTED, started_at=dt.datetime(2026, 3, 2, 11, 59, 1, tzinfo=dt.UTC))
    monkeypatch.setattr(tracking, "backlog", backlog.Backlog(background=False))
    error = OperationalError("connection refused")
    tracking.on_internal_error(task_id=run.task_id, request=_ours(run), exception=error)
    run.refresh_from_db()
    assert run.state == RunState.FAILED
    assert "outside the task body" in run.error and "connection refused" in run.error


def test_celery_failing_after_a_body_that_returned_leaves_it_succeeded(previous, monkeypatch):
    """Storing the result failed after the body returned: task_postrun said SUCCESS first,
    and the body decides (R12)."""
    run = previous()
    kept = backlog.Backlog(make=_Database(), background=False)  # the database is down
    monkeypatch.setattr(tracking, "backlog", kept)
    tracking._tracked[run.task_id] = tracking._Tracked(started_at=run.published_at)
    tracking.on_postrun(task_id=run.task_id, task=None, state="SUCCESS")
    tracking.on_internal_error(
        task_id=run.task_id, request=_ours(run), exception=OperationalError("down")
    )
    assert [w.what for w in kept.kept] == ["the completion", "the internal error"]
    kept.make = backlog.apply  # the database is back: made in order
    assert kept.flush() == backlog.DONE
    assert Run.objects.get(pk=run.pk).state == RunState.SUCCEEDED


def test_an_internal_error_of_a_message_durablebeat_did_not_send_is_ignored(previous):
    run = previous()
    tracking.on_internal_error(
        task_id=run.task_id, request={"id": run.task_id}, exception=RuntimeError("x")
    )
    assert Run.objects.get(pk=run.pk).state == RunState.PUBLISHED


# --- a write that can never be made holds up nothing (R21, R22) -------------------------------


def test_a_write_the_database_refuses_is_dropped_and_logged_not_kept_ahead_of_the_rest(
    previous, job, make_run, t0, caplog
):
    poisoned = previous()
    other = make_run(job, t0, state=RunState.PUBLISHED)

    def make(event):
        if event.task_id == poisoned.task_id:
            raise DataError("invalid byte sequence for encoding UTF8: 0x00")
        return backlog.apply(event)

    kept = backlog.Backlog(make=make, background=False)
    with caplog.at_level(logging.ERROR, logger="durablebeat"):
        kept.submit(_finished(poisoned, t0))
        kept.submit(_finished(other, t0))
    assert len(kept) == 0
    assert [r.event for r in caplog.records] == ["tracking_dropped"]
    assert Run.objects.get(pk=other.pk).state == RunState.SUCCEEDED


def test_a_write_that_cannot_even_be_encoded_is_dropped_and_the_thread_lives_on(previous, t0):
    run = previous()
    calls = []

    def make(event):
        calls.append(event.task_id)
        if len(calls) <= 2:
            raise OperationalError("down")  # kept, then the pass meets the bad one
        if event.task_id == "bad":
            raise UnicodeEncodeError("utf-8", "\ud800", 0, 1, "surrogates not allowed")
        return backlog.apply(event)

    kept = backlog.Backlog(make=make)
    kept.submit(_finished(Run(task_id="bad"), t0))
    kept.submit(_finished(run, t0))
    wait_until(lambda: len(kept) == 0, 15, interval=0.1, what="both settled")
    assert Run.objects.get(pk=run.pk).state == RunState.SUCCEEDED


def test_texts_the_database_would_refuse_are_stored_escaped(previous, t0):
    """An exception message with a NUL (PostgreSQL refuses it) or a lone surrogate."""
    run = previous()
    event = completion.Finished(run.task_id, t0, succeeded=False, error="a\x00b\ud800c")
    assert completion.finish(event)
    assert Run.objects.get(pk=run.pk).error == "a\\x00b\\ud800c"
