"""What pruning the ledger costs (R32, issue 31 item 1): nothing is asserted, figures printed.

    .venv/bin/python -m benchmarks.prune_cost --runs 1000000

Fills its own database (``durablebeat_prune``; override: ``BENCH_DATABASE_URL``) with
``--schedules`` schedules and ``--runs`` finished runs written with ``COPY`` in time order:
nine in ten spread over the year before the retention's cutoff, the rest within it. Then:

1. ``durablebeat prune --dry-run`` (the counts), timed;
2. beat's rounds (``beat.retention.RetentionRound``'s bounds: 500-row batches, at most 5,000
   rows or 0.2 s a round): the rows one round deletes and how long it holds;
3. ``durablebeat prune`` for the rest: rows a second;
4. a round with nothing left to delete over the rows kept (the steady state): its cost.
"""

from __future__ import annotations

import argparse
import datetime as dt
import io
import os
import statistics
import time
import uuid

os.environ.setdefault("BENCH_DATABASE_URL", "postgres://postgres@127.0.0.1:5432/durablebeat_prune")

from benchmarks import bench

COLUMNS = ("schedule_id", "slot", "reason", "state", "task_id", "claimed_at", "published_at")
COLUMNS += ("publish_attempts", "finished_at", "worker", "detail", "error", "failure")
COLUMNS += ("soft_time_limit_exceeded",)


def fill(schedules: int, runs: int, now: dt.datetime) -> None:
    from django.db import connection

    from durablebeat.models import Schedule

    with connection.cursor() as cur:
        cur.execute("TRUNCATE durablebeat_run, durablebeat_schedule RESTART IDENTITY CASCADE")
    Schedule.objects.bulk_create(
        (
            Schedule(
                name=f"tenant-{i:06d}",
                task=bench.TASK,
                kind="interval",
                every=dt.timedelta(hours=1),
            )
            for i in range(schedules)
        ),
        batch_size=5000,
    )
    ids = list(Schedule.objects.order_by("pk").values_list("pk", flat=True))
    start = now - dt.timedelta(days=395)
    step = (now - start) / runs
    buf = io.StringIO()
    with (
        connection.cursor() as cur,
        cur.cursor.copy(f"COPY durablebeat_run ({', '.join(COLUMNS)}) FROM STDIN") as copy,
    ):
        for i in range(runs):
            at = start + i * step
            slot = at.isoformat()
            buf.write(
                f"{ids[i % len(ids)]}\t{slot}\tscheduled\tsucceeded\t{uuid.uuid4()}\t{slot}\t"
                f"{slot}\t1\t{slot}\tw1\t\t\t\tf\n"
            )
            if i % 50_000 == 49_999:
                copy.write(buf.getvalue())
                buf = io.StringIO()
        copy.write(buf.getvalue())
    with connection.cursor() as cur:
        cur.execute("VACUUM ANALYZE durablebeat_run")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=1_000_000)
    parser.add_argument("--schedules", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=20)
    args = parser.parse_args()
    bench.setup()
    from django.core.management import call_command

    from durablebeat import conf
    from durablebeat.beat import retention
    from durablebeat.models import Run

    now = bench.now()
    started = time.perf_counter()
    fill(args.schedules, args.runs, now)
    print(f"filled {args.runs:,} runs in {time.perf_counter() - started:.1f} s", flush=True)
    keep = conf.settings.RETENTION
    assert keep is not None
    before = now - keep

    started = time.perf_counter()
    call_command("durablebeat", "prune", "--dry-run", stdout=io.StringIO())
    print(f"prune --dry-run: {time.perf_counter() - started:.2f} s", flush=True)

    rounds, rows = [], []
    every = retention.ROUND_EVERY.total_seconds()
    p = retention.Pass(before)
    for _ in range(args.rounds):
        t = time.perf_counter()
        ends = t + retention.ROUND_SECONDS
        rows.append(
            retention.prune_round(p, retention.ROUND_ROWS, lambda e=ends: time.perf_counter() < e)
        )
        rounds.append(time.perf_counter() - t)
    print(
        f"beat's rounds ({args.rounds}): {statistics.median(rows):,.0f} rows a round (median), "
        f"{statistics.median(rounds) * 1000:.0f} ms [max {max(rounds) * 1000:.0f} ms]; "
        f"one round per {every:.0f} s: {statistics.median(rows) * 60 / every:,.0f} rows a minute",
        flush=True,
    )

    left = Run.objects.filter(claimed_at__lt=before).count()
    started = time.perf_counter()
    call_command("durablebeat", "prune", "--batch-size", "5000", stdout=io.StringIO())
    took = time.perf_counter() - started
    print(f"prune --batch-size 5000: {left:,} runs in {took:.1f} s ({left / took:,.0f} a second)")

    idle = []
    for _ in range(args.rounds):
        t = time.perf_counter()
        retention.prune_round(retention.Pass(before), retention.ROUND_ROWS)
        idle.append(time.perf_counter() - t)
    print(
        f"a round with nothing to delete ({Run.objects.count():,} runs kept): "
        f"{statistics.median(idle) * 1000:.1f} ms [max {max(idle) * 1000:.1f} ms]"
    )


if __name__ == "__main__":
    main()
