"""The pure parts of check, report, status and metrics: durations in words, slot counts,
the 1.5x allowance and exit codes. No database: rows are unsaved model instances."""

from __future__ import annotations

import datetime as dt

import pytest

from durablebeat import words
from durablebeat.core import timing
from durablebeat.models import Schedule
from durablebeat.ops import health, report, run_findings

T0 = dt.datetime(2026, 3, 2, 12, 0, tzinfo=dt.UTC)
S = dt.timedelta(seconds=1)
MIN = dt.timedelta(minutes=1)
H = dt.timedelta(hours=1)
DAY = dt.timedelta(days=1)


@pytest.mark.parametrize(
    ("delta", "said"),
    [
        (45 * S, "45 s"),
        (4 * MIN + 59 * S, "4 min"),
        (3 * H, "3 h"),
        (3 * H + 5 * MIN, "3 h 5 min"),
        (2 * DAY + 4 * H + 30 * MIN, "2 d 4 h"),
        (-(3 * H), "3 h"),
    ],
)
def test_duration_words(delta, said):
    assert words.duration_words(delta) == said


def row(**fields):
    fields.setdefault("name", "job")
    fields.setdefault("task", "t")
    fields.setdefault("kind", "interval")
    fields.setdefault("every", MIN)
    return Schedule(**fields)


@pytest.mark.parametrize(
    ("fields", "said"),
    [
        ({"next_fire_at": T0 + 4 * MIN}, "in 4 min"),
        ({"next_fire_at": T0 - 3 * S}, "due now"),
        ({"next_fire_at": T0 - 3 * H}, "overdue 3 h"),
        ({"next_fire_at": None}, "beat computes it"),
        ({"next_fire_at": T0 - 3 * H, "enabled": False}, "disabled"),
        ({"next_fire_at": T0 - 3 * H, "error": "minute: bad"}, "bad row: not firing"),
    ],
)
def test_next_fire_in_words(fields, said):
    assert words.next_fire_words(row(**fields), T0) == said


def test_schedule_in_words_says_why_a_row_is_invalid():
    assert words.schedule_words(row(every=None)).startswith("invalid: ")


def test_interval_allowance_counts_both_ends_of_the_window():
    assert report.allowed_fires(timing.Interval(DAY), T0 - 48 * H, T0) == 3
    assert report.allowed_fires(timing.Interval(H), T0 - H, T0) == 2


def test_crontab_allowance_is_its_slots_in_the_window():
    hourly = timing.Crontab(minute="0")
    assert report.allowed_fires(hourly, T0 - 48 * H, T0) == 48
    # A window without a slot still allows one fire (it may land on the edge).
    assert report.allowed_fires(timing.Crontab(minute="0", hour="3"), T0 - H, T0) == 1


def test_one_off_allowance_is_one():
    assert report.allowed_fires(timing.Clocked(T0 - H), T0 - 48 * H, T0) == 1


def _slots_after(spec, since, until):
    """Brute force: the slots in (since, until], one minute (interval: one step) at a time."""
    if isinstance(spec, timing.Interval):
        return int((until - since) / spec.every) if until > since else 0
    return len(list(timing.slots_between(spec, since, until)))


@pytest.mark.parametrize(
    "spec",
    [
        timing.Interval(MIN),
        timing.Interval(H),
        timing.Interval(90 * MIN),
        timing.Crontab(minute="0"),
        timing.Crontab(minute="30", hour="8", timezone="Europe/Berlin"),
        timing.Crontab(minute="0", hour="9", day_of_week="mon", timezone="America/New_York"),
        timing.Crontab(minute="15", hour="2", timezone="Europe/Berlin"),  # a DST gap slot
    ],
)
def test_no_success_bound_matches_counting_the_slots(spec):
    """``since < bound`` exactly when (since, until] holds 3 slots, for every minute of
    the ten days before ``until`` (which straddle no DST change in Berlin or New York;
    the timing tests cover those)."""
    until = T0
    bound = run_findings.no_success_bound(spec, until, 3)
    since = until - 10 * DAY
    while since <= until:
        assert (since < bound) == (_slots_after(spec, since, until) >= 3), since
        since += MIN if since > bound - 2 * H else 17 * MIN


def test_no_success_bound_of_rare_and_one_off_slots():
    assert run_findings.no_success_bound(timing.Clocked(T0 - H), T0, 3) is None
    leap = timing.Crontab(minute="0", hour="0", day_of_month="29", month_of_year="2")
    assert run_findings.no_success_bound(leap, T0, 3) == dt.datetime(2016, 2, 29, tzinfo=dt.UTC)


def finding(code):
    return health.Finding(code, "x")


def test_exit_code_is_the_worst_severity():
    warn = finding("lost_runs")
    crit = finding("no_beat")
    assert (warn.severity, crit.severity) == (health.Severity.WARNING, health.Severity.CRITICAL)
    assert health.exit_code([]) == 0
    assert health.exit_code([warn]) == 1
    assert health.exit_code([warn, crit]) == 2


def test_exit_code_counts_only_what_was_asked_for():
    down = finding("database_unreachable")
    assert health.exit_code([down], only=["no_beat"]) == 0
    assert health.exit_code([down], only=["no_beat", "database_unreachable"]) == 2


def test_a_finding_code_without_a_severity_is_refused():
    with pytest.raises(ValueError, match="add it to SEVERITIES"):
        health.Finding("made_up", "x")


def test_finding_line_and_json():
    f = health.Finding("stuck", "job: skipped for 7 h", "job")
    assert f.line() == "CRITICAL stuck: job: skipped for 7 h"
    assert f.as_dict() == {
        "code": "stuck",
        "severity": "critical",
        "message": "job: skipped for 7 h",
        "schedule": "job",
    }
