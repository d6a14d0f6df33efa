"""Solar schedules: slots at a sun event seen from a place (R25). Pure; nothing reads the clock.

The semantics are Celery's ``celery.schedules.solar``, computed with ``ephem`` the same way:
an observer at the latitude and longitude, elevation 0, no atmospheric pressure, the event's
horizon (``-0:34`` for sunrise and sunset, ``-6``/``-12``/``-18`` for the twilights, centre of
the disc for those), ``next_rising`` / ``next_setting`` / ``next_transit`` after the previous
slot. A day on which the event does not happen (polar day or night: ephem raises
``CircumpolarError``) has no slot: the search goes on from the next anti-transit, as Celery's
does, for at most ``MAX_SEARCH_DAYS``. Never a slot that is not the event, never a hot loop.

``ephem`` is an optional dependency (``pip install 'durablebeat[solar]'``), imported on first
use; without it every function here raises ``InvalidSchedule`` naming the extra.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

from celery.schedules import solar as celery_solar

from .clock import check_aware
from .errors import InvalidSchedule

__all__ = ["EVENTS", "MAX_SEARCH_DAYS", "Solar", "event_after", "events_between"]

#: each event Celery's ``solar`` knows: (ephem's method, horizon, centre of the disc), copied
#: from ``celery.schedules.solar`` (its private ``_methods``, ``_horizons`` and
#: ``_use_center_l``; tests/unit/test_celery_compat.py checks the copy against them), so that
#: a rename inside Celery never breaks importing durablebeat
_TABLE: dict[str, tuple[str, str, bool]] = {
    "dawn_astronomical": ("next_rising", "-18", True),
    "dawn_nautical": ("next_rising", "-12", True),
    "dawn_civil": ("next_rising", "-6", True),
    "sunrise": ("next_rising", "-0:34", False),
    "solar_noon": ("next_transit", "0", False),
    "sunset": ("next_setting", "-0:34", False),
    "dusk_civil": ("next_setting", "-6", True),
    "dusk_nautical": ("next_setting", "-12", True),
    "dusk_astronomical": ("next_setting", "-18", True),
}
EVENTS: tuple[str, ...] = tuple(sorted(_TABLE))
_METHODS: dict[str, str] = {event: row[0] for event, row in _TABLE.items()}
_HORIZONS: dict[str, str] = {event: row[1] for event, row in _TABLE.items()}
_USE_CENTER: dict[str, bool] = {event: row[2] for event, row in _TABLE.items()}
#: Celery's own bound on the days searched for an event that does not happen every day
MAX_SEARCH_DAYS = int(getattr(celery_solar, "max_search_days", 366))
#: what to install when ephem is missing
EXTRA = "pip install 'durablebeat[solar]' (the ephem package)"


@dataclasses.dataclass(frozen=True)
class Solar:
    """A sun event at a place; latitude and longitude in degrees, north and east positive."""

    event: str
    latitude: float
    longitude: float

    def __post_init__(self) -> None:
        if self.event not in EVENTS:
            raise InvalidSchedule("solar_event", f"must be one of {', '.join(EVENTS)}")
        for name, value, bound in (
            ("latitude", self.latitude, 90),
            ("longitude", self.longitude, 180),
        ):
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise InvalidSchedule(name, f"must be a number of degrees, got {value!r}")
            if not (math.isfinite(value) and -bound <= value <= bound):
                raise InvalidSchedule(name, f"must be between -{bound} and {bound}, got {value!r}")
            object.__setattr__(self, name, float(value))

    def place(self) -> str:
        lat, lon = self.latitude, self.longitude
        return f"{abs(lat):g}°{'N' if lat >= 0 else 'S'}, {abs(lon):g}°{'E' if lon >= 0 else 'W'}"


def _ephem() -> Any:
    try:
        import ephem
    except ImportError as exc:
        raise InvalidSchedule("solar_event", f"solar schedules need ephem: {EXTRA}") from exc
    return ephem


def event_after(spec: Solar, after: datetime) -> datetime | None:
    """The first time of the event strictly after ``after`` (UTC), or None when it does not
    happen within ``MAX_SEARCH_DAYS`` anti-transits (the polar search bound)."""
    check_aware(after, "after")
    ephem = _ephem()
    observer = ephem.Observer()
    # Celery's observer, field by field (celery.schedules.solar.__init__)
    observer.lat = str(spec.latitude)
    observer.lon = str(spec.longitude)
    observer.elev = 0
    observer.horizon = _HORIZONS[spec.event]
    observer.pressure = 0
    start_utc = after.astimezone(UTC).replace(tzinfo=None)
    observer.date = start_utc
    start = ephem.Date(start_utc)
    sun = ephem.Sun()
    method = getattr(observer, _METHODS[spec.event])
    kwargs = {"use_center": True} if _USE_CENTER[spec.event] else {}
    for _ in range(MAX_SEARCH_DAYS):
        try:
            found = method(sun, start=start, **kwargs)
        except ephem.CircumpolarError:
            start = observer.next_antitransit(sun, start=start)
            continue
        slot: datetime = found.datetime().replace(tzinfo=UTC)
        if slot > after:
            return slot
        start = ephem.Date(found + ephem.second)  # the same event again: look past it
    return None


def events_between(spec: Solar, since: datetime, until: datetime) -> Iterator[datetime]:
    """Every event time s with since < s <= until, ascending; lazy."""
    check_aware(until, "until")
    slot = event_after(spec, since)
    while slot is not None and slot <= until:
        yield slot
        slot = event_after(spec, slot)
