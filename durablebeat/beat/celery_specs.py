"""Celery's schedule objects read as durablebeat's specs: the code sync's adapter (R25).

What ``app.conf.beat_schedule`` holds (a number, a ``timedelta``, ``schedule``, ``crontab``,
``solar``, a ``datetime``, or any object with ``is_due``) becomes a ``core.timing`` spec,
so that a code schedule fires when Celery's beat would fire it. The math is ``core``'s;
reading Celery's objects is the code sync's.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, datetime, timedelta

from celery.schedules import crontab, schedule, solar

from ..core.custom import Custom, custom_label
from ..core.errors import InvalidSchedule
from ..core.solar import Solar
from ..core.timing import CRONTAB_FIELDS, Clocked, Crontab, Interval, Spec


def from_celery(schedule_: object, default_timezone: str, relative: bool = False) -> Spec:
    """The spec of an ``app.conf.beat_schedule`` entry's ``schedule`` value (R25).

    ``relative`` is the entry's own ``relative`` key: Celery's beat applies it to a number or
    a ``timedelta`` only (``celery.schedules.maybe_schedule``); a ``schedule`` object keeps
    its own flag and a crontab ignores it. A relative interval counts its clock units in
    ``default_timezone``, the zone of Celery's ``app.now()``. A spec is taken as it is (the
    API reads a stored schedule back so, ``durablebeat.api``)."""
    if isinstance(schedule_, Interval | Crontab | Clocked | Solar):
        return schedule_
    if isinstance(schedule_, solar):
        return Solar(schedule_.event, schedule_.lat, schedule_.lon)
    if isinstance(schedule_, crontab):
        fields = {
            name: _field_text(name, getattr(schedule_, f"_orig_{name}")) for name in CRONTAB_FIELDS
        }
        return Crontab(**fields, timezone=_own_zone(schedule_) or default_timezone)
    if isinstance(schedule_, schedule) and not _overrides(schedule_, schedule):
        return _interval(schedule_.run_every, schedule_.relative is True, default_timezone)
    if isinstance(schedule_, timedelta):
        return _interval(schedule_, relative, default_timezone)
    if isinstance(schedule_, int | float) and not isinstance(schedule_, bool):
        try:
            every = timedelta(seconds=schedule_)
        except (ValueError, OverflowError) as exc:  # nan, inf
            raise InvalidSchedule("every", f"{schedule_!r} is not a number of seconds") from exc
        return _interval(every, relative, default_timezone)
    if isinstance(schedule_, datetime):
        return Clocked(schedule_)
    if callable(getattr(schedule_, "is_due", None)):  # a BaseSchedule subclass, or duck-typed
        return Custom(custom_label(schedule_), schedule_)
    raise InvalidSchedule("schedule", f"{type(schedule_).__name__} schedules are not supported")


def _overrides(schedule_: object, base: type) -> bool:
    """A subclass that answers Celery's questions its own way is a custom schedule."""
    cls = type(schedule_)
    return any(getattr(cls, m) is not getattr(base, m) for m in ("is_due", "remaining_estimate"))


def _interval(every: timedelta, relative: bool, zone: str) -> Interval:
    return Interval(every, relative=True, timezone=zone) if relative else Interval(every)


def _field_text(name: str, value: object) -> str:
    # crontab() also takes an int or an iterable of ints per field and keeps it as given.
    if isinstance(value, str):
        return value
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    if isinstance(value, Iterable):
        items = list(value)
        if all(isinstance(v, int) and not isinstance(v, bool) for v in items):
            return ",".join(str(v) for v in sorted(set(items)))
    raise InvalidSchedule(name, f"cannot read {value!r}")


def _own_zone(schedule_: crontab) -> str | None:
    """The IANA name of a crontab's own zone (django-celery-beat's TzAwareCrontab), or None.

    A plain crontab has none: its ``tz`` is a cached property that reads the current Celery
    app's zone, so asking it would ignore ``default_timezone`` and reach for global state.
    """
    if type(schedule_) is crontab:
        return None
    tz = vars(schedule_).get("tz")  # set by TzAwareCrontab.__init__
    if tz is None:
        return None
    if tz is UTC:
        return "UTC"
    for attr in ("key", "zone"):  # zoneinfo, pytz
        name = getattr(tz, attr, None)
        if isinstance(name, str):
            return name
    raise InvalidSchedule("timezone", f"{tz!r} is not an IANA time zone")
