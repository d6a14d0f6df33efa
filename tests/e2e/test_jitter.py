"""R35 with real processes: 40 code schedules sharing a slot, a 20-s jitter, a real beat
killed (SIGKILL) inside the window and started again, a real worker. Each slot is sent
once, at its own instant (derived from the name and the slot: the restarted beat sends the
rest at the instants the first one would have), never before it, never at or after the
next slot; the runs name the slot; the messages spread over the window."""

from __future__ import annotations

import datetime as dt

import pytest

from durablebeat.core import jitter, timing
from durablebeat.enums import RunState
from durablebeat.models import Run, Schedule

from .harness import Cluster, wait_until

pytestmark = pytest.mark.django_db(transaction=True)

N = 40
EVERY = 60  # seconds: one slot per schedule in the test's time
JITTER = dt.timedelta(seconds=20)
#: the longest a slot may go after its instant: beat's restart falls inside the window, and
#: a slot whose instant passed meanwhile goes at the new beat's first look (R7: within
#: DURABLEBEAT_LATE_AFTER it is on time)
LATE_AFTER = dt.timedelta(seconds=10)


def _first_runs() -> list[Run]:
    return list(Run.objects.filter(schedule__name__startswith="digest-").order_by("slot"))


def test_a_jittered_burst_spreads_over_the_window_across_a_beat_killed_inside_it(
    cluster: Cluster,
):
    cluster.beat_schedule = {
        f"digest-{i}": {
            "task": "tests.e2eapp.tasks.record",
            "every": EVERY,
            "durablebeat": {"startup_grace": 3, "jitter": JITTER.total_seconds()},
        }
        for i in range(N)
    }
    worker = cluster.worker(concurrency=4)
    wait_until(lambda: "ready" in worker.log(), 60, what="worker ready")
    first = cluster.beat()
    rows = wait_until(
        lambda: (
            r
            if len(
                r := list(
                    Schedule.objects.filter(name__startswith="digest-", next_slot__isnull=False)
                )
            )
            == N
            else None
        ),
        60,
        what="every schedule's first slot and its instant stored",
    )
    slots = {r.name: r.next_slot for r in rows}
    spec = timing.Interval(dt.timedelta(seconds=EVERY))
    instants = {name: jitter.instant(name, spec, slot, JITTER) for name, slot in slots.items()}
    assert {r.name: r.next_fire_at for r in rows} == instants
    slot = min(slots.values())

    # SIGKILL inside the window, once part of the burst went out; a new beat takes over
    wait_until(
        lambda: Run.objects.filter(slot__gte=slot).count() >= N // 4, 40, what="a quarter sent"
    )
    first.kill()
    cluster.beat()
    wait_until(
        lambda: (
            Run.objects.filter(
                schedule__name__startswith="digest-", state=RunState.SUCCEEDED
            ).count()
            >= N
        ),
        60,
        what="every slot run by the worker",
    )

    runs = _first_runs()
    assert len(runs) == N, "each slot once"
    for run in runs:
        name = run.schedule.name
        assert run.slot == slots[name], f"{name}: its run is named by the slot"
        assert run.published_at is not None
        assert run.published_at >= instants[name], f"{name} went before its instant"
        assert run.published_at - instants[name] <= LATE_AFTER, f"{name} went late"
        assert run.published_at < run.slot + dt.timedelta(seconds=EVERY)  # before the next slot
    seconds = {int((run.published_at - slot).total_seconds()) for run in runs}
    assert len(seconds) >= 10, f"not spread: sent in seconds {sorted(seconds)} of the window"

    nxt = Schedule.objects.get(name="digest-0")
    following = slots["digest-0"] + dt.timedelta(seconds=EVERY)
    assert nxt.next_slot == following
    assert nxt.next_fire_at == jitter.instant("digest-0", spec, following, JITTER)
