"""R21 at run time: whatever one row or one message raises, it alone is set aside and the
rest of its batch fires in the same tick; beat never sleeps zero without firing; the
outage memory is bounded. Failures are injected with arbitrary exception types, not only
reached with known bad values."""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as dt
import logging
import math

import pytest
from django.db import DataError, OperationalError

from durablebeat.beat import batch_claim, boots, claims, outage, triage
from durablebeat.beat.engine import MIN_SLEEP
from durablebeat.core import policy, timing
from durablebeat.enums import Failure, RunState
from durablebeat.models import Run, Schedule

pytestmark = pytest.mark.django_db(transaction=True)

S = dt.timedelta(seconds=1)
GOOD = ("good-1", "good-2", "good-3", "good-4")

#: every route a batch is claimed by: set-based (per vendor) and one slot at a time
CLAIM_PATHS = ((batch_claim, "claim_many"), (batch_claim, "claim_many_pg"), (claims, "_claim_one"))


class Weird(Exception):
    """An exception type nobody lists anywhere."""


RAISES = [
    RuntimeError("boom"),
    OverflowError("date value out of range"),
    KeyError("missing"),
    Weird("nobody expects this"),
    ZeroDivisionError("division by zero"),
]


def _batch(make_schedule, t0, bad_every=21):
    """Four good schedules and one to break, all due at ``t0`` in one batch."""
    for name in GOOD:
        make_schedule(name, every=20, next_fire_at=t0)
    return make_schedule("bad", every=bad_every, next_fire_at=t0)


def _assert_set_aside_and_the_rest_fired(publisher, t0, words):
    assert sorted(c.schedule for c in publisher.claims) == sorted(GOOD)
    assert set(publisher.slots()) == {t0}
    bad = Schedule.objects.get(name="bad")
    assert words in bad.error
    assert not Run.objects.filter(schedule=bad).exists()
    assert Run.objects.filter(state=RunState.PUBLISHED).count() == len(GOOD)


# --- rows: decided, advanced, claimed -------------------------------------------------------


@pytest.mark.parametrize("exc", RAISES, ids=lambda e: type(e).__name__)
def test_a_row_that_raises_anything_while_decided_is_set_aside_and_the_batch_fires(
    make_engine, make_schedule, publisher, t0, monkeypatch, exc
):
    _batch(make_schedule, t0)
    real = triage.decide

    def decide(due, *args):
        if due.name == "bad":
            raise exc
        return real(due, *args)

    monkeypatch.setattr(triage, "decide", decide)
    engine = make_engine()
    engine.tick(t0)
    _assert_set_aside_and_the_rest_fired(publisher, t0, type(exc).__name__)
    engine.tick(t0 + 20 * S)  # set aside: not read again, the others go on
    assert len(publisher.slots()) == 2 * len(GOOD)


@pytest.mark.parametrize("exc", RAISES, ids=lambda e: type(e).__name__)
def test_a_row_whose_advance_raises_anything_is_set_aside_and_the_batch_fires(
    make_engine, make_schedule, publisher, t0, monkeypatch, exc
):
    _batch(make_schedule, t0, bad_every=21)
    real = timing.advance

    def advance(spec, deadline, now):
        if isinstance(spec, timing.Interval) and spec.every == 21 * S:
            raise exc
        return real(spec, deadline, now)

    monkeypatch.setattr(timing, "advance", advance)
    make_engine().tick(t0)
    _assert_set_aside_and_the_rest_fired(publisher, t0, type(exc).__name__)


@pytest.mark.parametrize(
    "exc", [*RAISES, DataError("value out of range")], ids=lambda e: type(e).__name__
)
@pytest.mark.parametrize("path", ["set-based", "one by one"])
def test_a_row_whose_claim_raises_anything_is_set_aside_and_the_batch_fires(
    make_engine, make_schedule, publisher, t0, monkeypatch, exc, path
):
    """The set-based claim of the batch raises: it is claimed again slot by slot, each in a
    savepoint; the slot that raises again is set aside, the others are claimed and fired in
    the same tick. "one by one": the same for a slot the set-based path does not take (a
    one-off)."""
    bad = _batch(make_schedule, t0)
    if path == "one by one":
        Schedule.objects.filter(pk=bad.pk).update(kind="clocked", every=None, clocked_at=t0)
    bad_id = bad.pk

    def breaking(real):
        def claim(fires_or_due, *args, **kwargs):
            ids = (
                [fires_or_due.id]
                if isinstance(fires_or_due, policy.Due)
                else [f.due.id for f in fires_or_due]
            )
            if bad_id in ids:
                raise exc
            return real(fires_or_due, *args, **kwargs)

        return claim

    for module, name in CLAIM_PATHS:
        monkeypatch.setattr(module, name, breaking(getattr(module, name)))
    make_engine().tick(t0)
    _assert_set_aside_and_the_rest_fired(publisher, t0, type(exc).__name__)


def test_a_database_outage_at_the_claim_keeps_its_meaning(
    make_engine, make_schedule, publisher, t0, monkeypatch
):
    """R5, not R21: a connection-level error is the database's, not a row's. No row is set
    aside; the slots still go out, from memory."""
    _batch(make_schedule, t0)

    def down(*args, **kwargs):
        raise OperationalError("server closed the connection unexpectedly")

    for module, name in CLAIM_PATHS:
        monkeypatch.setattr(module, name, down)
    engine = make_engine()
    engine.tick(t0)
    assert not engine.db_ok
    assert sorted(c.schedule for c in publisher.claims) == sorted([*GOOD, "bad"])
    assert not Schedule.objects.exclude(error="").exists()


def test_a_row_at_the_edge_of_the_datetime_range_is_set_aside(
    make_engine, make_schedule, publisher, t0
):
    """The reported case, with real values: a one-off at the far past edge, and an interval
    longer than the calendar, both written around the form, next to healthy schedules."""
    for name in GOOD:
        make_schedule(name, every=20, next_fire_at=t0)
    make_schedule("edge", every=20, next_fire_at=t0)
    make_schedule("huge", every=20, next_fire_at=t0)
    Schedule.objects.filter(name="edge").update(
        kind="clocked",
        every=None,
        clocked_at=dt.datetime.min.replace(tzinfo=dt.UTC),
        next_fire_at=None,
    )
    # next_fire_at given: a timing update alone would reset it (R29) and the overflow would
    # come a slot later
    Schedule.objects.filter(name="huge").update(
        every=dt.timedelta(days=365 * 9000), next_fire_at=t0
    )
    engine = make_engine()
    engine.tick(t0)
    assert sorted(c.schedule for c in publisher.claims) == sorted(GOOD)
    assert "OverflowError" in Schedule.objects.get(name="edge").error
    assert "OverflowError" in Schedule.objects.get(name="huge").error
    engine.tick(t0 + 20 * S)
    assert len(publisher.slots()) == 2 * len(GOOD)


def test_a_failing_hook_does_not_stop_firing(make_engine, make_schedule, publisher, t0):
    def hook(engine, now):
        raise Weird("a hook broke")

    make_schedule("job", every=20, next_fire_at=t0)
    make_engine(hooks=[hook]).tick(t0)
    assert publisher.slots("job") == [t0]


# --- messages -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "exc",
    [TypeError("not serializable"), ValueError("bad"), OverflowError("huge"), Weird("odd")],
    ids=lambda e: type(e).__name__,
)
def test_a_message_refused_for_its_content_fails_its_slot_and_the_group_goes_out(
    make_engine, make_schedule, publisher, t0, exc
):
    """R21: not a broker outage: its run fails with why, nothing is retried, and the rest
    of its group is published in the same tick."""
    _batch(make_schedule, t0)

    def refuse(claim):
        if claim.schedule == "bad":
            raise exc

    publisher.on_publish = refuse
    engine = make_engine()
    engine.tick(t0)
    assert sorted(c.schedule for c in publisher.claims) == sorted(GOOD)
    assert Run.objects.filter(state=RunState.PUBLISHED).count() == len(GOOD)
    run = Run.objects.get(schedule__name="bad")
    assert (run.state, run.failure) == (RunState.FAILED, Failure.UNPUBLISHABLE)
    assert type(exc).__name__ in run.error and "refused" in run.detail
    assert run.finished_at == t0
    bad = Schedule.objects.get(name="bad")
    assert (bad.last_outcome, bad.last_failed_at) == (RunState.FAILED, t0)
    assert len(engine.retries) == 0
    assert bad.error == ""  # the row itself is fine: its next slot is tried again


def test_a_broker_outage_is_still_retried_not_failed(make_engine, make_schedule, publisher, t0):
    _batch(make_schedule, t0)
    publisher.fail = True  # ConnectionError: the broker is unreachable
    engine = make_engine()
    engine.tick(t0)
    assert len(engine.retries) == len(GOOD) + 1
    assert Run.objects.filter(state=RunState.CLAIMED).count() == len(GOOD) + 1


def test_a_batch_whose_send_fails_for_a_message_is_sent_again_one_by_one(
    make_engine, make_schedule, publisher, t0
):
    """The batch sends at its exit; an exit that fails for a reason other than the broker
    is not an outage: the group is sent again one message at a time."""
    _batch(make_schedule, t0)
    exits = []

    @contextlib.contextmanager
    def batch():
        yield
        exits.append(1)
        if len(exits) == 2:  # the tick's first message goes alone; then the group's exit
            raise ValueError("a message the batch could not encode")

    engine = make_engine(publish_batch=batch)
    engine.tick(t0)
    # The group was buffered and refused as a whole, then each of it sent once more.
    alone = publisher.claims[0].schedule
    sent_again = publisher.claims[len(GOOD) + 1 :]
    assert sorted(c.schedule for c in sent_again) == sorted({*GOOD, "bad"} - {alone})
    assert Run.objects.filter(state=RunState.PUBLISHED).count() == len(GOOD) + 1
    assert len(engine.retries) == 0


def test_a_batch_whose_send_fails_for_the_broker_is_retried(
    make_engine, make_schedule, publisher, t0
):
    _batch(make_schedule, t0)

    @contextlib.contextmanager
    def batch():
        yield
        raise ConnectionResetError("Connection reset by peer")

    engine = make_engine(publish_batch=batch)
    engine.tick(t0)
    assert len(engine.retries) == len(GOOD) + 1
    assert Run.objects.filter(state=RunState.CLAIMED).count() == len(GOOD) + 1


def test_a_retried_message_refused_for_its_content_fails_and_the_others_go_out(
    make_engine, make_schedule, publisher, t0
):
    """retries.Retries: after an outage, a message refused for its content fails its slot
    and does not stop the retries behind it."""
    _batch(make_schedule, t0)
    publisher.fail = True
    engine = make_engine()
    engine.tick(t0)
    publisher.fail = False

    def refuse(claim):
        if claim.schedule == "bad":
            raise TypeError("Object of type set is not JSON serializable")

    publisher.on_publish = refuse
    retry_at = engine.retries.next_wake()
    engine.tick(retry_at)
    assert sorted(c.schedule for c in publisher.claims) == sorted(GOOD)
    assert Run.objects.get(schedule__name="bad").state == RunState.FAILED
    assert len(engine.retries) == 0


@pytest.fixture
def broker(settings):
    import redis

    client = redis.Redis.from_url(settings.CELERY_BROKER_URL)
    client.flushdb()
    yield client
    client.flushdb()


def test_an_expiry_the_broker_client_refuses_fails_its_slot_on_the_real_broker(broker):
    """The reported case on Redis: an expiry of 10**12 s makes Celery raise OverflowError for
    that message; its four neighbours in the same batch are published at once."""
    import json

    from durablebeat.core import clock
    from durablebeat.schedulers import DurableScheduler
    from project.celery import app

    due = clock.now() - S
    for name in (*GOOD, "bad"):
        Schedule.objects.create(
            name=name,
            task="tests.e2eapp.tasks.record",
            kind="interval",
            every=dt.timedelta(hours=1),
            overlap="allow",
            next_fire_at=due,
        )
    Schedule.objects.filter(name="bad").update(expire_seconds=1e12)
    scheduler = DurableScheduler(app)
    try:
        scheduler.tick()
        assert len(scheduler.engine.retries) == 0
    finally:
        scheduler.close()
    queued = [
        json.loads(m)["headers"]["durablebeat_schedule"] for m in broker.lrange("celery", 0, -1)
    ]
    assert sorted(queued) == sorted(GOOD)
    run = Run.objects.get(schedule__name="bad")
    assert run.state == RunState.FAILED and "OverflowError" in run.error


# --- no hot loop ----------------------------------------------------------------------------


def test_a_negative_startup_grace_row_is_set_aside_and_beat_does_not_spin(
    make_engine, make_schedule, publisher, t0
):
    make_schedule("good", every=20, next_fire_at=t0)
    make_schedule("neg", every=20)
    Schedule.objects.filter(name="neg").update(startup_grace=-dt.timedelta(hours=1))
    engine = make_engine()
    now, sleeps = t0, []
    for _ in range(50):
        sleeps.append(engine.tick(now))
        now += dt.timedelta(seconds=sleeps[-1])
    assert min(sleeps) >= MIN_SLEEP
    assert Schedule.objects.get(name="neg").error.startswith("startup_grace:")
    assert publisher.slots("good")[0] == t0


def test_a_setting_out_of_range_is_no_rows_fault(make_engine, make_schedule, t0, settings):
    """A bad setting (refused on access by conf) fails the tick, which the beat adapter
    logs and sleeps on; it never sets every row aside as if each were bad."""
    from durablebeat.conf import InvalidSetting

    make_schedule("job", every=20, next_fire_at=t0)
    settings.DURABLEBEAT_STARTUP_GRACE = -3600
    with pytest.raises(InvalidSetting):
        make_engine().tick(t0 + dt.timedelta(hours=1))
    assert Schedule.objects.get().error == ""


def test_a_row_that_cannot_move_on_is_set_aside(
    make_engine, make_schedule, publisher, t0, monkeypatch
):
    """Whatever makes a decision leave a next fire in the past (here: an injected policy
    bug) sets the row aside instead of finding it due again on every tick."""
    _batch(make_schedule, t0)
    real = triage.decide

    def decide(due, now, *args):
        action = real(due, now, *args)
        if due.name == "bad":
            return dataclasses.replace(action, next_fire_at=now - S)
        return action

    monkeypatch.setattr(triage, "decide", decide)
    make_engine().tick(t0)
    _assert_set_aside_and_the_rest_fired(publisher, t0, "next_fire_at: cannot move on")


def test_a_full_batch_that_fired_nothing_is_not_a_backlog_to_spin_on(
    make_engine, publisher, t0, settings
):
    """Overdue rows fill the batch with startup-grace defers (R7): nothing fired, so no
    zero sleep; a full batch that fired goes on at once. (Rows without a next fire no
    longer fill the due batch: they are filled after the due work, R33.)"""
    settings.DURABLEBEAT_BATCH_SIZE = 2
    for i in range(5):
        Schedule.objects.create(
            name=f"new-{i}",
            task="tests.e2eapp.tasks.record",
            every=20 * S,
            overlap="allow",
            next_fire_at=t0 - 3600 * S,
        )
    engine = make_engine()
    assert engine.tick(t0) == MIN_SLEEP  # two defers (first batch), more behind them
    grace = t0 + 60 * S
    sleeps = [engine.tick(t0 + k * S) for k in range(1, 4)]
    assert min(sleeps) >= MIN_SLEEP and publisher.claims == []
    assert engine.tick(grace) == 0.0  # a full batch fired: straight on
    assert len(publisher.claims) == 2


# --- the outage memory ----------------------------------------------------------------------


def _down(monkeypatch):
    def down(*args, **kwargs):
        raise OperationalError("could not connect to server")

    monkeypatch.setattr(boots, "register_boot", down)


def _entry(name: str, every: dt.timedelta):
    from durablebeat.beat.codesync import parse_beat_schedule

    entry = parse_beat_schedule(
        {name: {"task": "tests.e2eapp.tasks.record", "schedule": 60}}, "UTC"
    )[0]
    return dataclasses.replace(entry, spec=timing.Interval(every), startup_grace=dt.timedelta(0))


def test_a_sub_second_code_interval_fires_from_memory_at_a_bounded_rate(
    publisher, t0, monkeypatch, caplog
):
    """While the database is down, a 10 ms code interval fires at most once a second, not
    a hundred times, and the drop is logged as one event."""
    from durablebeat.beat.engine import Engine
    from durablebeat.beat.outage import MEMORY_MIN_GAP

    _down(monkeypatch)
    engine = Engine(code_entries=[_entry("fast", dt.timedelta(milliseconds=10))], publish=publisher)
    now, end, ticks = t0, t0 + 10 * S, 0
    with caplog.at_level(logging.WARNING, logger="durablebeat"):
        while now < end:
            sleep = engine.tick(now)
            assert sleep >= MIN_SLEEP
            now += dt.timedelta(seconds=sleep)
            ticks += 1
    assert not engine.db_ok
    assert len(publisher.claims) <= 10 * S / MEMORY_MIN_GAP + 1
    assert ticks <= 10 / MIN_SLEEP + 1
    events = [r for r in caplog.records if getattr(r, "event", "") == "outage_memory_dropped"]
    assert events and all(r.count > 0 for r in events)


def test_the_outage_memory_is_bounded_and_says_when_it_drops(publisher, t0, monkeypatch, caplog):
    from durablebeat.beat.engine import Engine

    monkeypatch.setattr(outage, "MAX_OUTAGE_FIRES", 5)
    _down(monkeypatch)
    entries = [_entry(f"job-{i}", 2 * S) for i in range(4)]
    engine = Engine(code_entries=entries, publish=publisher)
    with caplog.at_level(logging.WARNING, logger="durablebeat"):
        for k in range(20):
            engine.tick(t0 + k * S)
    assert len(engine.memory.fires) == 5
    assert len(publisher.claims) > 5  # still fired: only the records were dropped
    assert any(getattr(r, "event", "") == "outage_memory_dropped" for r in caplog.records)


# --- values at the calendar's edge on the paths around the batch (review of R21) --------------

EDGE = dt.datetime.max.replace(tzinfo=dt.UTC) - dt.timedelta(seconds=1)


def test_an_in_doubt_run_at_the_calendars_edge_never_stops_the_tick(
    make_engine, make_schedule, make_run, publisher, t0
):
    """A run row written around the checks (slot near datetime.max, no boot: in doubt)
    overflowed the settle-time sum in every tick that looked for in-doubt runs."""
    canary = make_schedule("canary", every=20, next_fire_at=t0)
    odd = make_schedule("odd", every=20, next_fire_at=t0 + dt.timedelta(days=1))
    make_run(odd, EDGE, state=RunState.CLAIMED, boot=None, claimed_at=t0 - S)
    engine = make_engine()
    engine.tick(t0)
    engine.tick(t0 + 20 * S)
    assert publisher.slots("canary") == [t0, t0 + 20 * S]
    assert Schedule.objects.get(pk=canary.pk).error == ""


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("catch_up_window", dt.timedelta(days=3_000_000)),  # past the calendar from today
        ("catch_up_window", -S),
        ("startup_grace", dt.timedelta(days=9000)),
        ("startup_grace", -S),
    ],
)
def test_a_policy_duration_out_of_range_in_the_row_sets_it_aside_before_any_claim(
    make_engine, make_schedule, publisher, t0, field, value
):
    """A window past the calendar overflowed the retry bookkeeping after the claim had
    committed, stranding the whole batch claimed while the broker was down."""
    bad = _batch(make_schedule, t0)
    Schedule.objects.filter(pk=bad.pk).update(**{field: value, "catch_up": True})
    publisher.fail = True  # the broker is down: the retry bookkeeping runs for every claim
    engine = make_engine()
    engine.tick(t0)
    assert field in Schedule.objects.get(pk=bad.pk).error
    assert Run.objects.filter(state=RunState.CLAIMED).count() == len(GOOD)
    publisher.fail = False
    engine.tick(t0 + 2 * S)  # the retries go out
    assert sorted(publisher.slots()) == [t0] * len(GOOD)


@pytest.mark.parametrize("limit", [float("inf"), float("nan"), 1e308, -5.0])
def test_a_started_run_with_a_limit_that_is_no_number_of_seconds_never_stops_the_reclaim(
    make_schedule, make_run, t0, limit
):
    from django.db import connection

    if connection.vendor == "mysql" and not math.isfinite(limit):
        pytest.skip("MariaDB/MySQL cannot store inf or NaN in a float column")
    from durablebeat.beat import reclaim

    job = make_schedule("job", every=60, next_fire_at=t0)
    odd = make_run(job, t0 - 60 * S, state=RunState.STARTED, started_at=t0 - 3000 * S)
    Run.objects.filter(pk=odd.pk).update(hard_time_limit=limit, worker="w@h", worker_pid=1)
    edge = make_run(job, EDGE, state=RunState.STARTED, started_at=EDGE, hard_time_limit=60.0)
    gone = make_run(
        job, t0 - 3600 * S, state=RunState.STARTED, started_at=t0 - 3600 * S, worker="x@h"
    )
    assert reclaim.reclaim(t0, None) == 2  # the silent workers' runs, whatever their limit
    assert Run.objects.get(pk=gone.pk).state == RunState.LOST
    assert Run.objects.get(pk=edge.pk).state == RunState.STARTED  # started "in the future"
