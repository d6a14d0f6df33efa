"""This process's offset to the database server's clock (R26), measured the way NTP does.

The database is the one place every beat, worker, ``check`` and admin process sees, so its
clock is the one clock: a reading is ``t0`` (this host), the server's clock, ``t1`` (this
host); the offset is ``server - (t0 + t1) / 2`` (``core.clock.sample``), and of a few
readings the one with the shortest round trip is kept (one is enough when its round trip is
within ``QUICK`` of the quickest seen). PostgreSQL is asked for
``clock_timestamp()`` (``now()`` is the transaction's start, not the clock), MariaDB and
MySQL for ``UTC_TIMESTAMP(6)``; SQLite is one host: its offset is zero, with no query.

Who measures: beat at its boot and with each boot heartbeat; a worker with each liveness
write (the first when it is ready), and its pool processes at their first task and when
their last reading is older than ``REFRESH_AFTER``; ``check``, ``status`` and ``report``
once per call; the admin and the metrics view when the last reading is older than
``REFRESH_AFTER``. A reading that fails keeps the last offset (a beat through an outage,
R5) and never raises: it is logged.
"""

from __future__ import annotations

import datetime as dt
import functools
import logging
import threading
import time
from collections.abc import Callable
from contextlib import nullcontext
from typing import Any

from django.db import connections, transaction

from . import db
from .core import clock

logger = logging.getLogger("durablebeat")

#: readings per measurement at most; the one with the shortest round trip is kept
SAMPLES = 3
#: a reading whose round trip is within this of the quickest this process has seen is kept
#: at once, without the others (a heartbeat's measurement is then one query, not three)
QUICK = dt.timedelta(milliseconds=1)
#: seconds after which a lazy ``refresh`` measures again (a reading or a failed try)
REFRESH_AFTER = 60.0
#: a wall clock that moved this many seconds more (or less) than ``elapsed`` between two
#: looks has jumped: beat measures again at once (``watch_jumps``)
JUMP = 1.0
#: seconds on a clock that never steps and, unlike ``time.monotonic`` on Linux, goes on
#: counting while the host is suspended: a laptop or VM resumed after ten minutes has a wall
#: clock ten minutes further on, rightly, and ``watch_jumps`` must not read that as a step
elapsed: Callable[[], float] = (
    functools.partial(time.clock_gettime, time.CLOCK_BOOTTIME)
    if hasattr(time, "CLOCK_BOOTTIME")
    else time.monotonic
)
#: the query that reads the server's clock, per Django vendor (None: one host, no query)
QUERIES = {
    "postgresql": "SELECT clock_timestamp()",
    "mysql": "SELECT UTC_TIMESTAMP(6)",
}

_lock = threading.Lock()
_last: clock.Sample | None = None
_tried_at: float | None = None  # time.monotonic() of the last try, successful or not
_looked: tuple[dt.datetime, float] | None = None  # watch_jumps: (local wall, elapsed())
_failing = False  # the last reading failed (its warning is said once)
_quickest: dt.timedelta | None = None  # the shortest round trip of any reading so far


def _aware(value: Any) -> dt.datetime:
    """The server's answer as an aware UTC instant (MariaDB's ``UTC_TIMESTAMP`` is naive)."""
    if not isinstance(value, dt.datetime):
        raise TypeError(f"the database's clock read as {value!r}, not a datetime")
    return value.replace(tzinfo=dt.UTC) if value.tzinfo is None else value


def _read(using: str | None, samples: int) -> clock.Sample | None:
    global _quickest
    conn = connections[using or db.alias()]
    query = QUERIES.get(conn.vendor)
    if query is None:
        return clock.Sample(clock.ZERO, clock.ZERO)
    readings: list[clock.Sample] = []
    # Inside a caller's transaction, a savepoint: a failed reading must not break it.
    guard = transaction.atomic(using=conn.alias) if conn.in_atomic_block else nullcontext()
    with guard, conn.cursor() as cursor:
        while len(readings) < max(1, samples):
            # The round trip on the monotonic clock: a wall clock slewed or stepped during
            # the reading must not read as a long (or negative) trip.
            sent, started = clock.local_now(), time.monotonic()
            cursor.execute(query)
            row = cursor.fetchone()
            received = sent + dt.timedelta(seconds=time.monotonic() - started)
            reading = clock.sample(sent, _aware(row[0] if row else None), received)
            readings.append(reading)
            if _quickest is not None and clock.ZERO <= reading.round_trip <= _quickest + QUICK:
                break  # as good as this host gets: no need for more
    kept = clock.best(readings)
    if kept is not None and (_quickest is None or kept.round_trip < _quickest):
        _quickest = kept.round_trip
    return kept


def measure(using: str | None = None, samples: int = SAMPLES) -> clock.Sample | None:
    """Read the database's clock and set this process's offset to it; the reading, or None
    when it failed (the last offset is kept, R5). Never raises: a heartbeat or a page that
    measures goes on whatever the database answers."""
    global _last, _tried_at, _failing
    _tried_at = time.monotonic()
    try:
        reading = _read(using, samples)
    except Exception as exc:  # a reading is never worth a crash: the last offset holds
        # Once per run of failures: through an outage the heartbeat's own warning repeats.
        logger.log(
            logging.DEBUG if _failing else logging.WARNING,
            "could not read the database's clock, keeping the offset %+.3f s: %r",
            clock.offset().total_seconds(),
            exc,
            extra={"event": "clock_unmeasured"},
        )
        _failing = True
        return None
    if reading is None:
        return None
    with _lock:
        previous = clock.offset()
        clock.set_offset(reading.offset)
        _last, _failing = reading, False
    if abs((reading.offset - previous).total_seconds()) >= JUMP:
        logger.info(
            "this host's clock is %+.3f s off the database's (round trip %.1f ms)",
            -reading.offset.total_seconds(),
            reading.round_trip.total_seconds() * 1000,
            extra={"event": "clock_offset", "offset": reading.offset.total_seconds()},
        )
    return reading


def sync(using: str | None = None) -> float | None:
    """Measure, and return what a boot or liveness row records: the last offset known in
    seconds (the database's clock minus this host's), None when none was ever measured."""
    measure(using)
    return offset_seconds()


def offset_seconds() -> float | None:
    return None if _last is None else _last.offset.total_seconds()


def refresh(max_age: float = REFRESH_AFTER, using: str | None = None) -> None:
    """Measure when the last try is older than ``max_age`` seconds (or there was none):
    for processes without a heartbeat of their own (the admin, a pool process)."""
    tried = _tried_at
    if tried is None or time.monotonic() - tried >= max_age:
        measure(using)


def watch_jumps(using: str | None = None) -> bool:
    """When this host's wall clock jumped since the last look (it moved unlike ``elapsed``,
    which a suspend does not stop), take the jump out of the offset and measure again at
    once: a clock stepped forward or back while beat runs moves no "now" (R26). One look
    per tick, no query unless it jumped."""
    global _looked
    wall, since_boot = clock.local_now(), elapsed()
    last, _looked = _looked, (wall, since_boot)
    if last is None or _last is None:
        return False
    drift = (wall - last[0]).total_seconds() - (since_boot - last[1])
    if abs(drift) < JUMP:
        return False
    logger.warning(
        "this host's clock jumped %+.1f s; measuring the database's clock again",
        drift,
        extra={"event": "clock_jump", "jump": drift},
    )
    # Undo the jump first, with no IO: should the reading fail (the database is down),
    # "now" still moves on as ``elapsed`` did (R5).
    with _lock:
        clock.set_offset(clock.offset() - dt.timedelta(seconds=drift))
    measure(using)
    return True


def forget() -> None:
    """Back to no measurement and a zero offset (tests; a process that starts over)."""
    global _last, _tried_at, _looked, _failing, _quickest
    with _lock:
        clock.set_offset(clock.ZERO)
        _last, _tried_at, _looked, _failing, _quickest = None, None, None, False, None
