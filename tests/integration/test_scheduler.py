"""The Celery adapter and the system checks: what a project sees before beat fires anything."""

from __future__ import annotations

import pytest
from celery.schedules import crontab
from django.core import checks
from django.core.exceptions import ImproperlyConfigured

from durablebeat import checks as db_checks
from durablebeat import wakeup
from durablebeat.schedulers import DurableScheduler
from project.celery import app


def _ids(messages: list[checks.CheckMessage]) -> list[str | None]:
    return [m.id for m in messages]


def test_scheduler_init_touches_neither_database_nor_broker():
    """Celery builds a lazy scheduler just for its banner; pytest-django refuses any
    database access here (no django_db mark), so a query would fail this test."""
    scheduler = DurableScheduler(app, lazy=True)
    assert "durablebeat" in scheduler.info
    assert scheduler.schedule == {}
    scheduler.close()


@pytest.mark.django_db(transaction=True)
def test_close_may_be_called_twice_after_a_tick():
    """Celery closes a scheduler from its SIGTERM handler and again on the way out: the
    boot is stopped once, and the second close neither raises nor writes it again (R17)."""
    from durablebeat.models import Boot

    scheduler = DurableScheduler(app)
    scheduler.tick()
    assert not wakeup.needed()  # R6: a beat's own writes wake no beat
    scheduler.close()
    assert wakeup.needed()  # the process that goes on saves as any (issue 30's probe)
    stopped_at = Boot.objects.get().stopped_at
    assert stopped_at is not None
    scheduler.close()
    assert Boot.objects.get().stopped_at == stopped_at


@pytest.mark.django_db(transaction=True)
def test_a_broker_down_at_the_first_publish_does_not_hold_the_beat_loop(make_schedule):
    """R5: beat's first publish meets a broker that is not there. Celery's own connect
    would retry ``broker_connection_max_retries`` times with back-off (most of an hour);
    here the tick returns and the claim is kept to be retried."""
    import datetime as dt
    import socket
    import threading

    from celery import Celery
    from django.db import connections

    from durablebeat.core import clock
    from durablebeat.enums import RunState
    from durablebeat.models import Run

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # nothing listens here once closed
    down = Celery("down", broker=f"redis://127.0.0.1:{port}/0", set_as_current=False)
    make_schedule("job", every=60, next_fire_at=clock.now() - dt.timedelta(seconds=1))
    scheduler = DurableScheduler(down)
    ticked = threading.Event()

    def tick() -> None:
        try:
            scheduler.tick()
            ticked.set()
        finally:
            connections.close_all()  # this thread's own database connection

    threading.Thread(target=tick, daemon=True).start()
    assert ticked.wait(60), "the beat loop is held by the broker connect"
    scheduler.close()
    assert Run.objects.get().state == RunState.CLAIMED
    assert scheduler.engine.retries.next_wake() is not None


def test_max_interval_is_bounded_by_the_setting(settings):
    settings.DURABLEBEAT_MAX_INTERVAL = 2
    assert DurableScheduler(app, lazy=True, max_interval=300).max_interval == 2


def test_use_tz_off_is_e001(settings):
    settings.USE_TZ = False
    assert _ids(db_checks.check_time_zone_support()) == ["durablebeat.E001"]
    settings.USE_TZ = True
    assert db_checks.check_time_zone_support() == []


@pytest.mark.parametrize(
    ("name", "value"),
    [("STARTUP_GRACE", "soon"), ("MAX_INTERVAL", 0), ("BATCH_SIZE", "many")],
)
def test_a_setting_of_the_wrong_type_is_e002(settings, name, value):
    setattr(settings, f"DURABLEBEAT_{name}", value)
    assert "durablebeat.E002" in _ids(db_checks.check_settings())


def test_defaults_pass_the_settings_check():
    assert db_checks.check_settings() == []


def test_another_beat_scheduler_is_w001(monkeypatch):
    monkeypatch.setitem(app.conf, "beat_scheduler", "celery.beat:PersistentScheduler")
    assert _ids(db_checks.check_scheduler_configured()) == ["durablebeat.W001"]
    monkeypatch.setitem(app.conf, "beat_scheduler", db_checks.SCHEDULER_PATH)
    assert db_checks.check_scheduler_configured() == []


def test_a_bad_beat_schedule_entry_is_e003_naming_it(monkeypatch):
    bad = {
        "broken-digest": {
            "task": "tests.e2eapp.tasks.record",
            "schedule": crontab(),
            "options": {"durablebeat": {"catchup": True}},
        }
    }
    monkeypatch.setitem(app.conf, "beat_schedule", bad)
    found = db_checks.check_code_schedules()
    assert _ids(found) == ["durablebeat.E003"]
    assert "broken-digest" in found[0].msg and "catchup" in found[0].msg


def test_an_unregistered_task_in_beat_schedule_is_w007_with_the_likely_typo(monkeypatch):
    """R29 amended: beat sends a task it has not registered by name, as Celery's beat does,
    so ``manage.py check`` warns (W007) rather than errs (an Error stops ``migrate``); the
    registered name it is closest to is named as a likely typo. (Was E003 before issue 39.)"""
    entries = {
        "good": {"task": "tests.e2eapp.tasks.record", "schedule": 60},
        "typo": {"task": "tests.e2eapp.tasks.recrod", "schedule": 60},
        "elsewhere": {"task": "billing.invoices.send_all", "schedule": 60},
    }
    monkeypatch.setitem(app.conf, "beat_schedule", entries)
    found = db_checks.check_code_schedules()
    assert _ids(found) == ["durablebeat.W007", "durablebeat.W007"]
    assert all(m.level == checks.WARNING for m in found)
    typo, elsewhere = found
    assert "beat_schedule['typo']" in typo.msg
    assert "'tests.e2eapp.tasks.recrod'" in typo.msg
    assert "likely typo: did you mean 'tests.e2eapp.tasks.record'?" in typo.msg
    assert "beat sends it by name" in elsewhere.msg and "typo" not in elsewhere.msg


def test_a_task_external_tasks_names_is_no_w007(monkeypatch, settings):
    """R29: a name DURABLEBEAT_EXTERNAL_TASKS matches is served by another codebase on
    purpose: no warning for it; a name it does not match still gets one."""
    settings.DURABLEBEAT_EXTERNAL_TASKS = ["billing.*"]
    entries = {
        "elsewhere": {"task": "billing.invoices.send_all", "schedule": 60},
        "ghost": {"task": "shop.tasks.ghost", "schedule": 60},
    }
    monkeypatch.setitem(app.conf, "beat_schedule", entries)
    found = db_checks.check_code_schedules()
    assert _ids(found) == ["durablebeat.W007"]
    assert "beat_schedule['ghost']" in found[0].msg


def test_an_unregistered_task_in_beat_schedule_never_stops_migrate(monkeypatch):
    """Issue 39: Django stops ``migrate`` and ``runserver`` on any Error of the check
    framework; an entry whose task this process has not registered raises none."""
    from django.core.management import call_command
    from django.core.management.base import SystemCheckError

    monkeypatch.setitem(
        app.conf,
        "beat_schedule",
        {"cleanup": {"task": "shop.tasks.cleanup", "schedule": crontab(minute=0, hour=3)}},
    )
    call_command("check", fail_level="ERROR")  # what migrate and runserver run
    monkeypatch.setitem(
        app.conf, "beat_schedule", {"broken": {"task": "shop.tasks.cleanup", "schedule": -5}}
    )
    with pytest.raises(SystemCheckError, match=r"durablebeat\.E003"):  # malformed: still one
        call_command("check", fail_level="ERROR")


@pytest.mark.django_db(transaction=True)
def test_beat_refuses_to_start_without_use_tz_naming_the_setting(settings):
    settings.USE_TZ = False
    scheduler = DurableScheduler(app)
    with pytest.raises(ImproperlyConfigured, match="USE_TZ = True"):
        scheduler.tick()
    scheduler.close()


def test_the_system_check_never_builds_the_result_backend(monkeypatch):
    """A web process may lack the result backend's packages: E003 reads beat_schedule only
    (whether Celery's beat would add celery.backend_cleanup is beat's business, R25)."""

    def unavailable(self):
        raise ImportError("no result backend in this image")

    monkeypatch.setattr(type(app), "backend", property(unavailable))
    monkeypatch.setitem(app.conf, "beat_schedule", {})
    monkeypatch.setitem(app.conf, "result_expires", 86400)  # Celery's default: beat adds it
    assert db_checks.check_code_schedules() == []


@pytest.mark.parametrize(
    ("conf", "expected"),
    [
        ({"timezone": "Asia/Tokyo"}, "Asia/Tokyo"),
        ({"timezone": None, "enable_utc": True}, "UTC"),  # Celery's default
        ({"timezone": None, "enable_utc": False}, "Europe/Berlin"),  # local = TIME_ZONE
    ],
)
def test_a_plain_crontab_reads_in_the_zone_celerys_own_beat_uses(settings, conf, expected):
    """R20: a project switching from Celery's scheduler keeps its slots. With no
    CELERY_TIMEZONE, Celery reads a plain crontab in UTC, not in Django's TIME_ZONE."""
    from celery import Celery

    from durablebeat.beat.codesync import celery_timezone, parse_beat_schedule

    settings.TIME_ZONE = "Europe/Berlin"
    other = Celery("tz-probe", set_as_current=False)
    other.conf.update(conf)
    assert celery_timezone(other) == expected
    [entry] = parse_beat_schedule(
        {"digest": {"task": "t", "schedule": crontab(hour=8, minute=0)}},
        celery_timezone(other),
        check_task=False,
    )
    assert entry.spec.timezone == expected


@pytest.mark.django_db(transaction=True)
def test_sigterm_part_way_through_a_tick_writes_nothing_until_the_tick_unwinds(monkeypatch):
    """Celery's SIGTERM handler calls close() inside whatever the tick is doing; a write on
    the connection a query of the tick is using waited for itself for ever (beat did not stop
    within 20 s in an e2e run). Beat's own ``finally`` closes again once the tick unwound."""
    scheduler = DurableScheduler(app)
    stops: list[object] = []
    monkeypatch.setattr(scheduler.engine, "close", lambda now: stops.append(now))

    def tick(now, woken_on_change=False):
        scheduler.close()  # the signal arrives here
        assert stops == []
        raise SystemExit

    monkeypatch.setattr(scheduler.engine, "tick", tick)
    with pytest.raises(SystemExit):
        scheduler.tick()
    scheduler.close()  # Service.start's finally
    assert len(stops) == 1


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("host_ahead", [0, 89], ids=["one clock", "host 89 s ahead"])
def test_a_tick_woken_ahead_of_a_slot_claims_it_before_and_sends_it_at_the_slot(
    monkeypatch, settings, host_ahead
):
    """The adapter wakes LEAD before a planned wake and runs that tick as of the planned
    instant, so the slot is read and claimed when it comes; its message is held until then
    (R3: claimed, then sent; R26: nothing goes out early). The planned instant is on the
    clock as the boot measured it: a host 89 s ahead plans on the database's clock, not 89
    s ahead of it (which made every slot look late, seen in the e2e clock-skew test), and a
    planned instant further ahead than the lead is not run ahead of at all. The lead is 1 s
    here, not the 50 ms beat uses: a loaded machine (a niced CI lane beside the e2e runs)
    once woke this process 120 ms late, past the slot, and the test is about what a wake
    ahead does, not how punctual the machine is."""
    import datetime as dt
    import time

    from durablebeat import dbclock, schedulers
    from durablebeat.beat import publishing
    from durablebeat.core import clock
    from durablebeat.models import MissedSlots, Run, Schedule

    step = dt.timedelta(seconds=-host_ahead)
    if host_ahead:

        def sync(*args, **kwargs):
            clock.set_offset(step)  # measured: this host is ahead of the database
            return step.total_seconds()

        monkeypatch.setattr(dbclock, "sync", sync)
    sent: list[tuple[str, dt.datetime]] = []
    monkeypatch.setattr(
        publishing,
        "send",
        lambda app, claim, producer=None: sent.append((claim.schedule, clock.now())),
    )
    monkeypatch.setattr(schedulers, "LEAD", 1.0)
    settings.DURABLEBEAT_MAX_INTERVAL = 10  # the boot tick plans its wake for the slot itself
    # on the database's clock; more than twice the lead after the boot tick
    slot = clock.now() + step + dt.timedelta(seconds=5)
    Schedule.objects.create(
        name="ahead",
        task="tests.e2eapp.tasks.record",
        kind="interval",
        every=dt.timedelta(hours=1),
        next_fire_at=slot,
    )
    scheduler = DurableScheduler(app)
    ticks: list[tuple[dt.datetime, dt.datetime]] = []
    real_tick = scheduler.engine.tick

    def tick(now, *args):
        ticks.append((now, clock.now()))
        return real_tick(now, *args)

    monkeypatch.setattr(scheduler.engine, "tick", tick)
    deadline = time.monotonic() + 10
    while not any(name == "ahead" for name, _ in sent) and time.monotonic() < deadline:
        scheduler.tick()
    scheduler.close()
    firing = [began for as_of, began in ticks if as_of == slot]
    assert firing and firing[0] < slot, ticks  # a tick ran as of the slot, ahead of it
    assert next(at for name, at in sent if name == "ahead") >= slot  # its message waited
    run = Run.objects.get(schedule__name="ahead")
    assert (run.slot, run.reason, run.state) == (slot, "scheduled", "published")
    assert not MissedSlots.objects.exists()


@pytest.mark.django_db(transaction=True)
def test_a_tick_run_ahead_holds_between_its_claim_and_the_commit(
    make_engine, make_schedule, publisher, t0
):
    """The adapter's hold (a tick run ahead waits for its instant) comes after the batch is
    claimed and before the claim commits, never between the commit and the publish: a beat
    stopped while it waits leaves no committed claim unsent (R3, R9)."""
    from django.db import connection

    from durablebeat.models import Run

    make_schedule("due", every=60, next_fire_at=t0)
    seen = []
    engine = make_engine()
    engine.hold = lambda: seen.append(
        (
            connection.in_atomic_block,
            Run.objects.filter(schedule__name="due").count(),
            len(publisher.claims),
        )
    )
    engine.tick(t0)
    assert seen == [(True, 1, 0)]  # in the claim's transaction, claimed, nothing sent yet
    assert [c.schedule for c in publisher.claims] == ["due"]
