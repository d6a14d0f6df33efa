"""A jittered top-of-the-minute burst (R35), through the real ``celery beat`` process: N
crontabs made by ``durablebeat.api`` at the same minute with a jitter, and how their
messages come out. Nothing is asserted; the figures are printed.

    .venv/bin/python -m benchmarks.jitter_burst -n 10000 --jitter 60

Prints, per second after the slot, how many messages beat sent (from the runs' publish
times, and the queue read back for duplicates): the busiest second against the mean, the
earliest and latest delay, how long after its own instant each went, duplicate and lost
slots; beat's CPU over the jitter window and
then idle (nothing due until the same minute tomorrow). Uses the benchmark's database and
Redis db (``benchmarks.bench``); empties their schedules, runs and queue first.
"""

from __future__ import annotations

import argparse
import collections
import datetime as dt
import json
import time

from benchmarks import bench


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("-n", type=int, default=10_000)
    parser.add_argument("--jitter", type=float, default=60.0, help="seconds")
    parser.add_argument("--idle-window", type=float, default=60.0)
    args = parser.parse_args()
    r = bench.setup()
    from celery.schedules import crontab

    from durablebeat import api
    from durablebeat.core import jitter, timing
    from durablebeat.models import Run

    bench.populate(0)
    r.flushdb()
    # the slot: a whole minute at least 90 s ahead (time to write the rows and boot beat)
    slot = (bench.now() + dt.timedelta(seconds=150)).replace(second=0, microsecond=0)
    options = {"durablebeat": {"jitter": args.jitter, "overlap": "allow"}}
    entries = {
        f"digest-{i:06d}": {
            "task": bench.TASK,
            "schedule": crontab(minute=slot.minute, hour=slot.hour),
            "kwargs": {"customer": i},
            "options": options,
        }
        for i in range(args.n)
    }
    began = time.monotonic()
    api.add_schedules(entries)
    print(
        f"{args.n:,} crontabs at {slot:%H:%M} UTC, jitter {args.jitter:g} s, "
        f"written in {time.monotonic() - began:.1f} s"
    )
    beat = bench.Beat("jitter-burst")
    try:
        lead = (slot - bench.now()).total_seconds()
        bench.wait_for(lambda: bench.now() >= slot, lead + 5, poll=0.2)
        cpu_before = beat.cpu_seconds()
        window = args.jitter + 30
        bench.wait_for(lambda: r.llen(bench.QUEUE) >= args.n, window, poll=0.2)
        cpu_burst = beat.cpu_seconds() - cpu_before
        time.sleep(2)  # anything beyond N would be a duplicate: give it a moment to show
        sent = collections.Counter()
        for raw in r.lrange(bench.QUEUE, 0, -1):
            headers = json.loads(raw)["headers"]
            sent[(headers["durablebeat_schedule"], headers["durablebeat_slot"])] += 1
        published = list(
            Run.objects.filter(slot=slot, published_at__isnull=False).values_list(
                "schedule__name", "published_at"
            )
        )
        delays = sorted((at - slot).total_seconds() for _, at in published)
        spec, span = (
            timing.Crontab(minute=str(slot.minute), hour=str(slot.hour)),
            dt.timedelta(seconds=args.jitter),
        )
        late = sorted(
            (at - jitter.instant(name, spec, slot, span)).total_seconds() for name, at in published
        )
        per_second = collections.Counter(int(d // 1) for d in delays)
        mean = len(delays) / max(1, int(args.jitter))
        busiest = per_second.most_common(1)[0] if per_second else (0, 0)
        print(
            f"messages in the queue: {sum(sent.values()):,} for {len(sent):,} slots "
            f"(duplicates {sum(c - 1 for c in sent.values())}, lost {args.n - len(sent)})"
        )
        if delays:
            print(
                f"sent after the slot: first {delays[0]:.3f} s, last {delays[-1]:.3f} s; "
                f"early (before the slot): {sum(d < 0 for d in delays)}; "
                f"at or past the jitter: {sum(d >= args.jitter for d in delays)}"
            )
            print(
                f"per second: mean {mean:.0f}, busiest second {busiest[0]} with {busiest[1]} "
                f"({busiest[1] / mean:.2f}x the mean), quietest "
                f"{min(per_second.get(s, 0) for s in range(int(args.jitter)))}"
            )
            print(
                f"sent after its own instant: median {late[len(late) // 2] * 1000:.1f} ms, "
                f"max {late[-1] * 1000:.1f} ms, before it: {sum(x < 0 for x in late)}"
            )
        print(f"beat CPU over the burst window: {cpu_burst:.2f} s")
        c0 = beat.cpu_seconds()
        time.sleep(args.idle_window)
        idle = (beat.cpu_seconds() - c0) * 60 / args.idle_window
        print(f"beat idle afterwards (nothing due until tomorrow): {idle:.3f} cpu-s/min")
    finally:
        beat.stop()
        r.flushdb()


if __name__ == "__main__":
    main()
