"""durablebeat at scale: the real ``celery beat`` process, PostgreSQL (or MariaDB) and Redis.

    .venv/bin/python -m benchmarks.bench --quick           # N = 1,000 and 10,000, 3 runs
    .venv/bin/python -m benchmarks.bench -n 1000 10000 100000 --repeats 5 --beats 2 4
    .venv/bin/python -m benchmarks.bench -n 1000000 --burst 100000 --beats-at 1000000

Prints, for each N, the median and the spread (min..max) over the repeated runs, next to the
floors measured in the same run and the ratio to them. Nothing here is asserted: the figures
are for people (benchmarks/README.md). It uses its own PostgreSQL database
(``durablebeat_bench``, created and migrated here) and Redis db 13; override with
``BENCH_DATABASE_URL`` / ``BENCH_BROKER_URL`` (a ``mysql://`` URL: MariaDB/MySQL, the
database created there; its idle figures are then server-wide, from ``SHOW GLOBAL STATUS``).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import random
import signal
import statistics
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "test-output" / "bench"
CELERY = str(Path(sys.executable).with_name("celery"))
QUEUE = "celery"
TASK = "bench.noop"
SCHEDULER = "durablebeat.schedulers:DurableScheduler"
FAR = dt.timedelta(days=30)
CLK_TCK = os.sysconf("SC_CLK_TCK")
#: runs with a slot before this are history a benchmark keeps across bursts
#: (``benchmarks.deep_ledger``); None: every run is the last measurement's and goes
HISTORY_BEFORE: dt.datetime | None = None

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "benchmarks.settings")


# --- setup -----------------------------------------------------------------------------------


def create_database() -> None:
    url = os.environ.get(
        "BENCH_DATABASE_URL", "postgres://postgres@127.0.0.1:5432/durablebeat_bench"
    )
    name = url.rsplit("/", 1)[1]
    if url.startswith("mysql"):
        import dj_database_url
        import MySQLdb

        c = dj_database_url.parse(url)
        server = MySQLdb.connect(
            host=c["HOST"], port=int(c["PORT"] or 3306), user=c["USER"], password=c["PASSWORD"]
        )
        server.cursor().execute(f"CREATE DATABASE IF NOT EXISTS `{name}` CHARACTER SET utf8mb4")
        server.close()
        return
    import psycopg

    with psycopg.connect(url.rsplit("/", 1)[0] + "/postgres", autocommit=True) as conn:
        if not conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", [name]).fetchone():
            conn.execute(f'CREATE DATABASE "{name}"')


def setup() -> Any:
    create_database()
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    import redis
    from django.conf import settings

    return redis.Redis.from_url(settings.CELERY_BROKER_URL)


def now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


def populate(n: int) -> None:
    """N interval schedules, one per tenant, none due for a month."""
    from django.db import connection

    from durablebeat.models import Schedule

    tables = ["run", "missedslots", "incident", "boot", "schedule", "marker"]
    with connection.cursor() as cur:
        if connection.vendor == "mysql":  # one table per TRUNCATE, foreign keys unchecked
            cur.execute("SET FOREIGN_KEY_CHECKS = 0")
            for table in tables:
                cur.execute(f"TRUNCATE durablebeat_{table}")
            cur.execute("SET FOREIGN_KEY_CHECKS = 1")
        else:
            names = ", ".join(f"durablebeat_{t}" for t in tables)
            cur.execute(f"TRUNCATE {names} RESTART IDENTITY CASCADE")
    far = now() + FAR
    Schedule.objects.bulk_create(
        (
            Schedule(
                name=f"tenant-{i:06d}",
                task=TASK,
                kind="interval",
                every=dt.timedelta(days=1),
                kwargs={"tenant": i},
                next_fire_at=far,
            )
            for i in range(n)
        ),
        batch_size=5000,
    )
    with connection.cursor() as cur:
        if connection.vendor == "mysql":
            cur.execute("ANALYZE TABLE durablebeat_schedule")
            cur.fetchall()
        else:
            cur.execute("VACUUM ANALYZE durablebeat_schedule")


def burst_runs() -> Any:
    """The runs a measurement left: all of them, or those after ``HISTORY_BEFORE``."""
    from durablebeat.models import Run

    runs = Run.objects.all()
    return runs if HISTORY_BEFORE is None else runs.filter(slot__gte=HISTORY_BEFORE)


def reset(due_at: dt.datetime | None = None, names: list[str] | None = None) -> None:
    """Every schedule a month away again, runs gone, dead row versions vacuumed: each
    measurement starts from the steady state, not from the last one's debris."""
    from django.db import connection

    from durablebeat.models import Schedule

    burst_runs().delete()
    Schedule.objects.filter(next_fire_at__lt=now() + FAR / 2).update(
        next_fire_at=now() + FAR, stuck_since=None, stuck_reason=""
    )
    if connection.vendor == "postgresql":  # InnoDB purges old row versions by itself
        with connection.cursor() as cur:
            cur.execute("VACUUM durablebeat_schedule")
            cur.execute("VACUUM durablebeat_run")
    if due_at is not None:
        Schedule.objects.filter(name__in=names or []).update(next_fire_at=due_at)


# --- processes -------------------------------------------------------------------------------


class Beat:
    def __init__(self, label: str, scheduler: str = SCHEDULER) -> None:
        OUT.mkdir(parents=True, exist_ok=True)
        self.log = open(OUT / f"{label}.log", "wb")  # noqa: SIM115 - closed in stop()
        env = dict(os.environ) | {"PYTHONUNBUFFERED": "1"}
        self.started = time.monotonic()
        args = ["beat", "-S", scheduler, "--loglevel", "WARNING", "--pidfile="]
        args.append(f"--schedule={OUT / 'celerybeat-schedule'}")
        self.popen = subprocess.Popen(
            [CELERY, "-A", "project", *args],
            cwd=ROOT,
            env=env,
            stdout=self.log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

    def cpu_seconds(self) -> float:
        fields = Path(f"/proc/{self.popen.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / CLK_TCK

    def peak_rss_mib(self) -> float:
        for line in Path(f"/proc/{self.popen.pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
        return float("nan")

    def stop(self) -> None:
        if self.popen.poll() is None:
            os.killpg(self.popen.pid, signal.SIGTERM)
            try:
                self.popen.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(self.popen.pid, signal.SIGKILL)
                self.popen.wait()
        self.log.close()


def wait_for(condition: Callable[[], Any], timeout: float, poll: float = 0.002) -> float | None:
    """Monotonic time at which ``condition()`` first held, None after ``timeout``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return time.monotonic()
        time.sleep(poll)
    return None


# --- floors ----------------------------------------------------------------------------------


def send_task_floor(r: Any, count: int) -> float:
    """Messages per second from one process through celery's own ``send_task``."""
    from project.celery import app

    r.flushdb()
    with app.producer_or_acquire() as producer:
        app.send_task(TASK, producer=producer)  # connect outside the timing
        start = time.perf_counter()
        for i in range(count):
            app.send_task(
                TASK,
                args=[],
                kwargs={"tenant": i},
                task_id=str(uuid.uuid4()),
                headers={"durablebeat_schedule": f"tenant-{i:06d}"},
                producer=producer,
            )
        rate = count / (time.perf_counter() - start)
    r.flushdb()
    return rate


def pg_write_floor(count: int = 2000) -> float:
    """Single-row committed writes per second (one UPDATE, one commit, each)."""
    from django.db import connection

    with connection.cursor() as cur:
        cur.execute("CREATE TABLE IF NOT EXISTS bench_floor (id int PRIMARY KEY, v bigint)")
        ignore = (
            ("INSERT IGNORE", "")
            if connection.vendor == "mysql"
            else ("INSERT", " ON CONFLICT DO NOTHING")
        )
        cur.execute(f"{ignore[0]} INTO bench_floor VALUES (1, 0){ignore[1]}")
        start = time.perf_counter()
        for _ in range(count):
            cur.execute("UPDATE bench_floor SET v = v + 1 WHERE id = 1")
        return count / (time.perf_counter() - start)


FLOOR_PROCESS = """
import os, sys, uuid
import django
django.setup()
from project.celery import app
app.send_task(sys.argv[1], task_id=str(uuid.uuid4()))
status = open("/proc/self/status").read().split("VmHWM:")[1].split()[0]
print(int(status) / 1024)
"""


def restart_floor(r: Any) -> tuple[float, float]:
    """A fresh process that boots Django + celery and sends one message: seconds to the
    message, and its peak RSS in MiB (what any beat process costs before scheduling)."""
    r.flushdb()
    start = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-c", FLOOR_PROCESS, TASK],
        cwd=ROOT,
        env=dict(os.environ),
        check=True,
        capture_output=True,
        text=True,
    )
    seen = wait_for(lambda: r.llen(QUEUE) > 0, 30)
    r.flushdb()
    return (seen or float("nan")) - start, float(done.stdout.strip())


def celery_beat_rss() -> float:
    """Peak RSS of celery's own beat (``PersistentScheduler``, nothing scheduled): what any
    beat process costs."""
    beat = Beat("celery-own-beat", "celery.beat:PersistentScheduler")
    time.sleep(5)
    rss = beat.peak_rss_mib()
    beat.stop()
    return rss


def pg_stats() -> tuple[int, int]:
    """(transactions, rows read) of the bench database so far."""
    from django.db import connection

    with connection.cursor() as cur:
        if connection.vendor == "mysql":  # server-wide: no per-database counters there
            cur.execute(
                "SHOW GLOBAL STATUS WHERE Variable_name IN "
                "('Com_commit', 'Com_rollback', 'Rows_read', 'Innodb_rows_read')"
            )
            status = {name: int(value) for name, value in cur.fetchall()}
            rows = status.get("Rows_read", status.get("Innodb_rows_read", 0))  # MariaDB's, MySQL's
            return status["Com_commit"] + status["Com_rollback"], rows
        cur.execute("SELECT pg_stat_clear_snapshot()")
        cur.execute(
            "SELECT xact_commit + xact_rollback, tup_returned + tup_fetched "
            "FROM pg_stat_database WHERE datname = current_database()"
        )
        xacts, rows = cur.fetchone()
    return int(xacts), int(rows)


# --- measurements ----------------------------------------------------------------------------


def measure_restart(r: Any, label: str) -> tuple[float, Beat]:
    """Start beat with one schedule due now among N stored; seconds to its message."""
    reset(now(), ["tenant-000000"])
    r.flushdb()
    beat = Beat(label)
    seen = wait_for(lambda: r.llen(QUEUE) > 0, 60)
    return (seen or float("nan")) - beat.started, beat


def measure_idle(beat: Beat, window: float) -> tuple[float, float, float]:
    """Beat CPU s per minute, database transactions/s and rows read/s while nothing is due."""
    reset()
    time.sleep(3)
    x0, rows0 = pg_stats()
    c0 = beat.cpu_seconds()
    time.sleep(window)
    c1 = beat.cpu_seconds()
    x1, rows1 = pg_stats()
    return (c1 - c0) * 60 / window, (x1 - x0 - 2) / window, (rows1 - rows0) / window


def measure_pickup(r: Any, name: str, max_interval: float) -> float:
    """A schedule edited through the ORM to be due now: seconds until its message."""
    from durablebeat.models import Schedule

    time.sleep(random.uniform(0.2, max_interval))  # any phase of beat's sleep
    r.flushdb()
    row = Schedule.objects.get(name=name)
    row.next_fire_at = now()
    start = time.monotonic()  # the save's own wake-up (where there is no LISTEN) counts
    row.save()
    seen = wait_for(lambda: r.llen(QUEUE) > 0, max_interval * 4 + 10)
    return (seen or float("nan")) - start


def measure_burst(r: Any, n: int, lead: float, poll: float = 0.005) -> dict[str, Any]:
    """N schedules due in the same second (the first N tenants; those after them stay a
    month away): broker rate, lateness, duplicates, losses (the queue read every ``poll``
    seconds)."""
    from durablebeat.models import Schedule

    burst_runs().delete()
    r.flushdb()
    due = now().replace(microsecond=0) + dt.timedelta(seconds=lead + 1)
    # the N tenants (not celery.backend_cleanup, the code entry Celery's beat adds too)
    tenants = Schedule.objects.filter(name__startswith="tenant-")
    if n < 10**6:  # the names have six digits: tenant-000000 .. tenant-999999
        tenants = tenants.filter(name__lt=f"tenant-{n:06d}")
    tenants.update(next_fire_at=due)
    first: float | None = None
    last: float | None = None
    deadline = time.time() + lead + 30 + n / 100
    while time.time() < deadline:
        count = r.llen(QUEUE)
        if count and first is None:
            first = time.time()
        if count >= n:
            last = time.time()
            break
        time.sleep(poll)
    time.sleep(0.5)  # anything beyond N would be a duplicate: give it a moment to show
    slots: dict[tuple[str, str], int] = {}
    by_boot: dict[str, int] = {}  # which beat sent it: each beat's share of the burst
    for raw in r.lrange(QUEUE, 0, -1):
        headers = json.loads(raw)["headers"]
        key = (headers["durablebeat_schedule"], headers["durablebeat_slot"])
        slots[key] = slots.get(key, 0) + 1
        by_boot[headers["durablebeat_boot"]] = by_boot.get(headers["durablebeat_boot"], 0) + 1
    t_due = due.timestamp()
    result = {
        "rate": n / (last - t_due) if last else float("nan"),
        "publish_rate": n / (last - first) if last and first and last > first else float("nan"),
        "late_last": (last - t_due) if last else float("nan"),
        "late_first": (first - t_due) if first else float("nan"),
        "duplicates": float(sum(c - 1 for c in slots.values())),
        "lost": float(n - len(slots)),
        "runs": float(burst_runs().count()),
        "shares": sorted(by_boot.values(), reverse=True),
    }
    reset()
    r.flushdb()
    return result


def measure_one_off(r: Any, lead: float = 1.0) -> float:
    """A one-off made from code (``api.add_schedule`` with an instant) ``lead`` seconds
    ahead, beside a running beat: seconds from its instant to its message in the queue."""
    from durablebeat import api

    r.flushdb()
    at = now() + dt.timedelta(seconds=lead)
    name = f"one-off-{uuid.uuid4().hex[:8]}"
    api.add_schedule(name, TASK, at)
    seen = wait_for(lambda: r.llen(QUEUE) > 0, timeout=lead + 30)
    late = (time.time() - time.monotonic() + seen) - at.timestamp() if seen else float("nan")
    api.delete_schedule(name, history="remove")
    r.flushdb()
    return late


# --- report ----------------------------------------------------------------------------------


def summary(values: list[float]) -> str:
    values = [v for v in values if v == v]
    if not values:
        return "n/a"
    med = statistics.median(values)
    return f"{med:10.3f}  [{min(values):.3f} .. {max(values):.3f}]"


def ratio(value: list[float], floor: list[float]) -> str:
    v = [x for x in value if x == x]
    f = [x for x in floor if x == x]
    if not v or not f:
        return ""
    return f"{statistics.median(v) / statistics.median(f):.2f}x floor"


def row(name: str, values: list[float], note: str = "") -> None:
    print(f"  {name:<38} {summary(values):<36} {note}", flush=True)


def bench_n(r: Any, n: int, args: argparse.Namespace, floors: dict[str, list[float]]) -> None:
    print(f"\nN = {n:,} schedules ({args.repeats} runs each)", flush=True)
    populate(n)
    restarts: list[float] = []
    beat: Beat | None = None
    for i in range(args.repeats):
        if beat is not None:
            beat.stop()
        took, beat = measure_restart(r, f"n{n}-restart{i}")
        restarts.append(took)
    assert beat is not None
    row("restart -> first message (s)", restarts, ratio(restarts, floors["restart"]))
    idle = [measure_idle(beat, args.idle_window) for _ in range(max(1, args.repeats // 2))]
    row("idle beat CPU (s per minute)", [i[0] for i in idle])
    row("idle database transactions/s", [i[1] for i in idle])
    row("idle database rows read/s", [i[2] for i in idle])
    max_interval = float(os.environ.get("DURABLEBEAT_MAX_INTERVAL", "5"))
    pickups = [measure_pickup(r, f"tenant-{i + 1:06d}", max_interval) for i in range(args.repeats)]
    row("change pickup (s)", pickups, f"max_interval {max_interval:g}s")
    one_offs = [measure_one_off(r) for _ in range(args.repeats)]
    row("one-off from code, lateness (s)", one_offs, "made 1 s ahead through the API")
    burst = min(n, args.burst or n)
    if not args.no_burst:
        if burst < n:
            print(f"  (bursts of {burst:,} of the {n:,} schedules)", flush=True)
        bursts = [measure_burst(r, burst, max_interval + 1) for _ in range(args.repeats)]
        rates = [b["rate"] for b in bursts]
        row(
            "burst msgs/s (from due time)",
            rates,
            f"{ratio(rates, floors['send_task'])}; {ratio(rates, floors['pg_write'])} (pg writes)",
        )
        row("burst msgs/s (first to last)", [b["publish_rate"] for b in bursts])
        row("burst lateness of first (s)", [b["late_first"] for b in bursts])
        row("burst lateness of last (s)", [b["late_last"] for b in bursts])
        row("burst duplicate slots", [b["duplicates"] for b in bursts])
        row("burst lost slots", [b["lost"] for b in bursts])
    rss = [beat.peak_rss_mib()]  # the boot's, the idle's, the pickup's and the bursts'
    row("beat peak RSS (MiB)", rss, ratio(rss, floors["beat_rss"]) + " (celery's own beat)")
    beat.stop()
    if not args.no_burst and n == args.beats_at:
        for k in args.beats:
            bench_many(r, burst, k, args, floors)


def bench_many(
    r: Any, n: int, k: int, args: argparse.Namespace, floors: dict[str, list[float]]
) -> None:
    reset()
    beats = [Beat(f"n{n}-x{k}-{i}") for i in range(k)]
    time.sleep(5)  # all booted and idle
    max_interval = float(os.environ.get("DURABLEBEAT_MAX_INTERVAL", "5"))
    bursts = [measure_burst(r, n, max_interval + 1) for _ in range(args.repeats)]
    for beat in beats:
        beat.stop()
    rates = [b["rate"] for b in bursts]
    row(f"{k} beats: burst msgs/s", rates, ratio(rates, floors["send_task"]))
    row(f"{k} beats: lateness of last (s)", [b["late_last"] for b in bursts])
    row(f"{k} beats: duplicate slots", [b["duplicates"] for b in bursts])
    row(f"{k} beats: lost slots", [b["lost"] for b in bursts])
    shares = ["/".join(f"{c:,}" for c in b["shares"]) for b in bursts]
    print(f"  {f'{k} beats: messages each beat sent':<38} {'; '.join(shares)}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("-n", type=int, nargs="+", default=[1000, 10000, 100000])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--idle-window", type=float, default=60.0)
    parser.add_argument("--beats", type=int, nargs="*", default=[2, 4], help="several beats")
    parser.add_argument("--beats-at", type=int, default=10000, help="N for several beats")
    parser.add_argument("--quick", action="store_true", help="N 1,000 and 10,000, 3 runs")
    parser.add_argument(
        "--no-burst", action="store_true", help="restart, idle and pickup only (no bursts)"
    )
    parser.add_argument(
        "--burst", type=int, help="burst the first K of the N schedules (default: all N)"
    )
    args = parser.parse_args()
    if args.quick:
        args.n, args.repeats, args.idle_window = [1000, 10000], 3, 20.0
    r = setup()
    print(f"durablebeat benchmark, {now():%Y-%m-%d %H:%M} UTC, {os.cpu_count()} cores")
    floors: dict[str, list[float]] = {
        "send_task": [],
        "pg_write": [],
        "restart": [],
        "rss": [],
        "beat_rss": [],
    }
    for _ in range(args.repeats):
        floors["send_task"].append(send_task_floor(r, min(max(args.n), 10000)))
        floors["pg_write"].append(pg_write_floor())
        took, rss = restart_floor(r)
        floors["restart"].append(took)
        floors["rss"].append(rss)
        floors["beat_rss"].append(celery_beat_rss())
    print("\nfloors")
    row("send_task msgs/s, one process", floors["send_task"])
    row("database single-row writes/s", floors["pg_write"])
    row("fresh process -> one message (s)", floors["restart"])
    row("fresh process peak RSS (MiB)", floors["rss"])
    row("celery's own beat peak RSS (MiB)", floors["beat_rss"])
    for n in args.n:
        bench_n(r, n, args, floors)


if __name__ == "__main__":
    main()
