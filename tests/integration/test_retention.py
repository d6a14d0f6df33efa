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


def _unhurried(engine):
    """The engine with its round's time bound (``ROUND_SECONDS``, 0.2 s) lifted: on a loaded
    machine four batches can take longer, and these tests are about when a round runs, not
    how long it may take (that bound: ``test_a_round_stops_between_batches_when_its_time_is_up``).
    """
    [hook] = engine.after_due
    hook.seconds = 60.0
    return engine


def test_a_round_stops_between_batches_when_its_time_is_up(ledger):
    asked = []

    def in_time():
        asked.append(True)
        return len(asked) == 1  # time for one batch, then up

    p = retention.Pass(NOW - 30 * DAY, batch=2)
    assert retention.prune_round(p, most_rows=10_000, in_time=in_time) == 2
    assert not p.finished and len(asked) == 2
    assert Run.objects.count() == 8


def test_a_beat_prunes_after_its_due_work_once_across_beats(ledger, make_engine, publisher):
    """The real engine loop: a beat with nothing due soon prunes (its round comes after
    the tick's claims); a second beat in the same ten seconds does not take a round."""
    first, second = _unhurried(make_engine()), _unhurried(make_engine())
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
    engine = _unhurried(make_engine())
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


def test_a_beat_that_found_nothing_to_prune_looks_again_only_minutes_later(
    make_engine, make_schedule, make_run
):
    """An idle ledger: a round that ends its pass with nothing deleted puts the next look
    ``IDLE_ROUND_EVERY`` away (an idle beat's rounds were most of its idle CPU, issue 36);
    a round that deleted something looks again after ``ROUND_EVERY``, and a run that
    crossed the cutoff meanwhile goes at the later look."""
    daily = make_schedule("daily", every=DAY, next_fire_at=NOW + H)
    make_run(daily, RECENT)
    engine = make_engine()
    [hook] = engine.after_due
    hook(engine, NOW)
    assert hook.rounds == 1 and hook.current is not None and hook.current.finished
    assert hook.next_look == NOW + retention.IDLE_ROUND_EVERY
    old = make_run(daily, NOW - 30 * DAY + S)  # past the cutoff a second later
    hook(engine, NOW + retention.ROUND_EVERY + S)
    assert hook.rounds == 1 and Run.objects.filter(pk=old.pk).exists()
    hook(engine, NOW + retention.IDLE_ROUND_EVERY)
    assert hook.rounds == 2 and not Run.objects.filter(pk=old.pk).exists()
    assert hook.next_look == NOW + retention.IDLE_ROUND_EVERY + retention.ROUND_EVERY


@pytest.mark.parametrize(
    ("retention_setting", "own", "caught_up"),
    [
        (None, None, True),
        (30 * DAY, None, False),
        (None, 30 * DAY, False),
        (30 * DAY, 90 * DAY, True),
    ],
)
def test_catch_up_never_reaches_past_the_retention(
    make_engine, make_schedule, publisher, retention_setting, own, caught_up
):
    """A yearly delivery job (1 January) with a 60-day catch-up window, found 40 days after
    its slot: kept for ever, it is caught up; with 30 days' retention it is missed (its run
    may have been pruned: a fire would be its second). The schedule's own retention, when
    it has one, decides, not the setting."""
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
        retention=own,
    )
    with override_settings(DURABLEBEAT_RETENTION=retention_setting):
        make_engine().tick(jan1 + 40 * DAY)
    if caught_up:
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
    nothing (no outage), and the next full pass (``FULL_PASS_EVERY``) prunes it."""
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
    for i in range(1, 20):  # the rest of this pass; the next ones start at its cutoff
        hook(engine, NOW + i * retention.ROUND_EVERY)
    assert old_runs.exists()
    later = NOW + retention.FULL_PASS_EVERY
    for i in range(1, 20):  # the next full pass takes it
        hook(engine, later + i * retention.ROUND_EVERY)
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


# --- a schedule's own retention (issue 31 item 1) ----------------------------------------------

WEEK = 7 * DAY


@pytest.fixture
def three(make_schedule, make_run, make_boot):
    """Three schedules with runs 100, 40 and 10 days old, one in flight 10 days old, and a
    newest one; a missed-slot record each, 40 and 10 days old: "short" keeps a week, "long"
    90 days, "plain" the setting."""
    rows = {
        "short": make_schedule("short", every=DAY, next_fire_at=NOW + H, retention=WEEK),
        "long": make_schedule("long", every=DAY, next_fire_at=NOW + H, retention=90 * DAY),
        "plain": make_schedule("plain", every=DAY, next_fire_at=NOW + H),
    }
    boot = make_boot(started_at=OLD - 70 * DAY, heartbeat_at=OLD - 60 * DAY)
    for row in rows.values():
        for age in (100, 40, 10):
            make_run(row, NOW - age * DAY, boot=boot)
        make_run(row, NOW - 10 * DAY + H, state=RunState.STARTED)
        make_run(row, RECENT)
        for age in (40, 10):
            at = NOW - age * DAY
            MissedSlots.objects.create(
                schedule=row, count=1, first_slot=at, last_slot=at, reason="x", recorded_at=at
            )
    Incident.objects.create(kind="reclaim", at=OLD)
    return rows


def _ages(name: str) -> list[int]:
    """The days before NOW of a schedule's runs still there, oldest first."""
    runs = Run.objects.filter(schedule__name=name).order_by("slot")
    return [(NOW - slot).days for slot in runs.values_list("slot", flat=True)]


def _missed_ages(name: str) -> list[int]:
    rows = MissedSlots.objects.filter(schedule__name=name).order_by("recorded_at")
    return [(NOW - at).days for at in rows.values_list("recorded_at", flat=True)]


def test_a_schedule_keeps_its_runs_for_its_own_retention_shorter_or_longer(three):
    done = retention.Pass.at(NOW)
    retention.prune_round(done, most_rows=10_000)
    assert done.finished
    # in whole days: 9 is the run in flight (10 days less an hour), 2 the newest
    assert _ages("short") == [9, 2]  # a week: what is in flight and the newest are kept
    assert _ages("long") == [40, 10, 9, 2]  # past the setting's 30 days, within its 90
    assert _ages("plain") == [10, 9, 2]
    assert _missed_ages("short") == []
    assert _missed_ages("long") == [40, 10]
    assert _missed_ages("plain") == [10]
    assert done.deleted == {"runs": 6, "missed slots": 3, "incidents": 1, "boots": 0}
    assert retention.pruned_before() == NOW - 30 * DAY
    assert retention.pruned_before(three["short"].pk) == NOW - WEEK
    assert retention.pruned_before(three["long"].pk) == NOW - 90 * DAY
    assert retention.pruned_before(three["plain"].pk) is None
    # the boot the long schedule's 40-day run names stays until that run goes
    assert Boot.objects.filter(heartbeat_at=OLD - 60 * DAY).exists()


def test_beats_passes_between_full_ones_start_at_the_last_cutoff(three, make_run):
    """Beat does not read the runs a pass kept every round (a year kept for one schedule:
    hundreds of thousands a pass): the passes within ``FULL_PASS_EVERY`` start at the last
    pass's cutoff; the next full pass frees what finished since."""
    hook = retention.RetentionRound()
    late = make_run(three["plain"], NOW - 50 * DAY, state=RunState.STARTED)  # in flight
    hook.current = first = hook.next_pass(NOW)
    assert first.runs_after is None
    retention.prune_round(first, most_rows=10_000)
    assert first.finished and Run.objects.filter(pk=late.pk).exists()
    Run.objects.filter(pk=late.pk).update(state=RunState.SUCCEEDED)  # it ends, 50 days late
    hook.current = second = hook.next_pass(NOW + 10 * S)
    assert second.runs_after == (first.before, 0)
    retention.prune_round(second, most_rows=10_000)
    assert second.finished and Run.objects.filter(pk=late.pk).exists()  # not read again
    hook.current = full = hook.next_pass(NOW + retention.FULL_PASS_EVERY + 10 * S)
    assert full.runs_after is None
    retention.prune_round(full, most_rows=10_000)
    assert not Run.objects.filter(pk=late.pk).exists()
    assert _ages("long") == [40, 10, 9, 2]  # a longer retention of its own still holds


@pytest.mark.parametrize("now_kept", [365 * DAY, None])
def test_a_retention_raised_or_cleared_during_a_pass_holds_at_once(three, now_kept):
    """The operator keeps a schedule's history longer while a pass (or ``prune``) works
    through it: the rest of the pass deletes none of what it now keeps."""
    p = retention.Pass.at(NOW, batch=1)
    retention.prune_round(p, most_rows=1)  # one batch: the short one's 100-day run
    assert _ages("short") == [40, 10, 9, 2]
    Schedule.objects.filter(pk=three["short"].pk).update(retention=now_kept)
    retention.prune_round(p, most_rows=10_000)
    assert p.finished
    # kept a year: all of it; cleared: the setting's 30 days
    assert _ages("short") == ([40, 10, 9, 2] if now_kept else [10, 9, 2])


def test_with_the_setting_none_only_schedules_with_their_own_retention_are_pruned(three):
    with override_settings(DURABLEBEAT_RETENTION=None):
        done = retention.Pass.at(NOW)
        retention.prune_round(done, most_rows=10_000)
    assert _ages("short") == [9, 2]
    assert _ages("long") == [40, 10, 9, 2]
    assert _ages("plain") == [100, 40, 10, 9, 2]  # kept for ever
    assert _missed_ages("plain") == [40, 10]
    assert Incident.objects.count() == 1  # incidents and boots follow the setting
    assert retention.pruned_before() is None
    with override_settings(DURABLEBEAT_RETENTION=None):
        assert retention.Pass.at(NOW).own  # what beat's round prunes
    Schedule.objects.update(retention=None)
    with override_settings(DURABLEBEAT_RETENTION=None):
        assert retention.Pass.at(NOW).finished  # nothing may go


def test_a_beat_prunes_a_schedules_own_retention_with_the_setting_none(three, make_engine):
    with override_settings(DURABLEBEAT_RETENTION=None):
        engine = make_engine()
        engine.tick(NOW)
    assert engine.after_due[0].rounds == 1
    assert 10 not in _ages("short")
    assert _ages("plain")[:3] == [100, 40, 10]


def test_a_batch_of_a_schedules_own_runs_is_one_bounded_transaction(three):
    run = retention.Pass.at(NOW, batch=1)
    while not run.finished:
        with CaptureQueriesContext(connection) as queries:
            n = run.step()
        deletes = [q["sql"] for q in queries if q["sql"].lstrip().upper().startswith("DELETE")]
        assert n <= 1 and len(deletes) <= 1
    assert _ages("short") == [9, 2] and _ages("long") == [40, 10, 9, 2]


def test_prune_honours_a_schedules_own_retention_dry_and_wet(three, time_machine):
    time_machine.move_to(NOW, tick=False)
    lines = _prune("--dry-run")
    assert "  2 schedule(s) with a retention of their own: their runs and missed slots at " in (
        "\n".join(lines)
    )
    assert "  runs: 6 would be deleted" in lines
    assert "  missed slots: 3 would be deleted" in lines
    assert Run.objects.count() == 15
    assert _prune()[-1].startswith("done: 10 rows deleted")  # 6 runs, 3 missed, 1 incident
    assert _ages("short") == [9, 2] and _ages("long") == [40, 10, 9, 2]
    # --older-than keeps more for every schedule, its own retention or not
    Schedule.objects.filter(name="long").update(retention=WEEK)
    assert "  runs: 0 would be deleted" in _prune("--dry-run", "--older-than", "60d")
    assert "  runs: 2 would be deleted" in _prune("--dry-run")
    with override_settings(DURABLEBEAT_RETENTION=None):
        # not refused: the schedules' own retention (2 runs, 2 missed-slot records)
        assert _prune()[-1].startswith("done: 4 rows deleted")
    assert _ages("long") == [9, 2]


def test_backfill_stops_at_a_schedules_own_cutoff_and_after_raising_it_at_its_pruned_mark(
    make_schedule, make_run, monkeypatch
):
    """A nightly job kept a week: backfill stops at its cutoff, not the setting's. Pruned,
    then its retention raised (or cleared: back to the setting's 30 days): the nights whose
    runs were deleted stay alone, or each would fire a second time (R4). The setting's own
    mark is no help: nothing else was pruned."""
    sent = []
    monkeypatch.setattr(publishing, "send", lambda app, claim, producer=None: sent.append(claim))
    row = make_schedule(
        "nightly", kind="crontab", minute="0", hour="3", next_fire_at=NOW + DAY, retention=WEEK
    )
    since = NOW.replace(hour=0) - 12 * DAY
    nights = [since + 3 * H + i * DAY for i in range(12)]  # 12 to 1 days ago
    until = nights[-1] + H
    before = backfill.backfill("nightly", since, until, NOW, dry_run=True)
    assert before.fired == [n for n in nights if n >= NOW - WEEK]
    for night in nights:
        make_run(row, night)
    retention.prune_round(retention.Pass.at(NOW), most_rows=10_000)
    gone = [n for n in nights if n < NOW - WEEK]
    assert len(gone) == 6 and not Run.objects.filter(slot__in=gone).exists()
    assert retention.pruned_before() is None
    for raised in (90 * DAY, None):
        row.retention = raised
        row.save()
        done = backfill.backfill("nightly", since, until, NOW)
        assert done.fired == [] and sent == []
        edge = f"before the ledger's pruned edge {(NOW - WEEK).isoformat()}"
        assert done.left_alone[: len(gone)] == [(night, edge) for night in gone]


def test_an_in_doubt_slot_older_than_its_schedules_retention_is_missed(
    make_engine, make_schedule, publisher
):
    row = make_schedule(
        "digest",
        kind="crontab",
        catch_up=True,
        catch_up_window=60 * DAY,
        next_fire_at=NOW + H,
        retention=30 * DAY,
    )
    run = Run.objects.create(
        schedule=row, slot=OLD, boot=_boot(OLD), claimed_at=OLD, task_id=str(uuid.uuid4())
    )
    with override_settings(DURABLEBEAT_RETENTION=None):
        make_engine().tick(NOW)
    run.refresh_from_db()
    assert publisher.claims == []
    assert (run.state, run.detail.rsplit("; ", 1)[1]) == (
        RunState.MISSED,
        "older than its retention",
    )


# --- where a user sets it ------------------------------------------------------------------


def test_code_and_the_api_set_a_schedules_retention_and_refuse_a_bad_one(make_engine):
    from durablebeat import api
    from durablebeat.beat.codesync import BadEntry

    task = "tests.e2eapp.tasks.record"
    entry = {"task": task, "schedule": 60, "options": {"durablebeat": {"retention": 7 * 86400}}}
    make_engine({"coded": entry}).tick(NOW)
    assert Schedule.objects.get(name="coded").retention == WEEK
    with pytest.raises(BadEntry, match=r"beat_schedule\['zero'\]: retention: must be at least 1"):
        make_engine({"zero": entry | {"options": {"durablebeat": {"retention": 0}}}})

    def own(keep: dt.timedelta | None) -> dict[str, object]:
        return {"options": {"durablebeat": {"retention": keep}}}

    api.add_schedule("made", task, 60, **own(90 * DAY))
    assert Schedule.objects.get(name="made").retention == 90 * DAY
    again = {"task": task, "schedule": 60} | own(90 * DAY)
    assert api.add_schedules({"made": again}).unchanged == 1
    assert api.add_schedules({"made": again | own(WEEK)}).replaced == 1
    assert Schedule.objects.get(name="made").retention == WEEK
    api.update_schedule("made", options={"durablebeat": {"retention": None}})
    assert Schedule.objects.get(name="made").retention is None  # the setting's
    for bad in (dt.timedelta(0), -DAY, 4000 * DAY):
        with pytest.raises(api.InvalidSchedule) as refused:
            api.add_schedules({"fine": again, "bad": again | own(bad)})
        assert refused.value.field == "retention" and "'bad'" in str(refused.value)
    assert not Schedule.objects.filter(name__in=["fine", "bad"]).exists()


def test_a_row_written_around_the_checks_with_a_bad_retention_is_set_aside(
    make_engine, make_schedule, publisher
):
    make_schedule("zero", every=60, next_fire_at=NOW)
    Schedule.objects.filter(name="zero").update(retention=dt.timedelta(0))
    make_engine().tick(NOW)
    assert publisher.claims == []
    assert "retention" in Schedule.objects.get(name="zero").error
    assert retention.kept_for(dt.timedelta(0)) == DAY  # the pruner never cuts closer


def test_the_admin_form_sets_a_schedules_retention_and_refuses_a_bad_one(admin_client):
    from tests.integration.admin_forms import schedule_form

    add = "/admin/durablebeat/schedule/add/"
    page = admin_client.get(add).content.decode()
    assert "Empty: DURABLEBEAT_RETENTION" in page
    for typed, words in (
        ("0", "at least 1 day"),
        ("-1 day, 0:00:00", "at least 1 day"),
        ("4000d", "at most"),
    ):
        response = admin_client.post(add, schedule_form(retention=typed))
        assert response.status_code == 200
        errors = response.context["adminform"].form.errors
        assert words in " ".join(errors["retention"]), errors
    assert not Schedule.objects.exists()
    admin_client.post(add, schedule_form(retention="7d"))
    assert Schedule.objects.get(name="tick").retention == WEEK
