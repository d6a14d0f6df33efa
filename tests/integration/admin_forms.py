"""What the admin's schedule page posts, for the tests that drive its form."""

from __future__ import annotations

TASK = "tests.e2eapp.tasks.record"


def schedule_form(**overrides: str | None) -> dict[str, str]:
    """The fields of the schedule page as a browser posts them: an interval of 60 s named
    "tick", changed by ``overrides``; an override of None leaves its field out of the post."""
    data: dict[str, str | None] = {
        "name": "tick",
        "task": TASK,
        "description": "",
        "enabled": "on",
        "kind": "interval",
        "every": "60s",
        "minute": "*",
        "hour": "*",
        "day_of_week": "*",
        "day_of_month": "*",
        "month_of_year": "*",
        "timezone": "UTC",
        "clocked_at_0": "",
        "clocked_at_1": "",
        "next_fire_at_0": "",
        "next_fire_at_1": "",
        "args": "[]",
        "kwargs": "{}",
        "queue": "",
        "routing_key": "",
        "priority": "",
        "expire_seconds": "",
        "countdown": "",
        "headers": "{}",
        "startup_grace": "",
        "catch_up_window": "",
        "overlap": "skip",
        "retention": "",
        **overrides,
    }
    return {k: v for k, v in data.items() if v is not None}
