"""durablebeat side by side with django-celery-beat, celery-redbeat and celery's own beat.

    .venv/bin/python -m benchmarks.compare -n 1000 10000 --repeats 2

For each N and each scheduler: N interval schedules (one per tenant, every day) stored in
that scheduler's own storage, the real ``celery beat`` process, and the same measurements:
restart -> first message, idle beat CPU, a burst of N schedules all due in the same second
(messages/s onto the broker from the due time to the last message, lateness, duplicates and
losses counted per tenant from the queue), beat peak RSS. Each figure is printed with its
ratio to durablebeat's and to the floor measured in the same run (``benchmarks.bench``'s
floors). Nothing is asserted; the figures are for benchmarks/README.md.

Its own PostgreSQL database ``durablebeat_compare`` and Redis db 12 (broker, and redbeat's
storage); logs and celery's schedule file under test-output/compare/.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import shelve
import statistics
import time
from base64 import b64decode
from collections.abc import Callable
from typing import Any

os.environ["DJANGO_SETTINGS_MODULE"] = "benchmarks.compare_settings"
os.environ.setdefault(
    "BENCH_DATABASE_URL", "postgres://postgres@127.0.0.1:5432/durablebeat_compare"
)
os.environ.setdefault("BENCH_BROKER_URL", "redis://127.0.0.1:6379/12")

from benchmarks import bench
from benchmarks.bench import QUEUE, TASK, Beat, now, wait_for

OUT = bench.ROOT / "test-output" / "compare"
# bench.Beat writes its log and celery's schedule file under bench.OUT: point it here.
bench.OUT = OUT
SCHEDULE_FILE = OUT / "celerybeat-schedule"
DAY = dt.timedelta(days=1)

SCHEDULERS = {
    "durablebeat": "durablebeat.schedulers:DurableScheduler",
    "django-celery-beat": "django_celery_beat.schedulers:DatabaseScheduler",
    "celery-redbeat": "redbeat.RedBeatScheduler",
    "celery PersistentScheduler": "celery.beat:PersistentScheduler",
}


def remove_schedule_file() -> None:
    for suffix in ("", ".db", ".dat", ".bak", ".dir"):
        SCHEDULE_FILE.with_name(SCHEDULE_FILE.name + suffix).unlink(missing_ok=True)


# --- each scheduler's own storage ------------------------------------------------------------
#
# Every store holds N schedules "tenant-NNNNNN", task bench.noop, kwargs {"tenant": i}, every
# day. ``set_last_run(n, when)`` writes, for each i, the time of the last run such that the
# next one is due at ``when(i) + 1 day``: the state each scheduler itself would have stored
# after running them, so "due" is decided by its own code, not by a shortcut of ours.


class Store:
    key = ""
    env: dict[str, str] = {}

    def populate(self, n: int) -> None:
        raise NotImplementedError

    def set_last_run(self, n: int, when: Callable[[int], dt.datetime]) -> None:
        raise NotImplementedError

    def start(self, label: str) -> Beat:
        saved = dict(os.environ)
        os.environ.update(self.env)
        try:
            return Beat(label, SCHEDULERS[self.key])
        finally:
            os.environ.clear()
            os.environ.update(saved)


class DurableStore(Store):
    """durablebeat: rows of ``durablebeat_schedule``; bench.py's own setup."""

    key = "durablebeat"

    def populate(self, n: int) -> None:
        bench.populate(n)

    def set_last_run(self, n: int, when: Callable[[int], dt.datetime]) -> None:
        """(burst only: restart and idle are bench.py's own.) All rows due at ``when``."""
        from durablebeat.models import Run, Schedule

        Run.objects.all().delete()
        Schedule.objects.update(next_fire_at=when(1))


class DjangoCeleryBeatStore(Store):
    """django-celery-beat: ``PeriodicTask`` rows on one ``IntervalSchedule`` (1 day). An
    interval task is due when ``last_run_at + every <= now`` (celery's ``schedule.is_due``);
    beat reloads every row when ``PeriodicTasks.last_update`` changes (``update_changed``),
    which bulk writes do not do by themselves."""

    key = "django-celery-beat"

    def populate(self, n: int) -> None:
        from django_celery_beat.models import IntervalSchedule, PeriodicTask, PeriodicTasks

        PeriodicTask.objects.all().delete()
        every, _ = IntervalSchedule.objects.get_or_create(every=1, period=IntervalSchedule.DAYS)
        last = now()
        PeriodicTask.objects.bulk_create(
            (
                PeriodicTask(
                    name=f"tenant-{i:06d}",
                    task=TASK,
                    interval=every,
                    kwargs=json.dumps({"tenant": i}),
                    last_run_at=last,
                )
                for i in range(n)
            ),
            batch_size=5000,
        )
        PeriodicTasks.update_changed()

    def set_last_run(self, n: int, when: Callable[[int], dt.datetime]) -> None:
        from django.db.models import Case, When
        from django_celery_beat.models import PeriodicTask, PeriodicTasks

        first, rest = when(0), when(1)
        PeriodicTask.objects.filter(name__startswith="tenant-").update(
            last_run_at=Case(When(name="tenant-000000", then=first - DAY), default=rest - DAY),
            total_run_count=0,
        )
        PeriodicTasks.update_changed()


class RedBeatStore(Store):
    """celery-redbeat: per schedule a hash ``redbeat:<name>`` (definition, meta with
    ``last_run_at``) and its due timestamp as score in the sorted set ``redbeat::schedule``;
    beat loads the entries whose score is <= now and fires those ``is_due``. The score is
    written as redbeat writes it after a run (``last_run_at + every``)."""

    key = "celery-redbeat"

    def __init__(self, r: Any) -> None:
        self.r = r

    def clear(self) -> None:
        keys = list(self.r.scan_iter("redbeat:*", count=5000))
        for i in range(0, len(keys), 5000):
            self.r.unlink(*keys[i : i + 5000])

    def populate(self, n: int) -> None:
        from celery.schedules import schedule
        from redbeat.decoder import RedBeatJSONEncoder

        self.clear()
        every = schedule(DAY)
        with self.r.pipeline(transaction=False) as pipe:
            for i in range(n):
                name = f"tenant-{i:06d}"
                definition = {
                    "name": name,
                    "task": TASK,
                    "args": [],
                    "kwargs": {"tenant": i},
                    "options": {},
                    "schedule": every,
                    "enabled": True,
                }
                pipe.hset(
                    f"redbeat:{name}", "definition", json.dumps(definition, cls=RedBeatJSONEncoder)
                )
                if i % 1000 == 999:
                    pipe.execute()
            pipe.execute()
        self.set_last_run(n, lambda i: now() + DAY)

    def set_last_run(self, n: int, when: Callable[[int], dt.datetime]) -> None:
        from redbeat.decoder import RedBeatJSONEncoder

        self.r.delete("redbeat::lock")  # a lock left by a killed beat would hold the next
        with self.r.pipeline(transaction=False) as pipe:
            for i in range(n):
                key = f"redbeat:tenant-{i:06d}"
                due = when(i)
                meta = {"last_run_at": due - DAY, "total_run_count": 0}
                pipe.hset(key, "meta", json.dumps(meta, cls=RedBeatJSONEncoder))
                pipe.zadd("redbeat::schedule", {key: due.timestamp()})
                if i % 1000 == 999:
                    pipe.execute()
            pipe.execute()


class PersistentStore(Store):
    """celery's own beat: the N entries in ``beat_schedule`` (settings, read at boot) and the
    shelve file, whose ``entries`` keep each one's ``last_run_at`` across restarts (boot merges
    ``beat_schedule`` into it, keeping ``last_run_at``). Nothing can change while it runs, so
    every measurement writes the file and then starts beat."""

    key = "celery PersistentScheduler"

    def populate(self, n: int) -> None:
        self.n = n
        self.env = {"COMPARE_BEAT_SCHEDULE_N": str(n)}

    def set_last_run(self, n: int, when: Callable[[int], dt.datetime]) -> None:
        import celery
        from celery.beat import ScheduleEntry
        from celery.schedules import schedule

        from project.celery import app

        remove_schedule_file()
        entries = {}
        for i in range(n):
            name = f"tenant-{i:06d}"
            entries[name] = ScheduleEntry(
                name=name,
                task=TASK,
                schedule=schedule(DAY),
                kwargs={"tenant": i},
                last_run_at=when(i) - DAY,
                app=app,
            )
        with shelve.open(str(SCHEDULE_FILE)) as store:
            store["entries"] = entries
            store["__version__"] = celery.__version__
            store["tz"] = app.conf.timezone
            store["utc_enabled"] = app.conf.enable_utc


# --- measurements ----------------------------------------------------------------------------


def restart(store: Store, r: Any, n: int, label: str) -> tuple[float, Beat]:
    """One schedule due now among N: seconds from starting beat to its message."""
    if isinstance(store, DurableStore):
        return bench.measure_restart(r, label)
    t = now()
    store.set_last_run(n, lambda i: t if i == 0 else t + DAY)
    r.delete(QUEUE)
    beat = store.start(label)
    seen = wait_for(lambda: r.llen(QUEUE) > 0, 60)
    return (seen or float("nan")) - beat.started, beat


def tenants_in_queue(r: Any) -> dict[int, int]:
    """Messages per tenant in the queue (the task's kwargs, whichever scheduler sent it)."""
    counts: dict[int, int] = {}
    for raw in r.lrange(QUEUE, 0, -1):
        message = json.loads(raw)
        _, kwargs, _ = json.loads(b64decode(message["body"]))
        counts[kwargs["tenant"]] = counts.get(kwargs["tenant"], 0) + 1
    return counts


def burst(store: Store, r: Any, n: int, lead: float, cap: float, label: str) -> dict[str, Any]:
    """A fresh beat, N schedules all due in the same second ``lead`` s later; watched until
    all N are on the broker or ``cap`` s after the due time."""
    r.delete(QUEUE)
    due = now().replace(microsecond=0) + dt.timedelta(seconds=lead + 1)
    store.set_last_run(n, lambda i: due)
    beat = store.start(label)
    t_due = due.timestamp()
    first = last = None
    count = 0
    while time.time() < t_due + cap:
        count = r.llen(QUEUE)
        if count and first is None:
            first = time.time()
        if count >= n:
            last = time.time()
            break
        time.sleep(0.005)
    capped = last is None
    end = last if last is not None else time.time()
    time.sleep(0.5)  # anything beyond N would be a duplicate: give it a moment to show
    counts = tenants_in_queue(r)
    rss = beat.peak_rss_mib()
    beat.stop()
    if isinstance(store, DurableStore):
        bench.reset()
    r.delete(QUEUE)
    return {
        "rate": (len(counts) if capped else n) / (end - t_due),
        "late_first": (first - t_due) if first else float("nan"),
        "late_last": end - t_due,
        "reached": float(len(counts)),
        "duplicates": float(sum(c - 1 for c in counts.values())),
        "lost": float("nan") if capped else float(n - len(counts)),
        "capped": capped,
        "rss": rss,
    }


def run_scheduler(store: Store, r: Any, n: int, args: argparse.Namespace) -> dict[str, Any]:
    tag = store.key.split()[-1].lower()
    print(f"  {store.key} ...", flush=True)
    store.populate(n)
    restarts: list[float] = []
    rss: list[float] = []
    beat: Beat | None = None
    for i in range(args.repeats):
        if beat is not None:
            rss.append(beat.peak_rss_mib())
            beat.stop()
        took, beat = restart(store, r, n, f"{tag}-n{n}-restart{i}")
        restarts.append(took)
    assert beat is not None
    idle = bench.measure_idle(beat, args.idle_window)
    rss.append(beat.peak_rss_mib())
    beat.stop()
    cap = args.burst_cap
    bursts = [
        burst(store, r, n, args.lead, cap, f"{tag}-n{n}-burst{i}") for i in range(args.repeats)
    ]
    rss += [b["rss"] for b in bursts]
    return {
        "restart": restarts,
        "idle_cpu": [idle[0]],
        "idle_xacts": [idle[1]],
        "rate": [b["rate"] for b in bursts],
        "late_first": [b["late_first"] for b in bursts],
        "late_last": [b["late_last"] for b in bursts],
        "reached": [b["reached"] for b in bursts],
        "duplicates": [b["duplicates"] for b in bursts],
        "lost": [b["lost"] for b in bursts],
        "capped": [b["capped"] for b in bursts],
        "rss": [max(rss)],
    }


# --- report ----------------------------------------------------------------------------------


def med(values: list[float]) -> float:
    values = [v for v in values if v == v]
    return statistics.median(values) if values else float("nan")


def fmt(value: float) -> str:
    if value != value:
        return "n/a"
    if abs(value) >= 100:
        return f"{value:,.0f}"
    if abs(value) >= 10:
        return f"{value:.1f}"
    return f"{value:.2f}"


def cell(values: list[float], base: list[float] | None, floor: list[float] | None) -> str:
    text = fmt(med(values))
    good = [v for v in values if v == v]
    if len(good) > 1 and fmt(min(good)) != fmt(max(good)):
        text += f" [{fmt(min(good))}..{fmt(max(good))}]"
    ratios = []
    for what, ref in (("db", base), ("floor", floor)):
        if ref is not None and med(ref) == med(ref) and med(ref) and med(values) == med(values):
            ratios.append(f"{med(values) / med(ref):.2f}x {what}")
    return text + (f" ({', '.join(ratios)})" if ratios else "")


def table(n: int, results: dict[str, dict[str, Any]], floors: dict[str, list[float]]) -> None:
    names = list(results)
    base = results["durablebeat"]
    print(f"\nN = {n:,}\n")
    print("| | floor | " + " | ".join(names) + " |")
    print("|---|---|" + "---|" * len(names))
    rows: list[tuple[str, str, str | None]] = [
        ("restart → first message, s", "restart", "restart"),
        ("idle beat CPU, s per minute", "idle_cpu", None),
        ("idle database transactions/s", "idle_xacts", None),
        ("burst msgs/s, due time → last", "rate", "send_task"),
        ("burst lateness of first, s", "late_first", None),
        ("burst lateness of last, s", "late_last", None),
        ("burst messages on the broker", "reached", None),
        ("burst duplicate slots", "duplicates", None),
        ("burst lost slots", "lost", None),
        ("beat peak RSS, MiB", "rss", "beat_rss"),
    ]
    for title, key, floor_key in rows:
        floor = floors[floor_key] if floor_key else None
        cells = []
        for name in names:
            res = results[name]
            if key == "idle_xacts" and name in ("celery-redbeat", "celery PersistentScheduler"):
                cells.append("no database")
                continue
            text = cell(res[key], None if name == "durablebeat" else base[key], floor)
            if key in ("rate", "late_last", "reached") and any(res["capped"]):
                text += f" capped {sum(res['capped'])}/{len(res['capped'])}"
            cells.append(text)
        print(
            f"| {title} | {cell(floor, None, None) if floor else ''} | " + " | ".join(cells) + " |"
        )
    print(flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("-n", type=int, nargs="+", default=[1000, 10000])
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--idle-window", type=float, default=20.0)
    parser.add_argument("--lead", type=float, default=10.0, help="beat starts this long before")
    parser.add_argument("--burst-cap", type=float, default=180.0, help="s after the due time")
    parser.add_argument(
        "--conn-max-age",
        default="none",
        help="Django CONN_MAX_AGE of every beat: none (persistent) or seconds; Django's default"
        " 0 reconnects on each of django-celery-beat's ticks",
    )
    parser.add_argument("--only", nargs="*", default=list(SCHEDULERS), help="scheduler names")
    args = parser.parse_args()
    os.environ["COMPARE_CONN_MAX_AGE"] = args.conn_max_age
    OUT.mkdir(parents=True, exist_ok=True)
    r = bench.setup()
    remove_schedule_file()
    print(
        f"side by side, {now():%Y-%m-%d %H:%M} UTC, {os.cpu_count()} cores, "
        f"CONN_MAX_AGE {args.conn_max_age}, max_interval 5 s",
        flush=True,
    )
    floors: dict[str, list[float]] = {"send_task": [], "restart": [], "beat_rss": []}
    for _ in range(args.repeats):
        floors["send_task"].append(bench.send_task_floor(r, min(max(args.n), 10000)))
        floors["restart"].append(bench.restart_floor(r)[0])
        floors["beat_rss"].append(bench.celery_beat_rss())
    stores: list[Store] = [
        DurableStore(),
        DjangoCeleryBeatStore(),
        RedBeatStore(r),
        PersistentStore(),
    ]
    for n in args.n:
        print(f"\nN = {n:,} ({args.repeats} runs)", flush=True)
        results = {
            s.key: run_scheduler(s, r, n, args)
            for s in stores
            if s.key == "durablebeat" or s.key in args.only
        }
        table(n, results, floors)
    RedBeatStore(r).clear()


if __name__ == "__main__":
    main()
