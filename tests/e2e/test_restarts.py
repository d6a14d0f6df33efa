"""§1 with real processes: restart storms (R1-R3), beats at once (R4), fail open (R5).

Every execution is counted twice: in durablebeat's ledger (Run) and by the task body itself
(tests.e2eapp Execution), so a slot fired twice or never shows in both.
"""

from __future__ import annotations

import datetime as dt
import itertools
import signal
import time
from collections import Counter

import pytest
from django.utils import timezone

from durablebeat.enums import RunState
from durablebeat.models import Boot, Run
from tests.e2eapp.models import Execution

from .harness import Cluster, wait_until
from .proxy import Proxy

pytestmark = [pytest.mark.e2e]

RECORD = "tests.e2eapp.tasks.record"
#: how far a slot may lie past the instant it was decided at: the tick that wrote it
ONE_TICK = dt.timedelta(seconds=2)


def _executions(schedule: str) -> Counter[str]:
    return Counter(Execution.objects.filter(schedule=schedule).values_list("slot", flat=True))


def _assert_no_crash(procs) -> None:
    for proc in procs:
        assert "Traceback" not in proc.log(), f"{proc.name} crashed:\n{proc.log()[-3000:]}"


@pytest.mark.long
@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM], ids=["sigkill", "sigterm"])
def test_restart_storm_faster_than_the_period_neither_starves_nor_doubles(cluster: Cluster, sig):
    # A 10-s interval, a beat stopped every ~5 s (4 s up after its boot): the storm is twice
    # as fast as the period, for a minute (six slots), as R1-R3 need. ``overlap: allow``: a
    # SIGKILL that lands between a claim's commit and its publish leaves that run claimed,
    # in doubt (R9: its beat may still be publishing, for all the next beats can tell), and
    # under ``skip`` that claim rightly holds the next slots until R22's bound (two minutes),
    # longer than the storm. What that does is R9's and R14's (tests/integration); this
    # test is about restarts neither starving nor doubling the schedule.
    cluster.beat_schedule = {
        "every10": {
            "task": RECORD,
            "every": 10,
            "durablebeat": {"startup_grace": 3, "overlap": "allow"},
        }
    }
    # A beat's boot on a loaded machine can take longer than LATE_AFTER's default 10 s; a
    # slot found that late is overdue and R7 rightly starts the interval's grid afresh (a
    # clean clone's MariaDB lane did). The storm tests R1-R3: a slot found late in it is
    # late, fired on its grid, so no boot here may outlast LATE_AFTER.
    cluster.settings = {"DURABLEBEAT_LATE_AFTER": "60"}
    worker = cluster.worker()
    wait_until(lambda: "ready" in worker.log(), 60, what="worker ready")
    beat = cluster.beat()
    wait_until(lambda: beat.booted(), 30, what="first beat boot")
    storm_end = time.monotonic() + 60
    beats = [beat]
    while time.monotonic() < storm_end:
        # Each beat reaches the database before it is stopped (a loaded machine may take
        # seconds to import Django; a beat stopped before that tests nothing of beat's, and
        # SIGTERM before Celery installs its handler is not a clean stop).
        wait_until(lambda beat=beat: beat.booted(), 30, what="beat boot")
        time.sleep(4)  # the storm's cadence is the input of this test, not a wait
        if sig == signal.SIGTERM:
            assert beat.terminate() == 0
        else:
            beat.kill()
        beat = cluster.beat()
        beats.append(beat)
    wait_until(lambda: beat.booted(), 30, what="last beat boot")
    # The first boot as beat recorded it: its tick's instant, the one its first slot is
    # counted from (not this process's clock before the process started).
    first_boot = Boot.objects.order_by("started_at").values_list("started_at", flat=True)[0]
    storm_seconds = (timezone.now() - first_boot).total_seconds()

    runs = list(Run.objects.filter(schedule__name="every10").order_by("slot"))
    slots = [r.slot for r in runs]
    # After the grace it fires on its grid: one slot every 10 s, none skipped, none twice.
    assert dt.timedelta(0) <= slots[0] - first_boot - dt.timedelta(seconds=3) <= ONE_TICK
    assert all(b - a == dt.timedelta(seconds=10) for a, b in itertools.pairwise(slots))
    assert len(slots) >= int((storm_seconds - 4) // 10)
    # R9: a run whose beat was SIGKILLed after its claim committed and before its publish
    # stays claimed, until a later beat finds that boot silent and records the slot missed
    # (housekeeping is not re-sent): at most one per killed beat, none on SIGTERM. (The beat
    # still up may be publishing its newest claim as the runs are read: not counted as sent.)
    last_boot = Boot.objects.order_by("-started_at").values_list("pk", flat=True)[0]
    unsent = [r for r in runs if r.state in (RunState.CLAIMED, RunState.MISSED)]
    assert all(r.detail.startswith("in doubt") for r in unsent if r.state == RunState.MISSED)
    in_doubt = Counter(r.boot_id for r in unsent if r.boot_id != last_boot)
    if sig == signal.SIGTERM:
        assert not in_doubt, f"a clean stop left a claim unsent: {in_doubt}"
    assert set(in_doubt.values()) <= {1}, in_doubt
    sent = len(slots) - len(unsent)
    wait_until(lambda: sum(_executions("every10").values()) >= sent, 30, what="executions")
    executed = _executions("every10")
    assert set(executed.values()) == {1}, f"a slot ran twice: {executed}"
    # every run read above that was sent ran; the last beat, still up, may have fired more
    assert sent <= len(executed) <= Run.objects.filter(schedule__name="every10").count()
    assert Boot.objects.count() == len(beats)
    _assert_no_crash(beats)


@pytest.mark.long
def test_two_beats_at_once_never_fire_a_slot_twice(cluster: Cluster):
    # R4 with the two beats claiming the same instant's rows. Each instant has more rows due
    # than a burst's first batch (FIRST_BATCH): the beat that looks first locks that batch
    # and holds it until the instant (LEAD), and the other, looking meanwhile, passes over
    # it (SKIP LOCKED) and takes the rows behind it. With five rows an instant, one beat
    # took each instant whole, and which one was a matter of a few milliseconds: a 70/30
    # split here, and a clean clone's run where one beat took all twelve.
    from durablebeat.beat.engine import FIRST_BATCH

    names = [f"every5-{i}" for i in range(3 * FIRST_BATCH)]
    cluster.beat_schedule = {
        name: {"task": RECORD, "every": 5, "durablebeat": {"startup_grace": 2}} for name in names
    }
    worker = cluster.worker(concurrency=4)
    wait_until(lambda: "ready" in worker.log(), 60, what="worker ready")
    a, b = cluster.beat(), cluster.beat()
    wait_until(lambda: a.booted() and b.booted(), 30, what="both beats up")
    end = time.monotonic() + 60
    wait_until(lambda: time.monotonic() > end and a.alive and b.alive, 70, interval=1)
    assert a.alive and b.alive
    a.terminate()
    b.terminate()
    runs = list(Run.objects.values_list("schedule__name", "slot", "boot_id"))
    expected = Counter(name for name, _, _ in runs)
    assert set(expected) == set(names)
    assert min(expected.values()) >= 10  # a minute of 5-s slots, less the grace
    wait_until(lambda: Execution.objects.count() >= len(runs), 60, what="executions")
    for name in names:
        executed = _executions(name)
        assert set(executed.values()) == {1}, f"{name}: a slot ran twice: {executed}"
        assert len(executed) == expected[name]
    # The two took the same instants' rows between them: R4 held where they met.
    beats_by_instant: dict[dt.datetime, set] = {}
    for _, slot, boot in runs:
        beats_by_instant.setdefault(slot, set()).add(boot)
    shared = [slot for slot, boots in beats_by_instant.items() if len(boots) == 2]
    assert shared, f"no instant was shared: {Counter(boot for _, _, boot in runs)}"
    _assert_no_crash([a, b])


@pytest.mark.long
def test_crontab_every_minute_fires_each_slot_once_across_restarts(cluster: Cluster):
    cluster.beat_schedule = {"minutely": {"task": RECORD, "cron": "* * * * *"}}
    worker = cluster.worker()
    wait_until(lambda: "ready" in worker.log(), 60, what="worker ready")
    up: list[tuple[dt.datetime, dt.datetime]] = []  # when some beat was surely running
    beats = []
    # Three restarts, each a few seconds after a minute's slot: every beat is up across one
    # slot (a loaded machine's slow boot once left no slot inside any of a fixed cadence's
    # windows), and the slot after each restart comes while the next beat boots or runs.
    for _ in range(3):
        beat = cluster.beat()
        beats.append(beat)
        wait_until(lambda beat=beat: beat.booted(), 30)
        since = timezone.now()
        after_slot = _minutes_between(since, since + dt.timedelta(minutes=2))[0]
        after_slot += dt.timedelta(seconds=3)
        wait_until(lambda at=after_slot: timezone.now() >= at, 70, interval=0.5)
        up.append((since, timezone.now()))
        beat.terminate()
    wait_until(lambda: not Run.objects.filter(state=RunState.CLAIMED).exists(), 30)
    slots = list(Run.objects.filter(schedule__name="minutely").values_list("slot", flat=True))
    covered = [s for s in slots if any(a <= s and s + dt.timedelta(seconds=1) <= b for a, b in up)]
    expected = {m for a, b in up for m in _minutes_between(a, b)}
    assert expected <= set(slots), (
        f"slots while a beat was up were not fired: {expected - set(slots)}"
    )
    assert covered
    wait_until(lambda: sum(_executions("minutely").values()) >= len(slots), 30)
    executed = _executions("minutely")
    assert set(executed.values()) == {1}, f"a slot ran twice: {executed}"
    _assert_no_crash(beats)


def _minutes_between(a: dt.datetime, b: dt.datetime) -> list[dt.datetime]:
    m = (a + dt.timedelta(minutes=1)).replace(second=0, microsecond=0)
    out = []
    while m + dt.timedelta(seconds=1) <= b:
        out.append(m)
        m += dt.timedelta(minutes=1)
    return out


def test_database_unreachable_at_boot_beat_still_fires_and_reconciles_later(cluster: Cluster):
    """R5: beat starts without its database, fires code-defined schedules, never exits, and
    writes the ledger once the database answers."""
    from django.db import connection

    s = connection.settings_dict
    proxy = Proxy(s.get("HOST") or "127.0.0.1", int(s.get("PORT") or 5432))
    cluster.beat_schedule = {
        "every3": {"task": RECORD, "every": 3, "durablebeat": {"startup_grace": 1}}
    }
    worker = cluster.worker()  # the worker reaches the database directly
    wait_until(lambda: "ready" in worker.log(), 60, what="worker ready")
    beat_url = cluster.database_url.replace(f":{s.get('PORT') or 5432}/", f":{proxy.port}/")
    beat = cluster.beat(DATABASE_URL=beat_url)
    try:
        wait_until(lambda: "database unreachable" in beat.log(), 30, what="beat notices")
        wait_until(lambda: sum(_executions("every3").values()) >= 3, 40, what="fires in outage")
        assert beat.alive
        assert not Run.objects.exists()
        proxy.up()
        wait_until(lambda: beat.booted(), 30, what="beat reconnects")
        wait_until(lambda: Run.objects.filter(schedule__name="every3").count() >= 5, 30)
    finally:
        beat.terminate()
        proxy.down()
    slots = Counter(Run.objects.filter(schedule__name="every3").values_list("slot", flat=True))
    assert set(slots.values()) == {1}
    executed = _executions("every3")
    assert set(executed.values()) == {1}, f"a slot ran twice: {executed}"
    # Everything that ran during the outage is in the ledger now.
    run_slots = {r.isoformat() for r in slots}
    assert set(_executions("every3")) <= run_slots
    _assert_no_crash([beat])
