"""R21's last sentence: ``check``, ``report``, ``status``, the metrics and the admin render
every row, however extreme. Each case writes its rows straight through the ORM (no
``full_clean``: the shapes the form refuses are exactly the ones a migration, a script or an
older version may have left), beside a healthy canary, and every monitoring surface must
answer: no traceback, no HTTP 500, ``check`` with a documented exit code (0, 1 or 2), the
canary and the extreme row both shown.
"""

from __future__ import annotations

import datetime as dt
import io
import json
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import connection, models, transaction
from django.test import Client, override_settings

from durablebeat import words
from durablebeat.core import clock
from durablebeat.enums import Reason, RunState
from durablebeat.models import Boot, Incident, MissedSlots, Run, Schedule, WorkerHeartbeat
from durablebeat.ops import health, metrics, report, run_findings, status

pytestmark = pytest.mark.django_db

S = dt.timedelta(seconds=1)
H = dt.timedelta(hours=1)
MIN_AT = dt.datetime.min.replace(tzinfo=dt.UTC)
MAX_AT = dt.datetime.max.replace(tzinfo=dt.UTC)
TASK = "tests.e2eapp.tasks.record"
TOKEN = "monitoring-token"


def longest_duration(sign: int = 1) -> dt.timedelta:
    """The longest interval the database stores: PostgreSQL's interval holds timedelta.max;
    SQLite and MariaDB store microseconds in a signed 64-bit integer."""
    if connection.vendor == "postgresql":
        return dt.timedelta.max if sign > 0 else dt.timedelta.min
    return dt.timedelta(microseconds=sign * (2**63 - 1))


def store_unchecked(**fields: Any) -> Schedule:
    """A schedule written as given, past every check of ``save()`` (R29): what raw SQL, or a
    release before the checks, can leave in the table."""
    created = Schedule(**fields)
    models.Model.save(created)
    return created


def row(name: str, **fields: Any) -> Schedule:
    """A schedule written as given (``store_unchecked``); ``update`` skips ``save``."""
    base: dict[str, Any] = {"task": TASK, "kind": "interval", "every": 60 * S, "overlap": "allow"}
    after = {k: fields.pop(k) for k in ("error", "created_at", "updated_at") if k in fields}
    created = store_unchecked(name=name, **(base | fields))
    if after:
        Schedule.objects.filter(pk=created.pk).update(**after)
    return created


def _times(at: dt.datetime) -> dict[str, Any]:
    return {
        "last_fired_at": at,
        "last_completed_at": at,
        "last_failed_at": at,
        "stuck_since": at,
        "stuck_reason": "previous run still started",
        "enabled_at": at,
        "removed_from_code_at": at,
        "last_outcome": RunState.FAILED,
        "created_at": at,
        "updated_at": at,
    }


def _runs(at: dt.datetime, t0: dt.datetime) -> None:
    sched = row("runs-at-the-edge", next_fire_at=t0 + H)
    boot = Boot.objects.create(
        id=uuid.uuid4(), hostname="edge\nhost", pid=2**31 - 1, started_at=at, heartbeat_at=at
    )
    states = (RunState.CLAIMED, RunState.PUBLISHED, RunState.STARTED, RunState.LOST)
    for i, state in enumerate(states):
        Run.objects.create(
            schedule=sched,
            slot=at - i * S if at == MAX_AT else at + i * S,
            boot=boot,
            reason=Reason.SCHEDULED,
            state=state,
            task_id=str(uuid.uuid4()),
            claimed_at=at,
            published_at=at,
            started_at=at,
            finished_at=at,
            hard_time_limit=1e308,
            publish_attempts=2**31 - 1,
            error="Traceback\n" + "x" * 10_000,
        )
    MissedSlots.objects.create(
        schedule=sched,
        boot=boot,
        count=2**31 - 1,
        first_slot=MIN_AT,
        last_slot=MAX_AT,
        reason="r" * 300,
        recorded_at=at,
    )
    Incident.objects.create(kind="reclaim", count=2**31 - 1, detail="d\n" * 1000, at=at)
    WorkerHeartbeat.objects.create(worker=f"w\n{at.year}", pid=2**31 - 1, seen_at=at)


def _started_runs_with_absurd_limits(t0: dt.datetime) -> None:
    sched = row("absurd-limits", next_fire_at=t0 + H)
    limits = [1e308, -1e308, 0.0, 1e-300, float("nan")]
    if connection.vendor == "mysql":  # MariaDB refuses NaN; SQLite stores it as NULL
        limits[-1] = 0.0
    for i, limit in enumerate(limits):
        Run.objects.create(
            schedule=sched,
            slot=t0 - (i + 1) * H,
            state=RunState.STARTED,
            task_id=str(uuid.uuid4()),
            claimed_at=t0 - 30 * H,
            started_at=t0 - 30 * H,
            hard_time_limit=limit,
        )


#: name -> how to write it; each returns nothing and leaves its rows in the database
EXTREMES: dict[str, Callable[[dt.datetime], None]] = {
    "next_fire_at_min": lambda t0: row("x", next_fire_at=MIN_AT),
    "next_fire_at_max": lambda t0: row("x", next_fire_at=MAX_AT),
    "clocked_at_min": lambda t0: row("x", kind="clocked", clocked_at=MIN_AT, next_fire_at=MIN_AT),
    "clocked_at_max": lambda t0: row("x", kind="clocked", clocked_at=MAX_AT, next_fire_at=MAX_AT),
    "times_at_min": lambda t0: row("x", next_fire_at=t0 - H, **_times(MIN_AT)),
    "times_at_max": lambda t0: row("x", next_fire_at=t0 - H, **_times(MAX_AT)),
    "every_microsecond": lambda t0: row("x", every=dt.timedelta(microseconds=1)),
    "every_longest": lambda t0: row("x", every=longest_duration(), next_fire_at=t0 - H),
    "every_longest_never_run": lambda t0: row("x", every=longest_duration(), created_at=MIN_AT),
    "every_negative": lambda t0: row("x", every=longest_duration(-1), next_fire_at=t0 - H),
    "every_zero": lambda t0: row("x", every=dt.timedelta(0), next_fire_at=t0 - H),
    "interval_without_every": lambda t0: row("x", every=None, next_fire_at=t0 - H),
    "grace_longest": lambda t0: row(
        "x", startup_grace=longest_duration(), catch_up_window=longest_duration()
    ),
    "grace_negative_longest": lambda t0: row(
        "x", startup_grace=longest_duration(-1), created_at=MAX_AT
    ),
    "crontab_unparsable": lambda t0: row(
        "x", kind="crontab", minute="whenever\nyou like", next_fire_at=t0 - H
    ),
    "crontab_never_matching": lambda t0: row(
        "x", kind="crontab", day_of_month="31", month_of_year="2", next_fire_at=t0 - H
    ),
    "crontab_unknown_timezone": lambda t0: row(
        "x", kind="crontab", minute="0", timezone="Mars/Olympus_Mons", next_fire_at=t0 - H
    ),
    "crontab_last_minute_of_time": lambda t0: row(
        "x",
        kind="crontab",
        minute="59",
        hour="23",
        day_of_month="31",
        month_of_year="12",
        timezone="Pacific/Kiritimati",
        next_fire_at=MAX_AT,
        last_completed_at=MIN_AT,
    ),
    "crontab_every_minute_never_succeeded": lambda t0: row(
        "x", kind="crontab", created_at=MIN_AT, enabled_at=MIN_AT
    ),
    "unknown_kind": lambda t0: row("x", kind="lunar", next_fire_at=t0 - H),
    "json_wrong_shapes": lambda t0: row(
        "x", args={"not": "a list"}, kwargs=[1, 2], headers="text", next_fire_at=t0 + H
    ),
    "numbers_huge": lambda t0: row("x", priority=32767, expire_seconds=1e308, next_fire_at=t0 + H),
    "numbers_negative": lambda t0: row("x", expire_seconds=-1e308, next_fire_at=t0 + H),
    "name_with_newlines": lambda t0: row(
        "evil\nfire schedule=forged slot=now\r\x1b[2J", next_fire_at=t0 - H, stuck_since=t0 - 7 * H
    ),
    "very_long_texts": lambda t0: row(
        "n" * 200,
        task="t" * 200,
        description="d" * 1_000_000,
        stuck_reason="r" * 300,
        stuck_since=t0 - 7 * H,
        error="e\n" * 50_000,
    ),
    "runs_at_min": lambda t0: _runs(MIN_AT, t0),
    "runs_at_max": lambda t0: _runs(MAX_AT, t0),
    "started_runs_with_absurd_limits": _started_runs_with_absurd_limits,
}


#: the names the writers above give their schedules (``write_every_extreme`` renames them)
WRITTEN_AS = ("x", "runs-at-the-edge", "absurd-limits")


def _beat_and_canary(t0: dt.datetime) -> None:
    Boot.objects.create(
        id=uuid.uuid4(), hostname="beat", pid=1, started_at=t0 - H, heartbeat_at=t0 - 2 * S
    )
    row("canary", next_fire_at=t0 + 30 * S, last_completed_at=t0 - 30 * S)


@pytest.fixture(params=sorted(EXTREMES))
def extreme(request, t0, time_machine):
    """One extreme beside the canary and a live beat."""
    time_machine.move_to(t0, tick=False)
    _beat_and_canary(t0)
    EXTREMES[request.param](t0)
    return request.param


def write_every_extreme(t0: dt.datetime) -> dict[str, set[str]]:
    """Every extreme at once, each schedule named after its extreme (the two that name their
    own keep their names): a table that holds many bad rows, as a real one does. Returns the
    names of the schedules each extreme wrote."""
    written = {}
    for extreme_name, write in EXTREMES.items():
        before = set(Schedule.objects.values_list("pk", flat=True))
        write(t0)
        Schedule.objects.filter(name__in=WRITTEN_AS).update(name=extreme_name)
        new = Schedule.objects.exclude(pk__in=before).values_list("name", flat=True)
        written[extreme_name] = set(new)
    return written


def outcome(client: Client, url: str) -> tuple[str, Any]:
    """("ok", the response) for a 200; else what the page answered or raised, and None."""
    try:
        response = client.get(url)
    except Exception as exc:  # what a page raised is reported by the case of its row
        return f"{url} raised {type(exc).__name__}: {exc}", None
    if response.status_code != 200:
        return f"{url} answered {response.status_code}", None
    return "ok", response


def names() -> list[str]:
    return list(Schedule.objects.order_by("name").values_list("name", flat=True))


def one_line(text: str) -> str:
    return words.one_line(text)


# --- check --------------------------------------------------------------------------------


def test_check_answers_with_a_documented_exit_code(extreme, t0):
    found = health.check(t0)
    assert health.exit_code(found) in (0, 1, 2)
    assert "check_failed" not in {f.code for f in found}, [f.line() for f in found]
    for f in found:
        assert "\n" not in f.line() and "\r" not in f.line()  # one line per finding (R17)
    json.dumps([f.as_dict() for f in found])


def test_check_command_exits_0_1_or_2_never_a_traceback(extreme):
    out = io.StringIO()
    try:
        call_command("durablebeat", "check", stdout=out)
        code = 0
    except SystemExit as exc:
        code = exc.code
    assert code in (1, 2) or (code == 0 and out.getvalue().startswith("OK"))
    out = io.StringIO()
    try:
        call_command("durablebeat", "check", "--json", stdout=out)
    except SystemExit as exc:
        assert exc.code in (1, 2)
    json.loads(out.getvalue())


# --- report and status --------------------------------------------------------------------


@pytest.mark.parametrize("span", [48 * H, dt.timedelta(days=3_000_000)])
def test_report_renders(extreme, t0, span):
    since = clock.before(t0, span)
    built = report.build_report(since, t0)
    text = report.format_report(built)
    assert text.startswith("durablebeat report:")
    json.dumps(built.as_dict())


def test_report_and_status_commands(extreme):
    # 1,000,000 days reach back before year 1: the report starts at the calendar's first day.
    for args in (("report",), ("report", "--since", "1000000d"), ("status",)):
        out = io.StringIO()
        call_command("durablebeat", *args, stdout=out)
        assert out.getvalue()
    with pytest.raises(CommandError, match="too long a duration: '99999999999d'"):
        call_command("durablebeat", "report", "--since", "99999999999d")


def test_status_shows_every_row_on_its_own_line(extreme, t0):
    text = status.format_status(t0, every=True)
    lines = text.splitlines()
    for name in names():
        assert any(line.startswith(one_line(name)) for line in lines), name
    assert len(lines) == 2 + len(names()) + 2  # header, rule, a line per row, blank, beat


def test_status_shows_what_needs_a_look_whatever_the_rows_hold(extreme, t0):
    """R21 and R33: the default view (counts, the parts, the first rows by name) renders
    every row it reads, a line each, and so does its JSON."""
    lines = status.format_status(t0).splitlines()
    assert lines[0].startswith("schedules: ")
    assert "schedules by name:" in lines
    for line in status.status_json(t0, every=True):
        assert json.loads(line)["name"] in names()


# --- metrics ------------------------------------------------------------------------------


def test_metrics_render_every_row(extreme, t0):
    parser = pytest.importorskip("prometheus_client.parser")
    text = metrics.render(lambda: t0).decode()
    invalid = {}
    for family in parser.text_string_to_metric_families(text):
        for s in family.samples:
            if s.name == "durablebeat_schedule_invalid":
                invalid[s.labels["schedule"]] = s.value
            if s.name == "durablebeat_metrics_errors":
                assert s.value == 0, text
    assert set(invalid) == set(Schedule.objects.filter(enabled=True).values_list("name", flat=True))
    assert invalid["canary"] == 0


@override_settings(DURABLEBEAT_METRICS_TOKEN=TOKEN, DEBUG=False)
def test_metrics_view_answers(extreme, client):
    response = client.get("/durablebeat/metrics", headers={"Authorization": f"Bearer {TOKEN}"})
    assert response.status_code == 200
    assert b'durablebeat_schedule_invalid{schedule="canary"} 0.0' in response.content


# --- admin --------------------------------------------------------------------------------

ADMIN_PAGES = (
    "/admin/durablebeat/schedule/",
    "/admin/durablebeat/schedule/?invalid=yes",
    "/admin/durablebeat/schedule/?overdue=yes",
    "/admin/durablebeat/schedule/?stuck=yes",
    "/admin/durablebeat/run/",
    "/admin/durablebeat/boot/",
    "/admin/durablebeat/missedslots/",
    "/admin/durablebeat/incident/",
    "/admin/durablebeat/workerheartbeat/",
)


ZONES = ("UTC", "Pacific/Kiritimati", "America/Los_Angeles")


@dataclass
class AdminWithEveryExtreme:
    """What the admin answered in one zone with every extreme at once beside the canary and
    a live beat: each extreme's case reads its own rows' pages here."""

    written: dict[str, set[str]]  # extreme -> the names of the schedules it wrote
    lists: dict[str, str]  # list page -> "ok", or what it answered or raised
    listed: list[str]  # the schedule list's names, sorted
    names: list[str]  # every schedule's name, sorted
    pages: dict[str, list[str]]  # schedule name -> its page's and its runs' outcomes
    boots: list[str]  # each boot's page's outcome


def render_with_every_extreme(client: Client, zone: str, t0: dt.datetime) -> AdminWithEveryExtreme:
    """Every admin list page and every schedule's, run's and boot's page in ``zone``, with
    every extreme at once: written in a savepoint that is rolled back (the calling case's
    own transaction goes on)."""
    with transaction.atomic():
        _beat_and_canary(t0)
        written = write_every_extreme(t0)
        with override_settings(TIME_ZONE=zone):
            lists = {url: outcome(client, url) for url in ADMIN_PAGES}
            first = lists[ADMIN_PAGES[0]][1]
            listed = [] if first is None else [r.name for r in first.context["cl"].result_list]
            pages: dict[str, list[str]] = {}
            for pk, name in Schedule.objects.values_list("pk", "name"):
                url = f"/admin/durablebeat/schedule/{pk}/change/"
                pages.setdefault(name, []).append(outcome(client, url)[0])
            for pk, name in Run.objects.values_list("pk", "schedule__name"):
                url = f"/admin/durablebeat/run/{pk}/change/"
                pages.setdefault(name, []).append(outcome(client, url)[0])
            boots = [
                outcome(client, f"/admin/durablebeat/boot/{pk}/change/")[0]
                for pk in Boot.objects.values_list("pk", flat=True)
            ]
        seen = AdminWithEveryExtreme(
            written,
            {url: o for url, (o, _) in lists.items()},
            sorted(listed),
            names(),
            pages,
            boots,
        )
        transaction.set_rollback(True)
    return seen


@pytest.fixture(scope="module")
def admin_by_zone() -> dict[str, AdminWithEveryExtreme]:
    """The admin rendered once per zone (per test process) for every extreme's case."""
    return {}


# Far east and far west: the admin shows instants in TIME_ZONE, where the edges overflow.
# Every extreme at once: a page renders every row of a table that holds them all (each
# alone beside the canary: tests/integration/test_timeline.py renders its schedule's page,
# and the tests above every other surface). Rendered once per zone, each case reading its
# own rows: the same rows, pages and zones as one rendering per case, a sixth of the
# requests (issue 38's fast loop).
@pytest.mark.parametrize("zone", ZONES)
@pytest.mark.parametrize("extreme_name", sorted(EXTREMES))
def test_admin_lists_and_pages_render_every_row(
    extreme_name, zone, admin_by_zone, admin_client, t0, time_machine
):
    time_machine.move_to(t0, tick=False)
    if zone not in admin_by_zone:
        admin_by_zone[zone] = render_with_every_extreme(admin_client, zone, t0)
    seen = admin_by_zone[zone]
    assert seen.lists == dict.fromkeys(ADMIN_PAGES, "ok")
    assert seen.listed == seen.names
    assert seen.written[extreme_name] and "canary" in seen.listed
    for name in seen.written[extreme_name] | {"canary"}:
        assert name in seen.listed
        assert set(seen.pages[name]) == {"ok"}, seen.pages[name]
    assert set(seen.boots) == {"ok"}, seen.boots


# --- isolation by injection: any exception, not only the known ones -----------------------


@pytest.fixture
def two_overdue(t0, time_machine):
    time_machine.move_to(t0, tick=False)
    Boot.objects.create(
        id=uuid.uuid4(), hostname="beat", pid=1, started_at=t0 - H, heartbeat_at=t0 - 2 * S
    )
    row("late", next_fire_at=t0 - 2 * H)
    row("poisoned", next_fire_at=t0 - 3 * H)


def test_a_row_that_raises_in_a_finder_is_a_bad_row_naming_it(two_overdue, t0, monkeypatch):
    real_ago = health.ago

    def ago(then, now):
        if then == t0 - 3 * H:
            raise LookupError("injected")
        return real_ago(then, now)

    monkeypatch.setattr(health, "ago", ago)
    found = {(f.code, f.schedule): f for f in health.check(t0)}
    assert set(found) == {("overdue", "late"), ("bad_row", "poisoned")}
    assert "LookupError: injected" in found[("bad_row", "poisoned")].message
    assert health.exit_code(found.values()) == 2


def test_a_finder_that_raises_is_check_failed_and_the_others_still_run(
    two_overdue, t0, monkeypatch
):
    def broken(now):
        raise RuntimeError("injected")

    monkeypatch.setattr(health, "FINDERS", (broken, *health.FINDERS))
    found = health.check(t0)
    assert [(f.code, f.severity) for f in found if f.code == "check_failed"] == [
        ("check_failed", health.Severity.CRITICAL)
    ]
    assert "broken could not run (RuntimeError: injected)" in found[0].message
    assert {f.schedule for f in found if f.code == "overdue"} == {"late", "poisoned"}
    # Like an unreachable database: printed under --only, counted only when asked for.
    only = health.check(t0, only=["no_beat"])
    assert [f.code for f in only] == ["check_failed"]
    assert health.exit_code(only, ["no_beat"]) == 0
    out = io.StringIO()
    with pytest.raises(SystemExit) as exited:
        call_command("durablebeat", "check", stdout=out)
    assert exited.value.code == 2
    assert "CRITICAL check_failed: broken could not run" in out.getvalue()


def test_a_run_drill_down_past_the_last_year_is_a_bad_lookup_not_a_500(admin_client):
    response = admin_client.get("/admin/durablebeat/run/?slot__year=9999")
    assert response.status_code == 302 and response["Location"].endswith("?e=1")


# --- the math holds at the edges instead of giving up ------------------------------------


def test_an_interval_longer_than_the_calendar_has_no_no_success_bound(t0):
    from durablebeat.core import timing

    assert run_findings.no_success_bound(timing.Interval(dt.timedelta.max), t0, 3) is None
    assert run_findings.no_success_bound(timing.Interval(H), t0, 3) == t0 - 3 * H + S / 1_000_000


def test_a_grace_past_the_calendar_counts_from_its_edge(t0):
    assert run_findings._periods_start(None, MAX_AT, None, H) == MAX_AT
    assert run_findings._periods_start(None, t0, MIN_AT, dt.timedelta.min) == MIN_AT
    assert run_findings._periods_start(None, MIN_AT, None, -H) == MIN_AT


def test_a_hard_limit_past_the_calendar_never_runs_out(t0, time_machine):
    _started_runs_with_absurd_limits(t0)
    found = [f for f in health.check(t0) if f.schedule == "absurd-limits"]
    # 1e308 s: never unresolved; -1e308, NaN, 0 (no limit) and 1e-300 s: long unresolved.
    assert [(f.code, f.message.split(":")[1].strip()[:9]) for f in found] == [
        ("unresolved_runs", "4 run(s) ")
    ]
