"""R36, pause on failure, without a database: what counts, what resets, the bound that
applies and the note a pause carries (``durablebeat.core.pause``)."""

from __future__ import annotations

import datetime as dt

import pytest

from durablebeat.core import pause
from durablebeat.core.pause import Step

T0 = dt.datetime(2026, 3, 2, 12, 0, tzinfo=dt.UTC)
S = dt.timedelta(seconds=1)


@pytest.mark.parametrize(
    ("state", "was", "expected"),
    [
        ("failed", "started", Step.COUNT),
        ("failed", "claimed", Step.COUNT),  # refused by the broker client (unpublishable)
        ("failed", "no_news", Step.COUNT),  # no news was not counted: its failure is
        ("lost", "started", Step.COUNT),
        ("lost", None, Step.COUNT),
        ("failed", "lost", Step.KEEP),  # counted once, when it was lost (R11: later evidence)
        ("succeeded", "started", Step.RESET),
        ("succeeded", "lost", Step.RESET),  # a lost run that succeeded after all
        ("no_news", "published", Step.KEEP),
        ("skipped", None, Step.KEEP),
        ("missed", "claimed", Step.KEEP),
        ("replaced", "started", Step.KEEP),
    ],
)
def test_failed_and_lost_count_succeeded_resets_the_rest_keep(state, was, expected):
    """R36: failed and lost count, succeeded resets; no news, skipped, missed and replaced
    neither; a lost run later reported failed is not counted twice."""
    assert pause.step(state, was) is expected


@pytest.mark.parametrize(
    ("own", "default", "expected"),
    [
        (None, None, None),  # off by default
        (3, None, 3),
        (None, 5, 5),  # the setting's
        (3, 5, 3),  # its own wins
        (0, 5, None),  # its own 0: never, whatever the setting
    ],
)
def test_the_bound_is_the_schedules_own_else_the_settings_and_0_is_never(own, default, expected):
    assert pause.bound(own, default) == expected


def test_reached_at_the_bound_not_before_and_never_without_one():
    assert not pause.reached(2, 3)
    assert pause.reached(3, 3) and pause.reached(4, 3)
    assert not pause.reached(None, 3)
    assert not pause.reached(10_000, None)


def test_the_note_names_the_runs_and_when_the_last_one_ended():
    slots = [T0 + 4 * S, T0, T0 + 2 * S]
    note = pause.note(3, slots, "failed", T0 + 5 * S)
    assert note == (
        "paused after 3 failures in a row (failed or lost): runs of slots "
        "2026-03-02 12:00:00 UTC, 2026-03-02 12:00:02 UTC, 2026-03-02 12:00:04 UTC; "
        "the last failed at 2026-03-02 12:00:05 UTC"
    )


def test_the_note_of_many_names_the_last_few_and_says_a_lost_run_was_lost():
    slots = [T0 + i * S for i in range(pause.NAMED_SLOTS)]
    note = pause.note(50, slots, "lost", T0 + 9 * S)
    assert note.startswith("paused after 50 failures in a row (failed or lost): the last 5 of")
    assert note.endswith("the last was lost at 2026-03-02 12:00:09 UTC")


def test_the_note_in_utc_whatever_zone_the_instants_come_in():
    paris = dt.timezone(dt.timedelta(hours=1))
    note = pause.note(1, [T0.astimezone(paris)], "failed", T0.astimezone(paris))
    assert "runs of slots 2026-03-02 12:00:00 UTC;" in note
