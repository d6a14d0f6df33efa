"""Times, durations and schedules in words, for the admin, ``check``, ``status``, the report
and the importer; and ``parse_duration`` for what a person types."""

from __future__ import annotations

import datetime as dt
import re

from .. import conf
from ..core import solar, timing
from ..enums import Kind
from ..models import Schedule

_UNITS = {"w": 7 * 86400, "d": 86400, "h": 3600, "m": 60, "s": 1, "ms": 0.001}
_DURATION = re.compile(r"(\d+(?:\.\d+)?)\s*(ms|w|d|h|m|s)", re.IGNORECASE)


def parse_duration(text: str) -> dt.timedelta:
    """``"48h"``, ``"2d"``, ``"1h30m"``, ``"90s"``, ``"500ms"`` or a bare number of
    seconds."""
    raw = text.strip()
    if re.fullmatch(r"\d+(?:\.\d+)?", raw):
        return dt.timedelta(seconds=float(raw))
    parts = _DURATION.findall(raw)
    if not parts or _DURATION.sub("", raw).strip():
        raise ValueError(f"not a duration: {text!r} (use e.g. 48h, 2d, 1h30m, 90s)")
    try:
        return dt.timedelta(seconds=sum(float(n) * _UNITS[u.lower()] for n, u in parts))
    except OverflowError:
        raise ValueError(f"too long a duration: {text!r}") from None


def one_line(text: str) -> str:
    """``text`` with its control characters escaped (``\\n``, ``\\x1b``...): what a row
    holds never breaks a line of ``check`` or ``status``, nor forges one."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


def duration_words(delta: dt.timedelta) -> str:
    """A duration in one or two units: "45 s", "4 min", "3 h 5 min", "2 d 4 h"."""
    seconds = abs(int(delta.total_seconds()))
    if seconds < 60:
        return f"{seconds} s"
    minutes, _ = divmod(seconds, 60)
    if minutes < 60:
        return f"{minutes} min"
    hours, minutes = divmod(minutes, 60)
    if hours < 24:
        return f"{hours} h {minutes} min" if minutes else f"{hours} h"
    days, hours = divmod(hours, 24)
    return f"{days} d {hours} h" if hours else f"{days} d"


def relative(then: dt.datetime | None, now: dt.datetime) -> str:
    """ "in 4 min" / "3 h ago"; empty for None."""
    if then is None:
        return ""
    words = duration_words(then - now)
    return f"in {words}" if then > now else f"{words} ago"


def _polar_words(row: Schedule, now: dt.datetime) -> str | None:
    """A solar schedule whose event skips days (polar day or night) says so, R25."""
    if row.kind != Kind.SOLAR:
        return None
    try:
        spec = row.to_spec()
    except timing.InvalidSchedule:
        return None
    if not isinstance(spec, timing.Solar):
        return None
    return solar.no_event_words(spec, now, row.next_fire_at)


def next_fire_words(row: Schedule, now: dt.datetime) -> str:
    """The admin's and status's "next fire": "in 4 min", "due now", "overdue 3 h", "disabled".

    A slot passed by less than ``LATE_AFTER`` is beat's next look (at most ``MAX_INTERVAL``
    away), not a problem: it reads "due now".
    """
    if not row.enabled:
        return "disabled"
    if row.error:
        return "bad row: not firing"
    if row.next_fire_at is None:
        return "beat computes it"
    if row.next_fire_at >= now:
        words = f"in {duration_words(row.next_fire_at - now)}"
        polar = _polar_words(row, now)
        return f"{words} ({polar})" if polar else words
    if now - row.next_fire_at <= conf.settings.LATE_AFTER:
        return "due now"
    return f"overdue {duration_words(now - row.next_fire_at)}"


def absolute(value: dt.datetime | None) -> str:
    if value is None:
        return ""
    try:
        value = value.astimezone(dt.UTC)
    except OverflowError:  # an edge of the calendar in another zone: say it as it is
        return value.isoformat(sep=" ")
    return f"{value.year:04d}{value:-%m-%d %H:%M:%S} UTC"


def schedule_words(row: Schedule) -> str:
    """The admin's "schedule in words"; a bad row says why instead."""
    try:
        return str(timing.describe(row.to_spec()))
    except Exception as exc:  # any: a page that lists rows must render every one (R21)
        return f"invalid: {exc}"
