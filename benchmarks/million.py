"""A schedule per customer at a million (issue 36, R33): the per-customer digest of
docs/from-code.md (a daily crontab at the customer's hour in one of ten zones,
``catch_up``, kwargs naming the customer, a queue) written through
``durablebeat.api.add_schedules``, and a beat beside it. Nothing is asserted; the figures
are printed.

    .venv/bin/python -m benchmarks.million -n 10000 1000000

For each N, in a database of its own that it creates and drops (``durablebeat_million``
plus ``DURABLEBEAT_TEST_SUFFIX``, on ``BENCH_DATABASE_URL``'s server):

- the write: one ``add_schedules`` call fed by a generator (it streams, R33), its seconds,
  the caller's peak RSS growth, the table's rows and bytes, and the rows left without a
  first fire (the writer computes it: 0);
- while it writes, a beat (an in-process engine in a process of its own, as ``celery
  beat`` runs it, its publisher a no-op) fires a schedule due every 2 s: its lateness from
  the ledger (``published_at`` - slot);
- then ``--unfilled`` rows (default 200,000, at most N) set without a next fire, as raw
  SQL leaves them, and the same beat for ``--seconds``: the 2-s schedule's lateness while
  beat fills them after its due work, and the rows it filled.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import resource
import signal
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

ZONES = (
    "UTC",
    "Europe/London",
    "Europe/Berlin",
    "Europe/Moscow",
    "Asia/Kolkata",
    "Asia/Tokyo",
    "Australia/Sydney",
    "America/Sao_Paulo",
    "America/New_York",
    "America/Los_Angeles",
)
TASK = "bench.noop"
TICKER = "every-2s"


def database_url() -> str:
    server = os.environ.get("BENCH_DATABASE_URL", "postgres://postgres@127.0.0.1:5432/x")
    name = "durablebeat_million" + os.environ.get("DURABLEBEAT_TEST_SUFFIX", "")
    return server.rsplit("/", 1)[0] + "/" + name


def entries(n: int) -> Iterator[tuple[str, dict[str, Any]]]:
    """The digest of docs/from-code.md, one per customer, as a generator."""
    from celery.schedules import crontab

    # one crontab object per hour, shared (building one per entry is the caller's cost, a
    # third of the call's time at a million: not what is measured here)
    hours = [crontab(minute=0, hour=h) for h in range(24)]
    for i in range(n):
        yield (
            f"digest-{i}",
            {
                "task": TASK,
                "schedule": hours[(6 + i) % 24],
                "timezone": ZONES[i % len(ZONES)],
                "kwargs": {"customer_id": i},
                "options": {"queue": "mail", "durablebeat": {"catch_up": True}},
            },
        )


def peak_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def beat() -> None:
    """The beat: an engine ticking on the real clock until it is told to stop (SIGTERM)."""
    _django()
    import logging

    from durablebeat.beat.engine import Engine
    from durablebeat.core import clock

    logging.getLogger("durablebeat").setLevel(logging.ERROR)

    stop = False

    def stopping(*_: Any) -> None:
        nonlocal stop
        stop = True

    signal.signal(signal.SIGTERM, stopping)
    engine = Engine(code_entries=[], publish=lambda claim: None)
    print("ready", flush=True)
    while not stop:
        now = clock.now()
        delay = engine.tick(now)
        left = delay - (clock.now() - now).total_seconds()
        if left > 0:
            time.sleep(min(left, 0.5))
    engine.close(clock.now())


def _django() -> None:
    os.environ["BENCH_DATABASE_URL"] = database_url()
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "benchmarks.settings")
    import django

    django.setup()


def start_beat() -> subprocess.Popen[str]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "benchmarks.million", "--beat"],
        stdout=subprocess.PIPE,
        text=True,
        env=os.environ | {"BENCH_DATABASE_URL": database_url()},
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()  # the beat is up: its boot is registered
    assert line.strip() == "ready", line
    return proc


def stop_beat(proc: subprocess.Popen[str]) -> None:
    proc.send_signal(signal.SIGTERM)
    proc.wait(timeout=30)


def lateness(since: dt.datetime, until: dt.datetime) -> str:
    from durablebeat.models import Run

    late = [
        (published - slot).total_seconds()
        for slot, published in Run.objects.filter(
            schedule__name=TICKER, slot__gte=since, slot__lte=until
        ).values_list("slot", "published_at")
        if published is not None
    ]
    if not late:
        return "no fire"
    late.sort()
    p95 = late[min(len(late) - 1, int(0.95 * len(late)))]
    return (
        f"{len(late)} fires, median {statistics.median(late) * 1000:.0f} ms, "
        f"p95 {p95 * 1000:.0f} ms, max {late[-1] * 1000:.0f} ms"
    )


def run(n: int, unfilled: int, seconds: float, profile: str | None = None) -> None:
    from django.db import connection

    from durablebeat import api
    from durablebeat.core import clock
    from durablebeat.models import Schedule

    api.add_schedule(TICKER, TASK, 2, options={"durablebeat": {"overlap": "allow"}})  # no worker
    Schedule.objects.filter(name=TICKER).update(next_fire_at=clock.now() + dt.timedelta(seconds=2))
    proc = start_beat()
    try:
        time.sleep(3)  # past its first fire
        rss, start, t0 = peak_rss_mib(), clock.now(), time.perf_counter()
        if profile:
            import cProfile

            with cProfile.Profile() as prof:
                written = api.add_schedules(entries(n))
            prof.dump_stats(profile)
        else:
            written = api.add_schedules(entries(n))
        took, end = time.perf_counter() - t0, clock.now()
        grown = peak_rss_mib() - rss
        time.sleep(2.5)
        with connection.cursor() as cur:
            cur.execute("SELECT pg_total_relation_size('durablebeat_schedule')")
            size = cur.fetchone()[0]
        unknown = Schedule.objects.filter(enabled=True, next_fire_at__isnull=True).count()
        print(f"\n## N = {n:,}\n")
        print(f"- add_schedules: {written.created:,} created in {took:.1f} s")
        print(f"  ({written.created / took:,.0f}/s), caller's peak RSS +{grown:.0f} MiB")
        print(f"- table: {Schedule.objects.count():,} rows, {size / 2**20:,.0f} MiB with indexes")
        print(f"- rows without a first fire after the write: {unknown:,}")
        print(f"- the 2-s schedule while they were written: {lateness(start, end)}")

        k = min(unfilled, n)
        if not k:  # --unfilled 0: the write alone
            return
        ids = Schedule.objects.filter(name__startswith="digest-").order_by("pk")
        last = ids.values_list("pk", flat=True)[k - 1]
        Schedule.objects.filter(name__startswith="digest-", pk__lte=last).update(next_fire_at=None)
        since = clock.now()
        time.sleep(seconds)
        until = clock.now()
        left = Schedule.objects.filter(enabled=True, next_fire_at__isnull=True).count()
        print(
            f"- {k:,} rows without a next fire (raw SQL): in {seconds:.0f} s beat filled "
            f"{k - left:,} ({(k - left) / seconds:,.0f}/s) after its due work; the 2-s "
            f"schedule meanwhile: {lateness(since, until)}"
        )
    finally:
        stop_beat(proc)
        print("beat stopped", file=sys.stderr, flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("-n", type=int, nargs="+", default=[10_000])
    parser.add_argument("--unfilled", type=int, default=200_000)
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--beat", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--profile", help="write a cProfile of the write to this file")
    args = parser.parse_args()
    if args.beat:
        beat()
        return
    import psycopg

    url = database_url()
    server, name = url.rsplit("/", 1)
    for n in args.n:
        with psycopg.connect(server + "/postgres", autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}"')
            conn.execute(f'CREATE DATABASE "{name}"')
        try:
            _django()
            from django.core.management import call_command
            from django.db import connection

            call_command("migrate", verbosity=0)
            run(n, args.unfilled, args.seconds, args.profile)
            connection.close()
            print("closed", file=sys.stderr, flush=True)
        finally:
            with psycopg.connect(server + "/postgres", autocommit=True) as conn:
                conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


if __name__ == "__main__":
    main()
