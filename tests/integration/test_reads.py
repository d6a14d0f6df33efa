"""R33: every read a person or a probe makes costs what it shows, not what the table holds
(issue 36 item 4): ``check`` and its probe form, ``status``, ``report``, the admin's
schedule list and ``api.list_schedules``. Each new option works, and the number of queries
is the same with 10 schedules as with 200 (the million's benchmark:
benchmarks/million_reads.py)."""

from __future__ import annotations

import contextlib
import datetime as dt
import inspect
import io
import json
from collections.abc import Callable
from typing import Any

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import connection
from django.test.utils import CaptureQueriesContext

from durablebeat import api, db
from durablebeat.admin.schedules import ScheduleAdmin
from durablebeat.enums import RunState, Source
from durablebeat.models import Schedule
from durablebeat.ops import findings, health, report, run_findings, status

pytestmark = pytest.mark.django_db

S = dt.timedelta(seconds=1)
MIN = dt.timedelta(minutes=1)
H = dt.timedelta(hours=1)
CHANGELIST = "/admin/durablebeat/schedule/"


@pytest.fixture
def alive(make_boot, t0):
    return make_boot(started_at=t0 - 60 * 24 * H, heartbeat_at=t0 - 5 * S)


@pytest.fixture
def now(t0, time_machine):
    time_machine.move_to(t0, tick=False)
    return t0


def many(n: int, t0: dt.datetime, prefix: str = "digest-", **fields: Any) -> None:
    """``n`` healthy daily crontabs (as one per customer), due in an hour, created a day
    ago with a success an hour ago."""
    values: dict[str, Any] = {
        "task": "tests.e2eapp.tasks.record",
        "kind": "crontab",
        "minute": "0",
        "hour": "13",
        "timezone": "Europe/Berlin",
        "next_fire_at": t0 + H,
        "last_completed_at": t0 - H,
        "last_outcome": RunState.SUCCEEDED,
    } | fields
    Schedule.objects.bulk_create(Schedule(name=f"{prefix}{i:04d}", **values) for i in range(n))
    Schedule.objects.filter(name__startswith=prefix).update(created_at=t0 - 24 * H)


def queries(fn: Callable[[], Any]) -> int:
    with CaptureQueriesContext(connection) as captured:
        fn()
    return len(captured.captured_queries)


def command(*args: str) -> str:
    out = io.StringIO()
    with contextlib.suppress(SystemExit):  # check's status says how bad its findings are
        call_command("durablebeat", *args, stdout=out)
    return out.getvalue()


# --- check -------------------------------------------------------------------------------


def test_check_costs_the_same_queries_with_10_schedules_as_with_200(alive, now, t0):
    many(10, t0)
    few = queries(lambda: health.check(t0))
    many(190, t0, prefix="more-")
    assert queries(lambda: health.check(t0)) == few
    assert health.check(t0) == []


def test_the_probe_runs_only_the_finders_that_report_what_it_asks(alive, t0, monkeypatch):
    """--only no_beat,overdue reads the boots and the due index, nothing else: a finder
    that would read every schedule's periods (no_success) is not even called."""
    called = []

    def spy(finder):
        def run(at):
            called.append(finder.__name__)
            return finder(at)

        return run

    finders = tuple(spy(f) for f in health.FINDERS)
    finds = {s: health.FINDS[f] for s, f in zip(finders, health.FINDERS, strict=True)}
    monkeypatch.setattr(health, "FINDS", finds)
    monkeypatch.setattr(health, "FINDERS", finders)
    health.check(t0, ["no_beat", "overdue"])
    assert called == ["find_no_beat", "find_overdue"]
    called.clear()
    health.check(t0, ["bad_row"])
    assert set(called) == {
        "find_overdue",
        "find_stuck",
        "find_paused_on_failure",
        "find_unresolved",
        "find_no_success",
        "find_bad_rows",
    }


def test_a_finder_not_in_finds_runs_whatever_only_asks(alive, t0, monkeypatch):
    """A finder added without its codes (another module's) is never silently skipped."""

    def find_new(at):
        raise RuntimeError("boom")

    monkeypatch.setattr(health, "FINDERS", (*health.FINDERS, find_new))
    found = health.check(t0, ["no_beat"])
    assert [f.code for f in found] == ["check_failed"]


def test_overdue_names_the_first_and_counts_the_rest(alive, make_schedule, now, t0, monkeypatch):
    monkeypatch.setattr(findings, "SHOWN", 2)
    for i in range(5):
        make_schedule(f"late-{i}", every=60, next_fire_at=t0 - (10 + i) * MIN)
    found = [f for f in health.check(t0) if f.code == "overdue"]
    assert [f.schedule for f in found] == ["late-4", "late-3", None]  # the most overdue first
    assert found[-1].message == "and 3 more schedules overdue"
    assert health.exit_code(found) == 2


def test_counts_stop_at_their_cap(alive, make_schedule, now, t0, monkeypatch):
    monkeypatch.setattr(findings, "SHOWN", 1)
    monkeypatch.setattr(findings, "COUNTED", 2)
    for i in range(5):
        make_schedule(f"stuck-{i}", every=60, next_fire_at=t0 + MIN, stuck_since=t0 - (7 + i) * H)
    found = [f for f in health.check(t0) if f.code == "stuck"]
    assert [f.schedule for f in found] == ["stuck-4", None]
    assert found[-1].message == "and more than 2 more schedules stuck"


@pytest.mark.parametrize(("rest", "said"), [(2, "2"), (3, "more than 2")])
def test_exactly_the_cap_is_counted_not_said_to_pass_it(
    alive, make_schedule, now, t0, monkeypatch, rest, said
):
    """R33: "more than N" only when there are more than N: exactly the cap is said as is
    (the count reads cap + 1 rows to tell the two apart)."""
    monkeypatch.setattr(findings, "SHOWN", 1)
    monkeypatch.setattr(findings, "COUNTED", 2)
    for i in range(1 + rest):
        make_schedule(f"stuck-{i}", every=60, next_fire_at=t0 + MIN, stuck_since=t0 - (7 + i) * H)
    found = [f for f in health.check(t0) if f.code == "stuck"]
    assert found[-1].message == f"and {said} more schedules stuck"
    assert findings.count_words(findings.counted(Schedule.objects.all(), 1)) == said


def test_no_success_finds_failing_rows_of_each_outcome_in_one_timing(alive, now, t0, created_at):
    """The grouped no_success reads a group's rows by their outcome: a failed row, a row
    that never ran and a succeeded row whose success is old are each found, beside rows
    of the same timing that are well."""
    many(20, t0, hour="*", minute="0", timezone="UTC", last_completed_at=t0 - 30 * MIN)
    Schedule.objects.filter(name="digest-0001").update(
        last_completed_at=t0 - 5 * H, last_outcome=RunState.FAILED
    )
    Schedule.objects.filter(name="digest-0002").update(last_completed_at=None, last_outcome="")
    Schedule.objects.filter(name="digest-0003").update(last_completed_at=t0 - 6 * H)
    found = [f for f in health.check(t0) if f.code == "no_success"]
    assert [f.schedule for f in found] == ["digest-0001", "digest-0002", "digest-0003"]


def test_no_success_answers_with_more_failing_groups_than_sqlite_can_or(alive, now, t0):
    """1,100 failing groups (each its own interval): ORed in one query, SQLite's parser
    refused the expression ("Expression tree is too large", check's database_unreachable);
    a query per chunk of groups names the first by name and counts the rest."""
    Schedule.objects.bulk_create(
        Schedule(
            name=f"failing-{i:04d}",
            task="tests.e2eapp.tasks.record",
            every=dt.timedelta(seconds=600 + i),
            next_fire_at=t0 + H,
            last_outcome=RunState.FAILED,
        )
        for i in range(1100)
    )
    Schedule.objects.update(created_at=t0 - 48 * H)
    found = [f for f in health.check(t0) if f.code in ("no_success", "database_unreachable")]
    assert [f.schedule for f in found[:3]] == ["failing-0000", "failing-0001", "failing-0002"]
    assert len(found) == findings.SHOWN + 1
    assert found[-1].message == (
        "and 1,000 more schedules with no successful run over their last 3 periods"
    )


def test_no_success_names_the_first_rows_of_a_timing_it_cannot_bound_and_counts_the_rest(
    alive, now, t0, monkeypatch
):
    """R21 with R33: a group whose bound raises names its first SHOWN rows as bad_row and
    says how many more, as every other finder does."""
    monkeypatch.setattr(findings, "SHOWN", 2)
    many(5, t0, last_completed_at=t0 - 30 * H)

    def bound_or_error(*args):
        return RuntimeError("no bound")

    monkeypatch.setattr(run_findings, "_bound_or_error", bound_or_error)
    found = [f for f in run_findings.find_no_success(t0) if f.code == "bad_row"]
    assert [f.schedule for f in found] == ["digest-0000", "digest-0001", None]
    assert found[-1].message == ("and 3 more schedules whose no-success bound check cannot compute")


# --- status -------------------------------------------------------------------------------


def test_status_says_the_counts_then_what_needs_a_look(alive, make_schedule, now, t0):
    many(30, t0)
    make_schedule("late", every=60, next_fire_at=t0 - H)
    make_schedule("stuck", every=60, next_fire_at=t0 + MIN, stuck_since=t0 - 2 * H)
    make_schedule("failing", every=60, next_fire_at=t0 + MIN, last_outcome=RunState.FAILED)
    make_schedule("paused", every=60, enabled=False)
    Schedule.objects.filter(name="digest-0007").update(error="unknown time zone 'Mars/Olympus'")
    lines = command("status", "--limit", "5").splitlines()
    assert lines[0] == (
        "schedules: 34 (33 enabled, 1 paused, 0 deleted); 1 late, 1 stuck, 1 failing, "
        "1 set aside, 0 paused on failure"
    )
    titles = [line for line in lines if line.endswith(":") and not line.startswith(" ")]
    assert [t.split(" (")[0] for t in titles] == [
        "late",
        "stuck",
        "failing",
        "set aside",
        "schedules by name:",
    ]
    by_name = lines[lines.index("schedules by name:") + 3 :]
    assert [line.split()[0] for line in by_name[:5]] == [f"digest-000{i}" for i in range(5)]
    assert by_name[5] == "and 29 more (status --all, --name PATTERN, --limit N)"


def test_status_default_costs_the_same_queries_with_10_schedules_as_with_200(alive, now, t0):
    many(10, t0)
    few = queries(lambda: command("status", "--limit", "5"))
    many(190, t0, prefix="more-")
    assert queries(lambda: command("status", "--limit", "5")) == few


def test_status_name_takes_a_pattern_and_a_limit(alive, make_schedule, now, t0):
    many(12, t0)
    make_schedule("other", every=60)
    out = command("status", "--name", "digest-001*")
    names = [line.split()[0] for line in out.splitlines()[2:] if line and "alive" not in line]
    assert names == ["digest-0010", "digest-0011"]
    out = command("status", "--name", "digest-00?5")
    assert [ln.split()[0] for ln in out.splitlines()[2:3]] == ["digest-0005"]
    assert "digest-0004" not in out
    assert "digest-0000" in command("status", "--name", "digest-0000")  # no wildcard: exact
    out = command("status", "--name", "digest-*", "--limit", "3")
    assert [ln.split()[0] for ln in out.splitlines()[2:5]] == [
        "digest-0000",
        "digest-0001",
        "digest-0002",
    ]
    assert "digest-0003" not in out


def test_status_all_json_is_one_object_per_line_made_as_it_goes(alive, now, t0):
    many(25, t0)
    lines = status.status_json(t0, every=True)
    assert inspect.isgenerator(lines)  # never a list of them all
    first = json.loads(next(lines))
    assert first["name"] == "digest-0000" and first["schedule"].startswith("At 13:00")
    assert first["next_fire_at"] == (t0 + H).isoformat()
    assert len(list(lines)) == 24
    out = command("status", "--all", "--json")
    assert [json.loads(line)["name"] for line in out.splitlines()] == [
        f"digest-{i:04d}" for i in range(25)
    ]


def test_status_all_streams_every_row_past_a_chunk(alive, now, t0, monkeypatch):
    monkeypatch.setattr(db, "PAGE", 4)  # the widths from the first page, then on
    many(10, t0)
    lines = command("status", "--all").splitlines()
    assert [line.split()[0] for line in lines[2:12]] == [f"digest-{i:04d}" for i in range(10)]
    assert lines[-1].startswith("beat alive")


def test_status_json_default_starts_with_the_counts(alive, make_schedule, now, t0):
    many(3, t0)
    make_schedule("late", every=60, next_fire_at=t0 - H)
    lines = [json.loads(line) for line in command("status", "--json").splitlines()]
    assert lines[0]["counts"]["late"] == 1 and lines[0]["counts"]["schedules"] == 4
    assert lines[0]["counted_to"] == 10_000
    assert lines[0]["beats"][0]["hostname"] == "beat-host"
    assert [(x["part"], x["name"]) for x in lines[1:]] == [("late", "late")]


def test_status_refuses_a_limit_below_one():
    with pytest.raises(CommandError, match="--limit: a whole number of 1 or more, not '0'"):
        command("status", "--limit", "0")


# --- report -------------------------------------------------------------------------------


def test_report_names_the_schedules_that_fired_most_and_counts_the_rest(
    make_schedule, make_run, make_boot, now, t0
):
    boot = make_boot(started_at=t0 - 3 * H, heartbeat_at=t0 - 5 * S)
    for name, fires in (("a", 1), ("b", 3), ("c", 2)):
        row = make_schedule(name, every=600)
        for i in range(fires):
            make_run(row, t0 - H - i * 10 * MIN, boot=boot)
    built = report.build_report(t0 - 48 * H, t0, limit=2)
    assert list(built.by_schedule.items()) == [("b", 3), ("c", 2)]
    assert built.schedules_fired == 3 and built.more_schedules == 1
    text = report.format_report(built)
    assert "fires per schedule (the 2 that fired most, of 3):" in text
    assert "  and 1 more schedules (report --limit N)" in text
    assert built.as_dict()["schedules_fired"] == 3
    assert "a: 1" in command("report", "--limit", "3")


def test_report_costs_the_same_queries_with_10_fired_schedules_as_with_200(
    make_run, make_boot, now, t0
):
    boot = make_boot(started_at=t0 - 3 * H, heartbeat_at=t0 - 5 * S)

    def fire_all():
        for row in Schedule.objects.filter(runs__isnull=True):
            make_run(row, t0 - H, boot=boot)

    many(10, t0)
    fire_all()
    few = queries(lambda: report.build_report(t0 - 48 * H, t0))
    many(190, t0, prefix="more-")
    fire_all()
    assert queries(lambda: report.build_report(t0 - 48 * H, t0)) == few


def test_report_still_flags_an_over_firing_one_off_among_daily_schedules(
    make_schedule, make_run, make_boot, now, t0
):
    boot = make_boot(started_at=t0 - 3 * H, heartbeat_at=t0 - 5 * S)
    many(3, t0)
    for row in Schedule.objects.all():
        make_run(row, t0 - 2 * H, boot=boot)
    once = make_schedule("once", kind="clocked", clocked_at=t0 - 2 * H)
    make_run(once, t0 - 2 * H, boot=boot)
    make_run(once, t0 - 2 * H + S, boot=boot)
    hourly = make_schedule("hourly", kind="crontab", minute="0")
    for i in range(1, 8):
        make_run(hourly, t0 - i * 10 * MIN, boot=boot)
    flagged = {o.schedule: (o.fired, o.allowed) for o in report.find_overfired(t0 - 2 * H - S, t0)}
    assert flagged == {"once": (2, 1), "hourly": (7, 3)}


def sql_read(fn: Callable[[], Any]) -> int:
    """How much SQL ``fn`` sends: its queries' text with their values in it."""
    with CaptureQueriesContext(connection) as captured:
        fn()
    return sum(len(q["sql"]) for q in captured.captured_queries)


def test_report_reads_no_daily_schedule_a_weekly_one_lets_pass(
    make_schedule, make_run, make_boot, now, t0
):
    """R33: one weekly schedule (one fire allowed in 48 hours) does not lower the daily
    schedules' bar: a daily that fired twice in 48 hours is not read again, so the SQL
    sent is the same for 10 of them as for 200 (at a million, a list of a million ids)."""
    boot = make_boot(started_at=t0 - 60 * H, heartbeat_at=t0 - 5 * S)
    weekly = make_schedule("weekly", kind="crontab", minute="0", hour="3", day_of_week="1")
    for i in (1, 2):
        make_run(weekly, t0 - i * H, boot=boot)

    def fire_all():
        for row in Schedule.objects.filter(runs__isnull=True):
            make_run(row, t0 - 30 * H, boot=boot)
            make_run(row, t0 - 6 * H, boot=boot)

    window = (t0 - 48 * H, t0)
    many(10, t0)
    fire_all()
    flagged = report.find_overfired(*window)
    assert [(o.schedule, o.fired, o.allowed) for o in flagged] == [("weekly", 2, 1)]
    few = sql_read(lambda: report.find_overfired(*window))
    many(190, t0, prefix="more-")
    fire_all()
    assert [o.schedule for o in report.find_overfired(*window)] == ["weekly"]
    assert sql_read(lambda: report.find_overfired(*window)) == few


def test_report_a_timing_it_cannot_count_names_its_rows_and_keeps_the_others_bar(
    make_schedule, make_run, make_boot, now, t0, monkeypatch
):
    """R21 with R33: a timing whose allowance raises names its rows that fired, and does
    not lower the bar of the others (the daily rows that fired as allowed stay unread)."""
    boot = make_boot(started_at=t0 - 60 * H, heartbeat_at=t0 - 5 * S)
    odd = make_schedule("odd", kind="crontab", minute="7", hour="1")
    make_run(odd, t0 - H, boot=boot)
    allowed_fires = report.allowed_fires

    def allowed(spec, since, until):
        if getattr(spec, "minute", None) == "7":
            raise RuntimeError("cannot count this one")
        return allowed_fires(spec, since, until)

    monkeypatch.setattr(report, "allowed_fires", allowed)

    def fire_all():
        for row in Schedule.objects.filter(runs__isnull=True):
            make_run(row, t0 - 30 * H, boot=boot)
            make_run(row, t0 - 6 * H, boot=boot)

    window = (t0 - 48 * H, t0)
    many(10, t0)
    fire_all()
    flagged = report.find_overfired(*window)
    assert [(o.schedule, o.fired, o.error) for o in flagged] == [
        ("odd", 1, "cannot count this one")
    ]
    few = sql_read(lambda: report.find_overfired(*window))
    many(190, t0, prefix="more-")
    fire_all()
    assert sql_read(lambda: report.find_overfired(*window)) == few


# --- the admin ----------------------------------------------------------------------------


def test_admin_list_pages_without_counting_the_whole_table(admin_client, now, t0, monkeypatch):
    monkeypatch.setattr(ScheduleAdmin, "list_per_page", 4)
    monkeypatch.setattr(findings, "COUNTED", 6)
    many(10, t0)
    with CaptureQueriesContext(connection) as captured:
        response = admin_client.get(f"{CHANGELIST}?q=digest-&p=2")
    assert response.status_code == 200
    cl = response.context["cl"]
    assert [r.name for r in cl.result_list] == ["digest-0004", "digest-0005"]
    assert cl.result_count == 6  # counted up to COUNTED, paged to there
    assert cl.full_result_count is None
    counts = [q["sql"] for q in captured.captured_queries if "COUNT(*)" in q["sql"].upper()]
    assert counts and all("LIMIT" in sql for sql in counts), counts


def test_admin_unfiltered_list_counts_no_more_than_its_cap(admin_client, now, t0, monkeypatch):
    """R33 on every stack: the unfiltered list, with no estimate from the database's
    statistics (MariaDB, MySQL, SQLite, or a small PostgreSQL table), counts up to the cap
    through a LIMIT, never the whole table."""
    monkeypatch.setattr(ScheduleAdmin, "list_per_page", 4)
    monkeypatch.setattr(findings, "COUNTED", 6)
    many(10, t0)
    with CaptureQueriesContext(connection) as captured:
        response = admin_client.get(CHANGELIST)
    assert response.status_code == 200
    cl = response.context["cl"]
    assert cl.result_count == 6
    assert [r.name for r in cl.result_list] == [f"digest-{i:04d}" for i in range(4)]
    counts = [q["sql"] for q in captured.captured_queries if "COUNT(*)" in q["sql"].upper()]
    assert counts and all("LIMIT" in sql for sql in counts), counts


def test_admin_search_finds_by_the_start_of_the_name(admin_client, make_schedule, t0):
    make_schedule("digest-42", every=60)
    make_schedule("digest-420", every=60)
    make_schedule("weekly-digest-42", every=60)

    def shown(q: str) -> set[str]:
        response = admin_client.get(f"{CHANGELIST}?q={q}")
        assert response.status_code == 200
        return {r.name for r in response.context["cl"].result_list}

    assert shown("digest-42") == {"digest-42", "digest-420"}
    assert shown("digest-420") == {"digest-420"}
    assert shown("weekly") == {"weekly-digest-42"}
    assert shown("42") == set()  # a substring is not what it searches (no index serves one)


def test_admin_list_costs_the_same_queries_with_10_schedules_as_with_200(
    admin_client, alive, now, t0
):
    many(10, t0)

    def page():
        assert admin_client.get(CHANGELIST).status_code == 200

    few = queries(page)
    many(190, t0, prefix="more-")
    assert queries(page) == few


# --- api.list_schedules -------------------------------------------------------------------


def test_list_schedules_filters_limits_and_iterates(make_schedule, now, t0):
    many(5, t0)
    make_schedule("nightly", every=86400, task="tests.e2eapp.tasks.record_note", source=Source.CODE)
    make_schedule("paused-1", every=60, enabled=False)
    listed = api.list_schedules()
    assert inspect.isgenerator(listed)
    assert [s.name for s in listed][:2] == ["digest-0000", "digest-0001"]
    assert [s.name for s in api.list_schedules(name_prefix="digest-", limit=2)] == [
        "digest-0000",
        "digest-0001",
    ]
    noted = api.list_schedules(task="tests.e2eapp.tasks.record_note")
    assert [s.name for s in noted] == ["nightly"]
    assert [s.name for s in api.list_schedules(enabled=False)] == ["paused-1"]
    assert [s.name for s in api.list_schedules(source="code")] == ["nightly"]
    assert [s.name for s in api.list_schedules(limit=0)] == []
    assert len(list(api.list_schedules())) == 7
    [info] = api.list_schedules(name_prefix="digest-0003")
    assert info.schedule == "At 13:00 (Europe/Berlin)" and info.next_fire == "in 1 h"


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"limit": -1}, "limit"),
        ({"limit": "10"}, "limit"),
        ({"limit": True}, "limit"),
        ({"source": "cli"}, "source"),
        ({"enabled": "yes"}, "enabled"),
        ({"name_prefix": 42}, "name_prefix"),
        ({"task": b"x"}, "task"),
    ],
)
def test_list_schedules_refuses_a_bad_argument_naming_it(kwargs, field):
    with pytest.raises(api.InvalidSchedule) as refused:
        api.list_schedules(**kwargs)
    assert refused.value.field == field


def selects(captured: CaptureQueriesContext) -> list[str]:
    return [q["sql"] for q in captured.captured_queries if q["sql"].startswith("SELECT")]


def test_list_schedules_reads_a_page_a_query(now, t0, monkeypatch):
    """R33: a page is a query of its own, LIMITed, after the last name read: no cursor
    that MySQL/MariaDB or PostgreSQL behind PgBouncer (DISABLE_SERVER_SIDE_CURSORS) would
    hold whole in memory."""
    monkeypatch.setattr(db, "PAGE", 3)
    many(7, t0)
    with CaptureQueriesContext(connection) as captured:
        listed = api.list_schedules()
        assert selects(captured) == []  # nothing read before the first row is asked for
        assert [i.name for i in listed] == [f"digest-{i:04d}" for i in range(7)]
    sent = selects(captured)
    assert len(sent) == 3 and all("LIMIT 3" in sql for sql in sent), sent
    assert all('"name" >' in sql.replace("`", '"') for sql in sent[1:]), sent
    assert [i.name for i in api.list_schedules(limit=4)] == [f"digest-{i:04d}" for i in range(4)]
    assert [i.name for i in api.list_schedules(limit=6, name_prefix="digest-000")] == [
        f"digest-{i:04d}" for i in range(6)
    ]


def test_status_all_reads_a_page_a_query(alive, now, t0, monkeypatch):
    """R33: ``status --all`` and ``--name`` read as list_schedules does, a page a query."""
    monkeypatch.setattr(db, "PAGE", 3)
    many(7, t0)
    with CaptureQueriesContext(connection) as captured:
        lines = list(status.status_json(t0, name="digest-*", limit=None))
    assert [json.loads(line)["name"] for line in lines] == [f"digest-{i:04d}" for i in range(7)]
    pages = [sql for sql in selects(captured) if "digest-" in sql]
    assert len(pages) == 3 and all("LIMIT 3" in sql for sql in pages), pages
