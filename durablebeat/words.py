"""Times, durations and schedules in words, the one place they are worded: for the admin,
``check``, ``status``, the report, the importer and the validation messages; and
``parse_duration`` for what a person types.

Outside ``core`` (the math never words anything) and importing no model at run time, so
that ``validation`` (which the models import) may call it too."""

from __future__ import annotations

import datetime as dt
import re
from typing import TYPE_CHECKING

from cron_descriptor import ExpressionDescriptor, Options

from . import conf
from .core import timing
from .core.solar import MAX_SEARCH_DAYS, Solar
from .enums import Kind

if TYPE_CHECKING:
    from .models import Schedule

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


def ago(then: dt.datetime | None, now: dt.datetime) -> str:
    """``now - then`` in words, for messages: "3 h 5 min" ("never" when there is no then)."""
    return "never" if then is None else duration_words(now - then)


#: the longest duration said in words (a stored limit may be any float, R21)
_LONGEST = (dt.timedelta.max - dt.timedelta(days=1)).total_seconds()


def seconds_words(seconds: float) -> str:
    """``duration_words`` of a number of seconds, however large (a chart's axis)."""
    return duration_words(dt.timedelta(seconds=max(-_LONGEST, min(seconds, _LONGEST))))


def offset_words(seconds: float | None) -> str:
    """A host's measured offset to the database's clock (R26): "+90.0 s" when the database
    is ahead of the host (the host is behind), "-" when none was measured."""
    return "-" if seconds is None else f"{seconds:+.1f} s"


def unit_words(value: dt.timedelta) -> str | None:
    """``value`` in the largest unit that divides it: "15 minutes", "1 day"; None when it is
    not a whole number of seconds."""
    if whole := timing.whole_units(value):
        count, unit = whole
        return f"{count} {unit}{'' if count == 1 else 's'}"
    return None


def limit_words(value: dt.timedelta) -> str:
    """A bound in a validation message: "0", "15 minutes", "1.5 seconds"."""
    if not value:
        return "0"
    return unit_words(value) or f"{value.total_seconds():g} seconds"


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
    return no_event_words(spec, now, row.next_fire_at)


def next_fire_words(row: Schedule, now: dt.datetime) -> str:
    """The admin's and status's "next fire": "in 4 min", "due now", "overdue 3 h", "disabled",
    "deleted".

    A slot passed by less than ``LATE_AFTER`` is beat's next look (at most ``MAX_INTERVAL``
    away), not a problem: it reads "due now".
    """
    if row.deleted_at is not None:
        return "deleted"  # with its history kept (R29)
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


def pause_words(row: Schedule, now: dt.datetime) -> str:
    """A pause as the admin and ``status`` say it (R36): "" while it fires, else "paused"
    (and how long ago, and its note): "paused 2 h ago: paused after 3 failures in a row..."."""
    if row.enabled:
        return ""
    if row.deleted_at is not None:
        return "deleted"
    said = "paused" if row.paused_at is None else f"paused {relative(row.paused_at, now)}"
    return f"{said}: {row.paused_note}" if row.paused_note else said


def absolute(value: dt.datetime | None) -> str:
    if value is None:
        return ""
    try:
        value = value.astimezone(dt.UTC)
    except OverflowError:  # an edge of the calendar in another zone: say it as it is
        return value.isoformat(sep=" ")
    return f"{value.year:04d}{value:-%m-%d %H:%M:%S} UTC"


def schedule_words(row: Schedule) -> str:
    """The admin's "schedule in words"; a bad row says why instead.

    Worked out once per distinct timing (the words are a function of the timing fields
    alone): a listing of a million customers' digests shares a few hundred (R33)."""
    key = row.timing_key()
    try:
        found = _WORDS.get(key)
    except TypeError:  # a value that cannot be a key (a row built by hand): no cache
        return _words_of(row)
    if found is None:
        if len(_WORDS) >= _WORDS_KEPT:
            _WORDS.clear()
        found = _WORDS[key] = _words_of(row)
    return found


#: ``schedule_words`` by timing; cleared when full (one-offs each have their own)
_WORDS: dict[tuple[object, ...], str] = {}
_WORDS_KEPT = 4096


def _words_of(row: Schedule) -> str:
    try:
        return str(describe(row.to_spec()))
    except Exception as exc:  # any: a page that lists rows must render every one (R21)
        return f"invalid: {exc}"


# --- schedules --------------------------------------------------------------------------------


def describe(spec: timing.Spec) -> str:
    """Words for people: "every 20 seconds", "At 08:00, Monday through Friday (Europe/Berlin)"."""
    if isinstance(spec, timing.Interval):
        words = _interval_words(spec.every)
        if spec.relative:
            words += f", rounded to the clock ({spec.timezone})"
        return words
    if isinstance(spec, Solar):
        return f"at {spec.event.replace('_', ' ')} at {spec.place()}"
    if isinstance(spec, timing.Custom):
        return f"custom schedule {spec.label}"
    if isinstance(spec, timing.Clocked):
        fmt = "%Y-%m-%d %H:%M" + (":%S" if spec.at.second or spec.at.microsecond else "")
        return f"once at {spec.at.strftime(fmt)} UTC"
    options = Options()
    options.use_24hour_time_format = True
    options.day_of_week_start_index_zero = True
    try:
        words = ExpressionDescriptor(_expression(spec), options).get_description()
    except Exception:  # a describer bug must not break the admin page
        words = " ".join(f"{name}={getattr(spec, name)}" for name in timing.CRONTAB_FIELDS)
    return f"{words} ({spec.timezone})"


def _interval_words(every: dt.timedelta) -> str:
    if words := unit_words(every):
        return f"every {words}"
    seconds = f"{every.total_seconds():.6f}".rstrip("0").rstrip(".")
    return f"every {seconds} seconds"


def _expression(spec: timing.Crontab) -> str:
    """A 5-field cron expression of the expanded sets, in syntax cron_descriptor reads right."""
    minute = _cron_field(spec.values("minute"), 0, 59, steps=True)
    hour = _cron_field(spec.values("hour"), 0, 23, steps=True)
    if len(spec.values("minute")) == 1 and "-" in hour:
        # cron_descriptor reads "0 9-17" as "between 09:00 and 17:59"; a list reads right.
        hour = ",".join(str(h) for h in sorted(spec.values("hour")))
    dom = _cron_field(spec.values("day_of_month"), 1, 31, steps=True)
    month = _cron_field(spec.values("month_of_year"), 1, 12, steps=True)
    dow = _cron_field(spec.values("day_of_week"), 0, 6, steps=False)  # "*/2": "every 2 days"
    return f"{minute} {hour} {dom} {month} {dow}"


def _cron_field(values: frozenset[int], low: int, high: int, steps: bool) -> str:
    ordered = sorted(values)
    if ordered == list(range(low, high + 1)):
        return "*"
    if steps and len(ordered) > 2 and ordered[0] == low:
        step = ordered[1] - low
        if ordered == list(range(low, high + 1, step)):
            return f"*/{step}"
    parts: list[str] = []
    start = prev = ordered[0]
    for value in [*ordered[1:], None]:
        if value is not None and value == prev + 1:
            prev = value
            continue
        parts.append(
            f"{start}-{prev}" if prev - start >= 2 else ",".join(map(str, range(start, prev + 1)))
        )
        if value is not None:
            start = prev = value
    return ",".join(parts)


#: the words for a day without the event, by event
_NEVER = {
    "sunrise": "the sun does not rise",
    "sunset": "the sun does not set",
    "solar_noon": "the sun does not cross the meridian",
}


def no_event_words(spec: Solar, now: dt.datetime, next_fire: dt.datetime | None) -> str | None:
    """Words for status and check when the event skips days: "the sun does not rise at
    78.22°N, 15.65°E until 2027-02-16"; None when it happens within the next day or so."""
    if next_fire is not None and next_fire - now <= dt.timedelta(hours=26):
        return None
    what = _NEVER.get(spec.event, f"there is no {spec.event.replace('_', ' ')}")
    until = f"until {next_fire:%Y-%m-%d}" if next_fire else f"for {MAX_SEARCH_DAYS} days"
    return f"{what} at {spec.place()} {until}"
