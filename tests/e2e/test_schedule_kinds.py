"""R25 with real processes: two real ``celery beat`` processes boot a project's own
schedule class, a ``relative=True`` interval and solar schedules from ``beat_schedule``.
The custom schedule fires each of its slots once across both beats (R4), the relative
minute interval fires on the minute, and the solar rows hold the sun's next event. Every
wait is on a condition in the database, bounded."""

from __future__ import annotations

import datetime as dt
import time
from collections import Counter

import pytest

from durablebeat.core import timing
from durablebeat.enums import Kind
from durablebeat.models import Run, Schedule
from tests.e2eapp.models import Execution

from .harness import Cluster, wait_until

pytestmark = [pytest.mark.e2e]

RECORD = "tests.e2eapp.tasks.record"


def _slots(name: str) -> list[dt.datetime]:
    return list(
        Run.objects.filter(schedule__name=name).order_by("slot").values_list("slot", flat=True)
    )


def test_two_beats_boot_every_schedule_kind_and_fire_each_slot_once(cluster: Cluster):
    cluster.beat_schedule = {
        "custom-every-3s": {"task": RECORD, "custom": 3},
        "relative-minute": {
            "task": RECORD,
            "every": 60,
            "relative": True,
            "durablebeat": {"startup_grace": 1},
        },
        "sunrise-tromso": {"task": RECORD, "solar": ["sunrise", 69.6492, 18.9553]},
        "sunset-sydney": {"task": RECORD, "solar": ["sunset", -33.8688, 151.2093]},
    }
    worker = cluster.worker(concurrency=4)
    wait_until(lambda: "ready" in worker.log(), 60, what="worker ready")
    a, b = cluster.beat(), cluster.beat()
    wait_until(
        lambda: a.booted() and b.booted(),
        30,
        what="both beats up",
    )
    started = time.monotonic()
    wait_until(
        lambda: len(_slots("custom-every-3s")) >= 8 and _slots("relative-minute"),
        100,
        interval=1,
        what="8 custom slots and the first relative one",
    )
    assert a.alive and b.alive
    a.terminate()
    b.terminate()
    elapsed = time.monotonic() - started

    custom = _slots("custom-every-3s")
    # each slot is the instant the object named: its clock and beat's are read some ms apart
    # (more, when the tick stalls on a loaded machine), never a grid step apart
    assert all(abs(s.timestamp() - round(s.timestamp() / 3) * 3) < 1.0 for s in custom), custom
    assert len({round(s.timestamp() / 3) for s in custom}) == len(custom), "two fires, one slot"
    assert len(custom) <= elapsed / 3 + 3, "fired more often than its slots"
    wait_until(
        lambda: Execution.objects.filter(schedule="custom-every-3s").count() >= len(custom), 30
    )
    executed = Counter(
        Execution.objects.filter(schedule="custom-every-3s").values_list("slot", flat=True)
    )
    assert set(executed.values()) == {1}, f"a slot ran twice: {executed}"

    relative = _slots("relative-minute")
    assert all(s.second == 0 and s.microsecond == 0 for s in relative), relative

    for name in ("sunrise-tromso", "sunset-sydney"):
        row = Schedule.objects.get(name=name)
        assert (row.kind, row.error) == (Kind.SOLAR, "")
        assert row.next_fire_at == timing.next_slot(row.to_spec(), row.created_at)
    for proc in (a, b):
        assert "Traceback" not in proc.log(), f"{proc.name} crashed:\n{proc.log()[-3000:]}"
