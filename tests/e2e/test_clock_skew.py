"""R26 with real processes whose wall clocks are off (the database, the test and the other
processes on the true clock): a second beat 90 s ahead and a worker 150 s behind.

One cluster for the whole story (economy: one run of about three minutes): two beats, one
of them 90 s ahead, fire a job every 10 s and a crontab every minute; a worker 150 s
behind runs them and an ``overlap="skip"`` job every 10 s whose body takes 25 s. Every task
stamps its execution with the database server's clock (``tests.e2eapp.tasks``
``*_on_db_clock``), the witness on one clock whatever the process's own clock says. Every
violation is collected before the test fails, so that a red run shows them all.

The wall clock is shifted by ``tests/e2e/skew/sitecustomize.py`` (time_machine, started at
interpreter start; ``time.monotonic`` is left alone so timed waits work, and the worker's
pool processes inherit the shift through fork).
"""

from __future__ import annotations

import datetime as dt
import itertools
import socket
from collections import Counter

import pytest

from durablebeat.core import clock
from durablebeat.enums import RunState
from durablebeat.models import MissedSlots, Run
from durablebeat.ops import health
from tests.e2eapp.models import Execution

from .harness import Cluster, wait_until

pytestmark = [pytest.mark.e2e]

TASKS = "tests.e2eapp.tasks"
AHEAD, BEHIND = 90, -150
#: how long after its slot an execution may be stamped: publish, the broker, a loaded host
LATE = dt.timedelta(seconds=8)
SLOW_BODY = 25


def _slot(execution: Execution) -> dt.datetime:
    return dt.datetime.fromisoformat(execution.slot)


def _on_time(name: str, problems: list[str]) -> int:
    """Each fired slot of ``name`` executed once, at or after its slot on the database's
    clock and soon after it; the number of slots checked."""
    fired = set(
        Run.objects.filter(schedule__name=name, task_id__isnull=False)
        .exclude(state__in=(RunState.SKIPPED, RunState.MISSED))
        .values_list("slot", flat=True)
    )
    executions = list(Execution.objects.filter(schedule=name))
    twice = {s: n for s, n in Counter(e.slot for e in executions).items() if n > 1}
    if twice:
        problems.append(f"{name}: slots executed more than once: {twice}")
    for e in executions:
        slot = _slot(e)
        if e.at < slot:
            problems.append(f"{name}: slot {slot:%H:%M:%S} executed early, at {e.at:%H:%M:%S}")
        elif e.at > slot + LATE:
            problems.append(f"{name}: slot {slot:%H:%M:%S} executed late, at {e.at:%H:%M:%S}")
    if {_slot(e) for e in executions} != fired:
        problems.append(f"{name}: fired slots and executions differ")
    return len(fired)


def _overlaps(name: str, problems: list[str]) -> int:
    """Executions of ``name`` as (start, end) on the database's clock: none may start before
    the previous one ended. The number of executions."""
    moves: dict[str, dict[str, dt.datetime]] = {}
    for e in Execution.objects.filter(schedule=name):
        moves.setdefault(e.task_id, {})[e.reason] = e.at
    spans = sorted((m["start"], m.get("end")) for m in moves.values())
    for (start_a, end_a), (start_b, _) in itertools.pairwise(spans):
        if end_a is None or start_b < end_a:
            problems.append(
                f"{name}: the execution started {start_b:%H:%M:%S} overlaps the one started "
                f"{start_a:%H:%M:%S} (ended {end_a and f'{end_a:%H:%M:%S}'})"
            )
    return len(spans)


@pytest.mark.long
def test_beats_and_a_worker_with_clocks_off_fire_on_time_once_and_never_overlap(
    cluster: Cluster,
):
    record = {"task": f"{TASKS}.record_on_db_clock"}
    cluster.beat_schedule = {
        "every10": {**record, "every": 10, "durablebeat": {"startup_grace": 2}},
        "minutely": {**record, "cron": "* * * * *"},
        "slow": {
            "task": f"{TASKS}.sleep_on_db_clock",
            "every": 10,
            "args": [SLOW_BODY],
            "durablebeat": {"startup_grace": 2, "overlap": "skip"},
        },
    }
    worker = cluster.worker(concurrency=4, clock_offset=BEHIND)
    wait_until(lambda: "ready" in worker.log(), 60, what="worker ready")
    right, fast = cluster.beat(), cluster.beat(clock_offset=AHEAD)
    wait_until(lambda: right.booted() and fast.booted(), 60, what="both beats up")
    # Two whole crontab minutes with both beats up (on the true clock: the test's own).
    up = clock.now()
    second_minute = (up + dt.timedelta(minutes=2)).replace(second=0, microsecond=0)
    end = second_minute + dt.timedelta(seconds=10)
    wait_until(lambda: clock.now() > end, 200, interval=1, what="two crontab minutes")

    # check, with every process alive: the two skewed hosts, and nothing else.
    found = health.check(clock.now())
    problems: list[str] = []
    codes = Counter(f.code for f in found)
    if codes != Counter({"clock_skew": 2}):
        problems.append(f"check: {[f.line() for f in found]}")
    messages = " | ".join(f.message for f in found)
    host = socket.gethostname()
    if f"beat {host}:{fast.popen.pid}: its clock is" not in messages:
        problems.append(f"check does not name the fast beat {host}:{fast.popen.pid}: {messages}")
    if f"worker {worker.name}@" not in messages:
        problems.append(f"check does not name the slow worker {worker.name}: {messages}")
    if f"{right.popen.pid}: its clock" in messages:
        problems.append(f"check names the beat on the right clock: {messages}")

    for beat in (right, fast):
        assert beat.terminate() == 0
    # In flight when the beats stopped: the slow body ends within its 25 s.
    wait_until(
        lambda: not Run.objects.filter(state__in=(RunState.PUBLISHED, RunState.STARTED)).exists(),
        SLOW_BODY + 30,
        what="runs in flight to finish",
    )
    every10 = _on_time("every10", problems)
    minutely = _on_time("minutely", problems)
    slow = _overlaps("slow", problems)
    missed = list(MissedSlots.objects.values_list("schedule__name", "reason"))
    if missed:
        problems.append(f"slots recorded as missed while two beats ran: {missed}")
    assert not problems, "\n".join(problems)
    assert every10 >= 6 and minutely >= 2 and slow >= 2, (every10, minutely, slow)
    for proc in (right, fast, worker):
        assert "Traceback" not in proc.log(), f"{proc.name} crashed:\n{proc.log()[-3000:]}"
