"""Flat in history (issue 31 item 2): the same measurements with an empty runs table and
with millions of old runs, side by side in one run: nothing is asserted, figures printed.

    .venv/bin/python -m benchmarks.deep_ledger                      # depths 0 and 10,000,000
    .venv/bin/python -m benchmarks.deep_ledger --depths 0,2000000   # a quicker try
    .venv/bin/python -m benchmarks.deep_ledger --drop               # drop its databases

One PostgreSQL database per depth (``bench_deep_<depth>``, created, migrated and filled
here, kept for the next run: filling 10 million runs takes minutes), each with the same
``-n`` schedules (default 50,000: one per tenant, daily intervals) and ``depth`` old
finished runs spread over the year before the last week, written with ``COPY`` in the
order production writes them (by time, task ids time-ordered as beat makes them); both
have the same recent runs (five days of them, ``recent``), so a page with no window draws
the same rows at both depths. Then, at each depth in turn, round-robin so that
both see the same load of the shared machine: ``manage.py durablebeat check``, ``status``
and ``report --since 48h`` (in process, through ``call_command``), the admin's schedule
and run lists and the timeline (Django's test client, a logged-in superuser), and a
burst of 10,000 and of 50,000 (``benchmarks.bench``'s ``measure_burst``, a real ``celery
beat``, Redis db 11: the lateness of the first message after the due time, polled every
2 ms). ``--explain`` prints ``EXPLAIN (ANALYZE, BUFFERS)`` of the runs queries of each
command and page at each depth.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import io
import os
import random
import statistics
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

SERVER = os.environ.get("BENCH_SERVER_URL", "postgres://postgres@127.0.0.1:5432")
os.environ["BENCH_DATABASE_URL"] = f"{SERVER}/bench_deep_0"
os.environ.setdefault("BENCH_BROKER_URL", "redis://127.0.0.1:6379/11")
os.environ["DJANGO_SETTINGS_MODULE"] = "benchmarks.deep_settings"  # a year of runs kept

from benchmarks import bench, timeline  # noqa: E402 - the URLs above first

DAY = dt.timedelta(days=1)
#: old runs end a week before now: the windows a page or command reads by default (48 h,
#: 24 h, 7 d) hold the same rows at every depth, so a difference is the history's cost
HISTORY_END = dt.timedelta(days=8)
HISTORY_SPAN = dt.timedelta(days=357)
CHUNK = 250_000
#: the recent runs every depth has (``recent``): rounds over every schedule, a day apart,
#: ending two days ago (the bursts' ``bench.reset`` removes runs after that)
RECENT_DAYS = 5
RECENT_WORKER = "recent@host"


def name(depth: int) -> str:
    return f"bench_deep_{depth}"


def use(depth: int) -> None:
    """Point this process's Django connection, and the beats it starts, at one depth."""
    from django.db import connection

    connection.close()
    connection.settings_dict["NAME"] = name(depth)
    os.environ["BENCH_DATABASE_URL"] = f"{SERVER}/{name(depth)}"


def task_id_at(at: dt.datetime) -> str:
    """A UUID version 7 made at ``at``: the task id beat gives a fire (``new_task_id``),
    so the old runs' ``task_id`` index is in the order a year of production leaves it."""
    ms, rand = int(at.timestamp() * 1000), random.getrandbits(74)
    fields = (ms << 80) | (0x7 << 76) | ((rand >> 62) << 64) | (0b10 << 62) | (rand & (2**62 - 1))
    return str(uuid.UUID(int=fields))


def old_runs(
    ids: list[int],
    boots: list[tuple[str, dt.datetime]],
    depth: int,
    start: dt.datetime,
    span: dt.timedelta,
    worker: str = "worker@host",
) -> Iterator[str]:
    """``depth`` finished runs from ``start`` over ``span`` as COPY lines: rounds over every
    schedule, oldest first, one in a hundred failed, each from the boot that ran that day."""
    rounds = max(1, depth // len(ids))
    step = span / rounds
    written = 0
    for k in range(rounds):
        at = start + k * step
        boot = boots[min(len(boots) - 1, int((at - boots[0][1]) / DAY))][0]
        for i, pk in enumerate(ids):
            if written == depth:
                return
            slot = at + dt.timedelta(seconds=i % 3600)
            fired, done = slot + dt.timedelta(seconds=1), slot + dt.timedelta(seconds=31)
            state = "failed" if (i + k) % 100 == 0 else "succeeded"
            yield (
                f"{pk}\t{slot.isoformat()}\t{boot}\tscheduled\t{state}\t{task_id_at(fired)}\t"
                f"{fired.isoformat()}\t{fired.isoformat()}\t1\t{fired.isoformat()}\t"
                f"{done.isoformat()}\t{worker}\tf\t\t\t\n"
            )
            written += 1


def day_boots(host: str, pid: int, start: dt.datetime, days: int) -> list[tuple[str, dt.datetime]]:
    """A boot a day on ``host`` (pids from ``pid``) from ``start``, each up that day,
    written; their (id, start)."""
    from durablebeat.models import Boot

    boots = [(str(uuid.uuid4()), start + d * DAY) for d in range(days)]
    Boot.objects.bulk_create(
        Boot(
            id=b,
            hostname=host,
            pid=pid + d,
            started_at=at,
            heartbeat_at=at + DAY,
            stopped_at=at + DAY,
        )
        for d, (b, at) in enumerate(boots)
    )
    return boots


def fill(depth: int, n: int) -> None:
    """Create, migrate and fill one depth's database, unless it already holds them."""
    from django.core.management import call_command
    from django.db import connection

    from durablebeat.models import Run, Schedule

    use(depth)
    bench.create_database()
    call_command("migrate", verbosity=0)
    old = Run.objects.filter(slot__lt=bench.now() - HISTORY_END)
    if Schedule.objects.filter(name__startswith="tenant-").count() == n and (old.count() == depth):
        print(f"depth {depth:,}: kept from an earlier run")
        recent(n)
        return
    started = time.perf_counter()
    bench.populate(n)  # truncates every durablebeat table, then N schedules
    start = bench.now() - HISTORY_END - HISTORY_SPAN
    boots = day_boots("web-1", 1000, start, HISTORY_SPAN.days + 1)
    ids = list(Schedule.objects.filter(name__startswith="tenant-").values_list("pk", flat=True))
    copy_runs(old_runs(sorted(ids), boots, depth, start, HISTORY_SPAN), depth, started)
    recent(n)
    with connection.cursor() as cur:
        cur.execute("VACUUM ANALYZE")
        cur.execute("SELECT pg_size_pretty(pg_total_relation_size('durablebeat_run'))")
        size = cur.fetchone()[0]
    print(f"depth {depth:,}: filled in {time.perf_counter() - started:.0f} s, runs table {size}")


def copy_runs(lines: Iterator[str], count: int, started: float) -> None:
    """Write ``count`` runs' COPY lines, ``CHUNK`` at a time, saying how far it got."""
    from django.db import connection

    columns = (*timeline.RUN_COLUMNS, "failure")
    written = 0
    while written < count:
        buffer = io.StringIO()
        for _, line in zip(range(CHUNK), lines, strict=False):
            buffer.write(line)
        with (
            connection.cursor() as cur,
            cur.cursor.copy(f"COPY durablebeat_run ({', '.join(columns)}) FROM STDIN") as copy,
        ):
            copy.write(buffer.getvalue())
        written += CHUNK
        took = time.perf_counter() - started
        print(f"  {min(written, count):,} runs, {took:.0f} s", flush=True)


def recent(n: int) -> None:
    """The same recent runs at every depth (``RECENT_DAYS`` rounds over every schedule, a
    boot a day, ending before the bursts' window): what a page reads with no window (the
    runs list, newest first) finds the same rows with a year of runs under them as with
    none, so a difference is the history's cost, not more rows drawn."""
    from django.db import connection

    from durablebeat.models import Run, Schedule

    if Run.objects.filter(worker=RECENT_WORKER).count() == RECENT_DAYS * n:
        return
    Run.objects.filter(worker=RECENT_WORKER).delete()
    start = bench.now() - HISTORY_END + DAY
    boots = day_boots("web-2", 2000, start, RECENT_DAYS)
    ids = sorted(Schedule.objects.filter(name__startswith="tenant-").values_list("pk", flat=True))
    lines = old_runs(ids, boots, RECENT_DAYS * n, start, RECENT_DAYS * DAY, RECENT_WORKER)
    copy_runs(lines, RECENT_DAYS * n, time.perf_counter())
    with connection.cursor() as cur:
        cur.execute("ANALYZE durablebeat_run")  # what the planner knows of the new rows


def drop(depths: list[int]) -> None:
    import psycopg
    from django.db import connection

    connection.close()
    with psycopg.connect(f"{SERVER}/postgres", autocommit=True) as conn:
        for depth in depths:
            conn.execute(f'DROP DATABASE IF EXISTS "{name(depth)}"')


# --- measurements -----------------------------------------------------------------------


def command(*args: str) -> Callable[[], Any]:
    """``manage.py durablebeat <args>`` in this process, its output kept out of sight."""
    from django.core.management import call_command

    def run() -> None:
        with contextlib.suppress(SystemExit):  # check's status says how bad its findings are
            call_command("durablebeat", *args, stdout=io.StringIO(), stderr=io.StringIO())

    return run


def page(c: Any, url: str) -> Callable[[], Any]:
    def get() -> None:
        response = c.get(url)
        assert response.status_code == 200, (url, response.status_code)

    return get


PAGES = {
    "admin: schedules list": "/admin/durablebeat/schedule/",
    "admin: runs list": "/admin/durablebeat/run/",
    "admin: runs list, one schedule": "/admin/durablebeat/run/?schedule__id__exact={pk}",
    "admin: boots list": "/admin/durablebeat/boot/",
    "admin: timeline, 24 h": "/admin/durablebeat/schedule/timeline/",
    "admin: timeline, 7 d": "/admin/durablebeat/schedule/timeline/?window=7d",
    "admin: a schedule's page": "/admin/durablebeat/schedule/{pk}/change/",
}


def login() -> Any:
    """A test client logged in as a superuser of this depth's database."""
    from django.contrib.auth.models import User
    from django.test import Client

    user, _ = User.objects.get_or_create(
        username="bench", defaults={"is_staff": True, "is_superuser": True}
    )
    c = Client()
    c.force_login(user)
    return c


def probes(c: Any) -> dict[str, Callable[[], Any]]:
    from durablebeat.models import Schedule

    pk = Schedule.objects.get(name="tenant-000001").pk
    found: dict[str, Callable[[], Any]] = {
        "check": command("check"),
        "status": command("status"),
        "report --since 48h": command("report", "--since", "48h"),
    }
    return found | {label: page(c, url.format(pk=pk)) for label, url in PAGES.items()}


def timed(fn: Callable[[], Any]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def in_database(fn: Callable[[], Any]) -> float:
    """Seconds ``fn``'s queries took, as Django's cursor measured each."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    with CaptureQueriesContext(connection) as captured:
        fn()
    return sum(float(q["time"]) for q in captured.captured_queries)


def explain(fn: Callable[[], Any], slower_than: float) -> None:
    """``EXPLAIN (ANALYZE, BUFFERS)`` of each query of ``fn`` that took more than
    ``slower_than`` seconds: its plan's scans, rows and buffers."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    with CaptureQueriesContext(connection) as captured:
        fn()
    for query in captured.captured_queries:
        if float(query["time"]) < slower_than or not query["sql"].startswith("SELECT"):
            continue
        with connection.cursor() as cur:
            cur.execute("EXPLAIN (ANALYZE, BUFFERS) " + query["sql"])
            plan = [line for (line,) in cur.fetchall()]
        print(f"    {query['time']} s: {query['sql'][:300]}")
        for line in plan:
            if "Scan" in line or "Buffers" in line[:40] or "Execution" in line or "Sort" in line:
                print(f"      {line.strip()[:160]}")


def tenants(n: int) -> None:
    """The first ``n`` schedules are the tenants a burst sets due, the rest stand by."""
    from django.db import connection

    with connection.cursor() as cur:
        cur.execute(
            "UPDATE durablebeat_schedule SET name = 'tenant-' || substr(name, 7) "
            "WHERE name LIKE 'spare-%%'"
        )
        cur.execute(
            "UPDATE durablebeat_schedule SET name = 'spare-' || substr(name, 8) "
            "WHERE name LIKE 'tenant-%%' AND name >= %s",
            [f"tenant-{n:06d}"],
        )


def burst(r: Any, depth: int, n: int) -> dict[str, Any]:
    """``bench.measure_burst`` of ``n`` with a real beat on this depth's database."""
    from durablebeat.models import Boot

    use(depth)
    tenants(n)
    bench.reset()
    beat = bench.Beat(f"deep-{depth}-{n}")
    try:
        booted = bench.wait_for(
            lambda: Boot.objects.filter(stopped_at=None, pid=beat.popen.pid).exists(), 60, 0.05
        )
        assert booted, f"beat did not boot, see {bench.OUT}/deep-{depth}-{n}.log"
        time.sleep(2)  # past its boot's first ticks
        max_interval = float(os.environ.get("DURABLEBEAT_MAX_INTERVAL", "5"))
        return bench.measure_burst(r, n, max_interval + 1, poll=0.002)
    finally:
        beat.stop()
        tenants(len(ids_of_tenants()))


def ids_of_tenants() -> list[int]:
    from durablebeat.models import Schedule

    return list(
        Schedule.objects.filter(name__regex=r"^(tenant|spare)-").values_list("pk", flat=True)
    )


def fmt(values: list[float]) -> str:
    med = statistics.median(values)
    unit, k, digits = ("ms", 1000, 0) if med < 1 else ("s", 1, 2)
    spread = f" [{min(values) * k:.{digits}f}..{max(values) * k:.{digits}f}]"
    return f"{med * k:.{digits}f} {unit}" + (spread if len(values) > 1 else "")


def ratio(values: dict[int, list[float]], depths: list[int], depth: int) -> str:
    base = statistics.median(values[depths[0]])
    return (
        ""
        if depth == depths[0] or not base
        else f" ({statistics.median(values[depth]) / base:.2f}x)"
    )


def measure(r: Any, depths: list[int], args: argparse.Namespace) -> None:
    from django.test.utils import setup_test_environment

    setup_test_environment()  # "testserver" is an allowed host; DEBUG stays off
    clients = {}
    for depth in depths:  # logged in on each database; warm: caches, connections
        use(depth)
        clients[depth] = login()
        for fn in probes(clients[depth]).values():
            fn()
    names = list(probes(clients[depth]))
    times: dict[str, dict[int, list[float]]] = {k: {d: [] for d in depths} for k in names}
    db_times: dict[str, dict[int, list[float]]] = {k: {d: [] for d in depths} for k in names}
    for k in range(args.repeats):  # round-robin: both depths under the same load,
        for depth in depths if k % 2 == 0 else depths[::-1]:  # each first in turn
            use(depth)
            for label, fn in probes(clients[depth]).items():
                times[label][depth].append(timed(fn))
                db_times[label][depth].append(in_database(fn))
    print(
        f"\n| median of {args.repeats} [min..max] | "
        + " | ".join(f"{d:,} runs" for d in depths)
        + " | "
        + " | ".join(f"in the database, {d:,}" for d in depths)
        + " |"
    )
    print("|---|" + "---|" * 2 * len(depths))
    for label in names:
        cells = [fmt(times[label][d]) + ratio(times[label], depths, d) for d in depths]
        cells += [fmt(db_times[label][d]) for d in depths]
        print(f"| {label} | " + " | ".join(cells) + " |", flush=True)
    if args.explain:
        for depth in depths:
            use(depth)
            print(f"\nEXPLAIN of the queries over {args.explain_over} s at {depth:,} runs")
            for label, fn in probes(clients[depth]).items():
                print(f"  {label}")
                explain(fn, args.explain_over)
    if not args.bursts:
        return
    results: dict[int, dict[int, list[dict[str, Any]]]] = {}
    for n in args.bursts:
        results[n] = {d: [] for d in depths}
        for _ in range(args.burst_repeats):
            for depth in depths:
                results[n][depth].append(burst(r, depth, n))
    floor = statistics.median(bench.send_task_floor(r, 3000) for _ in range(3))
    print(f"\nbursts (send_task floor {floor:,.0f} msgs/s, measured after them)")
    print("| burst | " + " | ".join(f"{d:,} runs" for d in depths) + " |")
    print("|---|" + "---|" * len(depths))
    for n in args.bursts:
        for key, label in (
            ("late_first", "first message after due"),
            ("rate", "msgs/s, due -> last"),
        ):
            cells = []
            for d in depths:
                vals = [b[key] for b in results[n][d]]
                rate = statistics.median(vals)
                spread = f" [{min(vals):,.0f}..{max(vals):,.0f}]" if len(vals) > 1 else ""
                cells.append(
                    fmt(vals)
                    if key == "late_first"
                    else f"{rate:,.0f}{spread} ({rate / floor:.2f}x floor)"
                )
            print(f"| {n:,}: {label} | " + " | ".join(cells) + " |")
        dup = [
            "{:.0f} / {:.0f}".format(
                *(sum(b[k] for b in results[n][d]) for k in ("duplicates", "lost"))
            )
            for d in depths
        ]
        print(f"| {n:,}: duplicate / lost | " + " | ".join(dup) + " |", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("-n", type=int, default=50_000, help="schedules (one per tenant)")
    parser.add_argument("--depths", default="0,10000000", help="old runs, comma-separated")
    parser.add_argument("--fill-only", action="store_true")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--bursts", type=int, nargs="*", default=[10_000, 50_000])
    parser.add_argument("--burst-repeats", type=int, default=1)
    parser.add_argument("--explain", action="store_true", help="plans of the slow queries")
    parser.add_argument("--explain-over", type=float, default=0.05, help="seconds")
    parser.add_argument("--drop", action="store_true", help="drop the databases and stop")
    args = parser.parse_args()
    depths = [int(d) for d in args.depths.split(",")]
    r = bench.setup()
    if args.drop:
        drop(depths)
        return
    for depth in depths:
        fill(depth, args.n)
    if args.fill_only:
        return
    bench.HISTORY_BEFORE = bench.now() - 2 * DAY
    measure(r, depths, args)


if __name__ == "__main__":
    main()
