"""Where the time goes per fire: one burst of N due slots through ``Engine.tick`` in this
process, with celery's real ``send_task`` on Redis, under cProfile.

    .venv/bin/python -m benchmarks.profile_burst -n 10000 [--top 30] [--no-batch]

Prints wall time split into publish (broker) and everything else, the ``send_task`` floor
measured in the same process just before, then the functions with the most cumulative
time. Publishes through kombu's publish batch as beat does (``--no-batch``: one
``send_task`` round trip per message). Uses the benchmark's database and Redis db.
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import datetime as dt
import pstats
import time
import uuid
from typing import Any

from benchmarks.bench import QUEUE, now, populate, send_task_floor, setup


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("-n", type=int, default=10000)
    parser.add_argument("--top", type=int, default=30)
    parser.add_argument("--no-profile", action="store_true", help="the split alone, exact")
    parser.add_argument("--no-batch", action="store_true", help="one round trip per message")
    parser.add_argument("--dump", metavar="FILE", help="also write the profile, for pstats")
    args = parser.parse_args()
    r = setup()
    from durablebeat.beat import publishing
    from durablebeat.beat.dispatch import PUBLISH_GROUP
    from durablebeat.beat.engine import Engine
    from durablebeat.models import Schedule
    from project.celery import app

    populate(args.n)
    floor = send_task_floor(r, 3000)
    r.flushdb()
    publishing.keep_per_message_conf(app)  # as beat does (after the floor: plain send_task)
    timings: dict[str, float] = {"publish": 0.0}
    with app.producer_or_acquire() as producer:

        def publish(claim: Any) -> None:
            start = time.perf_counter()
            publishing.send(app, claim, producer=producer)
            timings["publish"] += time.perf_counter() - start

        def batch() -> Any:
            if args.no_batch:
                return contextlib.nullcontext()
            return producer.batch(max_size=10 * PUBLISH_GROUP)

        engine = Engine(code_entries=[], publish=publish, publish_batch=batch, boot_id=uuid.uuid4())
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
    rate = sent / wall
    print(f"{sent} messages in {wall:.2f} s ({rate:.0f}/s), {ticks + 1} ticks")
    print(f"  send_task floor: {floor:.0f}/s; this burst {rate / floor:.2f}x the floor")
    what = "send_task" if args.no_batch else "send_task into the batch, without its sends"
    print(f"  publish ({what}): {timings['publish']:.2f} s")
    print(f"  everything else:     {wall - timings['publish']:.2f} s")
    if not args.no_profile:
        stats: Any = pstats.Stats(profile)
        stats.sort_stats("cumulative").print_stats(args.top)
        if args.dump:
            stats.dump_stats(args.dump)


if __name__ == "__main__":
    main()
