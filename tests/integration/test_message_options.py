"""R24: a ``beat_schedule`` Celery's own beat runs is accepted unchanged. Every message option
it passes to ``apply_async`` that means something for a periodic message is stored on the
schedule, editable in the admin, imported from django-celery-beat and carried by every fire
into the real Celery message; one that does not is refused by name with the reason. The
per-schedule hard limit is what the worker records and the orphan reclaim waits for (R15).

The message is built by Celery's own ``send_task`` into a recording producer: everything up
to the broker's socket is real. The real beat, worker and broker are in
tests/e2e/test_message_options.py.
"""

from __future__ import annotations

import datetime as dt
import math
from unittest import mock

import pytest
from django.core.exceptions import ValidationError
from django_celery_beat.models import IntervalSchedule, PeriodicTask

from durablebeat.beat import publishing, reclaim
from durablebeat.beat.claims import claim_manual
from durablebeat.beat.codesync import REFUSED_OPTIONS, BadEntry, parse_beat_schedule, sync
from durablebeat.beat.messages import Message
from durablebeat.enums import RunState
from durablebeat.forms import ScheduleForm
from durablebeat.models import MESSAGE_OPTIONS, Run, Schedule, WorkerHeartbeat
from durablebeat.ops import importer
from durablebeat.validation import MAX_TIME_LIMIT
from durablebeat.worker import tracking
from durablebeat.worker.backlog import Backlog
from project.celery import app
from tests.integration.admin_forms import schedule_form

pytestmark = pytest.mark.django_db

S = dt.timedelta(seconds=1)
TASK = "tests.e2eapp.tasks.record"
MARGIN = 60 * S  # DURABLEBEAT_RECLAIM_MARGIN's default

#: one value for every option durablebeat carries, as a beat_schedule entry gives it
EVERY_OPTION = {
    "queue": "mail",
    "exchange": "digests",
    "exchange_type": "topic",
    "routing_key": "mail.digest",
    "priority": 7,
    "expires": 600,
    "countdown": 90,
    "headers": {"tenant": "acme"},
    "serializer": "json",
    "compression": "gzip",
    "delivery_mode": "transient",
    "ignore_result": True,
    "shadow": "morning-digest",
    "time_limit": 30,
    "soft_time_limit": 1.5,
}


@pytest.fixture(autouse=True)
def frozen(time_machine, t0):
    time_machine.move_to(t0, tick=False)


def entry(**options):
    return {"task": TASK, "schedule": 60, "options": options}


def parse(**options):
    [parsed] = parse_beat_schedule({"digest": entry(**options)}, "UTC")
    return parsed


def refusal(**options) -> str:
    with pytest.raises(BadEntry) as caught:
        parse(**options)
    message = str(caught.value)
    assert message.startswith("beat_schedule['digest']: ")
    return message


def publish(row: Schedule) -> mock.Mock:
    """The fire's message as Celery builds it, published into a recording producer."""
    claim = claim_manual(row, None, dt.datetime.now(dt.UTC))
    producer = mock.MagicMock()
    publishing.send(app, claim, producer)
    producer.publish.assert_called_once()
    return producer.publish.call_args


# --- accepted, stored, carried --------------------------------------------------------------


def test_every_option_celery_beat_passes_is_stored_and_carried_by_the_fire(t0):
    """R24: from the beat_schedule entry to the row to the AMQP message, nothing dropped."""
    assert set(EVERY_OPTION) == {*MESSAGE_OPTIONS, "headers"}  # a new option joins this test
    sync([parse(**EVERY_OPTION)], t0)
    row = Schedule.objects.get(name="digest")
    stored = {option: getattr(row, field) for option, field in MESSAGE_OPTIONS.items()}
    assert stored == {
        **{k: v for k, v in EVERY_OPTION.items() if k != "headers"},
        "delivery_mode": 1,  # "transient", stored as AMQP's number
    }
    assert row.headers == {"tenant": "acme"}

    sent = publish(row)
    headers, publish_kwargs = sent.kwargs["headers"], sent.kwargs
    assert headers["timelimit"] == [30.0, 1.5]
    assert headers["ignore_result"] is True
    assert headers["shadow"] == "morning-digest"
    assert headers["expires"] == (dt.datetime.now(dt.UTC) + 600 * S).isoformat()
    assert headers["eta"] == (dt.datetime.now(dt.UTC) + 90 * S).isoformat()  # R25
    assert headers["tenant"] == "acme" and headers["durablebeat_schedule"] == "digest"
    assert (publish_kwargs["exchange"], publish_kwargs["routing_key"]) == (
        "digests",
        "mail.digest",
    )
    assert publish_kwargs["serializer"] == "json"
    assert publish_kwargs["compression"] == "gzip"
    assert publish_kwargs["delivery_mode"] == 1
    assert publish_kwargs["priority"] == 7
    assert publish_kwargs["expiration"] == 600.0
    assert [q.name for q in publish_kwargs["declare"]] == ["mail"]


def test_options_left_out_pass_nothing_so_the_tasks_own_defaults_apply(make_schedule):
    """An empty field is not "0" or "no": Celery's beat would not have passed it either."""
    row = make_schedule("plain", every=60)
    assert Message.for_row(row).options == {"headers": {}}
    headers = publish(row).kwargs["headers"]
    assert headers["timelimit"] == [None, None]
    assert headers["ignore_result"] is None  # the worker applies the task's own setting


def test_ignore_result_false_is_carried_as_given(make_schedule):
    row = make_schedule("kept", every=60, ignore_result=False)
    assert Message.for_row(row).options["ignore_result"] is False


def test_a_code_change_of_an_option_rewrites_the_row_at_boot(t0):
    sync([parse(time_limit=30, serializer="json")], t0)
    sync([parse(time_limit=60)], t0 + S)
    row = Schedule.objects.get(name="digest")
    assert (row.time_limit, row.serializer) == (60.0, "")


# --- refused by name, with the reason -------------------------------------------------------


@pytest.mark.parametrize("option", sorted(REFUSED_OPTIONS))
def test_an_option_meaningless_for_a_periodic_fire_is_refused_by_name_with_why(option):
    message = refusal(**{option: 5})
    assert f"{option} is refused: {REFUSED_OPTIONS[option]}" in message


def test_eta_says_to_use_the_schedule_or_countdown():
    assert refusal(eta=10, queue="mail") == (
        "beat_schedule['digest']: eta is refused: one fixed instant, which every fire of a "
        "periodic schedule would share; use the schedule, or countdown to delay each message"
    )


def test_an_unknown_option_stays_refused():
    assert "unsupported options ['bogus']" in refusal(bogus=1)


# --- ranges (R21), at every entry -----------------------------------------------------------


@pytest.mark.parametrize(
    ("options", "words"),
    [
        ({"time_limit": 0}, "time_limit: must be more than 0"),
        ({"time_limit": -1}, "time_limit: must be more than 0"),
        ({"time_limit": MAX_TIME_LIMIT + 1}, "time_limit: must be more than 0 and at most"),
        ({"time_limit": math.inf}, "options['time_limit']: must be a finite number"),
        ({"time_limit": math.nan}, "options['time_limit']: must be a finite number"),
        ({"time_limit": "30"}, "options['time_limit']: '30' value must be a number"),
        ({"time_limit": True}, "options['time_limit']: True value must be a number"),
        ({"soft_time_limit": 0}, "soft_time_limit: must be more than 0"),
        ({"soft_time_limit": math.inf}, "options['soft_time_limit']: must be a finite"),
        (
            {"time_limit": 30, "soft_time_limit": 31},
            "soft_time_limit: must be at most time_limit (30 s), got 31",
        ),
        ({"serializer": "nope"}, "serializer: no serializer named 'nope' is registered"),
        ({"compression": "nope"}, "compression: no compression named 'nope' is registered"),
        ({"delivery_mode": 3}, "delivery_mode: must be 1 (transient) or 2 (persistent), got 3"),
        ({"delivery_mode": "sometimes"}, "delivery_mode: must be 1, 2, 'transient' or"),
        ({"delivery_mode": True}, "delivery_mode: True value must be 1, 2"),
        ({"ignore_result": "yes"}, "ignore_result: 'yes' value must be True or False"),
        ({"ignore_result": 1}, "ignore_result: 1 value must be True or False"),
        ({"exchange": 5}, "exchange: 5 value must be a string"),
        ({"exchange": "a\nb"}, "exchange: must be one printable line"),
        ({"exchange": "x" * 201}, "exchange: Ensure this value has at most 200"),
        ({"exchange_type": "bogus"}, "exchange_type: must be one of direct, topic, fanout"),
        ({"shadow": "a\tb"}, "shadow: must be one printable line"),
    ],
)
def test_an_option_out_of_its_range_is_refused_naming_it(options, words):
    assert words in refusal(**options)


@pytest.mark.parametrize(
    ("options", "kept"),
    [
        ({"time_limit": MAX_TIME_LIMIT, "soft_time_limit": MAX_TIME_LIMIT}, None),
        ({"time_limit": 0.5}, None),
        ({"soft_time_limit": 540}, None),  # alone: the task's or app's hard limit applies
        ({"serializer": "msgpack", "compression": "bzip2"}, None),
        ({"compression": "application/x-gzip"}, None),
        ({"delivery_mode": 2}, None),
        ({"delivery_mode": "persistent"}, {"delivery_mode": 2}),
    ],
)
def test_edges_inside_the_ranges_are_accepted(options, kept):
    parsed = parse(**options)
    for key, value in (kept or options).items():
        assert getattr(parsed, MESSAGE_OPTIONS[key]) == value, key


def test_the_model_refuses_what_the_code_sync_refuses():
    """``full_clean`` (the ORM, the importer) and code sync are one function (R20, R21)."""
    row = Schedule(
        name="digest",
        task=TASK,
        every=60 * S,
        time_limit=30,
        soft_time_limit=60,
        serializer="nope",
        delivery_mode=3,
    )
    with pytest.raises(ValidationError) as caught:
        row.full_clean()
    errors = caught.value.message_dict
    assert set(errors) >= {"soft_time_limit", "serializer", "delivery_mode"}
    assert "must be at most time_limit (30 s)" in errors["soft_time_limit"][0]


# --- the admin --------------------------------------------------------------------------------


def _form(**overrides):
    return ScheduleForm(
        data=schedule_form(**{"name": "digest", "ignore_result": "unknown", **overrides})
    )


def test_the_admin_form_edits_the_options_and_names_a_bad_one():
    form = _form(time_limit="30", soft_time_limit="60")
    assert not form.is_valid()
    assert "must be at most time_limit (30 s)" in form.errors["soft_time_limit"][0]
    assert list(form.errors) == ["soft_time_limit"]
    assert list(_form(countdown="-1").errors) == ["countdown"]

    form = _form(
        time_limit="30",
        soft_time_limit="25",
        exchange="digests",
        serializer="msgpack",
        compression="gzip",
        delivery_mode="1",
        ignore_result="true",
        countdown="45",
    )
    assert form.is_valid(), form.errors
    row = form.save()
    assert row.countdown == 45.0  # R25
    assert (row.time_limit, row.soft_time_limit, row.exchange) == (30.0, 25.0, "digests")
    assert (row.serializer, row.compression, row.delivery_mode) == ("msgpack", "gzip", 1)
    assert row.ignore_result is True
    default = _form(name="other", ignore_result="unknown")
    assert default.is_valid(), default.errors
    assert default.cleaned_data["ignore_result"] is None


def test_the_admin_page_shows_the_time_limits_outside_the_collapsed_message(admin_client):
    page = admin_client.get("/admin/durablebeat/schedule/add/").content.decode()
    limits = page.index("Time limits")
    assert limits < page.index('name="time_limit"') < page.index('name="soft_time_limit"')
    assert page.index('name="soft_time_limit"') < page.index("Message")
    for field in ("exchange", "exchange_type", "serializer", "compression", "delivery_mode"):
        assert f'name="{field}"' in page
    assert "the task&#x27;s own setting" in page


# --- django-celery-beat -----------------------------------------------------------------------


def test_the_importer_brings_the_exchange_along(t0):
    PeriodicTask.objects.create(
        name="routed",
        task=TASK,
        interval=IntervalSchedule.objects.create(every=5, period=IntervalSchedule.MINUTES),
        exchange="digests",
        routing_key="mail.digest",
        priority=3,
    )
    importer.run_import(t0, dry_run=False)
    row = Schedule.objects.get(name="routed")
    assert (row.exchange, row.routing_key, row.priority) == ("digests", "mail.digest", 3)
    assert publish(row).kwargs["exchange"] == "digests"


# --- the hard limit the worker applies is the reclaim's (R15) ----------------------------------


@pytest.mark.django_db(transaction=True)
def test_a_fire_with_time_limit_30_records_30_and_is_reclaimed_past_it(t0, monkeypatch):
    """The worker reads its limit from the message (``request.timelimit``, set from the
    message's headers as a worker's request is), records it on the run, and the reclaim
    takes a run past it plus the margin even while its worker is alive."""
    monkeypatch.setattr(tracking, "backlog", Backlog(background=False))
    sync([parse(time_limit=30, soft_time_limit=1)], t0)
    row = Schedule.objects.get(name="digest")
    headers = publish(row).kwargs["headers"]
    task = app.tasks[TASK]
    task.push_request(**{**headers, "hostname": "w1@host"})
    try:
        assert task.time_limit is None  # the message's limit, not the task's
        tracking.on_prerun(task_id=headers["id"], task=task)
    finally:
        task.pop_request()
    run = Run.objects.get(task_id=headers["id"])
    assert run.state == RunState.STARTED
    assert (run.hard_time_limit, run.started_at, run.worker) == (30.0, t0, "w1@host")

    WorkerHeartbeat.objects.create(worker="w1@host", pid=run.worker_pid, seen_at=t0 + 500 * S)
    assert reclaim.reclaim(t0 + 30 * S + MARGIN, None) == 0
    assert reclaim.reclaim(t0 + 30 * S + MARGIN + S, None) == 1
    run.refresh_from_db()
    assert run.state == RunState.LOST and "hard time limit (30 s)" in run.detail
