"""Shared fixtures: fixed instants, an engine with a recording publisher, schedule rows."""

from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import Callable
from typing import Any

import pytest

T0 = dt.datetime(2026, 3, 2, 12, 0, tzinfo=dt.UTC)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The tests of a minute or more (``long``) and the quiet group (tests/e2e/harness.py's
    ``QUIET``) first: a parallel run (pytest-xdist) hands out work in this order, so none of
    them starts last and holds the whole run up alone (issue 38)."""

    def later(item: pytest.Item) -> bool:
        return item.get_closest_marker("long") is None and not any(
            mark.args == ("quiet",) for mark in item.iter_markers("xdist_group")
        )

    items.sort(key=later)


@pytest.fixture
def t0() -> dt.datetime:
    return T0


@pytest.fixture(autouse=True)
def _wakeup_state() -> Any:
    """The wake-up sender's process state (R6, R31) ends with its test: a scheduler built
    in process mutes it (as in a real beat), a broker error backs it off, a read caches the
    deaf beats. Left over, a later test's process saved as a muted beat would, and an e2e
    saver through a deaf LISTEN woke no beat (issue 30's transaction-mode probe)."""
    from durablebeat import wakeup

    yield
    wakeup.mute(False)
    wakeup._broken_until = 0.0
    wakeup._deaf_seen = (-wakeup.DEAF_CACHE, False)


class RecordingPublisher:
    """Stands in for the broker in integration tests of the engine's database logic; the
    e2e tests use the real broker."""

    def __init__(self) -> None:
        self.claims: list[Any] = []
        self.fail = False
        self.on_publish: Callable[[Any], None] | None = None

    def __call__(self, claim: Any) -> None:
        if self.on_publish is not None:
            self.on_publish(claim)
        if self.fail:
            raise ConnectionError("broker down (test)")
        self.claims.append(claim)

    def slots(self, schedule: str | None = None) -> list[dt.datetime]:
        return [c.slot for c in self.claims if schedule is None or c.schedule == schedule]


@pytest.fixture
def publisher() -> RecordingPublisher:
    return RecordingPublisher()


@pytest.fixture
def make_engine(publisher: RecordingPublisher) -> Callable[..., Any]:
    from durablebeat.beat.codesync import parse_beat_schedule
    from durablebeat.beat.engine import Engine

    def make(beat_schedule: dict[str, Any] | None = None, **kwargs: Any) -> Engine:
        # as the scheduler parses it: a task beat has not registered is sent by name (R29)
        entries = parse_beat_schedule(beat_schedule or {}, "UTC", check_task=False)
        return Engine(code_entries=entries, publish=publisher, boot_id=uuid.uuid4(), **kwargs)

    return make


@pytest.fixture
def make_schedule() -> Callable[..., Any]:
    from durablebeat.models import Schedule

    def make(name: str = "job", **fields: Any) -> Schedule:
        fields.setdefault("task", "tests.e2eapp.tasks.record")
        fields.setdefault("overlap", "allow")
        if "every" in fields and isinstance(fields["every"], int | float):
            fields["every"] = dt.timedelta(seconds=fields["every"])
        if "every" in fields:
            fields.setdefault("kind", "interval")
        schedule = Schedule(name=name, **fields)
        schedule.full_clean()
        schedule.save()
        return schedule

    return make
