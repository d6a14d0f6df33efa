"""The admin's timeline, the pure part: the window a person asked for, what a run's mark
says (its kind, shape and colour), and where things go on the page.

Nothing here reads the database or the clock: ``timeline_query`` fetches the rows and the
view passes ``now``. Instants near the calendar's edges are shifted with ``clock.shift``.
"""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace

from django.utils.dateparse import parse_date, parse_datetime

from ..core import clock
from ..enums import Reason, RunState
from ..words import absolute, duration_words, seconds_words

H = dt.timedelta(hours=1)
#: the windows a person picks with one click: {key: span}
SPANS = {"1h": H, "24h": 24 * H, "7d": 7 * 24 * H, "30d": 30 * 24 * H}
#: a from/to window longer than this is refused: a lane is a picture, not an archive
MAX_SPAN = 366 * 24 * H
#: a lane with more slots than this in the window is drawn as buckets with counts
BUCKET_ABOVE = 500


class WindowError(ValueError):
    """A from/to a person typed that names no window; the message says what to type."""


@dataclass(frozen=True)
class Window:
    since: dt.datetime
    until: dt.datetime
    #: one of ``SPANS`` ending now, or "custom" for from/to
    key: str

    @property
    def span(self) -> dt.timedelta:
        return self.until - self.since

    def words(self) -> str:
        return f"{absolute(self.since)} to {absolute(self.until)} ({duration_words(self.span)})"


def _instant(text: str, name: str) -> dt.datetime:
    """An ISO date or date and time; one without a zone is UTC (the page says so)."""
    raw = text.strip()
    try:
        value = parse_datetime(raw)
        if value is None and (day := parse_date(raw)) is not None:
            value = dt.datetime.combine(day, dt.time())
    except ValueError:  # well-formed but not a date: 2026-02-30
        value = None
    if value is None:
        raise WindowError(f"{name} {raw!r} is not a date and time (use e.g. 2026-03-02T12:00)")
    if value.tzinfo is None:
        value = value.replace(tzinfo=dt.UTC)
    try:
        return value.astimezone(dt.UTC)
    except OverflowError:
        raise WindowError(f"{name} {raw!r} is outside the calendar in UTC") from None


def parse_window(
    params: Mapping[str, str], now: dt.datetime, default: str = "24h"
) -> tuple[Window, str]:
    """The window in ``params`` (``window`` = a key of ``SPANS``, or ``from`` and ``to``) and
    an error message, empty when the request named a window. A bad request gets the
    default window and the message: the page still answers."""
    start, end = params.get("from", "").strip(), params.get("to", "").strip()
    try:
        if start or end:
            return _custom(start, end), ""
    except WindowError as exc:
        return _ending(now, default), f"{exc}; showing the last {SPANS[default] // H} h instead."
    key = params.get("window", default)
    if key not in SPANS:
        return _ending(now, default), f"unknown window {key!r}: pick one of {', '.join(SPANS)}."
    return _ending(now, key), ""


def _ending(now: dt.datetime, key: str) -> Window:
    return Window(clock.shift(now, -SPANS[key]), now, key)


def _custom(start: str, end: str) -> Window:
    if not (start and end):
        raise WindowError("give both from and to")
    since, until = _instant(start, "from"), _instant(end, "to")
    if since >= until:
        raise WindowError("from must be before to")
    if until - since > MAX_SPAN:
        raise WindowError(f"a window is at most {MAX_SPAN.days} days long")
    return Window(since, until, "custom")


# --- what a mark says -----------------------------------------------------------------------


@dataclass(frozen=True)
class Style:
    """How one kind of mark looks: a shape (so colour is never needed) and an Okabe-Ito
    colour (told apart with any common colour blindness)."""

    kind: str
    label: str
    shape: str
    colour: str


#: worst first: a bucket of many slots is drawn with the worst kind it holds
STYLES = {
    s.kind: s
    for s in (
        Style("failed", "failed", "cross", "#D55E00"),
        Style("lost", "lost (reclaimed)", "square", "#CC79A7"),
        Style("missed", "missed while no beat ran", "triangle-down", "#8C8C8C"),
        Style("skipped", "skipped: the previous run was still going", "bar", "#E69F00"),
        Style("replaced", "replaced by a newer slot (overlap=replace)", "slash", "#882255"),
        Style("unresolved", "still running or unresolved", "ring", "#56B4E9"),
        Style("manual", "fired by hand", "triangle-up", "#F0E442"),
        Style("backfill", "missed, then backfilled by hand", "hexagon", "#000000"),
        Style("catch_up", "caught up at boot", "diamond", "#0072B2"),
        Style("succeeded", "succeeded", "circle", "#009E73"),
    )
}
_RANK = {kind: i for i, kind in enumerate(STYLES)}


def mark_kind(state: str, reason: str) -> str:
    """What became of a slot, as one of ``STYLES``: a bad end first, then how it was fired
    (by hand, caught up), then how it ended."""
    if state in (
        RunState.FAILED,
        RunState.LOST,
        RunState.MISSED,
        RunState.SKIPPED,
        RunState.REPLACED,
    ):
        return str(state)
    if reason == Reason.MANUAL:
        return "manual"
    if reason == Reason.BACKFILL:
        return "backfill"
    if reason == Reason.CATCH_UP:
        return "catch_up"
    if state == RunState.SUCCEEDED:
        return "succeeded"
    return "unresolved"  # claimed, published, started, no news, or a state we do not know


def worst(kinds: Iterable[str]) -> str:
    return min(kinds, key=lambda k: _RANK.get(k, len(_RANK)), default="succeeded")


def state_words(state: str, reason: str) -> str:
    """ "Succeeded, caught up at boot": the run's state and, unless scheduled, its reason."""
    said = RunState(state).label if state in RunState.values else state
    if reason and reason != Reason.SCHEDULED:
        said += ", " + (Reason(reason).label if reason in Reason.values else reason).lower()
    return said


# --- buckets --------------------------------------------------------------------------------


def bucket_unit(span: dt.timedelta) -> tuple[str, dt.timedelta]:
    """The unit a dense lane is counted in (a ``Trunc`` kind every database has), so that a
    window holds at most a few hundred buckets."""
    if span <= 3 * H:
        return "minute", dt.timedelta(minutes=1)
    if span <= 10 * 24 * H:
        return "hour", H
    return "day", 24 * H


# --- geometry -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Scale:
    """Instants in the window to x on the page: ``x0`` is the window's start, ``x0 + width``
    its end. Anything outside is put at the nearer edge."""

    since: dt.datetime
    until: dt.datetime
    x0: float
    width: float

    def x(self, at: dt.datetime) -> float:
        if at <= self.since:
            return self.x0
        if at >= self.until:
            return self.x0 + self.width
        return round(self.x0 + self.width * ((at - self.since) / (self.until - self.since)), 1)

    def span_x(self, start: dt.datetime, end: dt.datetime) -> tuple[float, float]:
        """x and width of [start, end], at least one pixel wide so it shows."""
        left = self.x(start)
        return left, max(1.0, self.x(end) - left)


_TICK_STEPS = [
    dt.timedelta(minutes=m) for m in (1, 5, 10, 15, 30, 60, 120, 180, 360, 720, 1440, 2880)
] + [7 * 24 * H, 28 * 24 * H, 91 * 24 * H]


def ticks(since: dt.datetime, until: dt.datetime, most: int = 9) -> list[tuple[dt.datetime, str]]:
    """At most ``most`` round instants in the window, with their labels (UTC)."""
    span = until - since
    step = next((s for s in _TICK_STEPS if span / s <= most), _TICK_STEPS[-1])
    midnight = since.replace(hour=0, minute=0, second=0, microsecond=0)
    at = clock.shift(midnight, step * math.ceil((since - midnight) / step))
    found: list[tuple[dt.datetime, str]] = []
    while at <= until and len(found) <= most:
        daily = at.hour == 0 and at.minute == 0
        found.append((at, f"{at:%m-%d}" if daily or step >= 24 * H else f"{at:%H:%M}"))
        following = clock.shift(at, step)
        if following == at:  # the calendar's edge
            break
        at = following
    return found


@dataclass(frozen=True)
class Point:
    at: dt.datetime
    seconds: float
    run_id: int


@dataclass(frozen=True)
class PlacedPoint:
    x: float
    y: float
    point: Point

    @property
    def words(self) -> str:
        return seconds_words(self.point.seconds)


@dataclass(frozen=True)
class Chart:
    """A small scatter of seconds over time (lateness, duration): the points placed, the
    top of its y axis in words, and an optional limit line (a time limit)."""

    points: list[PlacedPoint]
    top_words: str
    height: float
    limit_y: float | None = None
    limit_words: str = ""


def chart(points: list[Point], scale: Scale, height: float, limit: float | None = None) -> Chart:
    """Place ``points`` under a y axis from 0 to the largest value (or the limit, when
    that is larger): a value creeping towards the limit is seen against it."""
    finite = [p for p in points if math.isfinite(p.seconds)]
    usable_limit = limit if limit is not None and math.isfinite(limit) and limit > 0 else None
    top = max([p.seconds for p in finite] + [usable_limit or 0.0, 1.0])

    def y(seconds: float) -> float:
        return round(height * (1 - max(0.0, min(seconds, top)) / top), 1)

    placed = [PlacedPoint(scale.x(p.at), y(p.seconds), p) for p in finite]
    return Chart(
        placed,
        seconds_words(top),
        height,
        y(usable_limit) if usable_limit is not None else None,
        seconds_words(usable_limit) if usable_limit is not None else "",
    )


# --- the band above the lanes: boot labels in rows ------------------------------------------

#: glyphs about 1 em wide in the admin's sans-serif fonts
_WIDE = frozenset("MWmw@%…#&+<=>^~")
#: the first row's baseline, and the step between rows (a 10 px label's box is ~11.6 px tall)
TAG_TOP = 10.0
TAG_ROW = 12.0


def text_width(text: str, size: float) -> float:
    """An upper estimate of ``text``'s width in pixels at ``size`` px in the admin's
    sans-serif fonts (DejaVu Sans, the widest of them, is under it): wide letters and
    anything outside ASCII 1 em, other capitals 0.8 em, the rest 0.65 em."""
    ems = sum(1.0 if c in _WIDE or not c.isascii() else 0.8 if c.isupper() else 0.65 for c in text)
    return round(ems * size, 1)


@dataclass(frozen=True)
class Tag:
    """A label beside its vertical line, from ``left`` to ``right`` in row ``row`` (0 at the
    top); ``x`` and ``anchor`` are its SVG text's."""

    x: float
    anchor: str
    left: float
    right: float
    row: int

    @property
    def y(self) -> float:
        return TAG_TOP + TAG_ROW * self.row


def place_tags(
    lines: Sequence[tuple[float, str]],
    edge: float,
    size: float = 10.0,
    pad: float = 2.0,
    gap: float = 4.0,
) -> list[Tag]:
    """Each ``(x, text)`` as a label beside its line: right of it, or left where it would
    pass ``edge``; in the first row where it keeps ``gap`` from every label already there.
    Rows are added as needed, so no two labels overlap, however close their lines are."""
    placed: list[Tag] = []
    for x, text in lines:
        width = text_width(text, size)
        if x + pad + width <= edge:
            tag = Tag(x + pad, "start", x + pad, x + pad + width, 0)
        else:
            tag = Tag(x - pad, "end", x - pad - width, x - pad, 0)
        row = 0
        while any(
            t.row == row and tag.left < t.right + gap and t.left < tag.right + gap for t in placed
        ):
            row += 1
        placed.append(replace(tag, row=row))
    return placed


@dataclass(frozen=True)
class Header:
    """The band above the lanes: ``rows`` rows of labels, the ticks' labels under them, then
    the axis; the lanes start at ``height``."""

    rows: int = 1

    @property
    def tick_y(self) -> float:
        return TAG_TOP + TAG_ROW * (max(self.rows, 1) - 1) + 17

    @property
    def line_y(self) -> float:
        """Where a tick's or a boot's vertical line starts."""
        return self.tick_y + 3

    @property
    def axis_y(self) -> float:
        return self.tick_y + 7

    @property
    def height(self) -> float:
        return self.tick_y + 13
