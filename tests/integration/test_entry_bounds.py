"""R20, R21 at each way in, against a real database: the ORM's ``full_clean``, the admin form,
a code entry meeting an admin-made row of its name, and the django-celery-beat importer."""

from __future__ import annotations

import datetime as dt
import io
import logging

import pytest
from django.core.exceptions import ValidationError
from django.core.management import call_command
from django_celery_beat.models import IntervalSchedule, PeriodicTask

from durablebeat.beat.codesync import BadEntry
from durablebeat.enums import Source
from durablebeat.models import Schedule
from durablebeat.ops import importer
from durablebeat.schedulers import DurableScheduler
from project.celery import app
from tests.integration.admin_forms import schedule_form

pytestmark = pytest.mark.django_db(transaction=True)

S = dt.timedelta(seconds=1)
H = dt.timedelta(hours=1)
TASK = "tests.e2eapp.tasks.record"
ADD = "/admin/durablebeat/schedule/add/"


@pytest.fixture(autouse=True)
def frozen(time_machine, t0):
    time_machine.move_to(t0, tick=False)


# --- the ORM ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({"every": dt.timedelta(days=300_000)}, "every"),  # ~820 years: past MAX_EVERY
        ({"every": S / 2000}, "every"),  # under the millisecond floor (R25)
        ({"next_fire_at": dt.datetime(9999, 12, 31, tzinfo=dt.UTC)}, "next_fire_at"),
        ({"startup_grace": -S}, "startup_grace"),
        ({"expire_seconds": float("inf")}, "expire_seconds"),
        ({"priority": 300}, "priority"),
        ({"priority": "high"}, "priority"),  # the field's own check, and no TypeError after
        ({"startup_grace": "soon"}, "startup_grace"),
        ({"name": "a\nb"}, "name"),
        # PostgreSQL would refuse these at the save (DataError): refused here, by field
        ({"kwargs": {"a": "\x00"}}, "kwargs"),
        ({"args": ["\ud800"]}, "args"),
        ({"description": "d\x00"}, "description"),
        ({"headers": {"task": "other.task"}}, "headers"),
    ],
)
def test_full_clean_refuses_out_of_range_values_naming_the_field(fields, field):
    fields.setdefault("every", 60 * S)
    with pytest.raises(ValidationError) as err:
        Schedule(name=fields.pop("name", "x"), task=TASK, **fields).full_clean()
    assert field in err.value.message_dict


# --- the admin form -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("overrides", "field", "words"),
    [
        # One wording whether the parser's recursion gives out (where depends on the Python:
        # 3.13 parses 5,000 levels) or the depth walk after it refuses.
        ({"kwargs": '{"a": ' * 5000 + "1" + "}" * 5000}, "kwargs", "nested deeper than 32"),
        ({"args": "[" * 100_000 + "]" * 100_000}, "args", "nested deeper than 32"),
        ({"kwargs": '{"a": NaN}'}, "kwargs", "JSON"),
        ({"kwargs": '{"a": "' + "x" * 70_000 + '"}'}, "kwargs", "MAX_MESSAGE_BYTES"),
        ({"every": "300000d"}, "every", "at most"),
        ({"every": "999999999999d"}, "every", "duration"),
        ({"every": "9" * 400}, "every", "duration"),
        ({"every": "0.0009"}, "every", "at least 0.001 seconds"),
        ({"startup_grace": "8d"}, "startup_grace", "at most"),
        ({"expire_seconds": "1e12"}, "expire_seconds", "at most"),
        ({"priority": "300"}, "priority", "0 to 255"),
        ({"name": "tick\nfire schedule=other"}, "name", "one printable line"),
        ({"queue": "mail\tlow"}, "queue", "one printable line"),
        ({"kwargs": '{"a": "\\u0000"}'}, "kwargs", "NUL"),
        ({"args": '["\\ud800"]'}, "args", "surrogate"),  # shown back escaped, not a 500
        ({"headers": '{"task": "other.task"}'}, "headers", "'task' reserved"),
        ({"time_limit": "1e-320"}, "time_limit", "at least 0.001"),
        ({"exchange_type": "bogus", "exchange": "x"}, "exchange_type", "direct, topic"),
        (
            {"kind": "clocked", "every": "", "clocked_at_0": "2999-01-01", "clocked_at_1": "08:00"},
            "clocked_at",
            "2200",
        ),
    ],
)
def test_form_refuses_out_of_range_input_naming_the_field(admin_client, overrides, field, words):
    response = admin_client.post(ADD, schedule_form(**overrides))
    assert response.status_code == 200
    errors = {k: list(v) for k, v in response.context["adminform"].form.errors.items()}
    assert field in errors, errors
    assert words in " ".join(errors[field])
    assert not Schedule.objects.exists()


def test_an_invalid_size_setting_refuses_the_save_saying_why(admin_client, settings):
    """R21: with DURABLEBEAT_MAX_MESSAGE_BYTES out of its range the size of a message
    cannot be checked; the page says so and nothing is saved (it was a 500)."""
    settings.DURABLEBEAT_MAX_MESSAGE_BYTES = 10
    response = admin_client.post(ADD, schedule_form())
    assert response.status_code == 200
    errors = response.context["adminform"].form.errors
    assert "DURABLEBEAT_MAX_MESSAGE_BYTES" in " ".join(errors["args"])
    assert not Schedule.objects.exists()


# --- a code entry and an admin-made row of the same name ----------------------------------


def code(**policy):
    return {"digest": {"task": TASK, "schedule": 60, "options": {"durablebeat": policy}}}


def test_a_code_entry_does_not_silently_take_over_an_admin_row(make_engine, make_schedule, t0):
    admin_row = make_schedule("digest", every=3600, next_fire_at=t0 + H)
    with pytest.raises(
        BadEntry, match=rf"'digest'.*made in the admin.*id {admin_row.pk}.*take_over"
    ):
        make_engine(code()).tick(t0)
    row = Schedule.objects.get(name="digest")
    assert (row.source, row.every, row.next_fire_at) == (Source.DATABASE, H, t0 + H)


def test_take_over_lets_code_own_the_admin_row_and_logs_it(make_engine, make_schedule, t0, caplog):
    make_schedule("digest", every=3600, next_fire_at=t0 + H)
    with caplog.at_level(logging.WARNING, logger="durablebeat"):
        make_engine(code(take_over=True)).tick(t0)
    row = Schedule.objects.get(name="digest")
    assert (row.source, row.every) == (Source.CODE, 60 * S)
    assert [r.schedule for r in caplog.records if getattr(r, "event", "") == "code_took_over"] == [
        "digest"
    ]
    make_engine(code()).tick(t0 + S)  # code's own row now: no option needed any more


def test_beat_stops_at_a_refused_takeover_instead_of_looping(make_schedule, monkeypatch, t0):
    make_schedule("digest", every=3600, next_fire_at=t0 + H)
    monkeypatch.setitem(app.conf, "beat_schedule", code())
    scheduler = DurableScheduler(app)
    with pytest.raises(BadEntry, match="digest"):
        scheduler.tick()
    scheduler.close()


# --- the importer -------------------------------------------------------------------------


def periodic(name, every, period=IntervalSchedule.MINUTES, **fields):
    interval = IntervalSchedule.objects.create(every=every, period=period)
    return PeriodicTask.objects.create(name=name, task=TASK, interval=interval, **fields)


@pytest.mark.parametrize("dry_run", [True, False])
def test_one_bad_row_is_skipped_by_name_and_the_rest_imported(t0, dry_run):
    periodic("good-before", 5)
    periodic("forever", 10**9, IntervalSchedule.DAYS)  # overflows timedelta
    periodic("too-high", 5, priority=1000)
    periodic("two\nlines", 5)
    periodic("good-after", 5)
    out = io.StringIO()
    args = ["import-django-celery-beat"] + (["--dry-run"] if dry_run else [])
    call_command("durablebeat", *args, stdout=out)
    text = out.getvalue()
    assert "skip    forever: every: 1000000000 days is outside" in text
    assert "skip    too-high: priority: must be from 0 to 255" in text
    assert "skip    'two\\nlines': name: must be one printable line" in text
    expected = [] if dry_run else ["good-after", "good-before"]
    assert sorted(Schedule.objects.values_list("name", flat=True)) == expected
    assert ("would create 2" if dry_run else "created 2") in text


def test_a_row_that_raises_anything_is_skipped_by_name(t0, monkeypatch):
    periodic("a", 5)
    periodic("b", 5)
    real = importer.build_row

    def build_row(task, now):
        if task.name == "a":
            raise KeyError("surprise")
        return real(task, now)

    monkeypatch.setattr(importer, "build_row", build_row)
    items = {i.name: i for i in importer.run_import(t0, dry_run=False).items}
    assert items["a"].action == importer.SKIP and "KeyError" in items["a"].why
    assert items["b"].action == importer.CREATE
    assert Schedule.objects.filter(name="b").exists()


def test_an_imported_row_named_in_beat_schedule_is_code_defined_and_kept_at_boot(
    make_engine, publisher, monkeypatch, t0
):
    """docs/switching.md: a row whose name matches a beat_schedule entry becomes code-defined
    at beat's first boot and keeps the imported next fire when its timing is the same."""
    task = periodic("digest", 1, IntervalSchedule.MINUTES)
    PeriodicTask.objects.filter(pk=task.pk).update(last_run_at=t0 - 30 * S)
    monkeypatch.setitem(app.conf, "beat_schedule", code())
    item = {i.name: i for i in importer.run_import(t0, dry_run=False).items}["digest"]
    assert "code owns it" in item.line()
    assert Schedule.objects.get(name="digest").source == Source.CODE
    make_engine(code()).tick(t0)  # no takeover refusal: the import said code owns it
    row = Schedule.objects.get(name="digest")
    assert (row.source, row.next_fire_at) == (Source.CODE, t0 + 30 * S)
