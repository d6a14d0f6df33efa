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


#: tables a test's flush keeps: what ``migrate`` wrote and no test writes (content types and
#: permissions, read by the admin tests), so Django's post-migrate pass need not write it again
KEPT_BY_FLUSH = frozenset({"django_content_type", "auth_permission"})


def _quick_sql_flush(
    style: Any, connection: Any, reset_sequences: bool = True, allow_cascade: bool = False
) -> list[str]:
    """What a ``transaction=True`` test's teardown runs (Django's ``flush``): every table the
    tests write emptied, as Django's own does, at a fraction of its cost. PostgreSQL's flush
    is one TRUNCATE of every table, ~0.2 s on this machine whatever they hold; DELETEs of the
    few rows a test wrote take milliseconds (Django's foreign keys there are deferred to the
    flush's commit, so their order does not matter; MySQL's and SQLite's flushes already
    DELETE). Issue 38: ~1,000 such tests a run."""
    tables = [
        t
        for t in connection.introspection.django_table_names(
            only_existing=True, include_views=False
        )
        if t not in KEPT_BY_FLUSH
    ]
    if connection.vendor == "postgresql" and not reset_sequences:
        return [f"DELETE FROM {connection.ops.quote_name(t)};" for t in tables]
    return connection.ops.sql_flush(
        style, tables, reset_sequences=reset_sequences, allow_cascade=allow_cascade
    )


@pytest.fixture(scope="session", autouse=True)
def _quick_flush() -> Any:
    """Django's test flush through ``_quick_sql_flush``, and without its post-migrate pass:
    that pass writes the content types and permissions again after every flush (~0.1 s),
    and the flush keeps them."""
    from django.core.management.commands import flush

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(flush, "sql_flush", _quick_sql_flush)
        patch.setattr(flush, "emit_post_migrate_signal", lambda *args, **kwargs: None)
        yield


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
