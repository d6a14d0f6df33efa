"""R34 with real processes: a beat and a worker, a task whose body takes longer than its
period under each overlap policy, and the worker killed (SIGKILL) once mid-run, then another
started. ``buffer_one`` sends one follow-up the moment each run ends, ``replace`` (with
``terminate``) never has two bodies running, ``allow`` with ``max_in_flight: 2`` never more
than two. The ledger says it, and the task bodies' own records (``Execution``) agree.

Scaled from issue 37's "a 40-s task every 15 s" to a 5-s task every 2 s: the same ratio of
body to period, so every policy meets a run in flight at almost every slot."""

from __future__ import annotations

import datetime as dt
import itertools

import pytest
from django.utils import timezone

from durablebeat.enums import Reason, RunState
from durablebeat.models import Run
from tests.e2eapp.models import Execution

from .harness import Cluster, wait_until

pytestmark = pytest.mark.django_db(transaction=True)

TASK = "tests.e2eapp.tasks.sleep_marked"
BODY = 5  # seconds a body sleeps
EVERY = 2  # seconds between slots
#: a worker silent for 4 s is dead; reclaim rounds every second (R15)
FAST_RECLAIM = {
    "DURABLEBEAT_GC_INTERVAL": "1",
    "DURABLEBEAT_WORKER_HEARTBEAT_INTERVAL": "1",
    "DURABLEBEAT_WORKER_DEAD_AFTER": "4",
    "DURABLEBEAT_RECLAIM_MARGIN": "2",
}
#: issue 37: a kept slot goes "right after" the end it waited for
RIGHT_AFTER = dt.timedelta(seconds=1)


def _entry(**policy: object) -> dict[str, object]:
    return {
        "task": TASK,
        "every": EVERY,
        "args": [BODY],
        "durablebeat": {"startup_grace": 1, **policy},
    }


def _fired(name: str) -> list[Run]:
    return list(
        Run.objects.filter(schedule__name=name).exclude(state=RunState.SKIPPED).order_by("slot")
    )


def _ended(name: str, since: dt.datetime) -> int:
    final = (RunState.SUCCEEDED, RunState.FAILED)
    return Run.objects.filter(schedule__name=name, state__in=final, finished_at__gt=since).count()


def _bodies(name: str) -> dict[str, dict[str, dt.datetime]]:
    """Each task id's body records: when it started and, unless cut short, when it ended."""
    seen: dict[str, dict[str, dt.datetime]] = {}
    for e in Execution.objects.filter(schedule=name):
        seen.setdefault(e.task_id, {})[e.reason] = e.at
    return seen


def _most_at_once(spans: list[tuple[dt.datetime, dt.datetime]]) -> int:
    edges = sorted([(a, 1) for a, _ in spans] + [(b, -1) for _, b in spans])
    most = running = 0
    for _, step in edges:  # an end before a start at the same instant (-1 sorts first)
        running += step
        most = max(most, running)
    return most


@pytest.mark.long
def test_each_overlap_policy_with_a_real_worker_killed_once_mid_run(cluster: Cluster):
    cluster.settings = FAST_RECLAIM
    cluster.beat_schedule = {
        "buffered": _entry(overlap="buffer_one"),
        "replaced": _entry(overlap="replace", terminate=True),
        "bounded": _entry(overlap="allow", max_in_flight=2),
    }
    doomed = cluster.worker(concurrency=6)
    wait_until(lambda: "ready" in doomed.log(), 60, what="worker ready")
    beat = cluster.beat()
    started = timezone.now()
    wait_until(lambda: _ended("buffered", started) >= 2, 40, what="two buffer_one runs end")

    # the worker dies mid-run: a buffered run is running (every slot is kept behind one)
    wait_until(
        lambda: Run.objects.filter(schedule__name="buffered", state=RunState.STARTED).exists(),
        20,
        what="a buffer_one run running",
    )
    doomed.kill()
    killed_at = timezone.now()
    lost = wait_until(
        lambda: Run.objects.filter(schedule__name="buffered", state=RunState.LOST).first(),
        30,
        what="the killed buffer_one run reclaimed as lost",
    )
    rescuer = cluster.worker(concurrency=6)
    wait_until(lambda: "ready" in rescuer.log(), 60, what="second worker ready")
    back = timezone.now()
    wait_until(lambda: _ended("buffered", back) >= 2, 40, what="two more buffer_one runs end")
    assert beat.terminate() == 0
    rescuer.terminate()
    stopped = timezone.now()

    # --- buffer_one: one run in flight at a time; each end sends the one slot kept -------
    runs = _fired("buffered")
    assert [r for r in runs if r.state == RunState.LOST] == [lost]
    for prev, nxt in itertools.pairwise(runs):
        assert nxt.reason == Reason.BUFFERED, f"{nxt} is not a kept slot: {nxt.reason}"
        assert prev.finished_at is not None and nxt.published_at is not None
        if prev.state == RunState.LOST:
            # its worker's death is the end: the kept slot goes once it is seen (R15)
            assert killed_at < nxt.published_at <= prev.finished_at + RIGHT_AFTER
        else:
            assert prev.finished_at <= nxt.published_at <= prev.finished_at + RIGHT_AFTER, (
                f"{nxt} sent {nxt.published_at} for an end at {prev.finished_at}"
            )
    skipped = Run.objects.filter(schedule__name="buffered", state=RunState.SKIPPED)
    assert skipped.exists() and all("already kept" in r.detail for r in skipped)
    assert len({r.slot for r in Run.objects.filter(schedule__name="buffered")}) == (
        Run.objects.filter(schedule__name="buffered").count()
    )  # one run per slot (R4)

    # --- replace with terminate: never two bodies running --------------------------------
    runs = _fired("replaced")
    replaced = [r for r in runs if r.state == RunState.REPLACED]
    assert len(replaced) >= 3, [(r.slot, r.state) for r in runs]
    bodies = _bodies("replaced")
    for run in replaced:
        assert "end" not in bodies.get(run.task_id or "", {}), f"{run} ran to its end"
    spans = []
    for run in runs:
        body = bodies.get(run.task_id or "")
        if body is None or "start" not in body:
            continue  # revoked before it started: never ran
        end = body.get("end") or run.finished_at or stopped
        if run.state == RunState.LOST or end > killed_at > body["start"]:
            end = min(end, killed_at)
        spans.append((body["start"], end))
    assert spans and _most_at_once(spans) == 1

    # --- allow with max_in_flight 2: never three -----------------------------------------
    runs = _fired("bounded")
    bodies = _bodies("bounded")
    spans = []
    for run in runs:
        body = bodies.get(run.task_id or "")
        if body is None or "start" not in body:
            continue
        end = body.get("end") or stopped
        if "end" not in body and body["start"] < killed_at:
            end = killed_at  # killed with its worker
        spans.append((body["start"], end))
    assert _most_at_once(spans) == 2
    held = Run.objects.filter(schedule__name="bounded", state=RunState.SKIPPED)
    assert held.exists() and all("max_in_flight 2" in r.detail for r in held)
