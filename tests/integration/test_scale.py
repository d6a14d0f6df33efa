"""Scale: batched claims keep §1 per slot; idle costs one query; LISTEN wakes.

The figures themselves are in benchmarks/ (never asserted here); these tests hold the
correctness the speed must not cost: each of many due slots claimed once, two beats racing
one batch never firing a slot twice, and a schedule change waking beat on PostgreSQL.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import threading
import time
import uuid
from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from durablebeat.beat import notify
from durablebeat.beat.batch_claim import ids_in
from durablebeat.beat.boots import register_boot
from durablebeat.beat.claims import claim
from durablebeat.beat.due import DUE_FIELDS, due_from_row, fetch_due, fetch_unfilled
from durablebeat.beat.messages import Message, ToFire
from durablebeat.core.policy import Fire, decide
from durablebeat.models import Run, Schedule

pytestmark = pytest.mark.django_db(transaction=True)

S = dt.timedelta(seconds=1)


def _many(n: int, due_at: dt.datetime, **fields: object) -> None:
    Schedule.objects.bulk_create(
        Schedule(
            name=f"tenant-{i:05d}",
            task="tests.e2eapp.tasks.record",
            kind="interval",
            every=dt.timedelta(hours=1),
            overlap=fields.get("overlap", "allow"),
            next_fire_at=due_at,
        )
        for i in range(n)
    )


def _tick_until_idle(engine, now: dt.datetime) -> int:
    ticks = 0
    while True:
        ticks += 1
        if engine.tick(now) > 0 or ticks > 50:
            return ticks


def test_many_due_slots_in_one_second_are_each_claimed_once_in_batches(
    make_engine, publisher, settings, t0
):
    settings.DURABLEBEAT_BATCH_SIZE = 400
    _many(1000, t0, overlap="skip")
    engine = make_engine()
    engine.tick(t0 - S)  # boot: heartbeat, code sync, hooks
    with CaptureQueriesContext(connection) as queries:
        ticks = _tick_until_idle(engine, t0)
    slots = [(c.schedule, c.slot) for c in publisher.claims]
    assert len(slots) == len(set(slots)) == 1000
    assert Run.objects.filter(slot=t0, state="published").count() == 1000
    assert not Schedule.objects.filter(next_fire_at__lte=t0).exists()  # R3: all advanced
    # Batched: a first batch of 50 (its slots go out at once), then batches of 400, with a
    # few statements each (SQLite splits the insert in chunks of 999 parameters), not two
    # per slot and a savepoint.
    assert ticks == 4
    control = ("BEGIN", "COMMIT", "SAVEPOINT", "RELEASE")
    statements = [q["sql"][:80] for q in queries if not q["sql"].startswith(control)]
    assert len(statements) <= 1000 // 20, statements


def test_a_burst_a_few_seconds_ahead_is_slept_until_not_polled(
    make_engine, publisher, settings, t0
):
    """More slots due in 3 s than one batch holds: beat sleeps until they are due instead of
    re-reading them in a loop (and does not take them for a backlog)."""
    from durablebeat.beat.engine import FIRST_BATCH

    settings.DURABLEBEAT_MAX_INTERVAL = 5
    _many(FIRST_BATCH + 10, t0 + 3 * S)
    engine = make_engine()
    engine.tick(t0 - S)  # boot
    assert engine.tick(t0) == pytest.approx(3.0)
    assert publisher.claims == []
    _tick_until_idle(engine, t0 + 3 * S)
    assert len(publisher.claims) == FIRST_BATCH + 10


def test_a_burst_longer_than_late_after_fires_its_last_slots_as_scheduled(
    make_engine, publisher, settings, t0
):
    """The last batches of a big burst are late because beat was busy with the first ones,
    not because no beat ran: they fire on their slot, no startup grace, nothing missed."""
    settings.DURABLEBEAT_BATCH_SIZE = 100
    _many(300, t0)
    engine = make_engine()
    for seconds in (0, 6, 12, 18):  # a slow broker: 6 s per batch
        engine.tick(t0 + seconds * S)
    assert len(publisher.claims) == 300
    assert {(c.slot, c.reason) for c in publisher.claims} == {(t0, "scheduled")}


def test_a_batch_keeps_firing_when_one_slot_already_has_a_run(make_engine, publisher, t0):
    """A slot fired during an outage and reconciled has its run: the batch's bulk insert
    fails on it, and the batch falls back to one by one, all others still fired once."""
    _many(50, t0)
    clash = Schedule.objects.get(name="tenant-00007")
    Run.objects.create(schedule=clash, slot=t0, claimed_at=t0, task_id=str(uuid.uuid4()))
    engine = make_engine()
    _tick_until_idle(engine, t0)
    fired = {c.schedule for c in publisher.claims}
    assert len(publisher.claims) == 49
    assert "tenant-00007" not in fired
    assert Run.objects.filter(slot=t0).count() == 50


def _fires(now: dt.datetime) -> list[ToFire]:
    fires = []
    for row in fetch_due(now, 1000):
        due = due_from_row(row)
        action = decide(due, now, dt.timedelta(seconds=10), False)
        assert isinstance(action, Fire)
        fires.append(ToFire(due=due, fire=action, message=Message.for_row(row)))
    return fires


def test_a_beat_claiming_a_batch_read_before_another_claimed_it_gets_nothing(t0):
    """R4 for a batch: both beats read the same due rows; the second one's compare-and-set
    finds them moved on and neither advances them again nor fires them."""
    _many(60, t0)
    stale = _fires(t0)
    boots = [uuid.uuid4(), uuid.uuid4()]
    for boot in boots:
        register_boot(boot, "host", 1, t0)
    first = claim(stale, boots[0], t0)
    second = claim(stale, boots[1], t0 + S)
    assert len(first) == 60
    assert second == []
    assert Run.objects.count() == 60
    assert set(Schedule.objects.values_list("last_fired_at", flat=True)) == {t0}


def test_two_engines_racing_one_burst_in_threads_never_duplicate_a_slot(
    make_engine, publisher, settings, t0
):
    settings.DURABLEBEAT_BATCH_SIZE = 250
    _many(2000, t0)
    engines = [make_engine(), make_engine()]
    start = threading.Barrier(2)
    errors: list[BaseException] = []

    def run(engine) -> None:
        try:
            start.wait(10)
            _tick_until_idle(engine, t0)
        except BaseException as exc:  # reported by the main thread
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=run, args=(e,)) for e in engines]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert errors == []
    slots = [(c.schedule, c.slot) for c in publisher.claims]
    assert len(slots) == len(set(slots)) == 2000
    assert Run.objects.count() == 2000
    if connection.vendor == "postgresql":  # SQLite serialises writers: one may take all
        assert {c.boot_id for c in publisher.claims} == {e.boot_id for e in engines}


def test_an_idle_tick_is_two_probes_of_the_due_index(make_engine, t0):
    """Idle cost flat in N: while nothing is due, a wake-up asks only for new rows and for
    what is due soon, each an ordered scan of the partial index that stops at its limit."""
    _many(300, t0 + dt.timedelta(days=1))
    engine = make_engine()
    engine.tick(t0)  # boot, heartbeat, hooks
    with CaptureQueriesContext(connection) as queries:
        assert engine.tick(t0 + S) > 0
    control = ("BEGIN", "COMMIT", "SAVEPOINT", "RELEASE")
    selects = [q["sql"] for q in queries if not q["sql"].startswith(control)]
    assert len(selects) == 2, selects
    # No OR: PostgreSQL would answer it with a bitmap scan (see fetch_due).
    assert all("durablebeat_schedule" in sql and " OR " not in sql for sql in selects)


@pytest.mark.postgres_only
def test_a_schedule_change_wakes_the_listener_at_once():
    if connection.vendor != "postgresql":
        pytest.skip("LISTEN/NOTIFY is PostgreSQL's")
    _many(1, dt.datetime(2030, 1, 1, tzinfo=dt.UTC))
    listener = notify.Listener()
    try:
        assert listener.available()
        assert listener.wait(0.2) is False  # nothing changed
        Schedule.objects.filter(name="tenant-00000").update(
            next_fire_at=dt.datetime(2029, 1, 1, tzinfo=dt.UTC)
        )
        start = time.monotonic()
        assert listener.wait(5) is True
        assert time.monotonic() - start < 1
    finally:
        listener.close()


@pytest.mark.postgres_only
def test_a_beats_own_writes_wake_no_beat():
    if connection.vendor != "postgresql":
        pytest.skip("LISTEN/NOTIFY is PostgreSQL's")
    _many(1, dt.datetime(2030, 1, 1, tzinfo=dt.UTC))
    listener = notify.Listener()
    try:
        assert listener.available()
        notify.mark_beat_session()
        Schedule.objects.update(next_fire_at=dt.datetime(2029, 1, 1, tzinfo=dt.UTC))
        assert listener.wait(0.5) is False
    finally:
        listener.close()
        connection.close()  # drop the session setting with its connection


@pytest.mark.postgres_only
def test_an_engines_claims_wake_no_beat(make_engine, publisher, t0):
    """A burst's own claims must not wake every beat after every batch."""
    if connection.vendor != "postgresql":
        pytest.skip("LISTEN/NOTIFY is PostgreSQL's")
    _many(5, t0)
    listener = notify.Listener()
    try:
        assert listener.available()
        make_engine().tick(t0)
        assert len(publisher.claims) == 5
        assert listener.wait(0.5) is False
    finally:
        listener.close()
        connection.close()


def _an_edit_wakes_the_sleeping_scheduler(settings: Any, monkeypatch: Any) -> float:
    """Boot a real scheduler, then save a schedule from another thread while it sleeps; how
    long the sleeping tick took (it returns 0.0: woken, beat looks again at once)."""
    from durablebeat import wakeup
    from durablebeat.schedulers import DurableScheduler
    from project.celery import app

    settings.DURABLEBEAT_MAX_INTERVAL = 1  # the boot's own sleep: nothing wakes it
    _many(1, dt.datetime(2030, 1, 1, tzinfo=dt.UTC))
    scheduler = DurableScheduler(app)
    scheduler.tick()  # boot: this process is now a beat, whose own writes wake nobody
    settings.DURABLEBEAT_MAX_INTERVAL = 10  # the sleep an edit must cut short
    monkeypatch.setattr(wakeup, "_muted", False)  # the editor stands for another process

    def edit() -> None:
        time.sleep(0.3)
        row = Schedule.objects.get(name="tenant-00000")
        row.next_fire_at = dt.datetime(2029, 1, 1, tzinfo=dt.UTC)
        row.save()
        connection.close()

    editor = threading.Thread(target=edit)
    try:
        start = time.monotonic()
        editor.start()
        assert scheduler.tick() == 0.0  # it slept on its wake-up channel and was woken
        return time.monotonic() - start
    finally:
        editor.join(10)
        scheduler.close()


@pytest.mark.postgres_only
def test_scheduler_wakes_from_its_sleep_when_a_schedule_is_edited(settings, monkeypatch):
    if connection.vendor != "postgresql":
        pytest.skip("LISTEN/NOTIFY is PostgreSQL's")
    assert _an_edit_wakes_the_sleeping_scheduler(settings, monkeypatch) < 3


def test_without_any_wake_up_beat_sleeps_at_most_max_interval(settings):
    """R6 where neither LISTEN nor the broker's wake-up is on: Celery sleeps what tick
    returns, never more than max_interval, and beat runs on."""
    from durablebeat.schedulers import DurableScheduler
    from project.celery import app

    settings.DURABLEBEAT_LISTEN_NOTIFY = False
    settings.DURABLEBEAT_BROKER_WAKE = False
    settings.DURABLEBEAT_MAX_INTERVAL = 2
    scheduler = DurableScheduler(app)
    try:
        assert 0 < scheduler.tick() <= 2
        assert scheduler.engine.db_ok
    finally:
        scheduler.close()


def test_without_listen_a_save_wakes_the_scheduler_through_the_broker(settings, monkeypatch):
    """R6: MariaDB/MySQL and SQLite have no LISTEN; a save elsewhere wakes the sleeping
    beat through a wake-up message on the (real) broker, long before max_interval."""
    settings.DURABLEBEAT_LISTEN_NOTIFY = False
    assert _an_edit_wakes_the_sleeping_scheduler(settings, monkeypatch) < 5


# --- publishing in batches to the real broker -------------------------------------------------


@pytest.fixture
def broker(settings):
    import redis

    client = redis.Redis.from_url(settings.CELERY_BROKER_URL)
    client.flushdb()
    yield client
    client.flushdb()


def _queued(broker) -> list[tuple[str, str]]:
    import json

    messages = [json.loads(m) for m in broker.lrange("celery", 0, -1)]
    return [
        (m["headers"]["durablebeat_schedule"], m["headers"]["durablebeat_slot"]) for m in messages
    ]


@dataclasses.dataclass
class Flushes:
    """What each of kombu's Redis publish batches sent (its command count), in order;
    exceptions in ``fail`` make the next sends fail, as a broker connection reset would."""

    sizes: list[int] = dataclasses.field(default_factory=list)
    fail: list[Exception] = dataclasses.field(default_factory=list)


@pytest.fixture
def flushes(monkeypatch) -> Flushes:
    from kombu.transport import redis as kombu_redis

    real = kombu_redis.PublishBatch.flush
    seen = Flushes()

    def flush(self):
        if self._buffered and seen.fail:
            self._buffered = 0
            self.pipeline.reset()
            raise seen.fail.pop(0)
        if self._buffered:
            seen.sizes.append(self._buffered)
        return real(self)

    monkeypatch.setattr(kombu_redis.PublishBatch, "flush", flush)
    return seen


def test_a_burst_goes_to_the_broker_in_batches_each_slot_once(broker, flushes):
    """A burst is published PUBLISH_GROUP messages per Redis round trip (kombu's publish
    batch), only after its claims committed (R3), each slot once (R4): a first batch of
    FIRST_BATCH claims, its first message on its own (out at once), then full ones."""
    from durablebeat.beat.dispatch import PUBLISH_GROUP
    from durablebeat.beat.engine import FIRST_BATCH
    from durablebeat.core import clock
    from durablebeat.schedulers import DurableScheduler
    from project.celery import app

    n = FIRST_BATCH + 2 * PUBLISH_GROUP
    _many(n, clock.now() - S)
    scheduler = DurableScheduler(app)
    try:
        for _ in range(5):
            scheduler.tick()
            if Run.objects.filter(state="published").count() == n:
                break
    finally:
        scheduler.close()
    queued = _queued(broker)
    assert len(queued) == len(set(queued)) == n
    assert Run.objects.filter(state="published").count() == n
    assert flushes.sizes == [1, FIRST_BATCH - 1, PUBLISH_GROUP, PUBLISH_GROUP]


def test_a_batch_the_broker_did_not_take_is_retried_not_dropped(broker, flushes):
    """R5: the batch's send fails (delivery uncertain, so counted as not sent); its claims
    stay claimed, and the retry sends each slot once."""
    import redis

    from durablebeat.beat.engine import FIRST_BATCH
    from durablebeat.core import clock
    from durablebeat.schedulers import DurableScheduler
    from project.celery import app

    n = FIRST_BATCH  # one batch
    _many(n, clock.now() - S)
    flushes.fail.append(redis.ConnectionError("Connection reset by peer"))
    scheduler = DurableScheduler(app)
    try:
        scheduler.tick()
        assert _queued(broker) == []
        assert Run.objects.filter(state="claimed").count() == n
        retry_at = scheduler.engine.retries.next_wake()
        assert retry_at is not None
        scheduler.engine.tick(retry_at)
    finally:
        scheduler.close()
    queued = _queued(broker)
    assert len(queued) == len(set(queued)) == n
    assert Run.objects.filter(state="published").count() == n


def test_due_rows_are_the_rows_the_orm_reads(t0):
    """fetch_due builds its instances without Model.__init__ (a burst reads a thousand a
    batch): each loaded value is the ORM's, converted alike on every database (JSON,
    booleans, instants, durations), and a column the due query leaves out loads on access."""
    Schedule.objects.create(
        name="full",
        task="tests.e2eapp.tasks.record",
        kind="interval",
        every=dt.timedelta(minutes=5),
        args=[1, {"a": [2, 3]}],
        kwargs={"k": "é", "n": None},
        headers={"h": 1},
        catch_up=True,
        catch_up_window=dt.timedelta(hours=2),
        startup_grace=dt.timedelta(seconds=30),
        priority=3,
        next_fire_at=t0,
    )
    Schedule.objects.create(
        name="new", task="tests.e2eapp.tasks.record", kind="interval", every=dt.timedelta(1)
    )
    Schedule.objects.filter(name="new").update(next_fire_at=None)  # as raw SQL leaves it
    rows = fetch_due(t0, 10) + fetch_unfilled(0, 10)
    assert [r.name for r in rows] == ["full", "new"]  # R33: due rows, then rows to fill
    due_fields = [f for f in DUE_FIELDS if f != "id"]
    for row in rows:
        orm = Schedule.objects.get(pk=row.pk)
        assert {f: getattr(row, f) for f in due_fields} == {f: getattr(orm, f) for f in due_fields}
        assert row.get_deferred_fields() and row.created_at == orm.created_at  # loads on access
        assert row.to_spec() == orm.to_spec() and Message.for_row(row) == Message.for_row(orm)
    assert fetch_due(t0 - dt.timedelta(days=1), 10) == []  # "full" is not due then


def test_ids_in_matches_in_on_every_database():
    """The id filter a batch uses (one array on PostgreSQL, IN elsewhere) selects exactly
    the ids given, none for none."""
    _many(5, dt.datetime(2030, 1, 1, tzinfo=dt.UTC))
    ids = list(Schedule.objects.order_by("pk").values_list("pk", flat=True))
    chosen = ids[1:4]
    assert (
        sorted(Schedule.objects.filter(ids_in("pk", chosen)).values_list("pk", flat=True)) == chosen
    )
    assert not Schedule.objects.filter(ids_in("pk", [])).exists()
