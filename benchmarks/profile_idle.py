"""Where an idle tick's CPU and transactions go: N stored schedules, nothing due for a
month, ``Engine.tick`` driven in this process as beat drives it when a change wakes it
(``woken_on_change``), each tick one heartbeat interval after the last.

    .venv/bin/python -m benchmarks.profile_idle -n 10000 [--ticks 200] [--top 25]

Prints the CPU time and the database transactions (``pg_stat_database.xact_commit`` of
the benchmark database, this process alone on it) per tick, what that makes per minute of
a beat that sleeps a heartbeat between ticks, then the functions with the most cumulative
time under cProfile (CPU time, not wall). Uses the benchmark's database (``benchmarks/README.md``).
"""

from __future__ import annotations

import argparse
import cProfile
import datetime as dt
import pstats
import time
import uuid
from typing import Any

from benchmarks.bench import populate, setup


def _commits() -> int:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_stat_clear_snapshot()")
        cursor.execute(
            "SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()"
        )
        row = cursor.fetchone()
    return int(row[0]) if row else 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("-n", type=int, default=10000)
    parser.add_argument("--ticks", type=int, default=200)
    parser.add_argument("--top", type=int, default=25)
    parser.add_argument("--no-populate", action="store_true", help="the database as it is")
    args = parser.parse_args()
    setup()
    from durablebeat import conf, dbclock
    from durablebeat.beat.engine import Engine
    from durablebeat.beat.hooks import default_hooks

    if not args.no_populate:
        populate(args.n)
    engine = Engine(
        code_entries=[],
        publish=lambda claim: None,
        hooks=default_hooks(),
        boot_id=uuid.uuid4(),
        sync_clock=dbclock.sync,
    )
    step = conf.settings.HEARTBEAT_INTERVAL
    at = dt.datetime.now(dt.UTC)
    engine.tick(at, True)  # boot
    sleeps = []

    def ticks(count: int) -> None:
        nonlocal at
        for _ in range(count):
            at += step
            sleeps.append(engine.tick(at, True))

    ticks(20)  # warm: every hook has run once
    time.sleep(1.0)  # the statistics collector catches up
    before, cpu = _commits(), time.process_time()
    ticks(args.ticks)
    cpu = time.process_time() - cpu
    time.sleep(1.0)
    commits = _commits() - before - 2  # this measurement's own two snapshots' statements
    per_minute = 60 / step.total_seconds()
    print(f"{args.ticks} idle ticks, one per {step.total_seconds():.0f} s (heartbeat interval)")
    per_tick = cpu / args.ticks
    print(f"  CPU per tick {per_tick * 1000:.2f} ms -> {per_tick * per_minute:.4f} CPU-s/min")
    print(
        f"  transactions per tick {commits / args.ticks:.2f} -> "
        f"{commits / args.ticks / step.total_seconds():.3f}/s"
    )
    print(f"  sleep returned: min {min(sleeps):.1f} s, max {max(sleeps):.1f} s")
    profile = cProfile.Profile(time.process_time)  # CPU, not the waits on the database
    profile.enable()
    ticks(args.ticks)
    profile.disable()
    stats: Any = pstats.Stats(profile)
    stats.sort_stats("cumulative").print_stats(args.top)


if __name__ == "__main__":
    main()
