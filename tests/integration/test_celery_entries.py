"""R25, the message side: what Celery's beat sends for an entry, the DurableScheduler sends,
booted on a real database. ``BeatLazyFunc`` values computed at each publish, values JSON
cannot hold (pickle) kept in the beat's memory and sent as they are, ``countdown`` delaying
each message with the run's slot unchanged, and ``celery.backend_cleanup`` installed as
Celery's beat installs it.

Messages are built by Celery's own ``send_task`` into a recording producer (everything up
to the broker's socket is real) and decoded with the serializer they name. The real beat,
worker and broker are in tests/e2e/test_celery_entries.py.
"""

from __future__ import annotations

import datetime as dt
import decimal
import itertools
from collections.abc import Iterator
from typing import Any
from unittest import mock

import pytest
from celery.beat import BeatLazyFunc
from celery.schedules import crontab
from kombu import serialization

from durablebeat.beat import defaults, publishing
from durablebeat.beat.codesync import BadEntry
from durablebeat.beat.live import COMPUTED, PYTHON
from durablebeat.enums import RunState, Source
from durablebeat.models import Run, Schedule
from durablebeat.schedulers import DurableScheduler
from project.celery import app

pytestmark = pytest.mark.django_db(transaction=True)

S = dt.timedelta(seconds=1)
TASK = "tests.e2eapp.tasks.record"
ALLOW = {"durablebeat": {"overlap": "allow"}}
#: a new interval schedule's first fire: boot plus the startup grace (R2), then every 20 s
FIRST = 60 * S
_counter = itertools.count(1)


def next_number() -> int:
    return next(_counter)


class Booted:
    """A DurableScheduler on ``app`` whose producer records what Celery's ``send_task``
    hands it; time is moved with ``time_machine``."""

    def __init__(self, time_machine: Any) -> None:
        self.time_machine = time_machine
        self.producer = mock.MagicMock()
        self.producer.supports_batch_publish = False
        self.scheduler = DurableScheduler(app)
        self.scheduler.__dict__["producer"] = self.producer  # Celery's cached property

    def tick_at(self, when: dt.datetime) -> None:
        self.time_machine.move_to(when, tick=False)
        self.scheduler.tick()

    def sent(self) -> list[tuple[Any, dict[str, Any]]]:
        """(the decoded body, the publish's keyword arguments) of each message, in order."""
        found = []
        for call in self.producer.publish.call_args_list:
            serializer = call.kwargs["serializer"]
            content_type, encoding, data = serialization.dumps(call.args[0], serializer=serializer)
            body = serialization.loads(data, content_type, encoding, accept=[content_type])
            found.append((body, call.kwargs))
        return found

    def close(self) -> None:
        self.scheduler.close()


@pytest.fixture
def boot(monkeypatch: pytest.MonkeyPatch, time_machine: Any, t0: dt.datetime) -> Iterator[Any]:
    started: list[Booted] = []

    def make(beat_schedule: dict[str, Any], **conf: Any) -> Booted:
        monkeypatch.setitem(app.conf, "beat_schedule", beat_schedule)
        for key, value in conf.items():
            monkeypatch.setitem(app.conf, key, value)
        if "task_serializer" in conf:
            # A task reads task_serializer once, when bound (a real beat's conf is set
            # before): set on the task as its binding would have, and its cache cleared.
            task = app.tasks[TASK]
            monkeypatch.setattr(task, "serializer", conf["task_serializer"])
            monkeypatch.setattr(task, "_exec_options", None)
        time_machine.move_to(t0, tick=False)
        booted = Booted(time_machine)
        started.append(booted)
        booted.tick_at(t0)
        return booted

    yield make
    for booted in started:
        booted.close()


def every_20(**entry: Any) -> dict[str, Any]:
    return {"job": {"task": TASK, "schedule": 20 * S, "options": ALLOW, **entry}}


# --- BeatLazyFunc -----------------------------------------------------------------------


def test_a_beat_lazy_func_is_evaluated_by_the_beat_at_each_publish(boot, t0):
    """Celery's beat calls a top-level BeatLazyFunc at each send; so does durablebeat's,
    and the row shows which values are computed then."""
    beat = boot(
        every_20(
            args=[BeatLazyFunc(next_number), "plain"],
            kwargs={"n": BeatLazyFunc(next_number)},
        )
    )
    row = Schedule.objects.get(name="job")
    shown = f"{__name__}.next_number()"
    assert row.args == [{COMPUTED: shown}, "plain"]
    assert row.kwargs == {"n": {COMPUTED: shown}}
    beat.tick_at(t0 + FIRST)
    beat.tick_at(t0 + FIRST + 20 * S)
    (first, _), (second, _) = beat.sent()
    (args1, kwargs1, _), (args2, kwargs2, _) = first, second
    assert args1[1] == args2[1] == "plain"
    assert isinstance(args1[0], int) and isinstance(kwargs1["n"], int)
    assert args2[0] > kwargs1["n"] > args1[0]  # computed again at the second publish
    assert kwargs2["n"] > args2[0]
    assert list(Run.objects.values_list("slot", flat=True).order_by("slot")) == [
        t0 + FIRST,
        t0 + FIRST + 20 * S,
    ]


def test_a_beat_lazy_func_that_raises_fails_its_slot_only(boot, t0):
    """R21: the run fails with the error; the other schedule of the batch goes out."""

    def broken() -> int:
        raise OSError("the value's source is down")  # not the broker's outage

    other = {"task": TASK, "schedule": 20 * S, "options": ALLOW, "args": [1]}
    beat = boot({**every_20(args=[BeatLazyFunc(broken)]), "other": other})
    beat.tick_at(t0 + FIRST)
    assert [body[0] for body, _ in beat.sent()] == [[1]]
    failed = Run.objects.get(schedule__name="job")
    assert failed.state == RunState.FAILED
    assert "computed at send time raised" in failed.error
    assert not beat.scheduler.engine.retries  # not kept for a broker retry


def test_fires_from_memory_in_a_database_outage_compute_them_too(
    make_engine, publisher, t0, monkeypatch
):
    """R5 + R25: the outage memory fires a code schedule from its entry; its send-time
    values are computed at each of those publishes as well, never sent as markers."""
    from django.db import OperationalError

    from durablebeat.beat import boots, due

    engine = make_engine(every_20(args=[BeatLazyFunc(next_number), dt.timedelta(seconds=3)]))
    engine.tick(t0)  # boot: first fire at t0 + the startup grace
    engine.tick(t0 + 10 * S)  # a heartbeat: the memory is refreshed from the database

    def down(*args: Any, **kwargs: Any) -> None:
        raise OperationalError("server closed the connection unexpectedly")

    monkeypatch.setattr(due, "fetch_due", down)
    monkeypatch.setattr(due, "first_due", down)  # the tick asks it first
    monkeypatch.setattr(boots, "register_boot", down)
    for k in range(11, 100):
        engine.tick(t0 + k * S)
    assert not engine.db_ok
    sent = [c.message.args for c in publisher.claims if c.schedule == "job"]
    assert len(sent) == 2  # t0 + 60 s and t0 + 80 s
    assert [args[1] for args in sent] == [dt.timedelta(seconds=3)] * 2
    assert sent[0][0] < sent[1][0]


# --- values JSON cannot hold ------------------------------------------------------------


def test_pickle_args_arrive_as_the_real_objects_and_the_row_shows_their_repr(boot, t0):
    beat = boot(
        every_20(
            args=[dt.timedelta(minutes=5), {1, 2}],
            kwargs={"amount": decimal.Decimal("1.10"), "plain": [1, "two"], "pair": ("a", 1)},
        ),
        task_serializer="pickle",
    )
    row = Schedule.objects.get(name="job")
    assert row.source == Source.CODE
    assert row.args == [{PYTHON: "datetime.timedelta(seconds=300)"}, {PYTHON: "{1, 2}"}]
    assert row.kwargs == {
        "amount": {PYTHON: "Decimal('1.10')"},
        "plain": [1, "two"],
        "pair": ["a", 1],  # JSON's form of a tuple
    }
    beat.tick_at(t0 + FIRST)
    [((args, kwargs, _), sent)] = beat.sent()
    assert sent["serializer"] == "pickle"
    assert args == [dt.timedelta(minutes=5), {1, 2}]
    assert kwargs == {"amount": decimal.Decimal("1.10"), "plain": [1, "two"], "pair": ("a", 1)}


def test_the_entrys_own_serializer_carries_them_too(boot, t0):
    beat = boot(every_20(args=[dt.timedelta(seconds=7)], options={**ALLOW, "serializer": "pickle"}))
    beat.tick_at(t0 + FIRST)
    [((args, _, _), sent)] = beat.sent()
    assert (sent["serializer"], args) == ("pickle", [dt.timedelta(seconds=7)])


def test_with_the_json_serializer_a_value_it_cannot_carry_stops_the_boot_naming_it(boot):
    with pytest.raises(BadEntry) as refused:
        boot(every_20(kwargs={"every": dt.timedelta(seconds=7)}))
    message = str(refused.value)
    assert message.startswith("beat_schedule['job']: kwargs['every']: ")
    assert "'json' serializer" in message
    assert not Schedule.objects.exists()


def test_run_now_of_such_a_row_sends_the_code_entrys_values(monkeypatch, boot, t0):
    """The admin's "run now" has no beat memory: it reads the entry from beat_schedule."""
    boot(every_20(args=[dt.timedelta(seconds=9)]), task_serializer="pickle")
    producer = mock.MagicMock()
    monkeypatch.setattr(publishing, "send", _send_into(producer, publishing.send))
    claim = publishing.run_now(Schedule.objects.get(name="job"), app)
    assert claim.message.args == [dt.timedelta(seconds=9)]
    producer.publish.assert_called_once()


def test_a_row_holding_markers_is_never_sent_with_them(make_schedule, t0):
    """A marked row without its code entry (written around the admin): refused, the task
    never gets the markers as its arguments."""
    row = make_schedule("marked", every=60, args=[{PYTHON: "datetime.timedelta(seconds=9)"}])
    with pytest.raises(Exception, match="values only its beat_schedule entry has"):
        publishing.run_now(row, app)


def _send_into(producer: Any, send: Any) -> Any:
    return lambda app_, claim, _producer=None: send(app_, claim, producer)


# --- countdown --------------------------------------------------------------------------


def test_countdown_gives_an_eta_of_send_time_plus_countdown_and_keeps_the_slot(boot, t0):
    """Celery's beat passes countdown to apply_async: ETA = send time + countdown. The run's
    slot is the scheduled instant, not the ETA."""
    beat = boot(every_20(options={**ALLOW, "countdown": 90}))
    assert Schedule.objects.get(name="job").countdown == 90.0
    send_time = t0 + FIRST + dt.timedelta(milliseconds=250)  # beat sends a little late
    beat.time_machine.move_to(t0 + FIRST, tick=False)
    beat.scheduler.engine.tick(t0 + FIRST)  # decided at the slot ...
    assert Run.objects.get().slot == t0 + FIRST
    beat.tick_at(send_time)  # (nothing more due)
    [(_, sent)] = beat.sent()
    assert sent["headers"]["eta"] == (t0 + FIRST + 90 * S).isoformat()
    assert sent["headers"]["durablebeat_slot"] == (t0 + FIRST).isoformat()


def test_countdown_out_of_range_is_refused_naming_it(boot):
    with pytest.raises(BadEntry, match="countdown"):
        boot(every_20(options={**ALLOW, "countdown": -5}))


# --- celery.backend_cleanup -------------------------------------------------------------


def test_backend_cleanup_is_installed_as_celerys_beat_installs_it(boot):
    """django-db keeps results until cleaned, and results expire after a day by default:
    Celery's beat adds celery.backend_cleanup, daily at 04:00; so does durablebeat."""
    assert not app.backend.supports_autoexpire  # django-db
    boot({}, result_expires=dt.timedelta(days=1))
    row = Schedule.objects.get(name=defaults.BACKEND_CLEANUP)
    assert (row.source, row.task, row.enabled) == (Source.CODE, "celery.backend_cleanup", True)
    assert (row.kind, row.minute, row.hour, row.day_of_week) == ("crontab", "0", "4", "*")
    assert row.expire_seconds == 12 * 3600


@pytest.mark.parametrize("expires", [None, 0])
def test_backend_cleanup_is_off_when_results_do_not_expire(boot, expires):
    boot({}, result_expires=expires)
    assert not Schedule.objects.filter(name=defaults.BACKEND_CLEANUP).exists()


def test_a_backend_that_expires_results_itself_gets_no_cleanup(monkeypatch, boot):
    monkeypatch.setattr(type(app.backend), "supports_autoexpire", True)
    boot({}, result_expires=dt.timedelta(days=1))
    assert not Schedule.objects.filter(name=defaults.BACKEND_CLEANUP).exists()


def test_an_entry_of_that_name_replaces_it(boot):
    own = {
        defaults.BACKEND_CLEANUP: {
            "task": "celery.backend_cleanup",
            "schedule": crontab(minute="30", hour="2"),
        }
    }
    boot(own, result_expires=dt.timedelta(days=1))
    row = Schedule.objects.get(name=defaults.BACKEND_CLEANUP)
    assert (row.minute, row.hour, row.expire_seconds) == ("30", "2", None)


# --- the admin --------------------------------------------------------------------------


def test_the_admin_form_refuses_the_markers_in_a_schedule_made_there():
    """They stand for values only code holds: typed in the admin they would reach the task
    as its arguments."""
    from durablebeat.forms import ScheduleForm
    from tests.integration.admin_forms import schedule_form

    data = schedule_form(name="typed", args=f'[{{"{PYTHON}": "x"}}]', kwargs="{}")
    form = ScheduleForm(data=data)
    assert not form.is_valid()
    assert list(form.errors) == ["args"] and PYTHON in form.errors["args"][0]
    data = schedule_form(name="typed", kwargs=f'{{"at": {{"{COMPUTED}": "f()"}}}}')
    assert list(ScheduleForm(data=data).errors) == ["kwargs"]


def test_a_code_rows_admin_page_says_which_values_are_computed_at_send_time(admin_client, boot):
    boot(every_20(args=[BeatLazyFunc(next_number)]))
    row = Schedule.objects.get(name="job")
    page = admin_client.get(f"/admin/durablebeat/schedule/{row.pk}/change/").content.decode()
    assert "marks a value computed at send time by the beat" in page
    assert COMPUTED in page
