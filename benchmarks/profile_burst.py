"""Where the time goes per fire: one burst of N due slots through ``Engine.tick`` in this
process, with celery's real ``send_task`` on Redis, under cProfile.

    .venv/bin/python -m benchmarks.profile_burst -n 10000 [--top 30]

Prints wall time split into claim (database) and publish (broker) per batch, then the
functions with the most cumulative time. Uses the benchmark's database and Redis db.
"""

from __future__ import annotations

import argparse
import cProfile
import datetime as dt
import pstats
import time
import uuid
from typing import Any

from benchmarks.bench import QUEUE, now, populate, setup


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("-n", type=int, default=10000)
    parser.add_argument("--top", type=int, default=30)
    parser.add_argument("--no-profile", action="store_true", help="the split alone, exact")
    args = parser.parse_args()
    r = setup()
    from durablebeat import ledger, publishing
    from durablebeat.engine import Engine
    from durablebeat.models import Schedule
    from project.celery import app

    populate(args.n)
    r.flushdb()
    timings: dict[str, float] = {"publish": 0.0}
    with app.producer_or_acquire() as producer:

        def publish(claim: ledger.Claim) -> None:
            start = time.perf_counter()
            publishing.send(app, claim, producer=producer)
            timings["publish"] += time.perf_counter() - start

        engine = Engine(code_entries=[], publish=publish, boot_id=uuid.uuid4())
        engine.tick(now())  # boot
        due = now()
        Schedule.objects.update(next_fire_at=due)
        profile = cProfile.Profile()
        start = time.perf_counter()
        ticks = 0
        if not args.no_profile:
            profile.enable()
        tick_at = due
        while engine.tick(tick_at) == 0.0:
            ticks += 1
            tick_at = due + dt.timedelta(seconds=time.perf_counter() - start)
        profile.disable()
        wall = time.perf_counter() - start
    sent = r.llen(QUEUE)
    r.flushdb()
    print(f"{sent} messages in {wall:.2f} s ({sent / wall:.0f}/s), {ticks + 1} ticks")
    print(f"  publish (send_task): {timings['publish']:.2f} s")
    print(f"  everything else:     {wall - timings['publish']:.2f} s")
    if not args.no_profile:
        stats: Any = pstats.Stats(profile)
        stats.sort_stats("cumulative").print_stats(args.top)


if __name__ == "__main__":
    main()
