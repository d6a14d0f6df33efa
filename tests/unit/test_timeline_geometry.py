"""The timeline's pure part: which mark a run gets, windows a person types, where an
instant goes on the page, round ticks, bucket units and the small charts. No database."""

from __future__ import annotations

import datetime as dt
import math
from dataclasses import replace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from durablebeat.core import clock
from durablebeat.enums import Reason, RunState
from durablebeat.ops import timeline
from durablebeat.ops.timeline import Point, Scale, mark_kind, parse_window, ticks

T0 = dt.datetime(2026, 3, 2, 12, 0, tzinfo=dt.UTC)
H = dt.timedelta(hours=1)


@pytest.mark.parametrize(
    ("state", "reason", "kind"),
    [
        (RunState.SUCCEEDED, Reason.SCHEDULED, "succeeded"),
        (RunState.SUCCEEDED, Reason.STARTUP_GRACE, "succeeded"),
        (RunState.FAILED, Reason.SCHEDULED, "failed"),
        (RunState.FAILED, Reason.CATCH_UP, "failed"),  # a bad end says more than the reason
        (RunState.LOST, Reason.MANUAL, "lost"),
        (RunState.SKIPPED, Reason.SCHEDULED, "skipped"),
        (RunState.MISSED, Reason.SCHEDULED, "missed"),
        (RunState.SUCCEEDED, Reason.CATCH_UP, "catch_up"),
        (RunState.STARTED, Reason.CATCH_UP, "catch_up"),
        (RunState.SUCCEEDED, Reason.MANUAL, "manual"),
        (RunState.CLAIMED, Reason.SCHEDULED, "unresolved"),
        (RunState.PUBLISHED, Reason.REPUBLISH, "unresolved"),
        (RunState.STARTED, Reason.SCHEDULED, "unresolved"),
        (RunState.NO_NEWS, Reason.SCHEDULED, "unresolved"),
        ("a-state-of-tomorrow", "a-reason-of-tomorrow", "unresolved"),
    ],
)
def test_each_run_gets_the_mark_of_what_became_of_its_slot(state, reason, kind):
    assert mark_kind(state, reason) == kind


def test_every_kind_has_its_own_shape_and_colour():
    styles = list(timeline.STYLES.values())
    assert len({s.shape for s in styles}) == len(styles)  # colour is never needed
    assert len({s.colour for s in styles}) == len(styles)


def test_a_bucket_takes_the_worst_kind_it_holds():
    assert timeline.worst(["succeeded", "skipped", "catch_up"]) == "skipped"
    assert timeline.worst(["succeeded", "failed", "lost"]) == "failed"
    assert timeline.worst([]) == "succeeded"


def test_state_words_name_a_reason_other_than_scheduled():
    assert timeline.state_words("succeeded", "scheduled") == "Succeeded"
    assert timeline.state_words("succeeded", "catch_up") == "Succeeded, catch-up"
    assert timeline.state_words("odd", "odder") == "odd, odder"


# --- windows --------------------------------------------------------------------------------


def test_a_window_key_ends_now():
    window, error = parse_window({"window": "7d"}, T0)
    assert (window.since, window.until, window.key, error) == (T0 - 7 * 24 * H, T0, "7d", "")
    assert parse_window({}, T0)[0].key == "24h"


def test_from_and_to_without_a_zone_are_utc_and_a_date_is_its_midnight():
    window, error = parse_window({"from": "2026-03-01", "to": "2026-03-01T06:30"}, T0)
    assert error == ""
    assert window.since == dt.datetime(2026, 3, 1, tzinfo=dt.UTC)
    assert window.until == dt.datetime(2026, 3, 1, 6, 30, tzinfo=dt.UTC)
    zoned, _ = parse_window({"from": "2026-03-01T01:00+01:00", "to": "2026-03-02"}, T0)
    assert zoned.since == dt.datetime(2026, 3, 1, tzinfo=dt.UTC)


@pytest.mark.parametrize(
    ("params", "words"),
    [
        ({"from": "soon", "to": "2026-03-01"}, "from 'soon' is not a date and time"),
        ({"from": "2026-03-01", "to": "2026-13-01"}, "to '2026-13-01' is not a date and time"),
        ({"from": "2026-03-02", "to": "2026-03-01"}, "from must be before to"),
        ({"to": "2026-03-01"}, "give both from and to"),
        ({"from": "0001-01-01", "to": "9999-12-31"}, "at most 366 days"),
        ({"from": "0001-01-01T00:00+05:00", "to": "0001-01-02"}, "outside the calendar"),
        ({"window": "forever"}, "unknown window 'forever'"),
    ],
)
def test_a_bad_window_falls_back_to_the_default_with_its_reason(params, words):
    window, error = parse_window(params, T0)
    assert words in error
    assert (window.since, window.until) == (T0 - 24 * H, T0)


def test_a_window_at_the_calendars_start_stops_at_its_edge():
    window, error = parse_window({"window": "7d"}, clock.EARLIEST + H)
    assert error == "" and window.since == clock.EARLIEST


# --- geometry -------------------------------------------------------------------------------


def test_scale_puts_the_window_across_its_width_and_clamps_outside():
    scale = Scale(T0 - 24 * H, T0, 100.0, 800.0)
    assert scale.x(T0 - 24 * H) == 100.0
    assert scale.x(T0 - 12 * H) == 500.0
    assert scale.x(T0) == 900.0
    assert scale.x(clock.EARLIEST) == 100.0
    assert scale.x(clock.LATEST) == 900.0
    assert scale.span_x(T0 - H, T0 - H) == (scale.x(T0 - H), 1.0)  # at least a pixel


@pytest.mark.parametrize(
    ("span", "most"),
    [(H, 9), (24 * H, 9), (7 * 24 * H, 9), (366 * 24 * H, 9), (dt.timedelta(minutes=3), 4)],
)
def test_ticks_are_round_increasing_and_inside_the_window(span, most):
    since = T0 - span + dt.timedelta(minutes=7)
    found = ticks(since, since + span, most)
    instants = [at for at, _ in found]
    assert 1 <= len(found) <= most + 1
    assert instants == sorted(instants) and all(since <= at <= since + span for at in instants)
    assert all(at.second == 0 and at.microsecond == 0 for at in instants)


def test_ticks_stop_at_the_calendars_end():
    found = ticks(clock.LATEST - 2 * H, clock.LATEST)
    assert found and found[-1][0] <= clock.LATEST


def test_a_dense_lane_is_counted_in_minutes_hours_or_days_by_its_window():
    assert timeline.bucket_unit(H)[0] == "minute"
    assert timeline.bucket_unit(24 * H)[0] == "hour"
    assert timeline.bucket_unit(7 * 24 * H)[0] == "hour"
    assert timeline.bucket_unit(30 * 24 * H)[0] == "day"


def test_a_chart_reaches_up_to_its_largest_value_or_its_limit():
    scale = Scale(T0 - 24 * H, T0, 0.0, 240.0)
    points = [Point(T0 - 12 * H, 30.0, 1), Point(T0 - 6 * H, 60.0, 2)]
    chart = timeline.chart(points, scale, 100.0)
    assert [(p.x, p.y) for p in chart.points] == [(120.0, 50.0), (180.0, 0.0)]
    assert chart.top_words == "1 min" and chart.limit_y is None
    limited = timeline.chart(points, scale, 100.0, limit=120.0)
    assert limited.limit_y == 0.0 and limited.points[1].y == 50.0
    assert limited.limit_words == "2 min"


@pytest.mark.parametrize("limit", [math.inf, math.nan, -5.0, 0.0, 1e308])
def test_a_chart_ignores_a_limit_it_cannot_draw(limit):
    scale = Scale(T0 - H, T0, 0.0, 100.0)
    chart = timeline.chart([Point(T0, math.nan, 1), Point(T0, 5.0, 2)], scale, 50.0, limit)
    assert [p.point.run_id for p in chart.points] == [2]
    if limit != 1e308:
        assert chart.limit_y is None


# --- boot labels ----------------------------------------------------------------------------


def test_labels_far_apart_share_the_top_row_and_one_past_the_edge_goes_left_of_its_line():
    lines = [(200.0, "web-1 10:00"), (400.0, "web-2 13:00"), (990.0, "web-1 13:09")]
    tags = timeline.place_tags(lines, 1000)
    assert [t.row for t in tags] == [0, 0, 0]
    assert [t.anchor for t in tags] == ["start", "start", "end"]
    assert tags[0].x == tags[0].left == 202.0
    assert tags[2].x == tags[2].right == 988.0 and tags[2].left == 988.0 - 75.0


def test_labels_of_boots_a_minute_apart_go_one_row_each_under_the_other():
    # a day across 800 px: a minute is 0.56 px
    lines = [(700.0 + 0.56 * i, f"web-{i % 2 + 1} 13:0{i}") for i in range(3)]
    tags = timeline.place_tags(lines, 1000)
    assert [t.row for t in tags] == [0, 1, 2]
    assert [t.y for t in tags] == [timeline.TAG_TOP + timeline.TAG_ROW * r for r in range(3)]
    header = timeline.Header(3)
    assert header.tick_y > tags[-1].y + timeline.TAG_ROW  # the ticks' labels under them
    assert header.line_y < header.axis_y < header.height


def test_a_header_of_one_row_is_the_page_as_it_was():
    assert (timeline.Header().tick_y, timeline.Header().height) == (27.0, 40.0)


@given(
    st.lists(
        st.tuples(
            st.floats(190, 990, allow_nan=False),
            st.text(st.characters(codec="utf-8", categories=["L", "N", "P"]), max_size=24),
        ),
        max_size=14,
    )
)
def test_no_two_labels_overlap_and_each_goes_beside_its_line_in_the_first_row_it_fits(lines):
    gap = 4.0
    tags = timeline.place_tags(lines, 1000, gap=gap)

    def touch(a: timeline.Tag, b: timeline.Tag) -> bool:
        return a.row == b.row and a.left < b.right + gap and b.left < a.right + gap

    for i, ((x, text), tag) in enumerate(zip(lines, tags, strict=True)):
        width = timeline.text_width(text, 10)
        assert tag.right - tag.left == pytest.approx(width)
        assert tag.anchor == ("start" if x + 2 + width <= 1000 else "end")
        assert tag.left >= x if tag.anchor == "start" else tag.right <= x  # beside its line
        for row in range(tag.row):  # every row above holds a label it would touch
            assert any(touch(replace(tag, row=row), t) for t in tags[:i])
        assert not any(touch(tag, t) for t in tags[:i])


def test_a_label_is_measured_wide_where_its_letters_are():
    assert timeline.text_width("web-1 13:09", 10) == 75.0
    wide, capitals, small = (timeline.text_width(t, 10) for t in ("mWw", "ABC", "abc"))
    assert (wide, capitals, small) == (30.0, 24.0, 19.5)
    assert timeline.text_width("日本", 10) == 20.0
