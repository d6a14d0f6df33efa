"""R31 with real processes: a beat that reaches PostgreSQL through PgBouncer (started by
scripts/services.sh: transaction pooling on 6432, session pooling on 6433), with Django's
``DISABLE_SERVER_SIDE_CURSORS``. Through transaction pooling its LISTEN is deaf: beat finds
it by its own probe and wakes through the broker, and this process (a saver, as the admin)
publishes its wake-ups there while that beat is alive. Issue 30's probe: one-offs due 1 s
after their save, spread across beat's sleep, every one sent as scheduled, none missed.
"""

from __future__ import annotations

import datetime as dt
import itertools
import time
from collections import Counter
from collections.abc import Iterator

import django
import pytest
from django.db import connection

from durablebeat import wakeup
from durablebeat.beat import notify
from durablebeat.core import clock
from durablebeat.enums import Kind, Reason, RunState
from durablebeat.models import Boot, Incident, Run, Schedule

from .harness import QUIET, Cluster, Proc, wait_until

pytestmark = [QUIET, pytest.mark.e2e, pytest.mark.postgres_only]

RECORD = "tests.e2eapp.tasks.record"
PORTS = {"transaction": 6432, "session": 6433}
#: from a save to its message: a woken beat takes milliseconds; one that sleeps through the
#: change wakes at its heartbeat (20 s here), or finds the slot past LATE_AFTER
PICKUP_BOUND = dt.timedelta(seconds=1.5)


@pytest.fixture
def pooled(cluster: Cluster) -> Iterator[Cluster]:
    cluster.settings |= {
        "E2E_DB_POOLED": "1",
        # production's sleep: a beat that trusts a deaf LISTEN sleeps 20 s (issue 30)
        "DURABLEBEAT_HEARTBEAT_INTERVAL": "20",
        "DURABLEBEAT_MAX_INTERVAL": "5",
    }
    yield cluster
    cluster.stop_all()
    # PgBouncer keeps its server connections to the test database: end them, so that the
    # database can be dropped at the end of the run.
    with connection.cursor() as cur:
        cur.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
            " WHERE datname = current_database() AND pid <> pg_backend_pid()"
        )


def _through(cluster: Cluster, mode: str) -> None:
    if mode == "django-pool":  # Django's own pool (5.1+), straight to PostgreSQL
        cluster.settings["E2E_DB_POOL"] = "1"
        return
    cluster.database_url = cluster.database_url.replace(":5432/", f":{PORTS[mode]}/")


def _relied_on(beat: Proc, mode: str) -> None:
    """Wait until beat relies on a wake-up way it saw deliver (R31)."""
    wait_until(beat.booted, 60, what="beat boot")
    if mode != "transaction":
        wait_until(lambda: "LISTEN delivers" in beat.log(), 30, what="LISTEN proven")
        return
    wait_until(lambda: "broker wake-up delivers" in beat.log(), 30, what="broker proven")
    recorded = wait_until(
        lambda: Incident.objects.filter(kind=wakeup.LISTEN_DEAF).exists(), 30, what="deaf"
    )
    assert recorded
    # Beat relies on the broker once every saver can have read that (notify.Wakeups).
    trusted = time.monotonic() + wakeup.DEAF_CACHE + notify.PROBE_WAIT
    wait_until(lambda: time.monotonic() > trusted, 10, what="the savers' view")


#: every path to PostgreSQL issue 30 names besides the direct one (the other e2e tests)
MODES = [
    "transaction",
    "session",
    pytest.param(
        "django-pool",
        marks=pytest.mark.skipif(django.VERSION < (5, 1), reason="Django's pool is 5.1+"),
    ),
]


@pytest.mark.parametrize("mode", MODES)
def test_one_offs_due_a_second_after_their_save_all_go_out_through_pgbouncer(pooled, mode):
    _through(pooled, mode)
    beat = pooled.beat()
    _relied_on(beat, mode)
    wakeup._deaf_seen = (-wakeup.DEAF_CACHE, False)  # this process reads it afresh
    for i in range(6):
        # 1.7 s apart: each save lands at another point of beat's sleep
        at = clock.now() + dt.timedelta(seconds=1)
        Schedule.objects.create(name=f"once-{i}", task=RECORD, kind=Kind.CLOCKED, clocked_at=at)
        time.sleep(1.7)  # the probe's spacing is its input, not a wait
    wait_until(
        lambda: Run.objects.filter(published_at__isnull=False).count() == 6, 30, what="6 sent"
    )
    assert beat.alive
    runs = list(Run.objects.order_by("slot"))
    assert [r.schedule.name for r in runs] == [f"once-{i}" for i in range(6)]
    for run in runs:
        assert run.reason == Reason.SCHEDULED and run.state != RunState.MISSED, run.detail
        assert run.published_at is not None
        assert dt.timedelta(0) <= run.published_at - run.slot <= PICKUP_BOUND, run
    assert "Traceback" not in beat.log()
    deaf = Incident.objects.filter(kind=wakeup.LISTEN_DEAF).count()
    assert deaf == (1 if mode == "transaction" else 0)
    assert beat.log().count("is deaf") == (1 if mode == "transaction" else 0)


@pytest.mark.parametrize("mode", MODES)
def test_two_beats_and_restarts_through_a_pooler_fire_each_slot_once(pooled, mode):
    """Issue 30 item 2's storm, short: two beats at once, one of them stopped cleanly and
    then killed (R9's in-doubt claim) while the other runs on: 0 duplicates, 0 missed."""
    _through(pooled, mode)
    two_beats_and_restarts(pooled)


def two_beats_and_restarts(pooled: Cluster) -> None:
    """The storm (tests/e2e/test_routers.py runs it through a router too)."""
    pooled.beat_schedule = {
        "every1": {"task": RECORD, "every": 1, "durablebeat": {"startup_grace": 0}}
    }
    a, b = pooled.beat(), pooled.beat()
    wait_until(lambda: a.booted() and b.booted(), 60, what="both beats up")
    wait_until(lambda: Run.objects.count() >= 5, 30, what="5 slots fired")
    for stop in (Proc.terminate, Proc.kill):  # a restart while the other beat runs on
        assert stop(a) in (0, None)
        a = pooled.beat()
        wait_until(a.booted, 60, what="the restarted beat")
        after = Run.objects.count()
        wait_until(lambda after=after: Run.objects.count() >= after + 3, 30, what="3 more")
    for proc in (a, b):
        assert proc.terminate() == 0
    slots = Counter(Run.objects.values_list("slot", flat=True))
    assert set(slots.values()) == {1}, "a slot fired twice"
    ordered = sorted(slots)
    assert all(y - x == dt.timedelta(seconds=1) for x, y in itertools.pairwise(ordered)), (
        "a slot between the first and the last was never fired"
    )
    assert not Run.objects.filter(state=RunState.MISSED).exists()
    assert Boot.objects.count() == 4
    for proc in pooled.procs:
        assert "Traceback" not in proc.log(), proc.log()[-3000:]
