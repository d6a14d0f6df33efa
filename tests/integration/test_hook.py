"""R30's hook against a real database: ``durablebeat.signals`` per fire and per outcome, and
Celery's beat conventions in every message (``celery_beat_task``, ``periodic_task_name``)."""

from __future__ import annotations

import datetime as dt
import logging
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from django.dispatch import Signal

from durablebeat import signals
from durablebeat.beat import publishing
from durablebeat.core import timing
from durablebeat.enums import Reason, RunState
from durablebeat.models import Boot, Run
from durablebeat.worker import tracking
from project.celery import app

pytestmark = pytest.mark.django_db(transaction=True)

S = dt.timedelta(seconds=1)
JOB = {
    "job": {
        "task": "tests.e2eapp.tasks.record",
        "schedule": dt.timedelta(seconds=20),
        "options": {"headers": {"periodic_task_name": "not-the-name", "team": "ops"}},
    }
}


class Heard:
    """A receiver that keeps what it was sent; ``answer`` is what it returns."""

    def __init__(self, answer: Any = None, fail: bool = False) -> None:
        self.__qualname__ = "Heard"  # how Django's signals name a receiver that failed
        self.calls: list[dict[str, Any]] = []
        self.answer = answer
        self.fail = fail

    def __call__(self, sender: Any, **kwargs: Any) -> Any:
        self.calls.append({"sender": sender, **kwargs})
        if self.fail:
            raise RuntimeError("the monitor is down")
        return self.answer


@pytest.fixture
def hear() -> Iterator[Any]:
    connected: list[tuple[Signal, Heard]] = []

    def connect(signal: Signal, receiver: Heard) -> Heard:
        signal.connect(receiver, weak=False)
        connected.append((signal, receiver))
        return receiver

    yield connect
    for signal, receiver in connected:
        signal.disconnect(receiver)


class CapturingApp:
    """What ``publishing.send`` hands to Celery's ``send_task``."""

    def __init__(self) -> None:
        self.sent: list[dict[str, Any]] = []

    def send_task(self, name: str, **kwargs: Any) -> None:
        self.sent.append({"name": name, **kwargs})


def _first_fire(make_engine: Any, t0: dt.datetime) -> Any:
    engine = make_engine(JOB)
    engine.tick(t0)  # R2: the startup grace
    engine.tick(t0 + 60 * S)
    return engine


def test_fired_says_each_fire_schedule_slot_reason_run_and_timing(make_engine, publisher, t0, hear):
    """R30: one ``fired`` per fire, after it went out, with what a monitor needs."""
    heard = hear(signals.fired, Heard())
    _first_fire(make_engine, t0)
    run = Run.objects.get()
    assert heard.calls == [
        {
            "sender": None,
            "signal": signals.fired,
            "schedule": "job",
            "slot": t0 + 60 * S,
            "reason": Reason.STARTUP_GRACE,
            "task_id": run.task_id,
            "run_id": run.pk,
            "spec": timing.Interval(dt.timedelta(seconds=20)),
        }
    ]


def test_a_failing_hook_never_stops_a_fire(make_engine, publisher, t0, hear, caplog):
    """R30: a receiver that raises is logged; the fire went out and is recorded."""
    hear(signals.fired, Heard(fail=True))
    with caplog.at_level(logging.WARNING, logger="durablebeat"):
        _first_fire(make_engine, t0)
    assert publisher.slots() == [t0 + 60 * S]
    assert Run.objects.get().state == RunState.PUBLISHED
    assert [r.event for r in caplog.records if hasattr(r, "event")] == ["hook_failed"]


def test_every_message_carries_celerys_conventions_and_the_hooks_headers(
    make_engine, publisher, t0, hear
):
    """R30: ``celery_beat_task`` (Celery 5.5+ marks each beat message), the schedule's name
    as django-celery-results reads it (over the schedule's own header of that name, as
    django-celery-beat sets it), its own headers kept; a ``before_publish`` receiver's
    headers added; one that raises adds nothing and stops nothing."""
    _first_fire(make_engine, t0)
    claim = publisher.claims[0]
    app = CapturingApp()
    publishing.send(app, claim)  # no receiver: the message as it always was
    hear(signals.before_publish, Heard(answer={"monitor-slug": "job"}))
    hear(signals.before_publish, Heard(fail=True))
    publishing.send(app, claim)
    plain, hooked = (sent["headers"] for sent in app.sent)
    assert plain["celery_beat_task"] is True
    assert plain["periodic_task_name"] == "job"
    assert plain["team"] == "ops" and plain["durablebeat_schedule"] == "job"
    assert "monitor-slug" not in plain
    assert hooked == plain | {"monitor-slug": "job"}


def test_a_resend_of_a_dead_beats_claim_tells_the_hook_its_timing(
    make_engine, make_schedule, publisher, t0, hear
):
    """R30 with R9: the in-doubt resend goes through the hook with the schedule's timing,
    so that a monitor (Sentry Crons) checks the resent message in."""
    heard = hear(signals.fired, Heard())
    row = make_schedule("digest", kind="crontab", catch_up=True, next_fire_at=t0 + 30 * 60 * S)
    boot = Boot.objects.create(
        id=uuid.uuid4(), hostname="gone", pid=1, started_at=t0 - 60 * S, heartbeat_at=t0
    )
    Run.objects.create(schedule=row, slot=t0, boot=boot, claimed_at=t0, task_id="in-doubt")
    make_engine().tick(t0 + 10 * 60 * S)  # the settle time passed: resent
    [call] = heard.calls
    assert (call["schedule"], call["reason"], call["task_id"]) == (
        "digest",
        Reason.REPUBLISH,
        "in-doubt",
    )
    assert call["spec"] == timing.Crontab()


class _Request:
    hostname = "w1@host"
    timelimit = (None, None)

    def __init__(self, run: Run) -> None:
        self.headers = {
            "durablebeat_schedule": "job",
            "durablebeat_slot": run.slot.isoformat(),
            "durablebeat_reason": run.reason,
            "durablebeat_run": run.pk,
        }


class _Task:
    time_limit = None
    app = app

    def __init__(self, run: Run) -> None:
        self.request = _Request(run)


@pytest.mark.parametrize(
    ("state", "retval", "outcome", "error"),
    [("SUCCESS", 1, "succeeded", ""), ("FAILURE", ValueError("no"), "failed", "ValueError: no")],
)
def test_run_finished_says_the_workers_outcome(
    make_engine, publisher, t0, hear, state, retval, outcome, error
):
    """R30: the worker's end of a run, with the fire it was (from the message's headers)."""
    heard = hear(signals.run_finished, Heard())
    _first_fire(make_engine, t0)
    run = Run.objects.get()
    task = _Task(run)
    tracking.on_prerun(task_id=run.task_id, task=task)
    tracking.on_postrun(task_id=run.task_id, task=task, retval=retval, state=state)
    [call] = heard.calls
    assert {k: call[k] for k in ("schedule", "slot", "reason", "run_id", "task_id")} == {
        "schedule": "job",
        "slot": run.slot,
        "reason": run.reason,
        "run_id": run.pk,
        "task_id": run.task_id,
    }
    assert (call["outcome"], call["error"]) == (outcome, error)


def test_run_finished_says_a_message_the_broker_refused(make_engine, publisher, t0, hear):
    """R30: a fire whose message could not be sent for its own content (R21) ends failed,
    said by beat."""
    heard = hear(signals.run_finished, Heard())

    def refuse(claim: Any) -> None:
        raise ValueError("not JSON")

    publisher.on_publish = refuse
    _first_fire(make_engine, t0)
    [call] = heard.calls
    run = Run.objects.get()
    assert run.state == RunState.FAILED
    assert (call["schedule"], call["run_id"], call["outcome"], call["error"]) == (
        "job",
        run.pk,
        "failed",
        "ValueError: not JSON",
    )
