"""R34 against a real database: ``buffer_one`` keeps a slot and sends it when the run it
waited for ends (a worker's completion, a reclaim, the no-news bound, a publish given up),
``replace`` revokes the run in flight, ``allow`` with ``max_in_flight`` bounds the runs in
flight; each across restarts and two beats. Time is passed in; the real worker and beat
processes are in tests/e2e/test_overlap_policies.py."""

from __future__ import annotations

import datetime as dt

import pytest
from django.core.exceptions import ValidationError

from durablebeat import api
from durablebeat.beat import claims
from durablebeat.beat.codesync import BadEntry, parse_beat_schedule
from durablebeat.beat.messages import REPLACEABLE
from durablebeat.enums import Reason, RunState
from durablebeat.models import Run, Schedule, WorkerHeartbeat
from durablebeat.ops import timeline
from durablebeat.ops.report import build_report, format_report
from durablebeat.worker import completion

pytestmark = pytest.mark.django_db(transaction=True)

S = dt.timedelta(seconds=1)
TASK = "tests.e2eapp.tasks.record"


class Revokes:
    """Records what beat revokes (the broker side; the e2e tests revoke for real)."""

    def __init__(self) -> None:
        self.calls: list[tuple[list[str], bool]] = []

    def __call__(self, task_ids: list[str], terminate: bool) -> None:
        self.calls.append((task_ids, terminate))


def _finish(run: Run, at: dt.datetime, ok: bool = True) -> bool:
    return completion.finish(completion.Finished(run.task_id or "", at, succeeded=ok))


def _start(run: Run, at: dt.datetime, worker: str = "w1@host", pid: int = 10) -> bool:
    WorkerHeartbeat.objects.update_or_create(
        worker=worker, pid=pid, defaults={"seen_at": at + 3600 * S}
    )
    return completion.start(completion.Started(run.task_id or "", at, worker, pid, None))


def _row(name: str = "job") -> Schedule:
    return Schedule.objects.get(name=name)


def _runs(name: str = "job") -> list[tuple[dt.datetime, str, str]]:
    return list(
        Run.objects.filter(schedule__name=name)
        .order_by("slot")
        .values_list("slot", "state", "reason")
    )


@pytest.fixture
def buffered(make_schedule, make_run, t0):
    """A ``buffer_one`` schedule every 60 s whose run of slot t0 - 60 s is in flight."""
    job = make_schedule("job", every=60, overlap="buffer_one", next_fire_at=t0)
    run = make_run(
        job, t0 - 60 * S, state=RunState.PUBLISHED, claimed_at=t0 - 60 * S, published_at=t0 - 60 * S
    )
    return job, run


# --- buffer_one -------------------------------------------------------------------------------


def test_a_slot_while_a_run_is_in_flight_is_kept_and_sent_when_that_run_ends(
    make_engine, publisher, buffered, t0
):
    """R34: the slot is kept (no run yet), the next is skipped naming it, the run's end moves
    the next fire to that instant (reason buffered) and a new beat (a restart) sends the
    kept slot, its own slot as identity, then goes on at the grid's next slot."""
    job, blocker = buffered
    make_engine(hooks=[]).tick(t0)
    row = _row()
    assert row.buffered_slot == t0 and row.next_fire_at == t0 + 60 * S
    assert not publisher.claims and not Run.objects.filter(slot=t0).exists()

    make_engine(hooks=[]).tick(t0 + 60 * S)  # a restart: the kept slot is in the row
    skipped = Run.objects.get(schedule=job, slot=t0 + 60 * S)
    assert skipped.state == RunState.SKIPPED
    assert f"slot {t0.isoformat()} is already kept" in skipped.detail
    assert _row().buffered_slot == t0

    assert _finish(blocker, t0 + 70 * S)
    row = _row()
    assert (row.next_fire_at, row.next_fire_reason) == (t0 + 70 * S, Reason.BUFFERED)

    engine = make_engine(hooks=[])
    engine.tick(t0 + 70 * S)
    assert [(c.slot, c.reason) for c in publisher.claims] == [(t0, Reason.BUFFERED)]
    sent = Run.objects.get(schedule=job, slot=t0)
    assert (sent.state, sent.reason) == (RunState.PUBLISHED, Reason.BUFFERED)
    row = _row()
    assert row.buffered_slot is None
    assert (row.next_fire_at, row.next_fire_reason) == (t0 + 120 * S, Reason.SCHEDULED)

    engine.tick(t0 + 120 * S)  # the buffered run is in flight: this slot is kept behind it
    assert _row().buffered_slot == t0 + 120 * S
    assert len(publisher.claims) == 1


def test_a_run_that_ends_after_the_next_slot_came_sends_the_kept_slot_and_keeps_that_one(
    make_engine, publisher, buffered, t0
):
    """R34: the end came when the next slot was already due (no move needed): the claim
    sends the kept slot first and keeps the slot that came, Temporal's BufferOne order."""
    _job, blocker = buffered
    engine = make_engine(hooks=[])
    engine.tick(t0)
    assert _finish(blocker, t0 + 65 * S)  # next fire t0+60 s was due already: not moved
    assert _row().next_fire_reason == Reason.SCHEDULED
    engine.tick(t0 + 66 * S)
    assert [(c.slot, c.reason) for c in publisher.claims] == [(t0, Reason.BUFFERED)]
    row = _row()
    assert row.buffered_slot == t0 + 60 * S and row.next_fire_at == t0 + 120 * S


def test_a_failed_run_releases_the_kept_slot_too(make_engine, publisher, buffered, t0):
    _job, blocker = buffered
    engine = make_engine(hooks=[])
    engine.tick(t0)
    assert _finish(blocker, t0 + 10 * S, ok=False)
    engine.tick(t0 + 10 * S)
    assert publisher.slots("job") == [t0]


def test_a_lost_run_releases_the_kept_slot_in_the_reclaiming_tick(
    make_engine, make_schedule, make_run, publisher, t0, settings
):
    """R34 + R15: the reclaim marks the run lost, and the same tick sends the kept slot."""
    settings.DURABLEBEAT_GC_INTERVAL = dt.timedelta(seconds=60)
    job = make_schedule("job", every=600, overlap="buffer_one", next_fire_at=t0)
    blocker = make_run(job, t0 - 600 * S, state=RunState.PUBLISHED, published_at=t0 - 600 * S)
    assert _start(blocker, t0 - 590 * S, worker="gone@host", pid=1)
    engine = make_engine()
    engine.tick(t0)  # its worker is alive: the slot is kept
    assert _row().buffered_slot == t0
    WorkerHeartbeat.objects.filter(worker="gone@host").update(seen_at=t0 - 5 * S)
    engine.tick(t0 + 130 * S)  # silent past WORKER_DEAD_AFTER, the next round is due
    blocker.refresh_from_db()
    assert blocker.state == RunState.LOST
    assert [(c.slot, c.reason) for c in publisher.claims] == [(t0, Reason.BUFFERED)]
    assert _row().next_fire_at == t0 + 600 * S


def test_a_run_past_its_no_news_bound_no_longer_holds_the_kept_slot(
    make_engine, publisher, buffered, t0, settings
):
    """R34 + R22: at the next slot the published run is past the bound: marked no news,
    the kept slot goes and the slot that came is kept behind it."""
    _job, blocker = buffered
    settings.DURABLEBEAT_NO_NEWS_AFTER = dt.timedelta(seconds=90)
    engine = make_engine(hooks=[])
    engine.tick(t0)
    engine.tick(t0 + 60 * S)  # 120 s after its publish: past the 90 s bound
    blocker.refresh_from_db()
    assert blocker.state == RunState.NO_NEWS
    assert [(c.slot, c.reason) for c in publisher.claims] == [(t0, Reason.BUFFERED)]
    assert _row().buffered_slot == t0 + 60 * S


def test_two_beats_send_a_kept_slot_once(make_engine, publisher, buffered, t0):
    """R34 + R4: the end's move is claimed by one compare-and-set, whichever beat looks."""
    job, blocker = buffered
    first, second = make_engine(hooks=[]), make_engine(hooks=[])
    first.tick(t0)
    second.tick(t0)
    assert _finish(blocker, t0 + 70 * S)
    first.tick(t0 + 70 * S)
    second.tick(t0 + 70 * S)
    assert publisher.slots("job") == [t0]
    assert Run.objects.filter(schedule=job, slot=t0).count() == 1


def test_an_end_while_another_run_is_in_flight_keeps_the_slot_for_that_ones_end(
    make_engine, publisher, buffered, make_run, t0
):
    """A run now is in flight when the scheduled run ends: the kept slot waits for it."""
    job, blocker = buffered
    engine = make_engine(hooks=[])
    engine.tick(t0)
    manual = make_run(
        job, t0 + 5 * S, state=RunState.PUBLISHED, reason=Reason.MANUAL, published_at=t0 + 5 * S
    )
    assert _finish(blocker, t0 + 10 * S)
    engine.tick(t0 + 10 * S)
    assert not publisher.claims
    row = _row()
    assert row.buffered_slot == t0 and row.next_fire_at == t0 + 60 * S
    assert row.next_fire_reason == Reason.SCHEDULED
    assert _finish(manual, t0 + 20 * S)
    engine.tick(t0 + 20 * S)
    assert publisher.slots("job") == [t0]


def test_a_pause_drops_the_kept_slot(make_engine, publisher, buffered, t0):
    _job, blocker = buffered
    make_engine(hooks=[]).tick(t0)
    api.pause_schedule("job")
    assert _row().buffered_slot is None
    assert _finish(blocker, t0 + 10 * S)
    assert _row().next_fire_reason == Reason.SCHEDULED  # nothing kept: nothing moved


def test_an_overlap_changed_away_from_buffer_one_drops_the_kept_slot(
    make_engine, publisher, buffered, t0
):
    job, _blocker = buffered
    engine = make_engine(hooks=[])
    engine.tick(t0)
    Schedule.objects.filter(pk=job.pk).update(overlap="skip")
    engine.tick(t0 + 60 * S)  # skipped behind the run in flight; the kept slot is dropped
    assert _row().buffered_slot is None
    assert Run.objects.get(schedule=job, slot=t0 + 60 * S).state == RunState.SKIPPED


# --- replace ----------------------------------------------------------------------------------


@pytest.mark.parametrize("terminate", [False, True])
def test_replace_revokes_the_run_in_flight_which_ends_replaced_and_sends_the_slot(
    make_engine, make_schedule, make_run, publisher, t0, terminate
):
    job = make_schedule("job", every=60, overlap="replace", terminate=terminate, next_fire_at=t0)
    old = make_run(job, t0 - 60 * S, state=RunState.PUBLISHED, published_at=t0 - 60 * S)
    assert _start(old, t0 - 59 * S)
    revokes = Revokes()
    make_engine(hooks=[], revoke=revokes).tick(t0)
    assert revokes.calls == [([old.task_id], terminate)]
    old.refresh_from_db()
    assert old.state == RunState.REPLACED and old.finished_at == t0
    assert f"replaced by slot {t0.isoformat()}" in old.detail
    assert publisher.slots("job") == [t0]
    # what its worker says later does not move it: replaced is final
    assert not _finish(old, t0 + 5 * S)
    old.refresh_from_db()
    assert old.state == RunState.REPLACED
    # the report says it, and the timeline has a mark of its own for it
    said = format_report(build_report(t0 - 3600 * S, t0 + 60 * S))
    assert "1 replaced by a newer slot" in said
    assert timeline.mark_kind(old.state, old.reason) == "replaced"
    # the message of a replace schedule says so: its worker asks the ledger first
    assert publisher.claims[0].headers()[REPLACEABLE] is True
    assert completion.is_replaced(old.pk) and not completion.is_replaced(publisher.claims[0].run_id)


def test_replace_with_nothing_in_flight_just_fires(make_engine, make_schedule, publisher, t0):
    make_schedule("job", every=60, overlap="replace", next_fire_at=t0)
    revokes = Revokes()
    make_engine(hooks=[], revoke=revokes).tick(t0)
    assert publisher.slots("job") == [t0] and not revokes.calls


def test_a_revoke_that_fails_is_said_and_the_slot_still_goes(
    make_engine, make_schedule, make_run, publisher, t0, caplog
):
    job = make_schedule("job", every=60, overlap="replace", next_fire_at=t0)
    make_run(job, t0 - 60 * S, state=RunState.PUBLISHED, published_at=t0 - 60 * S)

    def broken(task_ids: list[str], terminate: bool) -> None:
        raise ConnectionError("broker down (test)")

    make_engine(hooks=[], revoke=broken).tick(t0)
    assert publisher.slots("job") == [t0]
    assert "revoke failed schedule=job" in caplog.text


# --- allow with max_in_flight ----------------------------------------------------------------


def test_allow_with_max_in_flight_skips_beyond_the_bound(
    make_engine, make_schedule, make_run, publisher, t0
):
    job = make_schedule("job", every=60, overlap="allow", max_in_flight=2, next_fire_at=t0)
    first = make_run(job, t0 - 120 * S, state=RunState.PUBLISHED, published_at=t0 - 120 * S)
    engine = make_engine(hooks=[])
    make_run(job, t0 - 60 * S, state=RunState.PUBLISHED, published_at=t0 - 60 * S)
    engine.tick(t0)
    skipped = Run.objects.get(schedule=job, slot=t0)
    assert skipped.state == RunState.SKIPPED
    assert "2 runs in flight (max_in_flight 2)" in skipped.detail
    assert _finish(first, t0 + 30 * S)
    engine.tick(t0 + 60 * S)
    assert publisher.slots("job") == [t0 + 60 * S]


def test_allow_without_a_bound_never_asks_for_the_runs_in_flight(
    make_engine, make_schedule, make_run, publisher, t0, monkeypatch
):
    job = make_schedule("job", every=60, overlap="allow", next_fire_at=t0)
    make_run(job, t0 - 60 * S, state=RunState.PUBLISHED, published_at=t0 - 60 * S)

    def asked(*args, **kwargs):
        raise AssertionError("an unbounded allow asked for the runs in flight")

    monkeypatch.setattr(claims, "_in_flight", asked)
    make_engine(hooks=[]).tick(t0)
    assert publisher.slots("job") == [t0]


# --- refused where set wrong (R20) ------------------------------------------------------------


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({"overlap": "skip", "max_in_flight": 2}, "max_in_flight"),
        ({"overlap": "allow", "max_in_flight": 0}, "max_in_flight"),
        ({"overlap": "replace", "max_in_flight": 1}, "max_in_flight"),
        ({"overlap": "allow", "terminate": True}, "terminate"),
        ({"overlap": "buffer_one", "terminate": True}, "terminate"),
        ({"overlap": "buffer_all"}, "overlap"),
    ],
)
def test_a_policy_option_with_the_wrong_overlap_is_refused_naming_the_field(
    make_schedule, fields, field
):
    with pytest.raises(ValidationError) as raised:
        make_schedule("job", every=60, **fields)
    assert field in raised.value.message_dict


@pytest.mark.parametrize(
    ("policy", "field"),
    [
        ({"overlap": "skip", "max_in_flight": 3}, "max_in_flight"),
        ({"overlap": "allow", "max_in_flight": "3"}, "max_in_flight"),
        ({"overlap": "allow", "terminate": True}, "terminate"),
        ({"overlap": "replace", "terminate": "yes"}, "terminate"),
        ({"overlap": "buffer_all"}, "overlap"),
    ],
)
def test_a_code_entry_with_a_wrong_policy_option_is_refused_naming_entry_and_field(policy, field):
    entry = {"task": TASK, "schedule": 60, "options": {"durablebeat": policy}}
    with pytest.raises(BadEntry) as raised:
        parse_beat_schedule({"nightly": entry}, "UTC", check_task=False)
    assert "nightly" in str(raised.value)
    assert raised.value.field == field


def test_the_api_takes_and_reads_back_every_policy_option(t0):
    options = {"durablebeat": {"overlap": "replace", "terminate": True}}
    api.add_schedule("a", TASK, dt.timedelta(minutes=5), options=options)
    bounded = {"durablebeat": {"overlap": "allow", "max_in_flight": 3}}
    api.add_schedule("b", TASK, dt.timedelta(minutes=5), options=bounded)
    assert (_row("a").overlap, _row("a").terminate) == ("replace", True)
    assert (_row("b").overlap, _row("b").max_in_flight) == ("allow", 3)
    with pytest.raises(api.InvalidSchedule) as raised:
        api.add_schedule(
            "c", TASK, dt.timedelta(minutes=5), options={"durablebeat": {"max_in_flight": 2}}
        )
    assert raised.value.field == "max_in_flight"
    api.update_schedule("b", options={"durablebeat": {"max_in_flight": 5}})
    assert _row("b").max_in_flight == 5


def test_a_run_now_is_sent_whatever_is_in_flight(make_schedule, make_run, t0):
    job = make_schedule("job", every=60, overlap="buffer_one", next_fire_at=t0)
    make_run(job, t0 - 60 * S, state=RunState.PUBLISHED, published_at=t0 - 60 * S)
    row = Schedule.objects.get(pk=job.pk)
    made = claims.claim_manual(row, None, t0)
    assert Run.objects.get(pk=made.run_id).reason == Reason.MANUAL


def test_a_worker_discards_a_message_whose_run_was_replaced_before_it_started(
    make_schedule, make_run, t0
):
    """R34: a revoke reaches only the workers running when it is sent; the worker that
    receives a replaced run's message later asks the ledger and discards it (Celery's own
    revoked set), and lets any other message run."""
    from types import SimpleNamespace

    from celery.worker import state

    from durablebeat.worker import tracking

    job = make_schedule("job", every=60, overlap="replace", next_fire_at=t0)
    gone = make_run(job, t0 - 60 * S, state=RunState.REPLACED)
    live = make_run(job, t0, state=RunState.PUBLISHED)

    def received(run: Run, **headers: object) -> bool:
        request_dict = {"durablebeat_schedule": "job", "durablebeat_run": run.pk, **headers}
        tracking.on_received(request=SimpleNamespace(id=run.task_id, request_dict=request_dict))
        return run.task_id in state.revoked

    try:
        assert received(gone, durablebeat_replaceable=True)
        assert not received(live, durablebeat_replaceable=True)
        state.revoked.discard(gone.task_id)
        assert not received(gone)  # not a replace schedule's message: not asked
    finally:
        state.revoked.discard(gone.task_id)
