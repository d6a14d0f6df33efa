"""Every ``DURABLEBEAT_*`` setting, its type, its default and its range, read on access.

Reading on access (not at import) lets ``override_settings`` and per-process environment
settings work. docs/configuration.md's settings table mirrors this module. A value of the
wrong type or out of its range raises ``InvalidSetting`` naming the setting, on every
access, so it can never reach the engine; the system check ``durablebeat.E002`` reads every
property here, whatever it is, so a new setting is checked as soon as its property exists
(R21).
"""

from __future__ import annotations

import datetime as dt
import math
from typing import Any

from django.conf import settings as django_settings
from django.core.exceptions import ImproperlyConfigured

from .core.pause import MAX_PAUSE_AFTER_FAILURES

#: ``startup_grace`` (per schedule, ``validation``, and the setting): 0 (fire at once) to a week
MAX_STARTUP_GRACE = dt.timedelta(days=7)
#: ``catch_up_window`` (per schedule and the setting): more than 0, at most a year
MAX_CATCH_UP_WINDOW = dt.timedelta(days=366)
#: ``jitter`` (per schedule and the setting): 0 (sent at the slot) to a day (R35)
MAX_JITTER = dt.timedelta(days=1)
#: ``DURABLEBEAT_MAX_MESSAGE_BYTES``: args, kwargs and headers together, serialised as JSON
DEFAULT_MAX_MESSAGE_BYTES = 64 * 1024
MIN_MAX_MESSAGE_BYTES, MAX_MAX_MESSAGE_BYTES = 1024, 16 * 1024 * 1024
#: ``DURABLEBEAT_RETENTION``: a month by default; at least a day (the longest lateness a
#: slot still fires at, ``LATE_AFTER``, is a day), at most ten years
DEFAULT_RETENTION = dt.timedelta(days=30)
MIN_RETENTION, MAX_RETENTION = dt.timedelta(days=1), dt.timedelta(days=3653)
ZERO = dt.timedelta(0)
HOUR = dt.timedelta(hours=1)
DAY = dt.timedelta(days=1)
#: the longest a duration setting may be unless its property says otherwise: far inside
#: what ``datetime`` arithmetic and the databases hold (``validation``'s module doc)
MAX_SETTING_DURATION = dt.timedelta(days=366)


class InvalidSetting(ImproperlyConfigured, ValueError):
    """A ``DURABLEBEAT_*`` setting of the wrong type or out of its range; names it."""


def _range_words(low: float, high: float, low_open: bool, unit: str = "") -> str:
    first = f"more than {low:g}{unit}" if low_open else f"from {low:g}{unit}"
    return f"{first} to {high:g}{unit}" if not low_open else f"{first} and at most {high:g}{unit}"


def _as_float(value: float) -> float:
    """An int beyond a float (``10**400``) is infinite: out of every range, refused as
    ``InvalidSetting`` like any other value out of range, never an ``OverflowError``."""
    try:
        return float(value)
    except OverflowError:
        return math.inf


def _seconds(
    value: Any,
    name: str,
    low: dt.timedelta = ZERO,
    high: dt.timedelta = MAX_SETTING_DURATION,
    low_open: bool = False,
) -> dt.timedelta:
    lo, hi = low.total_seconds(), high.total_seconds()
    if isinstance(value, dt.timedelta):
        seconds = value.total_seconds()
    elif isinstance(value, int | float) and not isinstance(value, bool):
        seconds = _as_float(value)
    else:
        raise InvalidSetting(f"{name} must be a timedelta or a number of seconds, got {value!r}")
    # Checked as a number first: NaN, infinity or 10**20 never reach timedelta's arithmetic.
    if not math.isfinite(seconds) or seconds < lo or seconds > hi or (low_open and seconds == lo):
        words = _range_words(lo, hi, low_open, " s")
        raise InvalidSetting(f"{name} must be {words}, got {value!r}")
    return value if isinstance(value, dt.timedelta) else dt.timedelta(seconds=seconds)


class Settings:
    """Typed access to the settings; one property per setting, its range beside it."""

    def _get(self, name: str, default: Any) -> Any:
        return getattr(django_settings, f"DURABLEBEAT_{name}", default)

    def _duration(
        self,
        name: str,
        default: float,
        *,
        low: dt.timedelta = ZERO,
        high: dt.timedelta = MAX_SETTING_DURATION,
        low_open: bool = False,
    ) -> dt.timedelta:
        """A timedelta or seconds, within ``low..high`` (``low`` excluded when ``low_open``)."""
        return _seconds(self._get(name, default), f"DURABLEBEAT_{name}", low, high, low_open)

    def _number(self, name: str, default: float, *, low: float, high: float) -> float:
        value = self._get(name, default)
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise InvalidSetting(f"DURABLEBEAT_{name} must be a number, got {value!r}")
        if not (math.isfinite(_as_float(value)) and low <= value <= high):
            words = _range_words(low, high, False)
            raise InvalidSetting(f"DURABLEBEAT_{name} must be {words}, got {value!r}")
        return float(value)

    def _int(self, name: str, default: int, *, low: int, high: int) -> int:
        value = self._get(name, default)
        if isinstance(value, bool) or not isinstance(value, int):
            raise InvalidSetting(f"DURABLEBEAT_{name} must be an integer, got {value!r}")
        if not low <= value <= high:
            words = _range_words(low, high, False)
            raise InvalidSetting(f"DURABLEBEAT_{name} must be {words}, got {value!r}")
        return value

    def _bool(self, name: str, default: bool) -> bool:
        value = self._get(name, default)
        if not isinstance(value, bool):  # "false" or 0 would be read wrongly either way
            raise InvalidSetting(f"DURABLEBEAT_{name} must be True or False, got {value!r}")
        return value

    @property
    def STARTUP_GRACE(self) -> dt.timedelta:
        """Delay before a new or overdue interval schedule fires at boot (R2). Per schedule."""
        return self._duration("STARTUP_GRACE", 60, high=MAX_STARTUP_GRACE)

    @property
    def JITTER(self) -> dt.timedelta:
        """Each slot is sent at slot + a delay in [0, jitter), the same for every beat and
        restart, before the next slot (R35). 0: at the slot. Per schedule."""
        return self._duration("JITTER", 0, high=MAX_JITTER)

    @property
    def MAX_INTERVAL(self) -> float:
        """Longest beat sleeps between looks at the database, in seconds (R6 pickup bound)."""
        return self._number("MAX_INTERVAL", 5.0, low=0.1, high=3600)

    @property
    def LATE_AFTER(self) -> dt.timedelta:
        """A slot found due later than this passed while no beat could fire it: it is
        overdue (R7, R8). Within it, it is fired as scheduled (a restart, a rolling deploy)."""
        return self._duration("LATE_AFTER", 10, high=DAY)

    @property
    def ONE_OFF_LATE_WINDOW(self) -> dt.timedelta:
        """A one-off (clocked) schedule found later than ``LATE_AFTER`` but within this
        fires once, late, and is recorded as late; past it, it is missed (R31). 0: missed
        as soon as it is late."""
        return self._duration("ONE_OFF_LATE_WINDOW", 3600, high=MAX_STARTUP_GRACE)

    @property
    def HEARTBEAT_INTERVAL(self) -> dt.timedelta:
        """How often a beat boot refreshes its heartbeat row and measures the clock (R17,
        R26); an idle beat wakes for nothing else, so this sets what idle costs (R28)."""
        return self._duration("HEARTBEAT_INTERVAL", 20, low_open=True, high=HOUR)

    @property
    def DB_RETRY_INTERVAL(self) -> dt.timedelta:
        """While the database is unreachable, how often beat tries it again (R5)."""
        return self._duration("DB_RETRY_INTERVAL", 5, low_open=True, high=HOUR)

    @property
    def BATCH_SIZE(self) -> int:
        """Most due schedules claimed and published in one transaction."""
        return self._int("BATCH_SIZE", 1000, low=1, high=10_000)

    @property
    def CATCH_UP_WINDOW(self) -> dt.timedelta:
        """Default for a delivery schedule: how old a missed slot may be and still fire (R8)."""
        return self._duration("CATCH_UP_WINDOW", 55 * 60, low_open=True, high=MAX_CATCH_UP_WINDOW)

    @property
    def CATCH_UP_SETTLE(self) -> dt.timedelta:
        """An in-doubt slot is not re-sent before this long after the slot (R9)."""
        return self._duration("CATCH_UP_SETTLE", 10 * 60, high=7 * DAY)

    @property
    def GC_INTERVAL(self) -> dt.timedelta:
        """Orphan reclaim runs at most this often, across all beats and restarts (R15)."""
        return self._duration("GC_INTERVAL", 5 * 60, low_open=True, high=DAY)

    @property
    def RETENTION(self) -> dt.timedelta | None:
        """How long the ledger keeps finished runs, missed-slot records, incidents and dead
        boots; beat deletes what is older, a little at a time (R32). ``None``: kept for
        ever. Backfill, catch-up and the in-doubt resend never reach back past it."""
        if self._get("RETENTION", DEFAULT_RETENTION) is None:
            return None
        return self._duration(
            "RETENTION",
            DEFAULT_RETENTION.total_seconds(),
            low=MIN_RETENTION,
            high=MAX_RETENTION,
        )

    @property
    def WORKER_HEARTBEAT_INTERVAL(self) -> dt.timedelta:
        """How often each worker process writes its liveness row (R15)."""
        return self._duration("WORKER_HEARTBEAT_INTERVAL", 30, low_open=True, high=HOUR)

    @property
    def WORKER_DEAD_AFTER(self) -> dt.timedelta:
        """A worker whose liveness row is older than this is gone (R15)."""
        return self._duration("WORKER_DEAD_AFTER", 120, low_open=True, high=DAY)

    @property
    def RECLAIM_MARGIN(self) -> dt.timedelta:
        """A run older than its hard time limit plus this margin is reclaimed (R15)."""
        return self._duration("RECLAIM_MARGIN", 60, high=DAY)

    @property
    def UNCONFIRMED_AFTER(self) -> dt.timedelta:
        """A published run with no worker news after this long is checked in the result backend."""
        return self._duration("UNCONFIRMED_AFTER", 5 * 60, low_open=True, high=7 * DAY)

    @property
    def NO_NEWS_AFTER(self) -> dt.timedelta:
        """A published run with no worker news this long after its publish (or past its
        message's expiry, when sooner) stops holding an ``overlap=skip`` schedule and is
        marked ``no_news`` (R22)."""
        return self._duration("NO_NEWS_AFTER", 120, low_open=True, high=7 * DAY)

    @property
    def STUCK_THRESHOLD(self) -> dt.timedelta:
        """``check`` flags a schedule skipped for longer than this (R17)."""
        return self._duration("STUCK_THRESHOLD", 6 * 3600, low_open=True)

    @property
    def HEARTBEAT_STALE_AFTER(self) -> dt.timedelta:
        """``check`` says no beat is alive when the freshest heartbeat is older than this."""
        return self._duration("HEARTBEAT_STALE_AFTER", 60, low_open=True, high=DAY)

    @property
    def CLOCK_SKEW_TOLERANCE(self) -> dt.timedelta:
        """``check`` flags a live beat or worker whose clock is further than this off the
        database's (R26): ``clock_skew``."""
        return self._duration("CLOCK_SKEW_TOLERANCE", 2, low_open=True, high=DAY)

    @property
    def DEPLOY_GRACE(self) -> dt.timedelta:
        """``check`` stays quiet this long after a beat stopped cleanly, waiting for the next
        boot of a deploy (R27); a beat gone without stopping keeps ``HEARTBEAT_STALE_AFTER``."""
        return self._duration("DEPLOY_GRACE", 120, high=DAY)

    @property
    def OVERDUE_TOLERANCE(self) -> dt.timedelta:
        """``check`` flags starvation when a next fire is older than this while beat is alive."""
        return self._duration("OVERDUE_TOLERANCE", 120, high=7 * DAY)

    @property
    def NO_SUCCESS_PERIODS(self) -> int:
        """``check`` flags a schedule with no success over this many of its periods."""
        return self._int("NO_SUCCESS_PERIODS", 3, low=1, high=1000)

    @property
    def PAUSE_AFTER_FAILURES(self) -> int | None:
        """R36: a schedule pauses itself after this many of its runs in a row failed or were
        lost, unless its own ``pause_after_failures`` says otherwise (0: never). ``None``
        (the default): no schedule pauses but by its own bound."""
        if self._get("PAUSE_AFTER_FAILURES", None) is None:
            return None
        return self._int("PAUSE_AFTER_FAILURES", 0, low=1, high=MAX_PAUSE_AFTER_FAILURES)

    @property
    def RESULT_RECONCILE(self) -> bool:
        """Reconcile unreported runs from django-celery-results (R13) when it is installed."""
        return self._bool("RESULT_RECONCILE", True)

    @property
    def LISTEN_NOTIFY(self) -> bool:
        """On PostgreSQL, wake beat at once when a schedule changes (LISTEN/NOTIFY)."""
        return self._bool("LISTEN_NOTIFY", True)

    @property
    def BROKER_WAKE(self) -> bool:
        """Elsewhere (MariaDB/MySQL, SQLite), wake beat at once when a schedule changes with
        a message on the Celery broker (``durablebeat.wakeup``)."""
        return self._bool("BROKER_WAKE", True)

    @property
    def LISTEN_DATABASE(self) -> str:
        """The database alias beat LISTENs on; empty: durablebeat's own (``db.alias()``,
        where the router sends it). Behind a pooler in transaction mode, an alias that
        reaches PostgreSQL directly (R31)."""
        value = self._get("LISTEN_DATABASE", "")
        if value is None or value == "":
            return ""
        if not isinstance(value, str) or value not in django_settings.DATABASES:
            raise InvalidSetting(
                f"DURABLEBEAT_LISTEN_DATABASE must name a database in DATABASES, got {value!r}"
            )
        return value

    @property
    def EXTERNAL_TASKS(self) -> tuple[str, ...]:
        """Task names (or ``fnmatch`` patterns, ``"billing.*"``) served by another codebase:
        every write of a schedule (the API, the admin, ``save()``) takes a name it matches
        without the writing process's Celery app having registered it (R29). Any other
        unknown name is refused there as a likely typo."""
        value = self._get("EXTERNAL_TASKS", ())
        if value is None:
            return ()
        if isinstance(value, str) or not isinstance(value, list | tuple):
            raise InvalidSetting(
                f"DURABLEBEAT_EXTERNAL_TASKS must be a list of task names or patterns, "
                f"got {value!r:.80}"
            )
        for item in value:
            # a task name is one line of text (``validation.line_error`` on a row's task)
            if not isinstance(item, str) or not item or not item.isprintable():
                raise InvalidSetting(
                    "DURABLEBEAT_EXTERNAL_TASKS must be a list of task names or patterns, each one "
                    f"line of text, got {item!r:.80}"
                )
        return tuple(value)

    # --- operations ---

    @property
    def CHECK_LOOKBACK(self) -> dt.timedelta:
        """``check`` reports runs lost within this look-back (R17)."""
        return self._duration("CHECK_LOOKBACK", 24 * 3600, low_open=True)

    @property
    def UNRESOLVED_AFTER(self) -> dt.timedelta:
        """``check`` flags a published or started run with no news for this long (R17);
        a started run with a hard time limit is flagged past limit + margin + gc interval."""
        return self._duration("UNRESOLVED_AFTER", 3600, low_open=True)

    @property
    def METRICS_TOKEN(self) -> str:
        """When set, the metrics view wants ``Authorization: Bearer <token>``."""
        value = self._get("METRICS_TOKEN", "")
        if value is None:
            return ""
        # one printable line, as ``validation.line_error`` asks of a row's text
        if not isinstance(value, str) or not value.isprintable():
            raise InvalidSetting(
                f"DURABLEBEAT_METRICS_TOKEN must be one line of text, got {value!r}"
            )
        return value

    @property
    def METRICS_PUBLIC(self) -> bool:
        """With no ``METRICS_TOKEN``, the metrics view answers anyone only when this is True;
        otherwise it refuses every request (R21). ``durablebeat.W002`` when True and
        ``DEBUG`` is off."""
        return self._bool("METRICS_PUBLIC", False)

    @property
    def MAX_MESSAGE_BYTES(self) -> int:
        """Largest a schedule's args, kwargs and headers may be together, as JSON (R21)."""
        return self._int(
            "MAX_MESSAGE_BYTES",
            DEFAULT_MAX_MESSAGE_BYTES,
            low=MIN_MAX_MESSAGE_BYTES,
            high=MAX_MAX_MESSAGE_BYTES,
        )


settings = Settings()


def setting_names() -> list[str]:
    """Every setting ``conf`` knows, without its ``DURABLEBEAT_`` prefix."""
    return [name for name in dir(Settings) if name.isupper()]


def invalid_settings() -> dict[str, str]:
    """{``DURABLEBEAT_*`` name: why it is invalid} for every setting ``conf`` refuses: the
    system check ``durablebeat.E002``, and ``check``'s ``bad_setting`` for the processes
    (gunicorn, the command) where system checks do not run. Generic over ``Settings``: a
    property added there is read at once (R21)."""
    bad = {}
    for name in setting_names():
        try:
            getattr(settings, name)
        except InvalidSetting as exc:
            bad[f"DURABLEBEAT_{name}"] = str(exc)
    return bad
