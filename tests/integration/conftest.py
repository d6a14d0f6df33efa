"""Fixtures of the operations tests: boots and runs built as a situation needs them."""

from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import Callable
from typing import Any

import pytest

from durablebeat import dbclock


@pytest.fixture(autouse=True)
def _local_clock(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Any:
    """R26: the commands, the admin and beat measure their offset to the database's clock.
    A test that moves time with time_machine would read as a host off by years, so tests
    run on the local clock (offset 0, as on SQLite: the same code, no clock query), and a
    test of the measurement itself is marked ``dbclock``. No offset outlives its test."""
    if not request.node.get_closest_marker("dbclock"):
        monkeypatch.setattr(dbclock, "QUERIES", {})
    dbclock.forget()
    yield
    dbclock.forget()


@pytest.fixture
def make_boot() -> Callable[..., Any]:
    from durablebeat.models import Boot

    def make(
        started_at: dt.datetime,
        heartbeat_at: dt.datetime | None = None,
        stopped_at: dt.datetime | None = None,
        hostname: str = "beat-host",
        pid: int = 4242,
        clock_offset_seconds: float | None = None,
    ) -> Boot:
        return Boot.objects.create(
            id=uuid.uuid4(),
            hostname=hostname,
            pid=pid,
            started_at=started_at,
            heartbeat_at=heartbeat_at or started_at,
            stopped_at=stopped_at,
            clock_offset_seconds=clock_offset_seconds,
        )

    return make


@pytest.fixture
def make_run() -> Callable[..., Any]:
    from durablebeat.enums import Reason, RunState
    from durablebeat.models import Run

    def make(schedule: Any, slot: dt.datetime, **fields: Any) -> Run:
        fields.setdefault("reason", Reason.SCHEDULED)
        fields.setdefault("state", RunState.SUCCEEDED)
        fields.setdefault("claimed_at", slot)
        if fields["state"] not in (RunState.SKIPPED, RunState.MISSED):
            fields.setdefault("task_id", str(uuid.uuid4()))
        return Run.objects.create(schedule=schedule, slot=slot, **fields)

    return make


@pytest.fixture
def created_at() -> Callable[..., None]:
    """Back-date a schedule's creation (``auto_now_add`` takes the real clock)."""
    from durablebeat.models import Schedule

    def set_(schedule: Any, when: dt.datetime) -> None:
        Schedule.objects.filter(pk=schedule.pk).update(created_at=when)
        schedule.refresh_from_db()

    return set_


class RealQueue:
    """A queue of one test's own on a real broker: ``send()`` puts a real message of a task
    in it (a task id of its own, or the one given) through a Celery app, as beat does."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self.name = f"mail-{uuid.uuid4().hex[:10]}"

    def send(self, task_id: str | None = None, queue: str | None = None, **options: Any) -> str:
        task_id = task_id or str(uuid.uuid4())
        if queue is None and "routing_key" not in options:
            options["queue"] = self.name
        elif queue:
            options["queue"] = queue
        self.app.send_task("tests.e2eapp.tasks.record", task_id=task_id, **options)
        return task_id


@pytest.fixture
def real_queue() -> Any:
    """A queue of this test's own on the test run's Redis broker (its database:
    ``DURABLEBEAT_TEST_REDIS_DB``), through the project's Celery app; its keys and bindings
    are gone after the test, so that no other test finds its messages."""
    import redis
    from django.conf import settings

    from project.celery import app

    queue = RealQueue(app)
    yield queue
    client = redis.Redis.from_url(settings.CELERY_BROKER_URL)
    for key in client.scan_iter(f"*{queue.name}*"):
        client.delete(key)
    for key in client.scan_iter("_kombu.binding.*"):
        for member in client.smembers(key):
            if queue.name.encode() in member:
                client.srem(key, member)
