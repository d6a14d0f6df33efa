"""The one clock seam: every "now" the IO layer uses comes from here.

Tests move time with ``time_machine``; pure schedule math (``timing``) never calls this and
takes its time as an argument instead.
"""

from __future__ import annotations

import datetime as dt


def now() -> dt.datetime:
    """The current instant, aware, in UTC."""
    return dt.datetime.now(dt.UTC)


def check_aware(value: dt.datetime, name: str = "datetime") -> dt.datetime:
    """Refuse naive datetimes at the boundary instead of guessing their zone."""
    if value.tzinfo is None or value.utcoffset() is None:
        raise ValueError(f"{name} must be timezone-aware, got naive {value!r}")
    return value


#: the calendar's edges, as aware instants
EARLIEST = dt.datetime.min.replace(tzinfo=dt.UTC)
LATEST = dt.datetime.max.replace(tzinfo=dt.UTC)


def shift(instant: dt.datetime, delta: dt.timedelta) -> dt.datetime:
    """``instant + delta``, stopping at the calendar's edge instead of raising: a stored
    value out of every range (written around the checks) must not stop the loop (R21)."""
    try:
        return instant + delta
    except OverflowError:
        return LATEST if delta > dt.timedelta(0) else EARLIEST


def before(instant: dt.datetime, span: dt.timedelta) -> dt.datetime:
    """``instant - span`` (a window's start), stopping at the calendar's first instant."""
    try:
        return instant - span
    except OverflowError:
        return EARLIEST
