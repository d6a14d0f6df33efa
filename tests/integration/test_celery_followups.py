"""R25 follow-ups on the database (PostgreSQL and SQLite), through the real engine: intervals
under a second fire on each of their slots; Celery's publish options (retry, retry_policy,
timeout, confirm_timeout) boot, superseded by beat's own publish and said so; kombu
``Queue``/``Exchange`` objects as options mean what Celery makes of them; a custom schedule
is asked, not fired blind, while the database is down (R5); and ``report`` counts a relative
interval's allowance from its real slots, never flagging a custom schedule (R18)."""

from __future__ import annotations

import datetime as dt
import itertools
import logging
from unittest import mock

import pytest
import time_machine
from celery.schedules import schedule
from kombu import Exchange, Queue

from durablebeat import words
from durablebeat.beat import due, publishing
from durablebeat.beat.claims import claim_manual
from durablebeat.beat.codesync import parse_beat_schedule, sync
from durablebeat.beat.engine import MIN_WAKE
from durablebeat.core import timing
from durablebeat.enums import Reason
from durablebeat.models import Schedule
from durablebeat.ops import report
from project.celery import app
from tests import compat_corpus as corpus
from tests.integration.test_dberrors import _connection_cut

pytestmark = pytest.mark.django_db(transaction=True)

TASK = corpus.TASK
T0 = corpus.utc(2026, 6, 10, 9, 17, 23)  # a Wednesday
S = dt.timedelta(seconds=1)
MS = dt.timedelta(milliseconds=1)
H = dt.timedelta(hours=1)


# --- intervals under a second (R21's floor is a millisecond) --------------------------------


def test_a_fifty_millisecond_interval_fires_on_each_of_its_slots(make_engine, publisher, settings):
    """Celery's beat sleeps until an interval's next run however short, whatever its
    max_interval; so does the engine, a ``MIN_WAKE`` at least: a floor of ``MIN_SLEEP``
    (0.1 s) would coalesce every other slot of a 50 ms interval, and a sleep to
    ``MAX_INTERVAL`` after each fire all but one in a hundred."""
    settings.DURABLEBEAT_MAX_INTERVAL = 5  # the default
    policy = {"startup_grace": 0, "overlap": "allow"}
    engine = make_engine(
        {"poll": {"task": TASK, "schedule": 50 * MS, "options": {"durablebeat": policy}}}
    )
    now, sleeps = T0, []
    with time_machine.travel(T0, tick=False) as clock:
        while now < T0 + S:
            sleeps.append(engine.tick(now))
            now += dt.timedelta(seconds=sleeps[-1])
            clock.move_to(now)
    slots = publisher.slots("poll")
    assert len(slots) >= 17, (slots, sleeps)
    assert {b - a for a, b in itertools.pairwise(slots[1:])} == {50 * MS}, sleeps
    assert min(sleeps) >= MIN_WAKE


def test_a_half_second_entry_is_stored_and_shown_as_given():
    [entry] = parse_beat_schedule({"half": {"task": TASK, "schedule": 0.5}}, "UTC")
    sync([entry], T0)
    row = Schedule.objects.get(name="half")
    assert row.every == dt.timedelta(milliseconds=500)
    assert words.describe(row.to_spec()) == "every 0.5 seconds"


@pytest.mark.parametrize(("typed", "every"), [("500ms", 500 * MS), ("0.5s", 500 * MS), ("1ms", MS)])
def test_the_admin_form_takes_an_interval_under_a_second(admin_client, typed, every):
    from tests.integration.admin_forms import schedule_form

    response = admin_client.post("/admin/durablebeat/schedule/add/", schedule_form(every=typed))
    assert response.status_code == 302, response.content.decode()[-2000:]
    row = Schedule.objects.get(name="tick")
    assert row.every == every
    page = admin_client.get(f"/admin/durablebeat/schedule/{row.pk}/change/").content.decode()
    assert f'name="every" value="{every // MS}ms"' in page  # reads back as it is typed


# --- Celery's publish options: accepted, superseded, said -----------------------------------


RETRYING = {
    "retrying": {
        "task": TASK,
        "schedule": 30.0,
        "options": {
            "retry": True,
            "retry_policy": {"max_retries": 3, "interval_start": 0, "interval_step": 0.2},
            "queue": "mail",
        },
    },
    "timeouts": {
        "task": TASK,
        "schedule": 60,
        "options": {"timeout": 10, "confirm_timeout": 5},
    },
    "plain": {"task": TASK, "schedule": 60},
}


def test_celerys_publish_options_boot_logged_per_entry_and_carried_by_no_fire(caplog):
    caplog.set_level(logging.INFO, logger="durablebeat")
    sync(parse_beat_schedule(RETRYING, "UTC"), T0)
    said = {
        r.schedule: r.options
        for r in caplog.records
        if getattr(r, "event", "") == "code_option_superseded"
    }
    assert said == {
        "retrying": ["retry", "retry_policy"],
        "timeouts": ["confirm_timeout", "timeout"],
    }
    row = Schedule.objects.get(name="retrying")
    assert row.queue == "mail"
    producer = mock.MagicMock()
    publishing.send(app, claim_manual(row, None, T0), producer)
    sent = producer.publish.call_args.kwargs
    assert sent["routing_key"] == "mail"
    # beat's own publish: no retry policy of the entry's reaches kombu (R5)
    assert sent.get("retry_policy") != RETRYING["retrying"]["options"]["retry_policy"]


@pytest.fixture
def in_app():
    """Sets the app's ``beat_schedule`` as a project's settings give it (the admin and "run
    now" read it); restored after the test."""
    before = app.conf.beat_schedule

    def put(beat_schedule):
        app.conf.beat_schedule = beat_schedule

    yield put
    app.conf.beat_schedule = before


@pytest.fixture
def beat_schedule_in_app(in_app):
    in_app(RETRYING)


def test_the_admin_shows_which_publish_options_beat_supersedes(admin_client, beat_schedule_in_app):
    sync(parse_beat_schedule(RETRYING, "UTC"), T0)
    row = Schedule.objects.get(name="retrying")
    page = admin_client.get(f"/admin/durablebeat/schedule/{row.pk}/change/").content.decode()
    assert "superseded by beat's own publish (R5, R25): retry=True: beat keeps" in page
    assert "retry_policy={&#x27;max_retries&#x27;: 3" in page  # code's values, escaped
    plain = Schedule.objects.get(name="plain")
    assert (
        "superseded"
        not in admin_client.get(f"/admin/durablebeat/schedule/{plain.pk}/change/").content.decode()
    )


# --- kombu objects as options ---------------------------------------------------------------


def _celerys_publish(**options):
    producer = mock.MagicMock()
    app.send_task(TASK, producer=producer, **options)
    return producer.publish.call_args.kwargs


def test_kombu_queue_and_exchange_objects_route_as_celery_routes_them():
    reports = Queue("reports", Exchange("reports-x", type="topic"), routing_key="reports.daily")
    cleanup = Exchange("maintenance", type="fanout")
    entries = {
        "queue-obj": {"task": TASK, "schedule": 60, "options": {"queue": reports}},
        "exchange-obj": {
            "task": TASK,
            "schedule": 60,
            "options": {"exchange": cleanup, "routing_key": "cleanup"},
        },
    }
    sync(parse_beat_schedule(entries, "UTC"), T0)
    row = Schedule.objects.get(name="queue-obj")
    assert (row.queue, row.exchange, row.exchange_type, row.routing_key) == (
        "reports",
        "reports-x",
        "topic",
        "reports.daily",
    )
    assert Schedule.objects.get(name="exchange-obj").exchange_type == "fanout"
    for name, options in (
        ("queue-obj", {"queue": reports}),
        ("exchange-obj", {"exchange": cleanup, "routing_key": "cleanup"}),
    ):
        producer = mock.MagicMock()
        publishing.send(app, claim_manual(Schedule.objects.get(name=name), None, T0), producer)
        ours, theirs = producer.publish.call_args.kwargs, _celerys_publish(**options)
        # Celery passes an Exchange object on, durablebeat its name: kombu publishes by name
        exchange = getattr(theirs["exchange"], "name", theirs["exchange"])
        assert (ours["exchange"], ours["routing_key"]) == (exchange, theirs["routing_key"])


# --- a custom schedule while the database is down (R5) --------------------------------------


def test_the_outage_memory_asks_a_custom_schedule_at_its_planned_time(
    make_engine, monkeypatch, publisher
):
    """The object said at 09:27:23 "not due, ask again in at most 10 min"; its slot is 09:30.
    With the database down, the memory asks it then, as the engine does, and fires 09:30
    only: it never fires the "ask again" instant as a slot."""
    engine = make_engine(
        {"quarters": {"task": TASK, "schedule": corpus.EveryQuarterHourOnWeekdays()}}
    )
    now = T0
    with time_machine.travel(T0, tick=False) as clock:
        while now < corpus.utc(2026, 6, 10, 9, 20):  # up: the memory learns the next fire
            engine.tick(now)
            now += 5 * S
            clock.move_to(now)
        assert Schedule.objects.get(name="quarters").next_fire_at == T0 + 10 * 60 * S
        monkeypatch.setattr(due, "fetch_due", _connection_cut)
        monkeypatch.setattr(due, "first_due", _connection_cut)  # the tick asks it first
        while now < corpus.utc(2026, 6, 10, 9, 31):
            engine.tick(now)
            assert not engine.db_ok
            now += 5 * S
            clock.move_to(now)
    assert publisher.slots("quarters") == [corpus.utc(2026, 6, 10, 9, 30)]


# --- report: a relative interval's real slots; custom and solar (R18) -----------------------


def _runs(make_run, row, first, gap, count):
    for k in range(count):
        make_run(row, first + k * gap, reason=Reason.SCHEDULED)


def test_a_relative_ninety_minute_interval_firing_hourly_is_not_flagged(
    make_schedule, make_run, t0
):
    """Celery rounds it to the hour: 48 fires in 48 h are its slots, not 1.5x of 32."""
    row = make_schedule("relative", every=90 * 60, relative=True, timezone="Europe/London")
    _runs(make_run, row, t0 - 47.5 * H, H, 48)
    assert report.build_report(t0 - 48 * H, t0).overfired == []
    assert report.allowed_fires(row.to_spec(), t0 - 48 * H, t0) == 49


def test_a_relative_interval_firing_faster_than_its_slots_is_flagged(make_schedule, make_run, t0):
    row = make_schedule("relative", every=90 * 60, relative=True, timezone="UTC")
    _runs(make_run, row, t0 - 47.5 * H, 20 * 60 * S, 143)
    [flag] = report.build_report(t0 - 48 * H, t0).overfired
    assert (flag.schedule, flag.fired, flag.allowed) == ("relative", 143, 49)


def test_custom_and_solar_schedules_are_counted_on_their_own_slots(make_schedule, make_run, t0):
    custom = make_schedule(
        "custom", kind="custom", custom_schedule="proj.Every5s: <5 s>", source="code"
    )
    _runs(make_run, custom, t0 - 47 * H, 60 * S, 2000)  # its slots are the object's own
    sunrise = make_schedule(
        "sunrise", kind="solar", solar_event="sunrise", latitude=51.5074, longitude=-0.1278
    )
    _runs(make_run, sunrise, t0 - 47 * H, 24 * H, 2)
    assert report.build_report(t0 - 48 * H, t0).overfired == []
    _runs(make_run, sunrise, t0 - 46 * H, 3 * H, 10)
    assert [o.schedule for o in report.build_report(t0 - 48 * H, t0).overfired] == ["sunrise"]


def test_a_sub_second_relative_interval_is_counted_by_its_interval():
    spec = Schedule(kind="interval", every=500 * MS, relative=True, timezone="UTC").to_spec()
    assert report.allowed_fires(spec, T0 - H, T0) == 7201
    assert schedule(500 * MS).seconds == 0.5  # Celery's own reading of the same interval


# --- link / link_error: kept with the code, passed on every publish -------------------------


def _embed(producer: mock.MagicMock) -> dict:
    """The callbacks part of a protocol-2 task message's body (args, kwargs, embed)."""
    return producer.publish.call_args.args[0][2]


def linked_entries():
    from tests.e2eapp.tasks import record

    return {
        "linked": {
            "task": TASK,
            "schedule": 60,
            "options": {
                "link": record.s("after"),
                "link_error": [record.si("failed"), record.si("paged")],
                "durablebeat": {"startup_grace": 0, "overlap": "allow"},
            },
        }
    }


def test_an_entrys_link_and_link_error_go_with_every_fire_as_under_celerys_beat(
    make_engine, publisher
):
    entries = linked_entries()
    engine = make_engine(entries)
    with time_machine.travel(T0, tick=False) as clock:
        for now in (T0, T0 + S, T0 + 61 * S):
            clock.move_to(now)
            engine.tick(now)
    assert len(publisher.claims) == 2  # the first fire and the next slot, each with them
    options = entries["linked"]["options"]
    for claim in publisher.claims:
        producer = mock.MagicMock()
        publishing.send(app, claim, producer)
        theirs = mock.MagicMock()
        app.send_task(TASK, producer=theirs, link=options["link"], link_error=options["link_error"])
        ours_embed, their_embed = _embed(producer), _embed(theirs)
        assert ours_embed["callbacks"] == their_embed["callbacks"] != None  # noqa: E711
        assert ours_embed["errbacks"] == their_embed["errbacks"]
        assert [e["kwargs"] for e in ours_embed["errbacks"]] == [{}, {}]
    row = Schedule.objects.get(name="linked")
    assert row.args == [] and row.error == ""  # the row holds JSON only


def test_run_now_of_a_linked_code_schedule_sends_its_callbacks(monkeypatch, in_app):
    entries = linked_entries()
    in_app(entries)
    sync(parse_beat_schedule(entries, "UTC"), T0)
    sent: list = []
    monkeypatch.setattr(publishing, "send", lambda app_, claim, producer=None: sent.append(claim))
    publishing.run_now(Schedule.objects.get(name="linked"), app)
    [claim] = sent
    assert claim.message.options["link"] == entries["linked"]["options"]["link"]
    assert len(claim.message.options["link_error"]) == 2


def test_a_link_that_is_not_a_signature_is_refused_naming_it():
    from durablebeat.beat.codesync import BadEntry

    bad = {"x": {"task": TASK, "schedule": 60, "options": {"link": "tests.e2eapp.tasks.record"}}}
    with pytest.raises(BadEntry, match=r"beat_schedule\['x'\]: link: 'tests.e2eapp.tasks.record'"):
        parse_beat_schedule(bad, "UTC")


def test_the_admin_shows_a_code_schedules_callbacks(admin_client, in_app):
    entries = linked_entries()
    in_app(entries)
    sync(parse_beat_schedule(entries, "UTC"), T0)
    row = Schedule.objects.get(name="linked")
    page = admin_client.get(f"/admin/durablebeat/schedule/{row.pk}/change/").content.decode()
    assert "Every publish passes its entry&#x27;s callbacks on" not in page
    assert "Every publish passes its entry's callbacks on, as Celery's beat does (R25): " in page
    assert "link=tests.e2eapp.tasks.record(&#x27;after&#x27;)" in page


def test_entry_keys_celerys_beat_replaces_or_only_counts_are_accepted_and_ignored():
    """Celery's ``_maybe_entry`` builds ``ScheduleEntry(**dict(entry, name=key, app=app))``:
    an entry's own ``name``/``app`` are replaced, ``total_run_count`` only counts (R25)."""
    entries = {
        "nightly": {
            "task": TASK,
            "schedule": 3600,
            "name": "a label some projects write",
            "total_run_count": 0,
        }
    }
    [entry] = parse_beat_schedule(entries, "UTC")
    assert (entry.name, entry.spec) == ("nightly", timing.Interval(H))
    from durablebeat.beat.codesync import BadEntry

    with pytest.raises(BadEntry, match=r"unknown keys \['last_run'\]"):
        parse_beat_schedule({"x": {"task": TASK, "schedule": 60, "last_run": 1}}, "UTC")
