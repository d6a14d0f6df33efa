"""R21 by property: random rows (valid, invalid and extreme, written through the ORM around
the form), random ``beat_schedule`` entries and random publish failures never stop the
other schedules, never make beat raise or spin, and never break monitoring.

Runs on PostgreSQL and on SQLite (the integration suite's two passes). Each example cleans
the tables it wrote: hypothesis runs many examples inside one test's database.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import math
import uuid
from typing import Any

import pytest
from django.db import transaction
from django.test import Client, override_settings
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from durablebeat.beat.codesync import BadEntry, parse_beat_schedule
from durablebeat.beat.engine import MIN_SLEEP, Engine
from durablebeat.enums import RunState
from durablebeat.models import Boot, Incident, MissedSlots, Run, Schedule
from durablebeat.ops import health
from tests.conftest import T0, RecordingPublisher

pytestmark = pytest.mark.django_db(transaction=True)

S = dt.timedelta(seconds=1)
UTC = dt.UTC
TASK = "tests.e2eapp.tasks.record"
CANARY_EVERY = 10 * S
CANARY_FIRST = T0 + 5 * S
RUN_FOR = 45 * S
FUZZ = settings(
    deadline=None,
    max_examples=30,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    database=None,
)
TOKEN = "fuzz-token"


def _clean() -> None:
    for model in (Run, MissedSlots, Incident, Schedule, Boot):
        model.objects.all().delete()


# --- what a row may hold -------------------------------------------------------------------

MIN_DT = dt.datetime.min.replace(tzinfo=UTC)
MAX_DT = dt.datetime.max.replace(tzinfo=UTC)

instants = st.one_of(
    st.none(),
    st.just(MIN_DT),
    st.just(MAX_DT),
    st.builds(lambda s: MIN_DT + dt.timedelta(seconds=s), st.integers(0, 10**6)),
    st.builds(lambda s: MAX_DT - dt.timedelta(seconds=s), st.integers(0, 10**6)),
    st.builds(lambda s: T0 + dt.timedelta(seconds=s), st.integers(-(10**6), 10**6)),
    st.datetimes(timezones=st.just(UTC)),
)
durations = st.one_of(
    st.none(),
    st.builds(lambda us: dt.timedelta(microseconds=us), st.integers(-(10**7), 10**7)),
    st.builds(lambda s: dt.timedelta(seconds=s), st.integers(-(10**6), 10**6)),
    st.builds(lambda d: dt.timedelta(days=d), st.integers(-(10**6), 10**6)),
    st.sampled_from([dt.timedelta(0), dt.timedelta.max, dt.timedelta.min, 820 * 365 * 86400 * S]),
)
cron_fields = st.one_of(
    st.sampled_from(["*", "*/5", "0", "61", "x", "", "1-", "*/0", "5-1", "mon", "0,30", "99999"]),
    st.text(max_size=12),
)
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3)
    ),
    max_leaves=8,
)
# The edges, drawn often: a row at the datetime limits or with a duration beyond any
# calendar, on its own timing kind, so that no earlier refusal hides it.
edge_instants = st.sampled_from(
    [None, MIN_DT, MIN_DT + S, MAX_DT, MAX_DT - S, T0, T0 - 30 * S, T0 - 86400 * S, T0 + S]
)
edge_durations = st.sampled_from(
    [
        None,
        dt.timedelta.max,
        dt.timedelta.min,
        dt.timedelta(microseconds=1),
        dt.timedelta(microseconds=-1),
        dt.timedelta(0),
        -86400 * S,
        820 * 365 * 86400 * S,
        9000 * 365 * 86400 * S,
    ]
)
extreme_rows = st.fixed_dictionaries(
    {
        "kind": st.sampled_from(["interval", "clocked", "crontab"]),
        "every": edge_durations,
        "clocked_at": edge_instants,
        "next_fire_at": edge_instants,
        "startup_grace": edge_durations,
        "catch_up": st.booleans(),
        "catch_up_window": edge_durations,
        "overlap": st.sampled_from(["skip", "allow"]),
        "expire_seconds": st.sampled_from([None, 1e12, math.inf, -1.0, 60.0]),
        "task": st.just(TASK),
    }
)
random_rows = st.fixed_dictionaries(
    {
        "kind": st.sampled_from(["interval", "crontab", "clocked", "solar", ""]),
        "every": durations,
        "minute": cron_fields,
        "hour": cron_fields,
        "day_of_week": cron_fields,
        "timezone": st.sampled_from(["UTC", "Europe/Berlin", "Mars/Olympus", "", "../etc", "utc"]),
        "clocked_at": instants,
        "next_fire_at": instants,
        "args": json_values,
        "kwargs": json_values,
        "headers": json_values,
        "expire_seconds": st.one_of(
            st.none(), st.sampled_from([1e12, -1.0, 0.0, math.inf, 1e308]), st.floats()
        ),
        "priority": st.one_of(st.none(), st.integers(0, 32767)),
        "startup_grace": durations,
        "catch_up": st.booleans(),
        "catch_up_window": durations,
        "overlap": st.sampled_from(["skip", "allow", "sometimes", ""]),
        "task": st.sampled_from([TASK, "no.such.task", ""]),
        "queue": st.sampled_from(["", "celery", "q" * 200]),
    }
)
rows = st.one_of(extreme_rows, random_rows)


def _write(i: int, fields: dict[str, Any]) -> None:
    """Write a row as the ORM takes it; a value the database itself refuses is no row."""
    with contextlib.suppress(Exception), transaction.atomic():
        Schedule.objects.create(name=f"fuzz-{i}", **fields)


class ContentPublisher(RecordingPublisher):
    """Builds the real Celery message (expiry arithmetic, JSON serialisation) before
    recording it, so that a message's content is refused as a real broker client would;
    ``attempts`` counts every publish tried."""

    def __init__(self) -> None:
        super().__init__()
        self.attempts = 0

    def __call__(self, claim: Any) -> None:
        from kombu.serialization import dumps

        from project.celery import app

        self.attempts += 1
        options = {k: v for k, v in claim.message.options.items() if k != "headers"}
        message = app.amqp.as_task_v2(
            claim.task_id,
            claim.message.task,
            args=claim.message.args,
            kwargs=claim.message.kwargs,
            expires=options.get("expires"),
            headers=claim.headers(),
        )
        dumps(message.body, serializer="json")
        super().__call__(claim)


def _engine(publisher: Any, **kwargs: Any) -> Engine:
    return Engine(code_entries=[], publish=publisher, boot_id=uuid.uuid4(), **kwargs)


def _monitoring_answers(now: dt.datetime, admin: Client) -> None:
    found = health.check(now)
    assert health.exit_code(found) in (0, 1, 2)
    with override_settings(DURABLEBEAT_METRICS_TOKEN=TOKEN):
        metrics = Client().get("/durablebeat/metrics", headers={"Authorization": f"Bearer {TOKEN}"})
    assert metrics.status_code < 500
    assert admin.get("/admin/durablebeat/schedule/").status_code < 500


@pytest.fixture
def admin() -> Client:
    from django.contrib.auth.models import User

    user = User.objects.create_superuser("fuzz-admin", "a@example.com", "pw")
    client = Client()
    client.force_login(user)
    return client


def test_random_rows_never_stop_the_canary_nor_spin_nor_break_monitoring(admin):
    @FUZZ
    @given(st.lists(rows, min_size=1, max_size=5))
    def run(fuzz_rows: list[dict[str, Any]]) -> None:
        _clean()
        Schedule.objects.create(
            name="canary",
            task=TASK,
            kind="interval",
            every=CANARY_EVERY,
            overlap="allow",
            next_fire_at=CANARY_FIRST,
        )
        for i, fields in enumerate(fuzz_rows):
            _write(i, fields)
        publisher = ContentPublisher()
        engine = _engine(publisher)
        now, end = T0, T0 + RUN_FOR
        idle_zero = idle_short = 0
        for _ in range(1000):
            if now >= end:
                break
            before = publisher.attempts
            sleep = engine.tick(now)  # never raises
            fired = publisher.attempts > before
            idle_zero = idle_zero + 1 if sleep <= 0 and not fired else 0
            assert idle_zero == 0, f"tick returned {sleep} at {now} without firing"
            # A wake still ahead may be nearer than MIN_SLEEP (a slot a grace of 1 us away:
            # beat sleeps MIN_WAKE for it, R25), once per slot it waits for; more short
            # sleeps in a row without a fire than there are rows is a busy loop (R21).
            idle_short = idle_short + 1 if sleep < MIN_SLEEP and not fired else 0
            assert idle_short <= len(fuzz_rows) + 1, f"{idle_short} short sleeps, no fire"
            now += dt.timedelta(seconds=sleep)
        assert now >= end, "beat did not get through the simulated time"
        expected = []
        slot = CANARY_FIRST
        while slot < end:
            expected.append(slot)
            slot += CANARY_EVERY
        assert publisher.slots("canary") == expected
        _monitoring_answers(now, admin)

    run()


# --- beat_schedule at boot -----------------------------------------------------------------

any_value = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(10**12), 10**12),
    st.floats(),
    st.text(max_size=6),
    st.lists(st.integers(), max_size=2),
    st.dictionaries(st.text(max_size=4), st.integers(), max_size=2),
    st.builds(lambda s: dt.timedelta(seconds=s), st.integers(-(10**6), 10**12)),
)
policy_options = st.dictionaries(
    st.sampled_from(["catch_up", "catch_up_window", "overlap", "startup_grace", "description"]),
    any_value,
    max_size=3,
)
entries = st.fixed_dictionaries(
    {
        "task": st.one_of(st.just(TASK), any_value),
        "schedule": st.one_of(st.sampled_from([5, 60.0, dt.timedelta(seconds=30)]), any_value),
    },
    optional={
        "args": st.one_of(st.lists(st.integers(), max_size=3), any_value),
        "kwargs": st.one_of(st.dictionaries(st.text(max_size=4), st.integers()), any_value),
        "options": st.one_of(
            st.fixed_dictionaries(
                {},
                optional={
                    "queue": st.one_of(st.just("mail"), any_value),
                    "priority": st.one_of(st.integers(0, 255), any_value),
                    "expires": st.one_of(st.just(60), any_value),
                    "durablebeat": st.one_of(policy_options, any_value),
                },
            ),
            any_value,
        ),
    },
)


@FUZZ
@given(entry=entries, name=st.one_of(st.just("entry"), st.text(min_size=1, max_size=10)))
def test_random_beat_schedule_entries_are_refused_by_name_or_accepted_exactly(entry, name):
    try:
        [parsed] = parse_beat_schedule({name: entry}, "UTC")
    except BadEntry as exc:
        assert f"beat_schedule[{name!r}]" in str(exc)
        return
    # Accepted: stored as given, and beat boots and ticks with it.
    assert parsed.task == entry["task"]
    assert parsed.args == list(entry.get("args") or [])
    assert parsed.kwargs == dict(entry.get("kwargs") or {})
    options = entry.get("options") or {}
    if "queue" in options:
        assert parsed.queue == options["queue"]
    if "priority" in options:
        assert parsed.priority == options["priority"]
    _clean()
    engine = Engine(code_entries=[parsed], publish=RecordingPublisher(), boot_id=uuid.uuid4())
    assert engine.tick(T0) >= MIN_SLEEP
    row = Schedule.objects.get(name=name)
    assert (row.task, row.args, row.kwargs) == (parsed.task, parsed.args, parsed.kwargs)


# --- publish failures ----------------------------------------------------------------------


class Weird(Exception):
    pass


content_errors = st.sampled_from(
    [TypeError("t"), ValueError("v"), OverflowError("o"), KeyError("k"), Weird("w")]
)


@FUZZ
@given(
    failures=st.lists(st.one_of(st.none(), content_errors), min_size=2, max_size=8),
    exit_error=st.one_of(st.none(), content_errors),
)
def test_random_publish_failures_fail_their_slot_only(failures, exit_error):
    """Each message refused for its own content fails its run; the rest of the group goes
    out in the same tick, also when the batch's own send fails for a non-broker reason."""
    _clean()
    for i in range(len(failures)):
        Schedule.objects.create(
            name=f"job-{i}",
            task=TASK,
            kind="interval",
            every=60 * S,
            overlap="allow",
            next_fire_at=T0,
        )
    publisher = RecordingPublisher()

    def refuse(claim: Any) -> None:
        exc = failures[int(claim.schedule.split("-")[1])]
        if exc is not None:
            raise exc

    publisher.on_publish = refuse
    exits = []

    @contextlib.contextmanager
    def batch():
        yield
        exits.append(1)
        if exit_error is not None and len(exits) == 1:
            raise exit_error

    engine = _engine(publisher, publish_batch=batch)
    engine.tick(T0)
    ok = {f"job-{i}" for i, exc in enumerate(failures) if exc is None}
    published = set(
        Run.objects.filter(state=RunState.PUBLISHED).values_list("schedule__name", flat=True)
    )
    failed = set(Run.objects.filter(state=RunState.FAILED).values_list("schedule__name", flat=True))
    assert published == ok
    assert failed == {f"job-{i}" for i, exc in enumerate(failures) if exc is not None}
    assert {c.schedule for c in publisher.claims} == ok
    assert len(engine.retries) == 0
    assert json.dumps([r.error for r in Run.objects.filter(state=RunState.FAILED)])
