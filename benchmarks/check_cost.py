"""What ``durablebeat check`` (and so the admin's health summary and the metrics scrape)
costs with N schedules stored: nothing is asserted, the figures are printed.

    .venv/bin/python -m benchmarks.check_cost -n 10000 100000

The schedules look like one per tenant: half hourly intervals, half a daily crontab at
08:00 in one of four time zones, all with a recent success except one in a hundred that
has not succeeded for a week (so that ``no_success`` has something to find). It uses its
own database, ``durablebeat_check`` (override: ``BENCH_DATABASE_URL``).
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import statistics
import time

os.environ.setdefault("BENCH_DATABASE_URL", "postgres://postgres@127.0.0.1:5432/durablebeat_check")

from benchmarks import bench

ZONES = ("UTC", "Europe/Berlin", "America/New_York", "Asia/Tokyo")


def populate(n: int, now: dt.datetime) -> None:
    from django.db import connection

    from durablebeat.models import Schedule

    with connection.cursor() as cur:
        cur.execute("TRUNCATE durablebeat_run, durablebeat_schedule RESTART IDENTITY CASCADE")
    week, hour = dt.timedelta(days=7), dt.timedelta(hours=1)

    def row(i: int) -> Schedule:
        failing = i % 100 == 0
        if i % 2:
            timing = {"kind": "interval", "every": hour}
            done = now - (week if failing else hour / 2)
        else:
            timing = {"kind": "crontab", "minute": "0", "hour": "8", "timezone": ZONES[i % 4]}
            done = now - (week if failing else hour * 12)
        return Schedule(
            name=f"tenant-{i:06d}",
            task=bench.TASK,
            next_fire_at=now + hour,
            last_completed_at=done,
            last_outcome="succeeded",
            **timing,
        )

    Schedule.objects.bulk_create((row(i) for i in range(n)), batch_size=5000)
    Schedule.objects.update(created_at=now - 4 * week)
    with connection.cursor() as cur:
        cur.execute("VACUUM ANALYZE durablebeat_schedule")


def measure(fn, repeats: int) -> tuple[float, float, float, int]:
    times, found = [], 0
    for _ in range(repeats):
        start = time.perf_counter()
        found = len(fn())
        times.append(time.perf_counter() - start)
    return statistics.median(times), min(times), max(times), found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("-n", type=int, nargs="+", default=[10_000, 100_000])
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    bench.setup()
    from durablebeat.ops import health

    now = bench.now()
    print("| N | no_success: s [min..max] | findings | whole check: s [min..max] |")
    print("|---|---|---|---|")
    for n in args.n:
        populate(n, now)
        ns = measure(lambda: health.find_no_success(now), args.repeats)
        whole = measure(lambda: health.check(now), args.repeats)
        print(
            f"| {n:,} | {ns[0]:.2f} [{ns[1]:.2f}..{ns[2]:.2f}] | {ns[3]} "
            f"| {whole[0]:.2f} [{whole[1]:.2f}..{whole[2]:.2f}] |",
            flush=True,
        )


if __name__ == "__main__":
    main()
