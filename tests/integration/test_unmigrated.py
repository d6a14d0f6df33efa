"""R32: a process of a new release meets a database its deploy has not migrated yet (here:
durablebeat's migrations rolled back to 0009, where ``Boot.clock_offset_seconds`` is
missing). Beat waits for the migrations, says once which, fires nothing, then boots;
``check`` says ``migrations_pending``, not ``database_unreachable``; ``status`` prints the
same line instead of a traceback."""

from __future__ import annotations

import datetime as dt
import logging
import uuid
from collections.abc import Iterator
from io import StringIO
from typing import Any

import pytest
from django.core.management import call_command
from django.db import connection
from django.db.migrations.loader import MigrationLoader

from durablebeat import schema
from durablebeat.ops import health

BEFORE = ("durablebeat", "0009_schedule_countdown")
S = dt.timedelta(seconds=1)


@pytest.fixture
def unmigrated(transactional_db: Any) -> Iterator[list[str]]:
    """The database at 0009; the migrations it lacks. Migrated forward again afterwards."""
    call_command("migrate", *BEFORE, verbosity=0)
    try:
        yield schema.pending()
    finally:
        call_command("migrate", "durablebeat", verbosity=0)


def _old_boot(now: dt.datetime) -> None:
    """A live beat of the previous release: its boot row, as its model (0009's) writes it."""
    Boot = MigrationLoader(connection).project_state(BEFORE).apps.get_model("durablebeat", "Boot")
    Boot.objects.create(
        id=uuid.uuid4(), hostname="old", pid=1, started_at=now - 60 * S, heartbeat_at=now - S
    )


def test_the_missing_migrations_are_named_in_order(unmigrated: list[str]) -> None:
    leaves = MigrationLoader(connection).graph.leaf_nodes("durablebeat")
    assert unmigrated[0] == "0010_clock_offset"
    assert unmigrated[-1] == leaves[0][1]
    assert "0013_database_defaults" in unmigrated


def test_check_says_migrations_pending_and_no_beat_when_none_is_alive(
    unmigrated: list[str], t0: dt.datetime
) -> None:
    found = health.check(t0)
    assert [(f.code, f.severity.name) for f in found] == [
        ("no_beat", "CRITICAL"),
        ("migrations_pending", "WARNING"),
    ]
    assert ", ".join(unmigrated) in found[1].message
    assert "run manage.py migrate" in found[1].message
    assert health.exit_code(found) == 2


def test_check_with_the_previous_beat_alive_is_a_warning_the_probe_does_not_count(
    unmigrated: list[str],
) -> None:
    from durablebeat.core import clock

    now = clock.now()
    _old_boot(now)
    found = health.check(now)
    assert [f.code for f in found] == ["migrations_pending"]
    assert health.exit_code(found) == 1
    probe = ["no_beat", "overdue"]
    assert health.exit_code(health.check(now, probe), probe) == 0


def test_the_commands_print_the_line_not_a_traceback(unmigrated: list[str]) -> None:
    from durablebeat.core import clock

    _old_boot(clock.now())
    out = StringIO()
    with pytest.raises(SystemExit) as exited:
        call_command("durablebeat", "check", stdout=out)
    assert exited.value.code == 1
    line = out.getvalue().strip()
    assert line.startswith("WARNING migrations_pending: the database lacks")
    out = StringIO()
    call_command("durablebeat", "status", stdout=out)
    assert out.getvalue().strip() == line


def test_beat_waits_says_it_once_fires_nothing_then_boots(
    unmigrated: list[str],
    make_engine: Any,
    publisher: Any,
    t0: dt.datetime,
    caplog: pytest.LogCaptureFixture,
    settings: Any,
) -> None:
    settings.DURABLEBEAT_DB_RETRY_INTERVAL = 5
    caplog.set_level(logging.INFO, logger="durablebeat")
    engine = make_engine({"code": {"task": "tests.e2eapp.tasks.record", "schedule": 10.0}})
    now = t0
    for _ in range(4):  # waits: one line, nothing fired, no exit, back within the retry
        assert 0 < engine.tick(now) <= 5
        assert not engine.db_ok
        now += 5 * S
    said = [r for r in caplog.records if getattr(r, "event", "") == "migrations_pending"]
    assert len(said) == 1, [r.getMessage() for r in caplog.records]
    assert said[0].getMessage().startswith(schema.words(unmigrated))
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert publisher.claims == []

    call_command("migrate", "durablebeat", verbosity=0)
    engine.tick(now)
    assert engine.db_ok
    from durablebeat.models import Schedule

    first = Schedule.objects.get(name="code").next_fire_at
    engine.tick(first)
    assert publisher.slots("code") == [first]
