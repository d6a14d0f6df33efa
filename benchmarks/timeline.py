"""What the admin's timeline costs at 100,000 schedules and a week of runs on
PostgreSQL: nothing is asserted, the figures are printed.

    .venv/bin/python -m benchmarks.timeline                   # 100,000 schedules, 5 repeats
    .venv/bin/python -m benchmarks.timeline -n 10000 --repeats 3

The database looks like one schedule per tenant: N hourly schedules, of which the first
``--with-runs`` (default 2,000) have a week of hourly runs (some failed, some stuck and
skipping), plus 20 "dense" schedules firing every minute for the week (10,080 runs each,
drawn as buckets), and a deploy every 3 hours (56 boots). Each page is fetched through
Django's test client as a logged-in superuser, ``--repeats`` times; the median and the
spread are printed, then ``EXPLAIN ANALYZE`` of every query the page sends to the runs
table, to show that it reads through the (schedule, slot) index and never scans all runs.
It uses its own database, ``durablebeat_timeline`` (override: ``BENCH_DATABASE_URL``).
"""

from __future__ import annotations

import argparse
import datetime as dt
import io
import os
import statistics
import time
import uuid
from typing import Any

os.environ.setdefault(
    "BENCH_DATABASE_URL", "postgres://postgres@127.0.0.1:5432/durablebeat_timeline"
)

from benchmarks import bench

DENSE = 20
WEEK = dt.timedelta(days=7)
H = dt.timedelta(hours=1)
MIN = dt.timedelta(minutes=1)


def _copy(table: str, columns: tuple[str, ...], rows: Any) -> int:
    """COPY rows (tuples of text) into ``table``: a week of runs in seconds, not minutes."""
    from django.db import connection

    buffer, n = io.StringIO(), 0
    for row in rows:
        buffer.write("\t".join(row) + "\n")
        n += 1
    buffer.seek(0)
    with connection.cursor() as cur:
        raw = cur.cursor  # psycopg's own cursor
        with raw.copy(f"COPY {table} ({', '.join(columns)}) FROM STDIN") as copy:
            copy.write(buffer.read())
    return n


def populate(n: int, with_runs: int, now: dt.datetime) -> dict[str, Any]:
    from django.db import connection

    from durablebeat.models import Schedule

    with connection.cursor() as cur:
        cur.execute(
            "TRUNCATE durablebeat_run, durablebeat_missedslots, durablebeat_boot, "
            "durablebeat_schedule RESTART IDENTITY CASCADE"
        )
    start = time.perf_counter()

    def row(i: int) -> Schedule:
        failing, stuck = i < with_runs and i % 50 == 7, i < with_runs and i % 100 == 13
        return Schedule(
            name=f"tenant-{i:06d}",
            task=bench.TASK,
            kind="interval",
            every=H,
            next_fire_at=now + H,
            last_outcome="failed" if failing else "succeeded",
            stuck_since=now - 30 * H if stuck else None,
            stuck_reason="previous run still started" if stuck else "",
        )

    Schedule.objects.bulk_create((row(i) for i in range(n)), batch_size=5000)
    Schedule.objects.bulk_create(
        (
            Schedule(name=f"dense-{i:02d}", task=bench.TASK, every=MIN, next_fire_at=now + MIN)
            for i in range(DENSE)
        ),
        batch_size=5000,
    )
    boots = [(uuid.uuid4(), now - WEEK + k * 3 * H + 5 * MIN) for k in range(56)]
    _copy(
        "durablebeat_boot",
        ("id", "hostname", "pid", "started_at", "heartbeat_at", "stopped_at", "version"),
        (
            (str(b), f"web-{k % 3}", str(1000 + k), at.isoformat(), at.isoformat(), "\\N", "")
            for k, (b, at) in enumerate(boots)
        ),
    )
    ids = dict(Schedule.objects.values_list("name", "pk"))
    top = now.replace(minute=0, second=0, microsecond=0)

    def boot_at(at: dt.datetime) -> str:
        k = max(0, min(len(boots) - 1, int((at - boots[0][1]) / (3 * H))))
        return str(boots[k][0])

    def runs() -> Any:
        for i in range(with_runs):
            pk = str(ids[f"tenant-{i:06d}"])
            for h in range(1, 7 * 24 + 1):
                slot = top - h * H
                state = "failed" if i % 50 == 7 and h < 12 else "succeeded"
                if i % 100 == 13 and h < 30:
                    state = "skipped"
                yield _run(pk, slot, boot_at(slot), state)
        for d in range(DENSE):
            pk = str(ids[f"dense-{d:02d}"])
            for m in range(1, 7 * 24 * 60 + 1):
                slot = top - m * MIN
                yield _run(pk, slot, boot_at(slot), "failed" if m % 997 == 0 else "succeeded")

    written = _copy("durablebeat_run", RUN_COLUMNS, runs())
    with connection.cursor() as cur:
        cur.execute("VACUUM ANALYZE")
    took = time.perf_counter() - start
    print(f"populated {n:,} schedules + {DENSE} dense, {written:,} runs in {took:.0f} s")
    return {"dense": ids["dense-00"]}


RUN_COLUMNS = (
    "schedule_id",
    "slot",
    "boot_id",
    "reason",
    "state",
    "task_id",
    "claimed_at",
    "published_at",
    "publish_attempts",
    "started_at",
    "finished_at",
    "worker",
    "soft_time_limit_exceeded",
    "detail",
    "error",
)


def _run(schedule: str, slot: dt.datetime, boot: str, state: str) -> tuple[str, ...]:
    fired = (slot + dt.timedelta(seconds=1)).isoformat()
    done = (slot + dt.timedelta(seconds=31)).isoformat()
    skipped = state == "skipped"
    return (
        schedule,
        slot.isoformat(),
        boot,
        "scheduled",
        state,
        "\\N" if skipped else str(uuid.uuid4()),
        fired,
        "\\N" if skipped else fired,
        "0" if skipped else "1",
        "\\N" if skipped else fired,
        "\\N" if skipped else done,
        "",
        "f",
        "previous run still started" if skipped else "",
        "",
    )


def client() -> Any:
    from django.contrib.auth.models import User
    from django.test import Client
    from django.test.utils import setup_test_environment

    setup_test_environment()  # "testserver" is an allowed host; DEBUG stays off
    user, _ = User.objects.get_or_create(
        username="bench", defaults={"is_staff": True, "is_superuser": True}
    )
    c = Client()
    c.force_login(user)
    return c


def measure(c: Any, url: str, repeats: int) -> tuple[float, float, float, int]:
    times, size = [], 0
    for _ in range(repeats):
        start = time.perf_counter()
        response = c.get(url)
        times.append(time.perf_counter() - start)
        assert response.status_code == 200, (url, response.status_code)
        size = len(response.content)
    return statistics.median(times), min(times), max(times), size


def explain(c: Any, url: str) -> None:
    """``EXPLAIN ANALYZE`` of the page's queries on the runs table, one line per kind of
    query: how many the page sent, the scans of the first, the slowest execution time."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    with CaptureQueriesContext(connection) as captured:
        c.get(url)
    kinds: dict[str, list[str]] = {}
    for query in captured.captured_queries:
        if 'FROM "durablebeat_run"' in query["sql"]:
            kinds.setdefault(query["sql"][:60], []).append(query["sql"])
    for queries in kinds.values():
        scans, slowest = [], 0.0
        for sql in queries:
            with connection.cursor() as cur:
                cur.execute("EXPLAIN (ANALYZE, BUFFERS) " + sql)
                plan = [line.strip() for (line,) in cur.fetchall()]
            if not scans:
                scans = [line.split("  (")[0] for line in plan if "Scan" in line]
            ms = [float(line.split()[-2]) for line in plan if line.startswith("Execution Time")]
            slowest = max([slowest, *ms])
        print(f"    {len(queries)} x {queries[0][:90]}...")
        print(f"      {'; '.join(scans)}; slowest {slowest:.1f} ms")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("-n", type=int, default=100_000)
    parser.add_argument("--with-runs", type=int, default=2_000)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--no-populate", action="store_true", help="reuse the database")
    args = parser.parse_args()
    bench.setup()
    from durablebeat.models import Schedule

    now = bench.now()
    if args.no_populate:
        dense = Schedule.objects.get(name="dense-00").pk
    else:
        dense = populate(args.n, args.with_runs, now)["dense"]
    c = client()
    base = "/admin/durablebeat/schedule/timeline/"
    pages = {
        "default: first 50 lanes (20 dense, 30 hourly), 24 h": base,
        "the same 50 lanes, 7 d (5,040 marks, 3,360 buckets)": base + "?window=7d",
        "filtered: last outcome failed (40), 7 d": base + "?last_outcome__exact=failed&window=7d",
        "filtered: stuck (20), 24 h": base + "?stuck=yes",
        "search, page 3 of the matches": base + "?q=tenant-01&page=3",
        "search: the 20 dense lanes, 7 d (201,600 runs)": base + "?q=dense&window=7d",
        "search: the 20 dense lanes, 1 h (60 marks each)": base + "?q=dense&window=1h",
        "as a table, 7 d": base + "?window=7d&as=table",
        "fires per deploy (report), 24 h": base + "?show=deploys",
        "fires per deploy (report), 7 d": base + "?show=deploys&window=7d",
        "a dense schedule's page (7 d lane + charts)": f"{base[:-9]}{dense}/change/",
    }
    print(f"\n| page | median s [min..max], {args.repeats} runs | HTML |")
    print("|---|---|---|")
    for name, url in pages.items():
        median, low, high, size = measure(c, url, args.repeats)
        print(f"| {name} | {median:.3f} [{low:.3f}..{high:.3f}] | {size / 1024:.0f} KiB |")
    print("\nEXPLAIN ANALYZE of the runs queries:")
    for name in (
        "default: first 50 lanes (20 dense, 30 hourly), 24 h",
        "search: the 20 dense lanes, 7 d (201,600 runs)",
    ):
        print(f"  {name}")
        explain(c, pages[name])


if __name__ == "__main__":
    main()
