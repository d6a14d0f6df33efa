"""Soak (R27): real ``celery beat`` and ``celery worker`` on PostgreSQL and Redis for
``--minutes``, beat stopped with SIGTERM every few minutes and held down 10 to 100 s (a
deploy, or past the deploy grace an outage), ``durablebeat check`` run every 30 s as the
real command. Every finding is recorded and classified:

- ``no_beat`` while beat has been down longer than the deploy grace: **true**;
- ``no_beat`` within a few seconds of the bound: **edge** (the check straddled it);
- anything else: **false**; and a check past the bound with no ``no_beat``: **missed**.

At the end it counts fires and executions: no slot may have run twice. Not part of CI's
default run (it takes as long as you ask)::

    .venv/bin/python -m benchmarks.soak --minutes 25

It uses its own database, ``durablebeat_soak`` (override: ``SOAK_DATABASE_URL``), created
afresh, and the Redis database ``DURABLEBEAT_TEST_REDIS_DB`` (default 13), flushed. The
summary goes to ``test-output/soak/summary.json``, the process logs beside it.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import random
import subprocess
import sys
import time
from typing import Any

from tests.e2e.harness import ROOT, Cluster, Proc, wait_until

OUTPUT = ROOT / "test-output" / "soak"
RECORD = "tests.e2eapp.tasks.record"
SLOW = "tests.e2eapp.tasks.sleep_then_record"
#: ten schedules of every kind: intervals, crontabs, a delivery crontab, overlap skip/allow
BEAT_SCHEDULE: dict[str, Any] = {
    "every5": {"task": RECORD, "every": 5},
    "every10": {"task": RECORD, "every": 10},
    "every30-allow": {"task": RECORD, "every": 30, "durablebeat": {"overlap": "allow"}},
    "every60": {"task": RECORD, "every": 60},
    "slow20-skip": {"task": SLOW, "every": 20, "args": [3]},
    "minutely": {"task": RECORD, "cron": "* * * * *"},
    "every2min": {"task": RECORD, "cron": "*/2 * * * *"},
    "every5min": {"task": RECORD, "cron": "*/5 * * * *"},
    "digest-catch-up": {"task": RECORD, "cron": "*/3 * * * *", "durablebeat": {"catch_up": True}},
}
#: plus one-off (clocked) schedules, this many minutes after the start
ONE_OFFS = (3, 11, 19)
#: a check this close to the deploy grace may see either side of it
EDGE = dt.timedelta(seconds=5)


def _database_url() -> str:
    url = os.environ.get("SOAK_DATABASE_URL", "postgres://postgres@127.0.0.1:5432/durablebeat_soak")
    import psycopg

    base, name = url.rsplit("/", 1)
    with psycopg.connect(
        f"{base}/postgres".replace("postgres://", "postgresql://"), autocommit=True
    ) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{name}"')
    return url


def _manage(cluster: Cluster, *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=ROOT,
        env=cluster.env(),
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def _setup_django(url: str) -> None:
    os.environ["DJANGO_SETTINGS_MODULE"] = "tests.settings"
    os.environ["DATABASE_URL"] = url
    import django

    django.setup()


def _one_offs(start: dt.datetime) -> None:
    from durablebeat.models import Schedule

    for minutes in ONE_OFFS:
        row = Schedule(
            name=f"one-off-{minutes}min",
            task=RECORD,
            kind="clocked",
            clocked_at=start + dt.timedelta(minutes=minutes),
        )
        row.full_clean()
        row.save()


class Soak:
    def __init__(self, cluster: Cluster, grace: float, seed: int) -> None:
        self.cluster = cluster
        self.grace = dt.timedelta(seconds=grace)
        self.random = random.Random(seed)
        self.beat: Proc | None = None
        self.down_since: dt.datetime | None = None
        self.downs: list[float] = []
        self.checks: list[dict[str, Any]] = []

    def now(self) -> dt.datetime:
        return dt.datetime.now(dt.UTC)

    def start_beat(self) -> None:
        self.beat = self.cluster.beat()
        wait_until(lambda: "database reachable" in self.beat.log(), 120, what="beat boot")
        if self.down_since is not None:
            self.downs.append((self.now() - self.down_since).total_seconds())
        self.down_since = None

    def stop_beat(self) -> None:
        assert self.beat is not None
        code = self.beat.terminate(timeout=60)
        assert code == 0, f"beat exited {code} on SIGTERM"
        self.down_since = self.now()

    def check(self) -> None:
        began = self.now()
        done = _manage(self.cluster, "durablebeat", "check", "--json", timeout=120)
        ended = self.now()
        found = json.loads(done.stdout or "[]")
        down_from = self.down_since
        record = {
            "at": began.isoformat(timespec="seconds"),
            "exit": done.returncode,
            "down_for": None if down_from is None else (began - down_from).total_seconds(),
            "findings": [],
            "missed": False,
        }
        past = down_from is not None and began - down_from > self.grace + EDGE
        near = down_from is not None and ended - down_from >= self.grace - EDGE and not past
        for f in found:
            if f["code"] == "no_beat" and past:
                verdict = "true"
            elif f["code"] == "no_beat" and near:
                verdict = "edge"
            else:
                verdict = "false"
            record["findings"].append({**f, "verdict": verdict})
        if past and not any(f["code"] == "no_beat" for f in found):
            record["missed"] = True
        self.checks.append(record)
        print(
            f"{record['at']} exit={record['exit']} down_for={record['down_for']} "
            + " ".join(f"{f['code']}:{f['verdict']}" for f in record["findings"]),
            flush=True,
        )

    def run(self, minutes: float) -> None:
        end = time.monotonic() + minutes * 60
        self.start_beat()
        next_check = time.monotonic() + 30
        next_stop = time.monotonic() + self.random.uniform(120, 240)
        next_start: float | None = None
        while time.monotonic() < end:
            now = time.monotonic()
            if now >= next_check:
                self.check()
                next_check += 30
            elif next_start is None and now >= next_stop:
                self.stop_beat()
                next_start = now + self.random.uniform(10, 100)
            elif next_start is not None and now >= next_start:
                self.start_beat()
                next_start = None
                next_stop = time.monotonic() + self.random.uniform(120, 240)
            else:
                # The soak's own cadence is its input, not a wait on a condition.
                time.sleep(min(1.0, max(0.0, min(next_check, next_start or next_stop) - now)))
        if next_start is not None:
            self.start_beat()


def _ledger() -> dict[str, Any]:
    from django.db.models import Count

    from durablebeat.models import MissedSlots, Run
    from tests.e2eapp.models import Execution

    twice = (
        Execution.objects.exclude(slot="")
        .values("schedule", "slot")
        .annotate(n=Count("id"))
        .filter(n__gt=1)
        .count()
    )
    runs_twice = Run.objects.values("schedule", "slot").annotate(n=Count("id")).filter(n__gt=1)
    return {
        "runs": Run.objects.count(),
        "runs_by_state": dict(Run.objects.values_list("state").annotate(n=Count("id"))),
        "runs_by_reason": dict(Run.objects.values_list("reason").annotate(n=Count("id"))),
        "executions": Execution.objects.count(),
        "slots_executed_twice": twice,
        "slots_claimed_twice": runs_twice.count(),
        "missed_ranges": MissedSlots.objects.count(),
        "missed_slots": sum(MissedSlots.objects.values_list("count", flat=True)),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=25)
    parser.add_argument("--deploy-grace", type=float, default=60, help="DEPLOY_GRACE, s")
    parser.add_argument("--seed", type=int, default=21)
    args = parser.parse_args()
    OUTPUT.mkdir(parents=True, exist_ok=True)
    url = _database_url()
    broker = f"redis://127.0.0.1:6379/{os.environ.get('DURABLEBEAT_TEST_REDIS_DB', '13')}"
    import redis

    redis.Redis.from_url(broker).flushdb()
    cluster = Cluster(url, broker, "soak")
    cluster.beat_schedule = BEAT_SCHEDULE
    cluster.settings = {"DURABLEBEAT_DEPLOY_GRACE": str(args.deploy_grace)}
    migrated = _manage(cluster, "migrate", "-v", "0")
    assert migrated.returncode == 0, migrated.stderr[-3000:]
    _setup_django(url)
    started = dt.datetime.now(dt.UTC)
    _one_offs(started)
    soak = Soak(cluster, args.deploy_grace, args.seed)
    try:
        worker = cluster.worker(concurrency=4)
        wait_until(lambda: "ready" in worker.log(), 120, what="worker ready")
        soak.run(args.minutes)
        time.sleep(15)  # let the last fires complete before counting
        soak.check()
    finally:
        cluster.stop_all()
    verdicts = [f["verdict"] for c in soak.checks for f in c["findings"]]
    summary = {
        "minutes": round((dt.datetime.now(dt.UTC) - started).total_seconds() / 60, 1),
        "deploy_grace_s": args.deploy_grace,
        "restarts": len(soak.downs),
        "downs_s": [round(d) for d in soak.downs],
        "downs_past_grace": sum(d > args.deploy_grace for d in soak.downs),
        "checks": len(soak.checks),
        "findings": len(verdicts),
        "true": verdicts.count("true"),
        "edge": verdicts.count("edge"),
        "false": verdicts.count("false"),
        "missed": sum(c["missed"] for c in soak.checks),
        "false_findings": [
            f for c in soak.checks for f in c["findings"] if f["verdict"] == "false"
        ],
        **_ledger(),
    }
    (OUTPUT / "summary.json").write_text(
        json.dumps({**summary, "checks_log": soak.checks}, indent=1)
    )
    print(json.dumps(summary, indent=1))
    for proc in cluster.procs:
        if "Traceback" in proc.log():
            print(f"{proc.name}: a Traceback in {proc.log_path}")


if __name__ == "__main__":
    main()
