"""R32 and issue 31 item 1: a bounded ledger. Beat deletes what is older than
``DURABLEBEAT_RETENTION`` after its due work, in batches, one beat at a time; what is in
flight, each schedule's newest run and a boot a row names are kept; backfill, catch-up and
the in-doubt resend stop at the cutoff, so a slot whose run is gone never fires again (R4 in
effect); report and the timeline say that history before the cutoff is pruned; ``durablebeat
prune`` cleans a large ledger once, in bounded transactions, with ``--dry-run``. On
PostgreSQL, SQLite and MariaDB (``DURABLEBEAT_TEST_DB``): every delete is by a list of
primary keys (MariaDB refuses ``LIMIT`` in a subquery)."""

from __future__ import annotations

import datetime as dt
import io
import threading
import uuid

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import connection
from django.test.utils import CaptureQueriesContext, override_settings

from durablebeat.beat import publishing, retention
from durablebeat.beat.engine import AFTER_DUE_MIN_SLEEP
from durablebeat.enums import Reason, RunState
from durablebeat.models import Boot, Incident, Marker, MissedSlots, Run, Schedule
from durablebeat.ops import backfill, prune, report
from durablebeat.words import absolute

pytestmark = pytest.mark.django_db(transaction=True)

S = dt.timedelta(seconds=1)
H = dt.timedelta(hours=1)
DAY = dt.timedelta(days=1)
NOW = dt.datetime(2026, 3, 2, 12, 0, tzinfo=dt.UTC)
OLD = NOW - 40 * DAY  # past the default retention of 30 days
RECENT = NOW - 2 * DAY


def _boot(at: dt.datetime) -> Boot:
    return Boot.objects.create(
        id=uuid.uuid4(), hostname="old-host", pid=7, started_at=at, heartbeat_at=at
    )


@pytest.fixture
def ledger(make_schedule, make_run):
    """A year-old ledger in small: per schedule, old finished runs, one old run in flight,
    and a recent one; a schedule whose newest run is old; missed slots, incidents, boots."""
    gone_boot, named_boot, live_boot = _boot(OLD - DAY), _boot(OLD - DAY), _boot(RECENT)
    daily = make_schedule("daily", every=DAY, next_fire_at=NOW + H)
    paused = make_schedule("paused", every=DAY, enabled=False)
    ids = {}
    ids["old"] = [make_run(daily, OLD + i * H, boot=gone_boot).pk for i in range(5)]
    # a dead boot's claim never confirmed (R9) and a started run (R15): in flight
    ids["in_flight"] = [
        make_run(daily, OLD + 10 * H, state=RunState.CLAIMED, boot=named_boot).pk,
        make_run(daily, OLD + 11 * H, state=RunState.STARTED).pk,
    ]
    ids["recent"] = [make_run(daily, RECENT, boot=live_boot).pk]
    ids["paused_old"] = make_run(paused, OLD - 2 * DAY).pk
    ids["paused_newest"] = make_run(paused, OLD).pk  # its last-run facts: kept
    MissedSlots.objects.create(
        schedule=daily, count=3, first_slot=OLD, last_slot=OLD, reason="x", recorded_at=OLD
    )
    MissedSlots.objects.create(
        schedule=daily, count=1, first_slot=RECENT, last_slot=RECENT, reason="y", recorded_at=RECENT
    )
    Incident.objects.create(kind="reclaim", at=OLD)
    Incident.objects.create(kind="reclaim", at=RECENT)
    ids["boots"] = (gone_boot.pk, named_boot.pk, live_boot.pk)
    return ids


def _assert_pruned(ids):
    kept = set(Run.objects.values_list("pk", flat=True))
    assert kept == {*ids["in_flight"], *ids["recent"], ids["paused_newest"]}
    assert list(MissedSlots.objects.values_list("recorded_at", flat=True)) == [RECENT]
    assert list(Incident.objects.values_list("at", flat=True)) == [RECENT]
    _gone, named, live = ids["boots"]
    assert set(Boot.objects.values_list("pk", flat=True)) == {named, live}


def test_a_pass_deletes_what_is_old_and_keeps_what_is_in_flight_newest_or_named(ledger):
    done = retention.Pass(NOW - 30 * DAY)
    assert retention.prune_round(done, most_rows=10_000) == 9
    assert done.finished
    assert done.deleted == {"runs": 6, "missed slots": 1, "incidents": 1, "boots": 1}
    _assert_pruned(ledger)


def test_each_batch_is_one_transaction_of_at_most_its_size_and_a_round_stops_at_its_bound(
    ledger,
):
    run = retention.Pass(NOW - 30 * DAY, batch=2)
    steps = []
    while not run.finished:
        with CaptureQueriesContext(connection) as queries:
            steps.append(run.step())
        deletes = [q["sql"] for q in queries if q["sql"].lstrip().upper().startswith("DELETE")]
        assert len(deletes) <= 1  # one statement, by a list of at most two keys
    assert max(steps) == 2 and sum(steps) == 9
    _assert_pruned(ledger)
    # a round's row bound: it stops once it has deleted that many (whole batches)
    Run.objects.all().delete()
    row = Schedule.objects.get(name="daily")
    Run.objects.bulk_create(
        Run(schedule=row, slot=OLD + i * S, claimed_at=OLD, state=RunState.SUCCEEDED)
        for i in range(10)
    )
    bounded = retention.Pass(NOW - 30 * DAY, batch=2)
    assert retention.prune_round(bounded, most_rows=3) == 4
    assert Run.objects.count() == 6 and not bounded.finished


def test_nothing_is_pruned_with_retention_none(ledger, make_engine):
    with override_settings(DURABLEBEAT_RETENTION=None):
        assert retention.cutoff(NOW) is None
        engine = make_engine()
        engine.tick(NOW)
    assert Run.objects.count() == 10


def _assert_old_gone(ids):
    """What a beat's round leaves of the ledger: the old finished runs are gone, the newest
    and recent ones kept. (Its other hooks settle the old in-flight runs first: the dead
    boot's claim is missed, the started run of no live worker lost, R9, R15.)"""
    kept = set(Run.objects.values_list("pk", flat=True))
    assert not kept & {*ids["old"], ids["paused_old"]}
    assert kept >= {*ids["recent"], ids["paused_newest"]}
    assert list(MissedSlots.objects.values_list("recorded_at", flat=True)) == [RECENT]
    assert list(Incident.objects.values_list("at", flat=True)) == [RECENT]


def test_a_beat_prunes_after_its_due_work_once_across_beats(ledger, make_engine, publisher):
    """The real engine loop: a beat with nothing due soon prunes (its round comes after
    the tick's claims); a second beat in the same ten seconds does not take a round."""
    first, second = make_engine(), make_engine()
    first.tick(NOW)
    _assert_old_gone(ledger)
    [hook] = first.after_due
    assert hook.rounds == 1
    Run.objects.create(
        schedule=Schedule.objects.get(name="daily"),
        slot=OLD + 20 * H,
        claimed_at=OLD,
        state=RunState.SUCCEEDED,
    )
    second.tick(NOW + S)
    assert second.after_due[0].rounds == 0  # the turn is the first beat's (Marker)
    assert Marker.objects.get(key=retention.ROUND_MARKER).at == NOW
    second.tick(NOW + retention.ROUND_EVERY + S)
    assert second.after_due[0].rounds == 1
    assert not Run.objects.filter(slot=OLD + 20 * H).exists()


def test_a_beat_about_to_fire_does_not_prune_and_a_due_slot_is_claimed_first(
    ledger, make_engine, make_schedule, publisher
):
    """A slot due in less than AFTER_DUE_MIN_SLEEP: no round now, the fire is not delayed;
    and a tick with a due slot claims it before any pruning (the hook runs after)."""
    make_schedule(
        "soon", every=60, next_fire_at=NOW + dt.timedelta(seconds=AFTER_DUE_MIN_SLEEP / 2)
    )
    engine = make_engine()
    engine.tick(NOW)
    assert engine.after_due[0].rounds == 0
    assert Run.objects.filter(pk__in=ledger["old"]).count() == 5
    order = []
    engine.after_due.insert(0, lambda loop, now: order.append(("after_due", publisher.slots())))
    Schedule.objects.filter(name="soon").update(next_fire_at=NOW + S)
    engine.tick(NOW + S)  # fires "soon", then sleeps a minute: the round may run
    assert order == [("after_due", [NOW + S])]
    assert engine.after_due[1].rounds == 1
    _assert_old_gone(ledger)


@pytest.mark.parametrize("retention_setting", [None, 30 * DAY])
def test_catch_up_never_reaches_past_the_retention(
    make_engine, make_schedule, publisher, retention_setting
):
    """A yearly delivery job (1 January) with a 60-day catch-up window, found 40 days after
    its slot: kept for ever, it is caught up; with 30 days' retention it is missed (its run
    may have been pruned: a fire would be its second)."""
    jan1 = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
    make_schedule(
        "yearly",
        kind="crontab",
        minute="0",
        hour="0",
        day_of_month="1",
        month_of_year="1",
        catch_up=True,
        catch_up_window=60 * DAY,
        next_fire_at=jan1,
    )
    with override_settings(DURABLEBEAT_RETENTION=retention_setting):
        make_engine().tick(jan1 + 40 * DAY)
    if retention_setting is None:
        assert [(c.slot, c.reason) for c in publisher.claims] == [(jan1, Reason.CATCH_UP)]
    else:
        assert publisher.claims == []
        assert MissedSlots.objects.get().first_slot == jan1


@pytest.mark.parametrize("retention_setting", [None, 30 * DAY])
def test_an_in_doubt_slot_older_than_the_retention_is_missed_not_resent(
    make_engine, make_schedule, publisher, retention_setting
):
    row = make_schedule(
        "digest", kind="crontab", catch_up=True, catch_up_window=60 * DAY, next_fire_at=NOW + H
    )
    boot = _boot(OLD)
    run = Run.objects.create(
        schedule=row, slot=OLD, boot=boot, claimed_at=OLD, task_id=str(uuid.uuid4())
    )
    with override_settings(DURABLEBEAT_RETENTION=retention_setting):
        make_engine().tick(NOW)
    run.refresh_from_db()
    if retention_setting is None:
        assert [(c.slot, c.reason) for c in publisher.claims] == [(OLD, Reason.REPUBLISH)]
    else:
        assert publisher.claims == []
        assert run.state == RunState.MISSED
        assert "older than DURABLEBEAT_RETENTION" in run.detail


@pytest.mark.parametrize("retention_setting", [None, 30 * DAY])
def test_backfill_leaves_slots_before_the_cutoff_alone(
    make_schedule, monkeypatch, retention_setting
):
    sent = []
    monkeypatch.setattr(publishing, "send", lambda app, claim, producer=None: sent.append(claim))
    make_schedule("nightly", kind="crontab", minute="0", hour="3", next_fire_at=NOW + DAY)
    since = NOW.replace(hour=0) - 32 * DAY  # five nights at 3:00, 32 to 28 days ago
    with override_settings(DURABLEBEAT_RETENTION=retention_setting):
        done = backfill.backfill("nightly", since, since + 4 * DAY + 4 * H, NOW)
    edge = NOW - 30 * DAY
    nights = [since + 3 * H + i * DAY for i in range(5)]
    if retention_setting is None:
        assert done.fired == nights
    else:
        assert done.fired == nights[3:]
        assert done.left_alone == [
            (night, f"before the ledger's pruned edge {edge.isoformat()}") for night in nights[:3]
        ]
    assert [c.slot for c in sent] == done.fired


def test_report_says_history_before_the_cutoff_is_pruned(make_schedule, make_run):
    row = make_schedule("daily", every=DAY, next_fire_at=NOW + H)
    make_run(row, RECENT)
    inside = report.build_report(NOW - 7 * DAY, NOW)
    assert inside.pruned == ""
    assert "note:" not in report.format_report(inside)
    beyond = report.build_report(NOW - 60 * DAY, NOW)
    assert beyond.pruned.startswith(f"history before {absolute(NOW - 30 * DAY)} is pruned")
    assert "note: history before" in report.format_report(beyond)
    assert beyond.as_dict()["pruned"] == beyond.pruned
    with override_settings(DURABLEBEAT_RETENTION=None):
        assert report.build_report(NOW - 60 * DAY, NOW).pruned == ""


def test_timeline_page_says_history_before_the_cutoff_is_pruned(admin_client, time_machine):
    time_machine.move_to(NOW, tick=False)
    url = "/admin/durablebeat/schedule/timeline/"
    old = admin_client.get(url, {"from": "2026-01-01", "to": "2026-01-02"})
    assert "is pruned (DURABLEBEAT_RETENTION = 30 d)" in old.content.decode()
    recent = admin_client.get(url, {"window": "24h"})
    assert "is pruned" not in recent.content.decode()


# --- the command ------------------------------------------------------------------------------


def _prune(*args: str) -> list[str]:
    out = io.StringIO()
    call_command("durablebeat", "prune", *args, stdout=out)
    return out.getvalue().splitlines()


def test_prune_dry_run_counts_and_deletes_nothing(ledger, time_machine):
    time_machine.move_to(NOW, tick=False)
    lines = _prune("--dry-run")
    assert lines[0].startswith("would prune the ledger before")
    assert "  runs: 6 would be deleted" in lines
    assert "  missed slots: 1 would be deleted" in lines
    assert "  boots: 1 would be deleted" in lines
    assert Run.objects.count() == 10 and Boot.objects.count() == 3


def test_prune_deletes_in_bounded_transactions_saying_progress(ledger, time_machine):
    time_machine.move_to(NOW, tick=False)
    lines = _prune("--batch-size", "2")
    assert lines[0].endswith("at most 2 rows a transaction")
    assert [line.split(" (")[0] for line in lines[1:-1]] == [
        "  runs: 6 deleted",
        "  missed slots: 1 deleted",
        "  incidents: 1 deleted",
        "  boots: 1 deleted",
    ]
    assert lines[-1].startswith("done: 9 rows deleted")
    _assert_pruned(ledger)


def test_prune_keeps_more_when_asked_never_less(ledger, time_machine):
    time_machine.move_to(NOW, tick=False)
    assert _prune("--older-than", "60d")[-1].startswith("done: 0 rows deleted")
    with pytest.raises(CommandError, match="shorter than DURABLEBEAT_RETENTION"):
        _prune("--older-than", "7d")
    with pytest.raises(CommandError, match="--batch-size must be from 1 to 10,000"):
        _prune("--batch-size", "0")
    with (
        override_settings(DURABLEBEAT_RETENTION=None),
        pytest.raises(CommandError, match="set it first"),
    ):
        _prune()
    assert Run.objects.count() == 10
    assert prune.MAX_BATCH == 10_000


# --- locks: a claim never waits on pruning, pruning waits on nobody for long ----------------


def _closing(work):
    """``work`` for a thread of its own: its connection closed when it ends."""
    from django.db import connections

    def run(*args):
        try:
            work(*args)
        finally:
            connections.close_all()

    return run


def _in_thread(work, ready, release):
    """``work()`` in a transaction of its own connection, held open until ``release``."""
    from django.db import transaction

    def run():
        with transaction.atomic():
            work()
            ready.set()
            release.wait(30)

    thread = threading.Thread(target=_closing(run), daemon=True)
    thread.start()
    assert ready.wait(30)
    return thread


@pytest.mark.skipif(
    connection.vendor == "sqlite", reason="SQLite has one writer at a time: no row locks"
)
def test_a_claim_never_waits_on_a_prune_batch(ledger, make_engine, make_schedule, publisher):
    """A prune batch's transaction, held open with its deletes done: a beat claims and
    publishes a due slot meanwhile (the batch locks only old runs, which no claim reads)."""
    make_schedule("due", every=60, next_fire_at=NOW)
    ready, release = threading.Event(), threading.Event()
    holder = _in_thread(lambda: retention.Pass(NOW - 30 * DAY).step(), ready, release)
    try:
        engine = make_engine(after_due=[])
        ticking = threading.Thread(target=_closing(engine.tick), args=(NOW,), daemon=True)
        ticking.start()
        ticking.join(20)
        assert not ticking.is_alive(), "the claim waited on the prune batch's locks"
        assert publisher.slots("due") == [NOW]
    finally:
        release.set()
        holder.join(30)
    assert not Run.objects.filter(pk__in=ledger["old"]).exists()


@pytest.mark.skipif(
    connection.vendor == "sqlite", reason="SQLite has one writer at a time: no row locks"
)
def test_a_round_skips_a_locked_old_run_and_waits_on_nobody(ledger, make_engine, caplog):
    """A worker holding an old run's row (writing its outcome), or ``durablebeat prune``
    beside beat: the round passes that row by (SKIP LOCKED) and prunes the rest, raises
    nothing (no outage), and a later pass prunes it."""
    old = ledger["old"][0]
    ready, release = threading.Event(), threading.Event()
    holder = _in_thread(
        lambda: list(Run.objects.select_for_update().filter(pk=old)), ready, release
    )
    engine = make_engine()
    hook = engine.after_due[0]
    try:
        hook(engine, NOW)
    finally:
        release.set()
        holder.join(30)
    assert hook.rounds == 1 and hook.current is not None  # not stopped by an error
    assert "pruning the ledger stopped" not in caplog.text
    assert list(Run.objects.filter(pk__in=ledger["old"]).values_list("pk", flat=True)) == [old]
    old_runs = Run.objects.filter(pk__in=ledger["old"])
    for i in range(1, 20):  # the rest of this pass, then the next one takes it
        hook(engine, NOW + i * retention.ROUND_EVERY)
        if not old_runs.exists():
            break
    assert not old_runs.exists()


def test_prune_says_its_progress_at_least_every_few_seconds(ledger):
    """Each batch takes 6 s on the clock given: a line after each, so a long first cleanup
    is never silent for more than ``PROGRESS_EVERY``."""
    said: list[str] = []
    ticks = iter(range(0, 10_000, 6))
    planned = prune.plan(NOW, None, batch=2, dry_run=False)
    prune.prune(planned, said.append, clock=lambda: float(next(ticks)))
    assert [line.split(" deleted so far ")[::-1] for line in said[1:3]] == [
        ["(6.0 s)", "  runs: 2"],
        ["(12.0 s)", "  runs: 3"],  # the schedule's newest run is kept
    ]
    _assert_pruned(ledger)


def test_backfill_after_the_retention_was_raised_still_leaves_pruned_slots_alone(
    make_schedule, make_run, monkeypatch
):
    """A retention raised (or set to None) after beat pruned brings no run back: a backfill
    of the pruned weeks would fire slots that ran once already (R4). The edge is the latest
    cutoff runs were pruned at, kept in a Marker."""
    sent = []
    monkeypatch.setattr(publishing, "send", lambda app, claim, producer=None: sent.append(claim))
    row = make_schedule("nightly", kind="crontab", minute="0", hour="3", next_fire_at=NOW + DAY)
    since = NOW.replace(hour=0) - 32 * DAY
    nights = [since + 3 * H + i * DAY for i in range(5)]
    for night in nights:
        make_run(row, night)
    make_run(row, NOW - DAY)  # the newest, kept
    assert retention.pruned_before() is None
    pruned = retention.Pass(NOW - 30 * DAY)
    retention.prune_round(pruned, most_rows=10_000)
    assert retention.pruned_before() == NOW - 30 * DAY
    retention.prune_round(retention.Pass(NOW - 40 * DAY), most_rows=10_000)  # never back
    assert retention.pruned_before() == NOW - 30 * DAY
    with override_settings(DURABLEBEAT_RETENTION=None):
        done = backfill.backfill("nightly", since, since + 4 * DAY + 4 * H, NOW)
    assert done.fired == [] and sent == []
    assert [slot for slot, why in done.left_alone if "pruned edge" in why] == nights[:3]


def test_a_live_boots_incident_outlives_the_retention(make_boot):
    """A beat up longer than the retention: its ``listen_deaf`` record, written once at its
    boot, is what turns the savers to the broker and what check names (R31). It stays while
    the boot is heard from; an old incident of a dead boot goes."""
    live = make_boot(started_at=OLD, heartbeat_at=NOW - S)
    dead = make_boot(started_at=OLD, heartbeat_at=OLD)
    Incident.objects.create(kind="listen_deaf", at=OLD, boot=live)
    Incident.objects.create(kind="listen_deaf", at=OLD, boot=dead)
    before = NOW - 30 * DAY
    assert prune.would_delete(before)["incidents"] == 1
    retention.prune_round(retention.Pass(before), most_rows=10_000)
    assert list(Incident.objects.values_list("boot_id", flat=True)) == [live.pk]
