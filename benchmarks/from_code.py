"""What ``durablebeat.api.add_schedules`` costs for N schedules in one call (R29): created,
replaced with a new timing, and called again unchanged. Nothing is asserted; the figures
are printed (median of the repeats, [min..max]).

    .venv/bin/python -m benchmarks.from_code -n 10000

It uses the benchmark's database (``BENCH_DATABASE_URL``, default ``durablebeat_bench``)
and empties the schedule and run tables first. The entries are one digest per tenant: a
crontab in one of four time zones, kwargs naming the tenant, a queue.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from typing import Any

from benchmarks import bench

ZONES = ("UTC", "Europe/Berlin", "America/New_York", "Asia/Tokyo")


def entries(n: int, hour: int) -> dict[str, dict[str, Any]]:
    from celery.schedules import crontab

    return {
        f"digest-{i:06d}": {
            "task": bench.TASK,
            "schedule": crontab(minute=0, hour=hour),
            "timezone": ZONES[i % 4],
            "kwargs": {"tenant": i},
            "options": {"queue": "mail"},
        }
        for i in range(n)
    }


def empty() -> None:
    from django.db import connection

    with connection.cursor() as cur:
        if connection.vendor == "postgresql":
            cur.execute("TRUNCATE durablebeat_run, durablebeat_schedule RESTART IDENTITY CASCADE")
        else:
            cur.execute("DELETE FROM durablebeat_run")
            cur.execute("DELETE FROM durablebeat_schedule")


def timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    start = time.perf_counter()
    result = fn()
    return time.perf_counter() - start, result


def summary(values: list[float]) -> str:
    return f"{statistics.median(values):.2f} s [{min(values):.2f}..{max(values):.2f}]"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("-n", type=int, nargs="+", default=[10_000])
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    bench.setup()
    from durablebeat import api

    print("| N | created | replaced (new hour) | again, unchanged |")
    print("|---|---|---|---|")
    for n in args.n:
        first, moved = entries(n, 8), entries(n, 9)
        created: list[float] = []
        replaced: list[float] = []
        unchanged: list[float] = []
        for _ in range(args.repeats):
            empty()
            t, written = timed(lambda first=first: api.add_schedules(first))
            assert written.created == n, written
            created.append(t)
            t, written = timed(lambda moved=moved: api.add_schedules(moved))
            assert written.replaced == n, written
            replaced.append(t)
            t, written = timed(lambda moved=moved: api.add_schedules(moved))
            assert written.unchanged == n, written
            unchanged.append(t)
        print(f"| {n:,} | {summary(created)} | {summary(replaced)} | {summary(unchanged)} |")


if __name__ == "__main__":
    main()
