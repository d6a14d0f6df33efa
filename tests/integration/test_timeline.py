"""The admin's timeline (R19), through Django's test client. Each slot's mark says what
became of it, boots are lines, dense lanes are buckets that say so, the schedule list's
filters and pages select the lanes, every row renders, the table holds the same data as
the picture, and the schedule page shows its lane, lateness and durations."""

from __future__ import annotations

import datetime as dt
import re
import uuid
from dataclasses import dataclass
from html import unescape
from typing import Any

import pytest
from django.contrib.auth.models import Permission, User
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext

from durablebeat.admin import timeline as admin_timeline
from durablebeat.enums import Reason, RunState
from durablebeat.models import Boot, MissedSlots, Run, Schedule
from durablebeat.ops import timeline
from tests.integration.test_monitoring_extremes import (
    EXTREMES,
    MAX_AT,
    outcome,
    store_unchecked,
    write_every_extreme,
)

pytestmark = pytest.mark.django_db

S = dt.timedelta(seconds=1)
MIN = dt.timedelta(minutes=1)
H = dt.timedelta(hours=1)
URL = "/admin/durablebeat/schedule/timeline/"
TASK = "tests.e2eapp.tasks.record"

MARK = re.compile(
    r'<a class="tl-mark tl-(\w+)" data-run="(\d+)" href="([^"]+)" aria-label="([^"]*)"'
)
ROW = re.compile(r'<tr class="tl-row tl-row-mark" data-run="(\d+)" data-kind="(\w+)">')


@pytest.fixture(autouse=True)
def frozen(time_machine, t0):
    time_machine.move_to(t0, tick=False)


def marks(response: Any) -> dict[int, tuple[str, str, str]]:
    """{run id: (kind, href, aria label)} of the marks drawn."""
    assert response.status_code == 200
    html = response.content.decode()
    return {int(run): (kind, href, label) for kind, run, href, label in MARK.findall(html)}


def lane_names(response: Any) -> list[str]:
    return [lane.name for lane in response.context["lanes"]]


@pytest.fixture
def scene(make_schedule, make_boot, make_run, t0):
    """One schedule per outcome the issue names, two boots (deploys) in the last 24 h."""
    first = make_boot(started_at=t0 - 10 * H, stopped_at=t0 - 3 * H, hostname="web-1")
    second = make_boot(started_at=t0 - 3 * H, heartbeat_at=t0 - 2 * S, hostname="web-2")
    rows = {n: make_schedule(n, every=3600) for n in ("ok", "failing", "orphan", "delivery")}
    rows |= {n: make_schedule(n, every=3600) for n in ("by-hand", "skipper", "busy", "missing")}
    runs = {
        "succeeded": make_run(rows["ok"], t0 - 5 * H, boot=first),
        "failed": make_run(rows["failing"], t0 - 4 * H, boot=first, state=RunState.FAILED),
        "lost": make_run(rows["orphan"], t0 - 6 * H, boot=first, state=RunState.LOST),
        "catch_up": make_run(
            rows["delivery"], t0 - 3 * H - 10 * MIN, boot=second, reason=Reason.CATCH_UP
        ),
        "manual": make_run(rows["by-hand"], t0 - 2 * H, reason=Reason.MANUAL),
        "skipped": make_run(
            rows["skipper"], t0 - H, boot=second, state=RunState.SKIPPED, detail="still running"
        ),
        "unresolved": make_run(rows["busy"], t0 - 30 * MIN, boot=second, state=RunState.STARTED),
        "missed": make_run(rows["missing"], t0 - 8 * H, state=RunState.MISSED),
    }
    Schedule.objects.filter(pk=rows["skipper"].pk).update(
        stuck_since=t0 - 2 * H, stuck_reason="previous run still started"
    )
    missed = MissedSlots.objects.create(
        schedule=rows["missing"],
        boot=second,
        count=3,
        first_slot=t0 - 6 * H,
        last_slot=t0 - 4 * H,
        reason="no beat ran",
        recorded_at=t0 - 3 * H,
    )
    return {"rows": rows, "runs": runs, "boots": (first, second), "missed": missed}


# --- marks ----------------------------------------------------------------------------------


def test_each_outcome_has_its_mark_kind_shape_and_words(admin_client, scene):
    drawn = marks(admin_client.get(URL))
    for kind, run in scene["runs"].items():
        assert drawn[run.pk][0] == kind, kind
        assert timeline.STYLES[kind].label in drawn[run.pk][2]
    assert len({timeline.STYLES[k].shape for k in scene["runs"]}) == len(scene["runs"])
    assert "failing: " in drawn[scene["runs"]["failed"].pk][2]  # the lane's name is said


def test_marks_link_to_their_run_lanes_to_their_schedule_boots_to_their_boot(admin_client, scene):
    response = admin_client.get(URL)
    drawn = marks(response)
    for run in scene["runs"].values():
        assert drawn[run.pk][1] == f"/admin/durablebeat/run/{run.pk}/change/"
    html = response.content.decode()
    for row in scene["rows"].values():
        assert f'href="/admin/durablebeat/schedule/{row.pk}/change/"' in html
    for boot in scene["boots"]:
        assert re.search(
            rf'<a class="tl-boot" href="/admin/durablebeat/boot/{boot.pk}/change/" '
            rf'aria-label="beat started on {boot.hostname} \(pid 4242\)',
            html,
        )
    assert f'href="/admin/durablebeat/missedslots/{scene["missed"].pk}/change/"' in html
    assert admin_client.get(drawn[scene["runs"]["lost"].pk][1]).status_code == 200


def test_a_stuck_schedule_shows_its_band_from_stuck_since(admin_client, scene, t0):
    response = admin_client.get(URL)
    lane = next(lane for lane in response.context["lanes"] if lane.name == "skipper")
    assert lane.stuck is not None and lane.stuck.since == t0 - 2 * H
    assert 'class="tl-stuck"' in response.content.decode()
    assert "stuck since 2026-03-02 10:00:00 UTC: previous run still started" in (
        response.content.decode()
    )
    assert all(lane.stuck is None for lane in response.context["lanes"] if lane.name != "skipper")


def test_boots_are_drawn_where_they_started(admin_client, scene):
    response = admin_client.get(URL)
    xs = {b.id: b.x for b in response.context["boots"]}
    first, second = scene["boots"]
    assert xs[first.pk] < xs[second.pk]
    # 10 h and 3 h before the end of the 24 h window, after the labels
    x0, width = admin_timeline.LABEL_WIDTH, admin_timeline.PLOT_WIDTH
    assert xs[first.pk] == pytest.approx(x0 + width * 14 / 24, abs=0.1)
    assert xs[second.pk] == pytest.approx(x0 + width * 21 / 24, abs=0.1)


def test_labels_of_boots_a_minute_apart_are_stacked_and_the_lanes_start_under_them(
    admin_client, scene, make_boot, t0
):
    """Issue 28 item 8: the second boot's restart a minute later gets a row of its own."""
    make_boot(started_at=t0 - 3 * H + MIN, heartbeat_at=t0 - 2 * S, hostname="web-2")
    response = admin_client.get(URL)
    header = response.context["header"]
    tags = [tag for _, tag in response.context["boot_tags"]]
    assert [tag.row for tag in tags] == [0, 0, 1] and header.rows == 2
    assert response.context["lanes"][0].y == header.height > timeline.Header().height
    drawn = re.findall(
        r'<text class="tl-boot-label" x="[\d.]+" y="([\d.]+)"', unescape(response.content.decode())
    )
    assert drawn == ["10.0", "10.0", "22.0"]


def test_a_window_shows_only_its_slots(admin_client, scene):
    drawn = marks(admin_client.get(URL + "?window=1h"))
    assert set(drawn) == {scene["runs"]["unresolved"].pk}  # 30 min ago
    drawn = marks(admin_client.get(URL + "?window=7d"))
    assert set(drawn) == {run.pk for run in scene["runs"].values()}


# --- dense lanes ----------------------------------------------------------------------------


def test_a_lane_with_more_slots_than_the_threshold_is_buckets_that_say_so(
    admin_client, make_schedule, t0
):
    dense = make_schedule("every-minute", every=60)
    sparse = make_schedule("hourly", every=3600)
    n = timeline.BUCKET_ABOVE + 1
    Run.objects.bulk_create(
        Run(
            schedule=dense,
            slot=t0 - (i + 1) * MIN,
            claimed_at=t0 - (i + 1) * MIN,
            state=RunState.FAILED if i == 7 else RunState.SUCCEEDED,
            task_id=str(uuid.uuid4()),
        )
        for i in range(n)
    )
    Run.objects.create(schedule=sparse, slot=t0 - H, claimed_at=t0 - H, state=RunState.SUCCEEDED)
    response = admin_client.get(URL)
    lanes = {lane.name: lane for lane in response.context["lanes"]}
    assert lanes["every-minute"].marks == []
    buckets = lanes["every-minute"].buckets
    assert sum(b.total for b in buckets) == n
    assert f"aggregated: {n} slots in {len(buckets)} buckets of 1 h" in lanes["every-minute"].note
    assert lanes["every-minute"].note in response.content.decode()
    assert [b.kind for b in buckets].count("failed") == 1  # the worst outcome of its bucket
    assert len(lanes["hourly"].marks) == 1 and lanes["hourly"].buckets == []
    failing = next(b for b in buckets if b.kind == "failed")
    assert failing.counts["failed"] == 1 and "1 failed" in failing.label
    one_fewer = Run.objects.filter(schedule=dense).order_by("slot").first()
    assert one_fewer is not None
    one_fewer.delete()
    lanes = {lane.name: lane for lane in admin_client.get(URL).context["lanes"]}
    assert len(lanes["every-minute"].marks) == timeline.BUCKET_ABOVE
    assert lanes["every-minute"].buckets == []


# --- which lanes ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("", ["busy", "by-hand", "delivery", "failing", "missing", "ok", "orphan", "skipper"]),
        ("q=fail", ["failing"]),
        ("stuck=yes", ["skipper"]),
        ("last_outcome=failed", ["failing"]),
        ("enabled__exact=0", ["ok"]),
        ("kind__exact=crontab", []),
        ("source__exact=code", []),
        ("overdue=yes", ["orphan"]),
    ],
)
def test_the_lists_filters_select_the_lanes(admin_client, scene, t0, query, expected):
    Schedule.objects.filter(name="failing").update(last_outcome=RunState.FAILED)
    Schedule.objects.filter(name="ok").update(enabled=False)
    Schedule.objects.exclude(name="orphan").update(next_fire_at=t0 + H)
    Schedule.objects.filter(name="orphan").update(next_fire_at=t0 - H)
    response = admin_client.get(f"{URL}?window=7d&{query}")
    assert lane_names(response) == expected
    listed = admin_client.get(f"/admin/durablebeat/schedule/?{query}").context["cl"].result_list
    assert sorted(r.name for r in listed) == expected  # the list's own answer


def test_filter_links_keep_the_window(admin_client, scene):
    html = admin_client.get(URL + "?window=7d").content.decode()
    assert re.search(r'href="\?[^"]*stuck=yes[^"]*window=7d', html)


def test_the_from_to_form_keeps_the_filters_and_starts_at_the_first_page(admin_client, scene):
    html = admin_client.get(URL + "?stuck=yes&page=2&window=7d").content.decode()
    form = html[html.index('<form method="get" class="tl-range"') :]
    form = form[: form.index("</form>")]
    assert '<input type="hidden" name="stuck" value="yes">' in form
    assert 'name="page"' not in form and 'name="window"' not in form


def test_the_from_to_form_keeps_every_value_of_a_repeated_parameter(admin_client, scene):
    html = admin_client.get(URL + "?q=a&q=b").content.decode()
    form = html[html.index('<form method="get" class="tl-range"') :]
    form = form[: form.index("</form>")]
    assert '<input type="hidden" name="q" value="a">' in form
    assert '<input type="hidden" name="q" value="b">' in form


def test_a_bad_filter_says_so_and_still_answers(admin_client, scene):
    response = admin_client.get(URL + "?nonsense__field=1")
    assert response.status_code == 200
    assert "These filters cannot be used" in response.content.decode()
    assert lane_names(response) == []


def test_lanes_come_a_page_at_a_time(admin_client, make_schedule):
    Schedule.objects.bulk_create(
        Schedule(name=f"tenant-{i:03d}", task=TASK, every=dt.timedelta(hours=1)) for i in range(120)
    )
    first = admin_client.get(URL)
    assert lane_names(first) == [f"tenant-{i:03d}" for i in range(50)]
    assert 'rel="next"' in first.content.decode()
    assert "Page 1 of 3" in first.content.decode()
    last = admin_client.get(URL + "?page=3")
    assert lane_names(last) == [f"tenant-{i:03d}" for i in range(100, 120)]
    assert 'rel="next"' not in last.content.decode()
    assert lane_names(admin_client.get(URL + "?page=x")) == lane_names(first)


def test_the_lanes_are_counted_once_per_page(admin_client, make_schedule):
    """The schedule list's changelist counts the filtered schedules; the page's paginator
    reuses that count instead of counting them again (100,000 rows each time)."""
    Schedule.objects.bulk_create(
        Schedule(name=f"tenant-{i:03d}", task=TASK, every=dt.timedelta(hours=1)) for i in range(60)
    )
    with CaptureQueriesContext(connection) as seen:
        response = admin_client.get(URL + "?enabled__exact=1")
    assert "Page 1 of 2" in response.content.decode()
    counts = [
        q["sql"]
        for q in seen.captured_queries
        if "COUNT(" in q["sql"] and "durablebeat_run" not in q["sql"]
    ]
    assert len(counts) == 1, counts


# --- windows --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("query", "words"),
    [
        ("from=yesterday&to=2026-03-02", "'yesterday' is not a date and time"),
        ("from=2026-02-30&to=2026-03-02", "'2026-02-30' is not a date and time"),
        ("from=2026-03-02T12:00&to=2026-03-01", "from must be before to"),
        ("from=2026-03-02", "give both from and to"),
        ("from=2000-01-01&to=2026-01-01", "a window is at most 366 days long"),
        ("window=1y", "unknown window '1y'"),
    ],
)
def test_a_bad_window_is_a_message_and_the_last_24_h(admin_client, scene, query, words):
    response = admin_client.get(f"{URL}?{query}")
    assert response.status_code == 200
    assert words.lower() in unescape(response.content.decode()).lower()
    assert response.context["window"].key == "24h"


def test_from_and_to_pick_the_window(admin_client, scene, t0):
    response = admin_client.get(URL + "?from=2026-03-02T05:00&to=2026-03-02T07:00")
    window = response.context["window"]
    assert (window.since, window.until) == (t0 - 7 * H, t0 - 5 * H)
    assert set(marks(response)) == {scene["runs"]["lost"].pk, scene["runs"]["succeeded"].pk}


# --- every row renders ----------------------------------------------------------------------


EDGE_WINDOWS = (
    "",
    "?window=7d",
    "?from=9999-12-30&to=9999-12-31T23:59:59.999999",
    "?from=0001-01-01&to=0001-01-03",
    "?as=table&from=9999-12-30&to=9999-12-31T23:59:59",
    "?show=deploys&window=7d",
)


@dataclass
class WindowsWithEveryExtreme:
    """What the timeline drew in each edge window with every extreme at once beside the
    canary: each extreme's case reads its own lanes here."""

    written: dict[str, set[str]]  # extreme -> the names of the schedules it wrote
    names: list[str]  # every schedule's name, sorted
    drawn: dict[str, tuple[str, list[str]]]  # window -> ("ok" or what it did, lanes, sorted)


def draw_every_extreme(client: Any, t0: dt.datetime) -> WindowsWithEveryExtreme:
    """Every edge window with every extreme at once, a lane each: written in a savepoint
    that is rolled back (the calling case's own transaction goes on)."""
    with transaction.atomic():
        written = write_every_extreme(t0)
        Schedule.objects.create(name="canary", task=TASK, every=dt.timedelta(minutes=1))
        drawn = {}
        for query in EDGE_WINDOWS:
            said, response = outcome(client, URL + query)
            drawn[query] = (said, [] if response is None else sorted(lane_names(response)))
        seen = WindowsWithEveryExtreme(
            written, sorted(Schedule.objects.values_list("name", flat=True)), drawn
        )
        transaction.set_rollback(True)
    return seen


@pytest.fixture(scope="module")
def windows_with_every_extreme() -> list[WindowsWithEveryExtreme]:
    """The windows drawn once (per test process) for every extreme's case."""
    return []


@pytest.mark.parametrize("name", sorted(EXTREMES))
def test_every_row_renders_on_the_timeline(admin_client, t0, name, windows_with_every_extreme):
    """Every extreme at once in every edge window, a lane each beside the canary's (drawn
    once, each case reading its own lanes); then this extreme alone beside the canary:
    every schedule's page, which draws its own lane (the timeline's detail)."""
    if not windows_with_every_extreme:
        windows_with_every_extreme.append(draw_every_extreme(admin_client, t0))
    seen = windows_with_every_extreme[0]
    for query, (said, lanes) in seen.drawn.items():
        assert said == "ok", query
        assert lanes == seen.names, query
        assert seen.written[name] <= set(lanes), query
    EXTREMES[name](t0)
    Schedule.objects.create(name="canary", task=TASK, every=dt.timedelta(minutes=1))
    for pk in Schedule.objects.values_list("pk", flat=True):
        assert admin_client.get(f"/admin/durablebeat/schedule/{pk}/change/").status_code == 200


def test_runs_at_the_last_instant_are_drawn(admin_client, t0):
    EXTREMES["runs_at_max"](t0)
    response = admin_client.get(URL + "?from=9999-12-31T23:00&to=9999-12-31T23:59:59.999999")
    assert len(marks(response)) == 4
    assert len(response.context["boots"]) == 1


# --- the same data as a table ---------------------------------------------------------------


def test_the_table_has_the_same_marks_as_the_picture(admin_client, scene):
    picture = marks(admin_client.get(URL))
    table = admin_client.get(URL + "?as=table")
    rows = {int(run): kind for run, kind in ROW.findall(table.content.decode())}
    assert rows == {run: kind for run, (kind, _, _) in picture.items()}
    page = table.content.decode()
    assert "3 slots missed while no beat ran" in page
    assert "stuck since" in page and page.count('class="tl-row tl-row-boot"') == 2
    assert '<svg class="tl-lanes"' not in page


def test_the_svg_and_marks_are_labelled_for_screen_readers(admin_client, scene):
    html = admin_client.get(URL).content.decode()
    assert re.search(
        r'<svg class="tl-lanes" role="group" aria-label="Timeline of 8 schedules', html
    )
    assert html.count("<title>") >= len(scene["runs"]) + 2
    assert "http://" not in html.replace('xmlns="http://www.w3.org/2000/svg"', "")
    assert "https://" not in html  # no external asset


# --- per deploy -----------------------------------------------------------------------------


def test_fires_per_deploy_by_reason_with_the_overfiring_schedule_marked(
    admin_client, make_schedule, make_boot, make_run, t0
):
    daily = make_schedule("nightly", every=24 * 3600)
    steady = make_schedule("steady", every=3600)
    for i in range(6):  # a deploy loop: each boot fires the daily job at startup grace
        boot = make_boot(started_at=t0 - (12 - i) * H, hostname=f"deploy-{i}")
        make_run(daily, t0 - (12 - i) * H + MIN, boot=boot, reason=Reason.STARTUP_GRACE)
        make_run(steady, t0 - (12 - i) * H + 2 * MIN, boot=boot)
    response = admin_client.get(URL + "?show=deploys")
    html = response.content.decode()
    bars = response.context["deploys"].bars
    assert [b.line.label for b in bars] == [f"deploy-{i}:4242" for i in range(6)]
    assert all(b.line.fires == {"scheduled": 1, "startup_grace": 1} for b in bars)
    assert "deploy-0:4242: 2 fires: 1 scheduled, 1 startup grace" in html
    assert html.count('class="tl-reason tl-reason-startup_grace"') == 6
    flagged = response.context["deploys"].flagged
    assert [(f.overfire.schedule, f.schedule_id) for f in flagged] == [("nightly", daily.pk)]
    assert 'over-firing:</strong> <a href="/admin/durablebeat/schedule/' in html


# --- the schedule page ----------------------------------------------------------------------


def test_the_schedule_page_shows_its_lane_lateness_and_durations(
    admin_client, make_schedule, make_run, t0
):
    row = make_schedule("creeping", every=3600, time_limit=600.0)
    for i in range(48):
        slot = t0 - (48 - i) * H
        make_run(
            row,
            slot,
            published_at=slot + i * S,
            started_at=slot + i * S,
            finished_at=slot + i * S + (100 + 10 * i) * S,
        )
    response = admin_client.get(f"/admin/durablebeat/schedule/{row.pk}/change/")
    html = response.content.decode()
    assert response.status_code == 200
    assert 'class="tl-chart tl-chart-lateness"' in html
    assert 'aria-label="Lateness: sent minus slot: 48 fires, axis up to 47 s"' in html
    assert 'aria-label="Run duration: finished minus started: 48 fires' in html
    assert "time limit 10 min" in html  # the longest run, 9 min 30 s, against its limit
    assert len(MARK.findall(html)) == 48  # the lane over 7 days
    assert f'href="{URL}?id__exact={row.pk}"' in html
    one_day = admin_client.get(f"/admin/durablebeat/schedule/{row.pk}/change/?timeline=24h")
    assert len(MARK.findall(one_day.content.decode())) == 23  # slots in (now - 24 h, now]


def test_the_timeline_is_linked_from_the_list_the_schedule_and_the_check_banner(
    admin_client, make_schedule
):
    row = make_schedule("job", every=60)
    listing = admin_client.get("/admin/durablebeat/schedule/?kind__exact=interval")
    html = listing.content.decode()
    assert f'href="{URL}?kind__exact=interval" class="durablebeat-timeline-link"' in html
    assert 'class="durablebeat-health-timeline"' in html  # no beat runs: check would fail
    page = admin_client.get(f"/admin/durablebeat/schedule/{row.pk}/change/").content.decode()
    assert f'href="{URL}?id__exact={row.pk}" class="durablebeat-timeline-link"' in page
    assert lane_names(admin_client.get(f"{URL}?id__exact={row.pk}")) == ["job"]


def test_view_permission_is_enough_and_anonymous_is_sent_to_log_in(client, scene):
    viewer = User.objects.create_user("viewer", password="pw", is_staff=True)
    viewer.user_permissions.add(Permission.objects.get(codename="view_schedule"))
    assert client.get(URL).status_code == 302
    client.force_login(viewer)
    assert len(marks(client.get(URL))) == len(scene["runs"])
    nobody = User.objects.create_user("nobody", password="pw", is_staff=True)
    client.force_login(nobody)
    assert client.get(URL).status_code == 403


def test_a_run_of_a_boot_gone_is_still_drawn(admin_client, scene):
    run = scene["runs"]["failed"]
    Boot.objects.filter(pk=scene["boots"][0].pk).delete()
    run.refresh_from_db()
    assert run.boot_id is None
    assert marks(admin_client.get(URL))[run.pk][0] == "failed"
    assert MAX_AT.year == 9999


@pytest.mark.parametrize("limit", [1e308, -1e308, 0.0, 1e-300])
def test_a_schedule_page_with_any_stored_time_limit_renders(admin_client, make_run, t0, limit):
    row = store_unchecked(name="odd-limit", task=TASK, every=H, time_limit=limit)
    make_run(row, t0 - H, started_at=t0 - H, finished_at=t0 - H + 5 * S)
    response = admin_client.get(f"/admin/durablebeat/schedule/{row.pk}/change/")
    assert response.status_code == 200
    assert 'class="tl-chart tl-chart-duration"' in response.content.decode()
