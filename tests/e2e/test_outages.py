"""§2 and R5 with real processes: stops that straddle cron slots, a broker outage and a
database outage. Every slot must end fired exactly once or recorded missed with its reason."""

from __future__ import annotations

import datetime as dt
import itertools
import shutil
import socket
import subprocess
from collections import Counter

import pytest
from django.db import connection
from django.utils import timezone

from durablebeat.enums import Reason, RunState
from durablebeat.models import MissedSlots, Run, Schedule
from tests.e2eapp.models import Execution

from .harness import OUTPUT, Cluster, wait_until
from .proxy import Proxy

pytestmark = [pytest.mark.e2e]

RECORD = "tests.e2eapp.tasks.record"


def _executed(schedule: str) -> Counter[str]:
    return Counter(Execution.objects.filter(schedule=schedule).values_list("slot", flat=True))


def _no_crash(*procs) -> None:
    for proc in procs:
        assert proc.alive or proc.popen.returncode == 0, f"{proc.name} exited"
        assert "Traceback" not in proc.log(), f"{proc.name}:\n{proc.log()[-3000:]}"


@pytest.mark.long
def test_stop_straddling_a_cron_slot_catches_up_delivery_and_counts_housekeeping(
    cluster: Cluster,
):
    cluster.beat_schedule = {
        "digest": {"task": RECORD, "cron": "* * * * *", "durablebeat": {"catch_up": True}},
        "sync": {"task": RECORD, "cron": "* * * * *"},
    }
    worker = cluster.worker()
    wait_until(lambda: "ready" in worker.log(), 60, what="worker ready")
    beat = cluster.beat()
    # Code sync writes a new row without a next fire; beat's first decision gives it one
    # (R2). A beat stopped between the two left no slot behind to miss: wait for it.
    wait_until(
        lambda: Schedule.objects.filter(next_fire_at__isnull=False).count() == 2,
        30,
        what="both schedules' first slot decided",
    )
    # Stop just before a slot (a window: a boot late in a minute must not stop it on the
    # slot itself), start again 20 s after it.
    wait_until(lambda: 52 <= timezone.now().second <= 54, 70, interval=0.1, what="before a slot")
    beat.terminate()
    # The slot the stopped beat was waiting for, as the table holds it (not this process's
    # reading of its own clock): still the next fire of both, so not fired.
    slot = Schedule.objects.get(name="digest").next_fire_at
    assert slot == Schedule.objects.get(name="sync").next_fire_at
    wait_until(lambda: timezone.now() >= slot + dt.timedelta(seconds=20), 90, interval=0.2)
    beat = cluster.beat()
    wait_until(lambda: beat.booted(), 30)
    run = wait_until(
        lambda: Run.objects.filter(schedule__name="digest", slot=slot).first(),
        60,
        what=f"the catch-up of digest's {slot:%H:%M:%S} slot",
    )
    assert run.reason == Reason.CATCH_UP
    wait_until(lambda: _executed("digest")[slot.isoformat()] >= 1, 60, what="catch-up ran")
    assert not Run.objects.filter(schedule__name="sync", slot=slot).exists()
    missed = MissedSlots.objects.get(schedule__name="sync")
    assert (missed.count, missed.first_slot) == (1, slot)
    beat.terminate()
    assert set(_executed("digest").values()) == {1}
    _no_crash(beat)


def test_delivery_slot_an_hour_old_is_not_caught_up_but_counted(cluster: Cluster):
    """Beat down for 60 min past a daily delivery slot (window 55 min): missed, not sent."""
    now = timezone.now()
    slot = (now - dt.timedelta(minutes=60)).replace(second=0, microsecond=0)
    Schedule.objects.create(
        name="daily-digest",
        task=RECORD,
        kind="crontab",
        minute=str(slot.minute),
        hour=str(slot.hour),
        catch_up=True,
        next_fire_at=slot,
    )
    beat = cluster.beat()
    wait_until(lambda: beat.booted(), 30)
    missed = wait_until(
        lambda: MissedSlots.objects.filter(schedule__name="daily-digest").first(), 20
    )
    assert (missed.count, missed.last_slot) == (1, slot)
    assert not Run.objects.exists()
    assert Schedule.objects.get().next_fire_at == slot + dt.timedelta(days=1)
    beat.terminate()
    _no_crash(beat)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class RedisServer:
    def __init__(self) -> None:
        self.port = _free_port()
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        exe = shutil.which("redis-server")
        if exe is None:
            pytest.skip("redis-server is not installed")
        OUTPUT.mkdir(parents=True, exist_ok=True)
        self.proc = subprocess.Popen(
            [
                exe,
                "--port",
                str(self.port),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
                "--dir",
                str(OUTPUT),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        wait_until(self._answers, 10, what="redis up")

    def _answers(self) -> bool:
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=0.5):
                return True
        except OSError:
            return False

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait(10)
            self.proc = None


def test_broker_outage_delivery_slots_go_out_once_after_it_returns(cluster: Cluster):
    redis = RedisServer()
    redis.start()
    cluster.broker_url = f"redis://127.0.0.1:{redis.port}/0"
    cluster.beat_schedule = {
        "delivery": {
            "task": RECORD,
            "every": 5,
            "durablebeat": {"catch_up": True, "overlap": "allow", "startup_grace": 1},
        },
        "housekeeping": {
            "task": RECORD,
            "every": 5,
            "durablebeat": {"overlap": "allow", "startup_grace": 1},
        },
    }
    worker = cluster.worker()
    beat = cluster.beat()
    try:
        wait_until(lambda: "ready" in worker.log() and beat.booted(), 60)
        wait_until(lambda: sum(_executed("delivery").values()) >= 2, 30, what="fires before")
        redis.stop()
        outage_start = timezone.now()
        wait_until(lambda: timezone.now() > outage_start + dt.timedelta(seconds=30), 35)
        outage_end = timezone.now()
        redis.start()
        during = Run.objects.filter(
            schedule__name="delivery", slot__gt=outage_start, slot__lt=outage_end
        )
        wait_until(lambda: during.count() >= 5, 10, what="slots claimed during the outage")
        wait_until(
            lambda: not during.filter(state=RunState.CLAIMED).exists(),
            60,
            what="delivery slots of the outage published",
        )
        slots = {r.slot.isoformat() for r in during}
        wait_until(lambda: slots <= set(_executed("delivery")), 60, what="and executed")
        assert beat.alive
    finally:
        beat.terminate()
        worker.kill()
        redis.stop()
    assert set(_executed("delivery").values()) == {1}, "a delivery slot ran twice"
    # Housekeeping slots of the outage were given up at their next slot, with the reason.
    missed = Run.objects.filter(schedule__name="housekeeping", state=RunState.MISSED)
    assert missed.count() >= 3
    assert all("broker unreachable" in r.detail for r in missed)
    assert set(_executed("housekeeping").values()) == {1}
    assert "Traceback" not in beat.log()


def test_database_outage_while_beat_runs_fires_on_and_completes_the_ledger(cluster: Cluster):
    s = connection.settings_dict
    proxy = Proxy(s.get("HOST") or "127.0.0.1", int(s.get("PORT") or 5432))
    proxy.up()
    cluster.beat_schedule = {
        "every3": {
            "task": RECORD,
            "every": 3,
            "durablebeat": {"overlap": "allow", "startup_grace": 1},
        }
    }
    worker = cluster.worker()  # the worker reaches the database directly
    beat_url = cluster.database_url.replace(f":{s.get('PORT') or 5432}/", f":{proxy.port}/")
    beat = cluster.beat(DATABASE_URL=beat_url)
    try:
        wait_until(lambda: "ready" in worker.log() and beat.booted(), 60)
        wait_until(lambda: sum(_executed("every3").values()) >= 2, 30, what="fires before")
        proxy.down()
        before = sum(_executed("every3").values())
        wait_until(lambda: "database error" in beat.log(), 20, what="beat notices")
        wait_until(
            lambda: sum(_executed("every3").values()) >= before + 8,
            40,
            what="fires go on during the outage",
        )
        proxy.up()
        wait_until(lambda: "ledger reconciled" in beat.log(), 30, what="ledger written")
        time_after = timezone.now()
        wait_until(
            lambda: Run.objects.filter(schedule__name="every3", slot__gt=time_after).count() >= 2,
            20,
            what="normal fires after",
        )
        assert beat.alive
    finally:
        beat.terminate()
        proxy.down()
    runs = list(Run.objects.filter(schedule__name="every3").order_by("slot"))
    slots = [r.slot for r in runs]
    assert all(b - a == dt.timedelta(seconds=3) for a, b in itertools.pairwise(slots)), (
        "the grid has a gap or a repeat"
    )
    wait_until(lambda: len(_executed("every3")) >= len(slots) - 1, 20)
    executed = _executed("every3")
    assert set(executed.values()) == {1}, "a slot ran twice"
    assert set(executed) <= {s.isoformat() for s in slots}, "a fire is missing from the ledger"
    assert "Traceback" not in beat.log()
