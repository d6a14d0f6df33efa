"""A brute-force crontab oracle for the property tests of ``durablebeat.core.timing``.

Deliberately slow and independent: its own field expander (the syntax subset the strategies
generate: ``*``, ``n``, ``a-b`` wrapping like Celery's when ``a > b``, ``*/s``, ``a-b/s`` and
comma lists), every wall-clock minute of every local day checked against all five fields, and
each match mapped to UTC with fold=0, then de-duplicated and sorted.
"""

from __future__ import annotations

import datetime as dt
from zoneinfo import ZoneInfo

RANGES = {
    "minute": (0, 59),
    "hour": (0, 23),
    "day_of_week": (0, 6),
    "day_of_month": (1, 31),
    "month_of_year": (1, 12),
}
# No UTC offset moves by a day or more, so the local days of a UTC window, widened by two,
# hold every wall time that can map into it.
_MARGIN = dt.timedelta(days=2)


def expand(text: str, low: int, high: int) -> set[int]:
    values: set[int] = set()
    for part in text.split(","):
        body, _, step = part.partition("/")
        if body == "*":
            run = list(range(low, high + 1))
        elif "-" in body:
            first, last = (int(x) for x in body.split("-"))
            if first <= last:
                run = list(range(first, last + 1))
            else:
                run = list(range(first, high + 1)) + list(range(low, last + 1))
        else:
            run = [int(body)]
        values.update(run[:: int(step) if step else 1])
    return values


def slots(
    fields: dict[str, str], timezone: str, since: dt.datetime, until: dt.datetime
) -> list[dt.datetime]:
    """Every slot in (since, until], ascending, by checking every wall-clock minute."""
    zone = ZoneInfo(timezone)
    sets = {name: expand(fields.get(name, "*"), *bounds) for name, bounds in RANGES.items()}
    day = (since.astimezone(zone) - _MARGIN).date()
    last_day = (until.astimezone(zone) + _MARGIN).date()
    found: set[dt.datetime] = set()
    while day <= last_day:
        if (
            day.month in sets["month_of_year"]
            and day.day in sets["day_of_month"]
            and day.isoweekday() % 7 in sets["day_of_week"]  # Sunday is 0
        ):
            midnight = dt.datetime(day.year, day.month, day.day)
            for minute_of_day in range(24 * 60):
                wall = midnight + dt.timedelta(minutes=minute_of_day)
                if wall.hour in sets["hour"] and wall.minute in sets["minute"]:
                    instant = wall.replace(tzinfo=zone, fold=0).astimezone(dt.UTC)
                    if since < instant <= until:
                        found.add(instant)
        day += dt.timedelta(days=1)
    return sorted(found)
