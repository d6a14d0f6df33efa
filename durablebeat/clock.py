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
