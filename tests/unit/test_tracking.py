"""The hard time limit a worker records with a start (R15 reclaims past it)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from durablebeat.worker.tracking import hard_time_limit


def task(message=None, own=None, app=None):
    return SimpleNamespace(
        request=SimpleNamespace(timelimit=(message, None)),
        time_limit=own,
        app=SimpleNamespace(conf=SimpleNamespace(task_time_limit=app)),
    )


def test_the_message_limit_wins_then_the_task_then_the_app():
    assert hard_time_limit(task(message=30, own=60, app=90)) == 30.0
    assert hard_time_limit(task(own=60, app=90)) == 60.0
    assert hard_time_limit(task(app=90)) == 90.0
    assert hard_time_limit(task()) is None


@pytest.mark.parametrize("value", [float("inf"), float("nan"), -5, "soon", object()])
def test_a_limit_no_column_can_hold_is_no_limit(value):
    """MariaDB refuses inf: the start write would be refused with it and the run never
    marked started."""
    assert hard_time_limit(task(app=value)) is None
