"""Every ``DURABLEBEAT_*`` setting, its type and its default, read on access.

Reading on access (not at import) lets ``override_settings`` and per-process environment
settings work. The README's settings table mirrors this module.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from django.conf import settings as django_settings


def _seconds(value: Any, name: str) -> dt.timedelta:
    if isinstance(value, dt.timedelta):
        return value
    if isinstance(value, int | float) and not isinstance(value, bool):
        return dt.timedelta(seconds=value)
    raise TypeError(f"{name} must be a timedelta or a number of seconds, got {value!r}")


class Settings:
    """Typed access to the settings; one property per setting."""

    def _get(self, name: str, default: Any) -> Any:
        return getattr(django_settings, f"DURABLEBEAT_{name}", default)

    def _duration(self, name: str, default: float) -> dt.timedelta:
        return _seconds(self._get(name, default), f"DURABLEBEAT_{name}")

    @property
    def STARTUP_GRACE(self) -> dt.timedelta:
        """Delay before a new or overdue interval schedule fires at boot (R2). Per schedule."""
        return self._duration("STARTUP_GRACE", 60)

    @property
    def MAX_INTERVAL(self) -> float:
        """Longest beat sleeps between looks at the database, in seconds (R6 pickup bound)."""
        return float(self._get("MAX_INTERVAL", 5.0))

    @property
    def LATE_AFTER(self) -> dt.timedelta:
        """A slot found due later than this passed while no beat could fire it: it is
        overdue (R7, R8). Within it, it is fired as scheduled (a restart, a rolling deploy)."""
        return self._duration("LATE_AFTER", 10)

    @property
    def HEARTBEAT_INTERVAL(self) -> dt.timedelta:
        """How often a beat boot refreshes its heartbeat row (R17)."""
        return self._duration("HEARTBEAT_INTERVAL", 10)

    @property
    def DB_RETRY_INTERVAL(self) -> dt.timedelta:
        """While the database is unreachable, how often beat tries it again (R5)."""
        return self._duration("DB_RETRY_INTERVAL", 5)

    @property
    def BATCH_SIZE(self) -> int:
        """Most due schedules claimed and published in one transaction."""
        return int(self._get("BATCH_SIZE", 1000))

    @property
    def CATCH_UP_WINDOW(self) -> dt.timedelta:
        """Default for a delivery schedule: how old a missed slot may be and still fire (R8)."""
        return self._duration("CATCH_UP_WINDOW", 55 * 60)

    @property
    def CATCH_UP_SETTLE(self) -> dt.timedelta:
        """An in-doubt slot is not re-sent before this long after the slot (R9)."""
        return self._duration("CATCH_UP_SETTLE", 10 * 60)

    @property
    def GC_INTERVAL(self) -> dt.timedelta:
        """Orphan reclaim runs at most this often, across all beats and restarts (R15)."""
        return self._duration("GC_INTERVAL", 5 * 60)

    @property
    def WORKER_HEARTBEAT_INTERVAL(self) -> dt.timedelta:
        """How often each worker process writes its liveness row (R15)."""
        return self._duration("WORKER_HEARTBEAT_INTERVAL", 30)

    @property
    def WORKER_DEAD_AFTER(self) -> dt.timedelta:
        """A worker whose liveness row is older than this is gone (R15)."""
        return self._duration("WORKER_DEAD_AFTER", 120)

    @property
    def RECLAIM_MARGIN(self) -> dt.timedelta:
        """A run older than its hard time limit plus this margin is reclaimed (R15)."""
        return self._duration("RECLAIM_MARGIN", 60)

    @property
    def UNCONFIRMED_AFTER(self) -> dt.timedelta:
        """A published run with no worker news after this long is checked in the result backend."""
        return self._duration("UNCONFIRMED_AFTER", 5 * 60)

    @property
    def STUCK_THRESHOLD(self) -> dt.timedelta:
        """``check`` flags a schedule skipped for longer than this (R17)."""
        return self._duration("STUCK_THRESHOLD", 6 * 3600)

    @property
    def HEARTBEAT_STALE_AFTER(self) -> dt.timedelta:
        """``check`` says no beat is alive when the freshest heartbeat is older than this."""
        return self._duration("HEARTBEAT_STALE_AFTER", 60)

    @property
    def OVERDUE_TOLERANCE(self) -> dt.timedelta:
        """``check`` flags starvation when a next fire is older than this while beat is alive."""
        return self._duration("OVERDUE_TOLERANCE", 120)

    @property
    def NO_SUCCESS_PERIODS(self) -> int:
        """``check`` flags a schedule with no success over this many of its periods."""
        return int(self._get("NO_SUCCESS_PERIODS", 3))

    @property
    def RESULT_RECONCILE(self) -> bool:
        """Reconcile unreported runs from django-celery-results (R13) when it is installed."""
        return bool(self._get("RESULT_RECONCILE", True))

    @property
    def LISTEN_NOTIFY(self) -> bool:
        """On PostgreSQL, wake beat at once when a schedule changes (LISTEN/NOTIFY)."""
        return bool(self._get("LISTEN_NOTIFY", True))

    # --- operations (issue 5) ---

    @property
    def CHECK_LOOKBACK(self) -> dt.timedelta:
        """``check`` reports runs lost within this look-back (R17)."""
        return self._duration("CHECK_LOOKBACK", 24 * 3600)

    @property
    def UNRESOLVED_AFTER(self) -> dt.timedelta:
        """``check`` flags a published or started run with no news for this long (R17);
        a started run with a hard time limit is flagged past limit + margin + gc interval."""
        return self._duration("UNRESOLVED_AFTER", 3600)

    @property
    def METRICS_TOKEN(self) -> str:
        """When set, the metrics view wants ``Authorization: Bearer <token>``."""
        return str(self._get("METRICS_TOKEN", "") or "")


settings = Settings()
