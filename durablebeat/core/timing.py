"""Pure schedule math: slots, grids, time zones and DST. Nothing here reads the clock.

Every function takes the instants it needs as arguments. Datetimes in must be timezone-aware
(a naive one raises ``ValueError``); datetimes out are in UTC.

Crontab fields use Celery's ``crontab`` syntax and meaning, so schedules migrated from Celery or
django-celery-beat fire at the same times: ``*``, numbers, ranges (``a-b``, wrapping when
``a > b``), steps (``*/s``, ``a-b/s``), comma lists, and names (``mon-fri``, ``jan``).
``day_of_week`` 0 is Sunday. A slot matches when ALL five fields match: ``day_of_month`` AND
``day_of_week`` (Celery's rule), not Vixie cron's OR, so ``day_of_month="1-7",
day_of_week="mon"`` is the first Monday of the month. Stricter than Celery on nonsense only:
trailing text (``"*/15/2"``), names outside their own field (``day_of_week="mar"``, which Celery
reads as Wednesday) and non-names (``"monxyz"``) are refused rather than guessed.

DST. Crontab slots are wall-clock times in the schedule's time zone. Each matching wall time maps
to exactly one UTC instant, so every wall slot fires once, never zero times, never twice:

- A wall time that does not exist (spring forward, e.g. 02:30 on the last Sunday of March in
  Europe/Berlin) maps with PEP 495 fold=0 — it is shifted forward by the gap (02:30 -> 03:30
  CEST). If that lands on an instant that is also a real slot, it is one slot (deduplicated).
- A wall time that happens twice (fall back) fires once, at its first occurrence (fold=0).

Because of the shift, instants near a gap are not monotone in wall-clock order (Lord Howe's
30-minute gap turns 02:10 into 02:40, after a real 02:35): ``next_slot``, ``slots_between`` and
``latest_slot`` still return correct, ascending, de-duplicated UTC instants. They assume a zone's
offset changes at most once within a local hour, which holds for all of tzdata.
"""

from __future__ import annotations

import calendar
import dataclasses
import functools
from bisect import bisect_right
from collections.abc import Iterator
from datetime import MAXYEAR, MINYEAR, UTC, date, datetime, timedelta
from heapq import heappop, heappush
from typing import Any, cast
from zoneinfo import ZoneInfo

from celery.schedules import ParseException, crontab_parser

from .clock import check_aware
from .custom import Custom, custom_next
from .errors import InvalidSchedule
from .relative import relative_after
from .solar import Solar, event_after, events_between

__all__ = [
    "Clocked",
    "Crontab",
    "Custom",
    "Interval",
    "InvalidSchedule",
    "Solar",
    "Spec",
    "advance",
    "latest_slot",
    "next_slot",
    "slots_between",
]

_SECOND = timedelta(seconds=1)
_MINUTE = timedelta(minutes=1)
_DAY = timedelta(days=1)
# datetime refuses a utcoffset of 24 h or more, so a slot's UTC instant is always within a day
# of its wall time: this bounds how far the day-by-day searches must look on either side.
_MAX_OFFSET = timedelta(hours=24)
# The Gregorian calendar repeats every 400 years: a valid spec matches within that many months.
_MONTHS_WITHOUT_MATCH = 400 * 12 + 12
_FIELDS = (  # name, size, lowest value (celery.schedules.crontab_parser's max_ and min_)
    ("minute", 60, 0),
    ("hour", 24, 0),
    ("day_of_week", 7, 0),
    ("day_of_month", 31, 1),
    ("month_of_year", 12, 1),
)
#: the five crontab fields, in Celery's order
CRONTAB_FIELDS = tuple(name for name, *_ in _FIELDS)
_NAMES = {
    "day_of_week": tuple(n.lower() for n in calendar.day_name[6:] + calendar.day_name[:6]),
    "month_of_year": tuple(n.lower() for n in calendar.month_name[1:]),
}
_LONGEST_MONTH = (0, 31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31)


@dataclasses.dataclass(frozen=True)
class Interval:
    """Every ``every``. ``relative`` is Celery's ``relative=True``: each slot is rounded down
    to the interval's clock unit (day, hour, minute or second) in ``timezone`` (R25)."""

    every: timedelta
    relative: bool = False
    #: the zone a relative interval's units are counted in (Celery's app zone); "UTC" else
    timezone: str = "UTC"

    def __post_init__(self) -> None:
        if not isinstance(self.every, timedelta):
            raise InvalidSchedule("every", f"must be a timedelta, got {type(self.every).__name__}")
        if self.every <= timedelta(0):
            raise InvalidSchedule("every", f"must be positive, got {self.every}")
        if not isinstance(self.relative, bool):
            raise InvalidSchedule("relative", f"must be True or False, got {self.relative!r}")
        _zone(self.timezone)


@dataclasses.dataclass(frozen=True)
class Clocked:
    at: datetime

    def __post_init__(self) -> None:
        if not isinstance(self.at, datetime):
            raise InvalidSchedule("at", f"must be a datetime, got {type(self.at).__name__}")
        if self.at.utcoffset() is None:
            raise InvalidSchedule("at", f"must be timezone-aware, got naive {self.at!r}")
        object.__setattr__(self, "at", self.at.astimezone(UTC))


@dataclasses.dataclass(frozen=True)
class Crontab:
    minute: str = "*"
    hour: str = "*"
    day_of_week: str = "*"
    day_of_month: str = "*"
    month_of_year: str = "*"
    timezone: str = "UTC"
    _zone: ZoneInfo = dataclasses.field(init=False, compare=False, repr=False)
    _sets: dict[str, frozenset[int]] = dataclasses.field(init=False, compare=False, repr=False)
    _doms: tuple[int, ...] = dataclasses.field(init=False, compare=False, repr=False)
    # Minute of the day of every matching (hour, minute), ascending, and each hour's slice of it.
    _mods: tuple[int, ...] = dataclasses.field(init=False, compare=False, repr=False)
    _hour_spans: tuple[tuple[int, int, int], ...] = dataclasses.field(
        init=False, compare=False, repr=False
    )

    @classmethod
    def from_fields(cls, fields: Any, timezone: str) -> Crontab:
        """The crontab of any object with the five cron fields as attributes: a schedule
        row, or django-celery-beat's ``CrontabSchedule``."""
        return cls(**{name: getattr(fields, name) for name in CRONTAB_FIELDS}, timezone=timezone)

    def values(self, name: str) -> frozenset[int]:
        """The numbers field ``name`` matches, expanded (``"*/15"`` of minute: 0, 15, 30, 45)."""
        return self._sets[name]

    def __post_init__(self) -> None:
        sets = {name: _expand(name, getattr(self, name), size, low) for name, size, low in _FIELDS}
        doms, months = sets["day_of_month"], sets["month_of_year"]
        if not any(day <= _LONGEST_MONTH[month] for month in months for day in doms):
            raise InvalidSchedule(
                "day_of_month",
                f"{self.day_of_month!r} never occurs in month_of_year {self.month_of_year!r}",
            )
        minutes, hours = sorted(sets["minute"]), sorted(sets["hour"])
        n = len(minutes)
        set_ = object.__setattr__
        set_(self, "_zone", _zone(self.timezone))
        set_(self, "_sets", sets)
        set_(self, "_doms", tuple(sorted(doms)))
        set_(self, "_mods", tuple(h * 60 + m for h in hours for m in minutes))
        set_(self, "_hour_spans", tuple((h, i * n, i * n + n) for i, h in enumerate(hours)))


Spec = Interval | Crontab | Clocked | Solar | Custom


def zone_of(name: str) -> ZoneInfo:
    """The IANA zone ``name``; ``InvalidSchedule`` naming the field ``timezone`` when it is
    none (the API checks a ``timezone`` argument with it, whatever the timing)."""
    return _zone(name)


def _zone(name: str) -> ZoneInfo:
    if not isinstance(name, str) or not name:
        raise InvalidSchedule("timezone", f"must be an IANA time zone name, got {name!r}")
    try:
        return ZoneInfo(name)
    except (KeyError, ValueError, OSError) as exc:  # KeyError: ZoneInfoNotFoundError
        raise InvalidSchedule("timezone", f"unknown time zone {name!r}") from exc


def _expand(name: str, value: object, size: int, low: int) -> frozenset[int]:
    if not isinstance(value, str):
        raise InvalidSchedule(name, f"must be a string, got {type(value).__name__}")
    return _expand_text(name, value, size, low)


@functools.lru_cache(maxsize=4096)
def _expand_text(name: str, value: str, size: int, low: int) -> frozenset[int]:
    """Pure, so kept: a burst or a bulk write reads the same few crontab fields thousands of
    times (a refused value raises, and is not kept)."""
    for part in value.split(","):
        # Celery's parser ignores trailing text and reads any word whose first three letters
        # name a weekday or month in any field; check the whole part first, then let it expand.
        head, slash, step = part.partition("/")
        words = ["*"] if head == "*" else head.split("-")
        if not (1 <= len(words) <= 2 and (not slash or (step.isascii() and step.isdigit()))):
            raise InvalidSchedule(name, f"cannot parse {part!r} in {value!r}")
        for word in words:
            if not (word == "*" or (word.isascii() and (word.isdigit() or _is_name(name, word)))):
                raise InvalidSchedule(name, f"{word!r} is not a valid value in {value!r}")
    try:
        return frozenset(crontab_parser(size, low).parse(value))
    except (ParseException, ValueError) as exc:
        raise InvalidSchedule(name, f"{exc} in {value!r}") from None


def _is_name(field: str, word: str) -> bool:
    word = word.lower()
    return len(word) >= 3 and any(full.startswith(word) for full in _NAMES.get(field, ()))


def _naive_utc(value: datetime, name: str) -> datetime:
    check_aware(value, name)
    return value.astimezone(UTC).replace(tzinfo=None)


def _crontab(spec: object) -> Crontab:
    if not isinstance(spec, Crontab):
        raise TypeError(f"expected Crontab or Clocked, got {type(spec).__name__}")
    return spec


def _offset(wall: datetime, zone: ZoneInfo) -> timedelta:
    # fold=0 (the default) is the decided DST rule: a gap shifts forward, a repeat fires first.
    # Asking the zone directly reads only the wall fields and fold, 20x faster than replace().
    return cast(timedelta, zone.utcoffset(wall))


_Run = tuple[timedelta, int, int]  # (utc offset, lo, hi): the day's slots _mods[lo:hi]


def _runs(spec: Crontab, base: datetime) -> list[_Run]:
    """Split one local day's slots into runs with a single offset, each ascending in UTC."""
    zone = spec._zone
    first = _offset(base, zone)
    if first == _offset(base + _DAY - _MINUTE, zone):
        return [(first, 0, len(spec._mods))]
    runs: list[_Run] = []
    for hour, lo, hi in spec._hour_spans:
        start = base + timedelta(hours=hour)
        offset = _offset(start, zone)
        if offset == _offset(start + timedelta(minutes=59), zone):
            runs.append((offset, lo, hi))
            continue
        for i in range(lo, hi):  # the transition hour: offset minute by minute
            offset = _offset(base + timedelta(minutes=spec._mods[i]), zone)
            if runs and runs[-1][0] == offset and runs[-1][2] == i:
                runs[-1] = (offset, runs[-1][1], i + 1)
            else:
                runs.append((offset, i, i + 1))
    return runs


def _cut(spec: Crontab, base: datetime, offset: timedelta, lo: int, hi: int, t: datetime) -> int:
    """Index of the run's first slot strictly after the naive-UTC instant ``t``."""
    return bisect_right(spec._mods, (t - base + offset) // _MINUTE, lo, hi)


def _slot(spec: Crontab, base: datetime, offset: timedelta, i: int) -> datetime:
    return base + timedelta(minutes=spec._mods[i]) - offset


def _days(spec: Crontab, start: date, forward: bool) -> Iterator[datetime]:
    """Local midnights (naive) of the days matching the date fields, from ``start`` on."""
    dows, months = spec._sets["day_of_week"], spec._sets["month_of_year"]
    doms = spec._doms if forward else spec._doms[::-1]
    year, month, barren, first = start.year, start.month, 0, True
    while MINYEAR <= year <= MAXYEAR:
        if month in months:
            length = calendar.monthrange(year, month)[1]
            for dom in doms:
                if dom > length or (first and (dom < start.day if forward else dom > start.day)):
                    continue
                day = datetime(year, month, dom)
                if (day.weekday() + 1) % 7 in dows:  # Celery counts from Sunday = 0
                    barren = 0
                    yield day
        first = False
        barren += 1
        if barren > _MONTHS_WITHOUT_MATCH:
            raise RuntimeError(f"{spec!r} matched no day in 400 years")
        month += 1 if forward else -1
        if not 1 <= month <= 12:
            year, month = (year + 1, 1) if forward else (year - 1, 12)


def next_slot(spec: Crontab | Clocked | Solar, after: datetime) -> datetime | None:
    """The first slot strictly after ``after``, or None (a past one-off, or beyond year 9999;
    a sun event that does not happen within the polar search bound)."""
    t = _naive_utc(after, "after")
    if isinstance(spec, Solar):
        return event_after(spec, after)
    if isinstance(spec, Clocked):
        return spec.at if spec.at.replace(tzinfo=None) > t else None
    spec = _crontab(spec)
    best: datetime | None = None
    # A slot after t has a wall time after t - 24 h; slots of later days lie after base - 24 h.
    for base in _days(spec, (t - _MAX_OFFSET).date(), forward=True):
        if best is not None and base - _MAX_OFFSET >= best:
            break
        for offset, lo, hi in _runs(spec, base):
            i = _cut(spec, base, offset, lo, hi, t)
            if i < hi:
                slot = _slot(spec, base, offset, i)
                best = slot if best is None else min(best, slot)
    return None if best is None else best.replace(tzinfo=UTC)


def slots_between(
    spec: Crontab | Clocked | Solar, since: datetime, until: datetime
) -> Iterator[datetime]:
    """Every slot s with since < s <= until, ascending, without duplicates; lazy."""
    lo_t, hi_t = _naive_utc(since, "since"), _naive_utc(until, "until")
    if isinstance(spec, Solar):
        return events_between(spec, since, until)
    if isinstance(spec, Clocked):
        return iter([spec.at] if lo_t < spec.at.replace(tzinfo=None) <= hi_t else [])
    return _between(_crontab(spec), lo_t, hi_t)


def _between(spec: Crontab, since: datetime, until: datetime) -> Iterator[datetime]:
    # Slots of neighbouring days can interleave near a gap, so each day's slots wait in a heap
    # until no later day can produce an earlier one.
    pending: list[datetime] = []
    last: datetime | None = None
    for base in _days(spec, (since - _MAX_OFFSET).date(), forward=True):
        floor = base - _MAX_OFFSET
        while pending and pending[0] <= floor:
            slot = heappop(pending)
            if slot != last:
                yield slot.replace(tzinfo=UTC)
                last = slot
        if floor >= until:
            break
        for offset, lo, hi in _runs(spec, base):
            for i in range(
                _cut(spec, base, offset, lo, hi, since), _cut(spec, base, offset, lo, hi, until)
            ):
                heappush(pending, _slot(spec, base, offset, i))
    while pending:
        slot = heappop(pending)
        if slot != last:
            yield slot.replace(tzinfo=UTC)
            last = slot


def latest_slot(
    spec: Crontab | Clocked | Solar, since: datetime, until: datetime
) -> datetime | None:
    """The latest slot in (since, until], or None; searches backwards day by day."""
    lo_t, hi_t = _naive_utc(since, "since"), _naive_utc(until, "until")
    if isinstance(spec, Solar):  # at most a slot a day: walk forward
        latest = None
        for latest in events_between(spec, since, until):  # noqa: B007
            pass
        return latest
    if isinstance(spec, Clocked):
        return spec.at if lo_t < spec.at.replace(tzinfo=None) <= hi_t else None
    spec = _crontab(spec)
    best: datetime | None = None
    for base in _days(spec, (hi_t + _MAX_OFFSET).date(), forward=False):
        ceiling = base + _DAY + _MAX_OFFSET  # every slot of this day or earlier is before it
        if ceiling <= lo_t or (best is not None and ceiling <= best):
            break
        for offset, lo, hi in _runs(spec, base):
            i = _cut(spec, base, offset, lo, hi, hi_t) - 1
            if i >= lo:
                slot = _slot(spec, base, offset, i)
                if slot > lo_t and (best is None or slot > best):
                    best = slot
    return None if best is None else best.replace(tzinfo=UTC)


def advance(spec: Spec, deadline: datetime, now: datetime) -> datetime | None:
    """The first slot of the schedule's own grid strictly after ``now`` (R3).

    Missed slots are skipped in one step, never replayed; a one-off is done after its fire.
    """
    # Aware arithmetic within one non-UTC tzinfo is wall-clock arithmetic: work in UTC.
    deadline = check_aware(deadline, "deadline").astimezone(UTC)
    now = check_aware(now, "now").astimezone(UTC)
    if isinstance(spec, Interval) and spec.relative:
        return relative_after(spec.every, _zone(spec.timezone), deadline, now)
    if isinstance(spec, Interval):
        k = max(1, (now - deadline) // spec.every + 1)  # exact: timedelta // is on microseconds
        return deadline + spec.every * k
    if isinstance(spec, Clocked):
        return None
    if isinstance(spec, Custom):
        return custom_next(spec, deadline, now)[1]
    return next_slot(spec, max(now, deadline))


#: the units a duration is written in, largest first
_UNITS = (("day", _DAY), ("hour", timedelta(hours=1)), ("minute", _MINUTE), ("second", _SECOND))


def whole_units(every: timedelta) -> tuple[int, str] | None:
    """``every`` as a count of the largest unit that divides it: (15, "minute"); None when
    it is not a whole number of seconds."""
    for unit, size in _UNITS:
        if every % size == timedelta(0):
            return every // size, unit
    return None
