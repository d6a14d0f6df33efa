"""The admin's timeline, the database part: a page of schedules' runs in a window, as marks,
or as buckets with counts where a lane is dense; the boots in it; one schedule's lateness
and durations.

Every query reads a page of lanes through the (schedule, slot) unique index: runs
``WHERE schedule_id IN (page) AND slot BETWEEN since AND until``, never all runs. A lane is
counted first, up to one past ``BUCKET_ABOVE``; a lane with more slots than that is grouped
in SQL by a truncated slot (which counts it) and never fetched row by row.
"""

from __future__ import annotations

import datetime as dt
import math
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

from django.db.models import Count, QuerySet
from django.db.models.functions import Trunc

from ..core import clock
from ..enums import Reason, RunState
from ..models import Boot, MissedSlots, Run, Schedule
from ..words import absolute, duration_words
from . import report
from .timeline import BUCKET_ABOVE, Point, Scale, Window, bucket_unit, mark_kind, state_words
from .timeline_lanes import Band, BootMark, Bucket, Lane, Mark, MissedRange

#: the most boots drawn in a window (a deploy loop shows as many lines; the rest are said)
MAX_BOOTS = 200
#: the most missed-slot ranges drawn per lane
MAX_MISSED = 20
#: the most fires a schedule's lateness and duration charts place
CHART_POINTS = 1000
#: the tallest bucket bar, in pixels
BAR_HEIGHT = 18.0


def lanes(
    rows: Sequence[Schedule], scale: Scale, lane_height: float, top: float = 0.0
) -> list[Lane]:
    """One lane per row, in the rows' order; runs read for these rows only, slots in
    (since, until] as in the report."""
    since, until = scale.since, scale.until
    found = [
        Lane(r.pk, r.name, r.enabled, r.error, top + i * lane_height, r.last_fired_at, until)
        for i, r in enumerate(rows)
    ]
    by_id = {lane.schedule_id: lane for lane in found}
    for lane, row in zip(found, rows, strict=True):
        if row.stuck_since is not None and row.stuck_since < until:
            x, width = scale.span_x(row.stuck_since, until)
            lane.stuck = Band(row.stuck_since, row.stuck_reason, x, width)
    window = {"slot__gt": since, "slot__lte": until}
    in_window = Run.objects.filter(schedule_id__in=list(by_id), **window)
    for lane in found:
        # Counted up to one past the threshold: a dense lane costs no more than a sparse one
        # here, and the planner never picks a scan of all runs for it: a range of the
        # one-run-per-slot index (the lane's schedule, its window; no list of every lane)
        lane_runs = Run.objects.filter(schedule_id=lane.schedule_id, **window).order_by()
        lane.total = lane_runs.values("id")[: BUCKET_ABOVE + 1].count()
    sparse = [lane.schedule_id for lane in found if 0 < lane.total <= BUCKET_ABOVE]
    dense = [lane.schedule_id for lane in found if lane.total > BUCKET_ABOVE]
    _add_marks(in_window.filter(schedule_id__in=sparse), by_id, scale)
    _add_buckets(in_window.filter(schedule_id__in=dense), by_id, scale)
    _add_missed(by_id, scale)
    return found


def _add_marks(runs: QuerySet[Run], by_id: dict[int, Lane], scale: Scale) -> None:
    fields = ("id", "schedule_id", "slot", "state", "reason", "boot_id", "detail")
    for run_id, schedule_id, slot, state, reason, boot_id, detail in runs.order_by(
        "schedule_id", "slot"
    ).values_list(*fields):
        by_id[schedule_id].marks.append(
            Mark(
                run_id,
                slot,
                mark_kind(state, reason),
                state_words(state, reason),
                detail,
                boot_id,
                scale.x(slot),
            )
        )


def _add_buckets(runs: QuerySet[Run], by_id: dict[int, Lane], scale: Scale) -> None:
    unit, width = bucket_unit(scale.until - scale.since)
    grouped = (
        runs.annotate(bucket=Trunc("slot", unit, tzinfo=dt.UTC))
        .values("schedule_id", "bucket", "state", "reason")
        .annotate(n=Count("id"))
        .order_by()
    )
    counts: dict[int, dict[dt.datetime, dict[str, int]]] = defaultdict(lambda: defaultdict(dict))
    for g in grouped:
        kinds = counts[g["schedule_id"]][g["bucket"]]
        kind = mark_kind(g["state"], g["reason"])
        kinds[kind] = kinds.get(kind, 0) + g["n"]
    for schedule_id, buckets in counts.items():
        lane = by_id[schedule_id]
        lane.unit = duration_words(width)
        lane.total = sum(sum(k.values()) for k in buckets.values())
        most = max(sum(k.values()) for k in buckets.values())
        for start in sorted(buckets):
            total = sum(buckets[start].values())
            end = clock.shift(start, width)
            x, w = scale.span_x(max(start, scale.since), min(end, scale.until))
            height = round(4 + (BAR_HEIGHT - 4) * math.log1p(total) / math.log1p(most), 1)
            lane.buckets.append(Bucket(start, end, buckets[start], x, w, height))


def _add_missed(by_id: dict[int, Lane], scale: Scale) -> None:
    rows = MissedSlots.objects.filter(
        schedule_id__in=list(by_id), first_slot__lte=scale.until, last_slot__gt=scale.since
    ).order_by("schedule_id", "first_slot")
    fields = ("id", "schedule_id", "first_slot", "last_slot", "count", "reason")
    for pk, schedule_id, first, last, count, reason in rows.values_list(*fields):
        lane = by_id[schedule_id]
        if len(lane.missed) < MAX_MISSED:
            x, width = scale.span_x(first, last)
            lane.missed.append(MissedRange(pk, first, last, count, reason, x, width))


# --- boots ----------------------------------------------------------------------------------


def boots(scale: Scale) -> tuple[list[BootMark], int]:
    """The boots that started in the window (the first ``MAX_BOOTS``) and how many there are."""
    started = Boot.objects.filter(started_at__gt=scale.since, started_at__lte=scale.until)
    fields = ("id", "hostname", "pid", "started_at")
    shown = [
        BootMark(pk, host, pid, at, scale.x(at))
        for pk, host, pid, at in started.order_by("started_at").values_list(*fields)[:MAX_BOOTS]
    ]
    total = len(shown) if len(shown) < MAX_BOOTS else started.count()
    return shown, total


# --- per deploy: the report as bars -------------------------------------------------------------


@dataclass(frozen=True)
class Segment:
    reason: str
    count: int
    x: float
    width: float


@dataclass(frozen=True)
class DeployBar:
    """One boot's fires by reason, ``report.BootLine`` as a bar."""

    line: report.BootLine
    segments: list[Segment]
    y: float

    @property
    def started(self) -> str:
        return absolute(self.line.started_at) if self.line.started_at else "-"

    @property
    def counts(self) -> list[int]:
        return [self.line.fires.get(r, 0) for r in Reason.values]

    @property
    def said(self) -> str:
        labels = dict(Reason.choices)
        said = ", ".join(f"{s.count} {labels[s.reason].lower()}" for s in self.segments)
        return f"{self.line.label}: {self.line.total} fires: {said or 'none'}"


@dataclass(frozen=True)
class Flagged:
    """An over-firing schedule (R18) and its row's id, to link it."""

    overfire: report.Overfire
    schedule_id: int | None


@dataclass(frozen=True)
class Deploys:
    bars: list[DeployBar]
    flagged: list[Flagged]
    height: float
    ratio: float = report.OVERFIRE_RATIO
    reasons: tuple[tuple[str, str], ...] = tuple(Reason.choices)


def deploys(window: Window, width: float, row_height: float = 22.0) -> Deploys:
    """``durablebeat report`` for the window (R18): each boot's fires by reason as a bar,
    ``width`` pixels for the busiest boot, and the over-firing schedules."""
    found = report.build_report(window.since, window.until)
    most = max([b.total for b in found.boots] + [1])
    bars = []
    for i, line in enumerate(found.boots):
        x, segments = 0.0, []
        for reason in Reason.values:
            if n := line.fires.get(reason, 0):
                w = max(1.0, round(width * n / most, 1))
                segments.append(Segment(reason, n, x, w))
                x += w
        bars.append(DeployBar(line, segments, i * row_height))
    names = [o.schedule for o in found.overfired]
    ids = dict(Schedule.objects.filter(name__in=names).values_list("name", "pk"))
    flagged = [Flagged(o, ids.get(o.schedule)) for o in found.overfired]
    return Deploys(bars, flagged, row_height * max(len(bars), 1))


# --- one schedule in detail -------------------------------------------------------------------


def fire_points(schedule_id: int, window: Window) -> tuple[list[Point], list[Point], bool]:
    """The latest ``CHART_POINTS`` fires of a schedule in the window: their lateness (sent,
    or claimed when never sent, minus the slot) and their run's duration (finished minus
    started); and whether there were more."""
    fires = (
        Run.objects.filter(schedule_id=schedule_id, slot__gt=window.since, slot__lte=window.until)
        .exclude(state__in=(RunState.SKIPPED, RunState.MISSED))
        .order_by("-slot")
        .values_list("id", "slot", "claimed_at", "published_at", "started_at", "finished_at")
    )
    rows = list(fires[: CHART_POINTS + 1])
    late, took = [], []
    for run_id, slot, claimed, published, started, finished in rows[:CHART_POINTS]:
        late.append(Point(slot, _seconds(slot, published or claimed), run_id))
        if started is not None and finished is not None:
            took.append(Point(slot, _seconds(started, finished), run_id))
    return late[::-1], took[::-1], len(rows) > CHART_POINTS


def _seconds(start: dt.datetime, end: dt.datetime) -> float:
    return (end - start).total_seconds()
