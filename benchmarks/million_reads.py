"""What a person's or a probe's read costs at 1,000,000 schedules beside 10,000 (R33, issue
36 item 4): nothing is asserted, figures printed (median of the repeats, [min..max]).

    .venv/bin/python -m benchmarks.million_reads                       # 10,000 and 1,000,000
    .venv/bin/python -m benchmarks.million_reads --sizes 10000,100000  # a quicker try
    .venv/bin/python -m benchmarks.million_reads --keep                # keep the databases

One PostgreSQL database per size (``bench_million_reads_<n><DURABLEBEAT_TEST_SUFFIX>``),
created, migrated and filled in the server (``INSERT ... SELECT`` over
``generate_series``: the fastest fill, no row crosses the wire), dropped at the end unless
``--keep``. The rows are the per-customer digest of docs/from-code.md: a daily crontab at
the customer's hour in one of 10 zones, next fires known, each with its last two days of
runs (one in a hundred failed), a beat alive for the last six days; and a few rows for each
finding a person reads: 3 stuck, 3 set aside (bad rows), 3 overdue, 3 failing for days.

Then, at each size in turn (round-robin, so both see the same load of the shared machine):
``check``, the liveness probe (``check --only no_beat,overdue``, in process and as its own
process, as a probe runs it), ``status``, ``status --all --json`` (streamed to /dev/null),
``report --since 48h``, the admin's schedule list, its search by name (exact, and a prefix),
its filters, its second page, a schedule's page (Django's test client, a logged-in
superuser), and ``api.list_schedules(limit=100)``. ``--only 'LABEL;...'`` measures these
alone (e.g. a run on an older release, which lacks the options, skips what it lacks).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

SERVER = os.environ.get("BENCH_SERVER_URL", "postgres://postgres@127.0.0.1:5432")
SUFFIX = os.environ.get("DURABLEBEAT_TEST_SUFFIX", "")
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "benchmarks.settings")


def name(n: int) -> str:
    return f"bench_million_reads_{n}{SUFFIX}"


os.environ["BENCH_DATABASE_URL"] = f"{SERVER}/{name(0)}"

ZONES = (
    "UTC",
    "Europe/Berlin",
    "Europe/London",
    "America/New_York",
    "America/Los_Angeles",
    "America/Sao_Paulo",
    "Asia/Tokyo",
    "Asia/Kolkata",
    "Australia/Sydney",
    "Africa/Lagos",
)
#: the rows each finding reads, a few of each: (what, how many)
PROBLEMS = 3


def use(n: int) -> None:
    """Point this process's Django connection at one size's database."""
    from django.db import connection

    connection.close()
    connection.settings_dict["NAME"] = name(n)
    os.environ["BENCH_DATABASE_URL"] = f"{SERVER}/{name(n)}"


def create(n: int) -> None:
    import psycopg

    with psycopg.connect(f"{SERVER}/postgres", autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name(n)}"')
        conn.execute(f'CREATE DATABASE "{name(n)}"')


def drop(sizes: list[int]) -> None:
    import psycopg
    from django.db import connection

    connection.close()
    with psycopg.connect(f"{SERVER}/postgres", autocommit=True) as conn:
        for n in sizes:
            conn.execute(f'DROP DATABASE IF EXISTS "{name(n)}"')


#: one digest per customer: its hour and zone from its number, its next fire the next
#: local ``hour:00`` after now (computed by the server, as a writer would have)
SCHEDULES = """
INSERT INTO durablebeat_schedule (
    name, task, args, kwargs, queue, routing_key, headers, exchange, exchange_type,
    serializer, compression, shadow, description, kind, minute, hour, day_of_week,
    day_of_month, month_of_year, timezone, relative, solar_event, custom_schedule, enabled,
    enabled_at, source, catch_up, overlap, next_fire_at, next_fire_reason, last_fired_at,
    last_completed_at, last_outcome, stuck_reason, error, created_at, updated_at
)
SELECT
    'digest-' || lpad(i::text, 7, '0'), 'bench.noop', '[]', ('{"customer_id": ' || i || '}')::jsonb,
    'mail', '', '{}', '', '', '', '', '', '', 'crontab', '0', (i %% 24)::text, '*', '*', '*',
    z.zone, false, '', '', true, NULL, 'database', true, 'skip', nf.at, 'scheduled',
    nf.at - interval '1 day', nf.at - interval '1 day' + interval '30 seconds', 'succeeded',
    '', '', now() - interval '30 days', now() - interval '30 days'
FROM generate_series(1, %(n)s) AS i,
LATERAL (SELECT (%(zones)s::text[])[1 + i %% 10] AS zone) AS z,
LATERAL (
    SELECT CASE WHEN t > now() THEN t ELSE t + interval '1 day' END AS at
    FROM (
        SELECT (date_trunc('day', now() AT TIME ZONE z.zone) + make_interval(hours => i %% 24))
            AT TIME ZONE z.zone AS t
    ) AS today
) AS nf
"""

#: each schedule's runs of its last two slots, from the one boot, one in a hundred failed
RUNS = """
INSERT INTO durablebeat_run (
    schedule_id, slot, boot_id, reason, state, task_id, claimed_at, published_at,
    publish_attempts, started_at, finished_at, worker, soft_time_limit_exceeded, detail, error
)
SELECT
    s.id, s.next_fire_at - d * interval '1 day', %(boot)s, 'scheduled',
    CASE WHEN (s.id + d) %% 100 = 0 THEN 'failed' ELSE 'succeeded' END,
    gen_random_uuid()::text,
    s.next_fire_at - d * interval '1 day', s.next_fire_at - d * interval '1 day', 1,
    s.next_fire_at - d * interval '1 day' + interval '1 second',
    s.next_fire_at - d * interval '1 day' + interval '30 seconds', 'worker@host', false, '', ''
FROM durablebeat_schedule AS s, generate_series(1, 2) AS d
"""

#: a few rows for each thing a person reads first (by number: the same rows at each size)
PROBLEM_ROWS = (
    # stuck for two hours
    "UPDATE durablebeat_schedule SET stuck_since = now() - interval '2 hours', "
    "stuck_reason = 'a run is still in flight (overlap skip)' WHERE name = ANY(%(stuck)s)",
    # set aside by beat
    "UPDATE durablebeat_schedule SET error = 'bench: an unknown time zone' "
    "WHERE name = ANY(%(bad)s)",
    # beat alive, the next fire an hour past
    "UPDATE durablebeat_schedule SET next_fire_at = now() - interval '1 hour' "
    "WHERE name = ANY(%(overdue)s)",
    # no success for five days
    "UPDATE durablebeat_schedule SET last_completed_at = now() - interval '5 days', "
    "last_outcome = 'failed', last_failed_at = now() - interval '1 day' "
    "WHERE name = ANY(%(failing)s)",
)


def problem_names(n: int) -> dict[str, list[str]]:
    step = n // (4 * PROBLEMS + 1)
    names = [f"digest-{(k + 1) * step:07d}" for k in range(4 * PROBLEMS)]
    kinds = ("stuck", "bad", "overdue", "failing")
    return {kind: names[i * PROBLEMS : (i + 1) * PROBLEMS] for i, kind in enumerate(kinds)}


def fill(n: int) -> None:
    import uuid

    from django.core.management import call_command
    from django.db import connection

    start = time.perf_counter()
    create(n)
    use(n)
    call_command("migrate", verbosity=0)
    boot = str(uuid.uuid4())
    with connection.cursor() as cur:
        cur.execute(SCHEDULES, {"n": n, "zones": list(ZONES)})
        cur.execute(
            "INSERT INTO durablebeat_boot (id, hostname, pid, started_at, heartbeat_at, version) "
            "VALUES (%s, 'bench-beat', 4242, now() - interval '6 days', now(), '')",
            [boot],
        )
        cur.execute(RUNS, {"boot": boot})
        names = problem_names(n)
        for sql in PROBLEM_ROWS:
            cur.execute(sql, names)
        cur.execute("VACUUM ANALYZE")
    took = time.perf_counter() - start
    print(f"filled {name(n)}: {n:,} schedules, {2 * n:,} runs in {took:.0f} s", flush=True)


def alive(n: int) -> None:
    """What a live beat leaves: its heartbeat now, and the next fires that passed since the
    fill a day on (all but the overdue and failing rows'): every round reads one picture."""
    from django.db import connection

    with connection.cursor() as cur:
        cur.execute("UPDATE durablebeat_boot SET heartbeat_at = now()")
        cur.execute(
            "UPDATE durablebeat_schedule SET next_fire_at = next_fire_at + interval '1 day', "
            "last_fired_at = last_fired_at + interval '1 day', "
            "last_completed_at = last_completed_at + interval '1 day' "
            "WHERE next_fire_at < now() AND NOT name = ANY(%s)",
            [problem_names(n)["overdue"] + problem_names(n)["failing"]],
        )


# --- measurements -----------------------------------------------------------------------


def command(*args: str, out: Callable[[], Any] = io.StringIO) -> Callable[[], Any]:
    """``manage.py durablebeat <args>`` in this process, its output kept out of sight."""
    from django.core.management import call_command

    def run() -> None:
        with contextlib.suppress(SystemExit), out() as stdout:
            call_command("durablebeat", *args, stdout=stdout, stderr=io.StringIO())

    return run


def devnull() -> Any:
    return open(os.devnull, "w")  # closed by command's with


def process(*args: str) -> Callable[[], Any]:
    """``manage.py durablebeat <args>`` as its own process, as a probe runs it."""
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "benchmarks.settings"}
    argv = [sys.executable, "-m", "django", "durablebeat", *args]

    def run() -> None:
        subprocess.run(argv, env=env, stdout=subprocess.DEVNULL, check=False)

    return run


def page(c: Any, url: str) -> Callable[[], Any]:
    def get() -> None:
        response = c.get(url)
        assert response.status_code == 200, (url, response.status_code)

    return get


def login() -> Any:
    from django.contrib.auth.models import User
    from django.test import Client

    user, _ = User.objects.get_or_create(
        username="bench", defaults={"is_staff": True, "is_superuser": True}
    )
    c = Client(HTTP_HOST="localhost")  # one of the demo project's ALLOWED_HOSTS
    c.force_login(user)
    return c


def listing(**kwargs: Any) -> Callable[[], Any]:
    from durablebeat import api

    def run() -> None:
        for _ in api.list_schedules(**kwargs):
            pass

    return run


def probes(n: int) -> dict[str, Callable[[], Any]]:
    from durablebeat.models import Schedule

    c = login()
    middle = f"digest-{n // 2:07d}"
    pk = Schedule.objects.get(name=middle).pk
    admin = "/admin/durablebeat/schedule/"
    return {
        "check": command("check"),
        "check --only no_beat,overdue": command("check", "--only", "no_beat,overdue"),
        "the probe, its own process": process("check", "--only", "no_beat,overdue"),
        "status": command("status"),
        "status --all --json > /dev/null": command("status", "--all", "--json", out=devnull),
        "report --since 48h": command("report", "--since", "48h"),
        "admin: schedules list": page(c, admin),
        "admin: search, a name": page(c, f"{admin}?q={middle}"),
        "admin: search, a prefix": page(c, f"{admin}?q={middle[:-2]}"),
        "admin: list, page 2": page(c, f"{admin}?p=2"),
        "admin: filter stuck": page(c, f"{admin}?stuck=yes"),
        "admin: filter overdue": page(c, f"{admin}?overdue=yes"),
        "admin: filter bad row": page(c, f"{admin}?invalid=yes"),
        "admin: filter failed": page(c, f"{admin}?last_outcome__exact=failed"),
        "admin: filter disabled": page(c, f"{admin}?enabled__exact=0"),
        "admin: a schedule's page": page(c, f"{admin}{pk}/change/"),
        "api.list_schedules(limit=100)": listing(limit=100),
    }


def timed(fn: Callable[[], Any]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def fmt(values: list[float]) -> str:
    if not values:
        return "-"
    return f"{statistics.median(values):.3f} [{min(values):.3f}..{max(values):.3f}]"


def measure(sizes: list[int], repeats: int, only: set[str] | None) -> None:
    results: dict[str, dict[int, list[float]]] = {}
    labels: list[str] = []
    for _ in range(repeats):
        for n in sizes:
            use(n)
            alive(n)
            for label, fn in probes(n).items():
                if only is not None and label not in only:
                    continue
                if label not in labels:
                    labels.append(label)
                took = timed(fn)
                results.setdefault(label, {}).setdefault(n, []).append(took)
                print(f"  {n:>9,}  {label}: {took:.3f} s", flush=True)
    print()
    print("| seconds (median [min..max]) | " + " | ".join(f"{n:,} schedules" for n in sizes) + " |")
    print("|---|" + "---|" * len(sizes))
    for label in labels:
        cells = " | ".join(fmt(results[label].get(n, [])) for n in sizes)
        print(f"| {label} | {cells} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="10000,1000000", help="schedules, comma-separated")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--only", default="", help="labels to measure, separated by ;")
    parser.add_argument("--keep", action="store_true", help="keep the databases (and reuse)")
    parser.add_argument("--drop", action="store_true", help="drop the databases and stop")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    import django

    django.setup()
    if args.drop:
        drop(sizes)
        return
    try:
        for n in sizes:
            if args.keep and _filled(n):
                from django.core.management import call_command

                use(n)
                call_command("migrate", verbosity=0)  # a kept database, this release's schema
                continue
            fill(n)
        only = {label.strip() for label in args.only.split(";")} if args.only else None
        measure(sizes, args.repeats, only)
    finally:
        if not args.keep:
            drop(sizes)


def _filled(n: int) -> bool:
    """The database of ``n`` exists with its schedules (a ``--keep`` run before)."""
    import psycopg

    try:
        with psycopg.connect(f"{SERVER}/{name(n)}") as conn:
            row = conn.execute("SELECT count(*) FROM durablebeat_schedule").fetchone()
    except psycopg.Error:
        return False
    return row is not None and row[0] == n


if __name__ == "__main__":
    main()
