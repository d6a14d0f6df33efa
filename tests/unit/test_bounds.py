"""R21 at entry, no database: every range in ``validation``, every setting in ``conf`` and
every ``beat_schedule`` value of the wrong type is refused with the field named, and the
values at the edges of each range are accepted."""

from __future__ import annotations

import datetime as dt
import math

import pytest
from celery.schedules import solar as celery_solar
from django.core import checks

from durablebeat import checks as db_checks
from durablebeat import conf
from durablebeat import validation as v
from durablebeat.beat.codesync import BadEntry, parse_entry
from durablebeat.models import Schedule

S = dt.timedelta(seconds=1)
DAY = dt.timedelta(days=1)
AT = dt.datetime(2030, 1, 1, tzinfo=dt.UTC)


def deep(levels: int) -> list:
    value: list = []
    for _ in range(levels - 1):
        value = [value]
    return value


# --- the row's values: one function for full_clean, the form, code sync, the importer -----


def row(**fields) -> Schedule:
    fields.setdefault("task", "t")
    fields.setdefault("every", 60 * S)
    return Schedule(name=fields.pop("name", "s"), **fields)


@pytest.mark.parametrize(
    ("fields", "field", "words"),
    [
        # R25: Celery's beat runs any positive interval; a millisecond is the floor
        ({"every": dt.timedelta(microseconds=999)}, "every", "at least 0.001 seconds"),
        ({"every": dt.timedelta(days=300_000)}, "every", "at most 36525 days"),
        (
            {
                "kind": "clocked",
                "every": None,
                "clocked_at": dt.datetime.max.replace(tzinfo=dt.UTC),
            },
            "clocked_at",
            "2200",
        ),
        (
            {
                "kind": "clocked",
                "every": None,
                "clocked_at": dt.datetime(1970, 1, 1, tzinfo=dt.UTC),
            },
            "clocked_at",
            "2000",
        ),
        ({"next_fire_at": dt.datetime(2200, 1, 1, tzinfo=dt.UTC)}, "next_fire_at", "2200"),
        ({"startup_grace": -S}, "startup_grace", "at least 0"),
        ({"startup_grace": 8 * DAY}, "startup_grace", "at most 7 days"),
        ({"catch_up_window": dt.timedelta(0)}, "catch_up_window", "more than 0"),
        ({"catch_up_window": 367 * DAY}, "catch_up_window", "at most 366 days"),
        ({"expire_seconds": math.nan}, "expire_seconds", "finite"),
        ({"expire_seconds": math.inf}, "expire_seconds", "finite"),
        ({"expire_seconds": 0.0}, "expire_seconds", "more than 0"),
        ({"expire_seconds": -1.0}, "expire_seconds", "more than 0"),
        ({"expire_seconds": 1e12}, "expire_seconds", "at most"),
        ({"expire_seconds": True}, "expire_seconds", "bool"),
        ({"priority": 256}, "priority", "0 to 255"),
        ({"priority": True}, "priority", "bool"),
        ({"kwargs": {"x": math.nan}}, "kwargs", "JSON"),
        ({"args": [math.inf]}, "args", "JSON"),
        ({"kwargs": {"x": deep(v.MAX_JSON_DEPTH)}}, "kwargs", "nested deeper"),
        ({"args": deep(5000)}, "args", "nested deeper"),
        ({"headers": {"h": "x" * conf.DEFAULT_MAX_MESSAGE_BYTES}}, "headers", "MAX_MESSAGE_BYTES"),
        ({"name": "job\nfire schedule=other"}, "name", "one printable line"),
        ({"task": "t\x1b[2J"}, "task", "one printable line"),
        ({"queue": "q\u2028x"}, "queue", "one printable line"),
        ({"routing_key": "k\r"}, "routing_key", "one printable line"),
        # what PostgreSQL refuses at the save is refused here, in any string or key (R20)
        ({"kwargs": {"a": "x\x00y"}}, "kwargs", "NUL"),
        ({"kwargs": {"a\x00": 1}}, "kwargs", "NUL"),
        ({"args": [["\ud800"]]}, "args", "surrogate"),
        ({"headers": {"h": "\udfff"}}, "headers", "surrogate"),
        ({"description": "two lines\nand a \x00"}, "description", "NUL"),
        ({"description": "\ud83d"}, "description", "surrogate"),
        ({"kwargs": {1: 2}}, "kwargs", "keys must be strings"),
        ({"headers": {"task": "other.task"}}, "headers", "'task' reserved"),
        ({"headers": {"eta": "2099-01-01T00:00:00", "id": "x"}}, "headers", "'eta', 'id'"),
        ({"headers": {"durablebeat_run": 1}}, "headers", "reserved"),
        ({"time_limit": 1e-320}, "time_limit", "at least 0.001"),
        ({"soft_time_limit": 0.0009}, "soft_time_limit", "at least 0.001"),
        ({"expire_seconds": 5e-324}, "expire_seconds", "at least 0.001"),
        ({"exchange_type": "bogus"}, "exchange_type", "direct, topic, fanout, headers"),
    ],
)
def test_a_value_out_of_its_range_is_refused_naming_the_field(fields, field, words):
    errors = v.validate_schedule_fields(row(**fields), check_task=False)
    assert field in errors, errors
    assert words in errors[field]


@pytest.mark.parametrize(
    "fields",
    [
        {"every": v.MIN_EVERY},
        {"every": S / 2},  # Celery's schedule=0.5 (R25)
        {"every": v.MAX_EVERY},
        {"kind": "clocked", "every": None, "clocked_at": v.MIN_INSTANT},
        {"next_fire_at": v.MAX_INSTANT - dt.timedelta(microseconds=1)},
        {"startup_grace": dt.timedelta(0)},
        {"startup_grace": v.MAX_STARTUP_GRACE},
        {"catch_up_window": v.MAX_CATCH_UP_WINDOW},
        {"expire_seconds": v.MAX_EXPIRE_SECONDS},
        {"priority": v.MIN_PRIORITY},
        {"priority": v.MAX_PRIORITY},
        {"kwargs": {"x": deep(v.MAX_JSON_DEPTH - 1)}},
        # exactly at the cap: args [] and kwargs {} are 2 bytes each, headers the rest
        {"headers": {"h": "x" * (conf.DEFAULT_MAX_MESSAGE_BYTES - 4 - len('{"h": ""}'))}},
        {"name": "Morning digest — 08:00 ☕", "queue": "mail.high"},
        {"time_limit": v.MIN_SECONDS, "expire_seconds": v.MIN_SECONDS},
        {"exchange_type": "headers"},
        {"headers": {"x-trace": "a ☕", "tenant": 7}, "description": "two\nlines ☕"},
    ],
)
def test_the_edges_of_each_range_are_accepted(fields):
    assert v.validate_schedule_fields(row(**fields), check_task=False) == {}


def test_every_header_celery_sets_on_a_message_is_reserved():
    """Celery merges extra headers over the ones it sets (``as_task_v2``): each is refused."""
    from celery import Celery

    message = Celery(set_as_current=False).amqp.as_task_v2("an-id", "a.task")
    assert set(message.headers) <= v.RESERVED_HEADERS
    for name in sorted(v.RESERVED_HEADERS):
        errors = v.validate_schedule_fields(row(headers={name: 1}), check_task=False)
        assert f"'{name}' reserved" in errors["headers"], name


def test_a_self_containing_value_is_refused_not_a_recursion_error():
    loop: list = []
    loop.append(loop)
    assert v.json_depth_error(loop) is not None


def test_the_message_size_cap_is_the_setting(settings):
    settings.DURABLEBEAT_MAX_MESSAGE_BYTES = 2048
    errors = v.validate_schedule_fields(row(kwargs={"x": "y" * 3000}), check_task=False)
    assert "(2048)" in errors["kwargs"]


def test_the_ranges_keep_all_date_arithmetic_finite():
    """The reasoning in validation's module doc, checked: the furthest beat computes from
    accepted values is an instant plus one interval plus a day of zone offset."""
    furthest = v.MAX_INSTANT + v.MAX_EVERY + DAY + v.MAX_STARTUP_GRACE
    assert furthest.year < 2400 < dt.MAXYEAR
    assert (v.MIN_INSTANT - v.MAX_EVERY - DAY).year > dt.MINYEAR
    assert v.MAX_EVERY // dt.timedelta(microseconds=1) < 2**63  # SQLite/MariaDB bigint


# --- settings: refused on access, naming the setting; the system check says the same ------


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("STARTUP_GRACE", -1),
        ("STARTUP_GRACE", math.nan),
        ("STARTUP_GRACE", math.inf),
        ("STARTUP_GRACE", 10**20),
        ("STARTUP_GRACE", 10**400),
        ("STARTUP_GRACE", True),
        ("STARTUP_GRACE", "60"),
        ("STARTUP_GRACE", dt.timedelta(days=8)),
        ("MAX_INTERVAL", 0),
        ("MAX_INTERVAL", math.nan),
        ("MAX_INTERVAL", 10**9),
        ("MAX_INTERVAL", 10**400),
        ("BATCH_SIZE", 0),
        ("BATCH_SIZE", 10**6),
        ("BATCH_SIZE", 1.5),
        ("BATCH_SIZE", True),
        ("NO_SUCCESS_PERIODS", 0),
        ("CATCH_UP_WINDOW", 0),
        ("HEARTBEAT_INTERVAL", 0),
        ("CLOCK_SKEW_TOLERANCE", 0),
        ("CLOCK_SKEW_TOLERANCE", dt.timedelta(days=2)),
        ("DB_RETRY_INTERVAL", dt.timedelta(0)),
        ("LISTEN_NOTIFY", "false"),
        ("RESULT_RECONCILE", 0),
        ("METRICS_PUBLIC", "yes"),
        ("METRICS_TOKEN", "a\nb"),
        ("METRICS_TOKEN", 5),
        ("MAX_MESSAGE_BYTES", 10),
        ("MAX_MESSAGE_BYTES", 10**12),
        ("DEPLOY_GRACE", -1),
        ("DEPLOY_GRACE", dt.timedelta(days=2)),
        ("EXTERNAL_TASKS", "billing.*"),  # a string is not a list of names (R29)
        ("EXTERNAL_TASKS", ["billing.*", ""]),
        ("EXTERNAL_TASKS", ["billing\n*"]),
    ],
)
def test_a_bad_setting_is_refused_on_access_and_by_e002_naming_it(settings, name, value):
    setattr(settings, f"DURABLEBEAT_{name}", value)
    with pytest.raises(conf.InvalidSetting, match=f"DURABLEBEAT_{name} must be"):
        getattr(conf.settings, name)
    found = db_checks.check_settings()
    assert [m.id for m in found] == ["durablebeat.E002"]
    assert f"DURABLEBEAT_{name}" in found[0].msg


def test_every_setting_refuses_a_value_of_the_wrong_type(settings):
    """Generic over conf's properties: a setting added later is covered too."""
    names = conf.setting_names()
    assert {"STARTUP_GRACE", "METRICS_PUBLIC", "MAX_MESSAGE_BYTES"} <= set(names)
    for name in names:
        setattr(settings, f"DURABLEBEAT_{name}", object())
    assert len(db_checks.check_settings()) == len(names)


def test_every_duration_setting_refuses_negative_and_nan(settings):
    durations = [
        n for n in conf.setting_names() if isinstance(getattr(conf.settings, n), dt.timedelta)
    ]
    assert len(durations) >= 15
    for bad in (-1, math.nan, math.inf):
        for name in durations:
            setattr(settings, f"DURABLEBEAT_{name}", bad)
        assert len(db_checks.check_settings()) == len(durations), bad


def test_edge_values_of_settings_are_accepted(settings):
    settings.DURABLEBEAT_STARTUP_GRACE = 0
    settings.DURABLEBEAT_MAX_INTERVAL = 0.1
    settings.DURABLEBEAT_BATCH_SIZE = 1
    settings.DURABLEBEAT_MAX_MESSAGE_BYTES = conf.MAX_MAX_MESSAGE_BYTES
    settings.DURABLEBEAT_METRICS_TOKEN = None
    assert db_checks.check_settings() == []
    assert dt.timedelta(0) == conf.settings.STARTUP_GRACE
    assert conf.settings.METRICS_TOKEN == ""


def test_metrics_open_to_anyone_without_debug_is_w002(settings):
    settings.DURABLEBEAT_METRICS_PUBLIC = True
    settings.DEBUG = False
    assert [m.id for m in db_checks.check_metrics_public()] == ["durablebeat.W002"]
    settings.DEBUG = True
    assert db_checks.check_metrics_public() == []
    settings.DEBUG = False
    settings.DURABLEBEAT_METRICS_TOKEN = "s3cret"  # a token closes it again
    assert db_checks.check_metrics_public() == []
    settings.DURABLEBEAT_METRICS_TOKEN = ""
    settings.DURABLEBEAT_METRICS_PUBLIC = False
    assert db_checks.check_metrics_public() == []


def test_an_unknown_durablebeat_setting_is_w003(settings):
    settings.DURABLEBEAT_STARTUP_GRACE_SECONDS = 30
    found = db_checks.check_unknown_settings()
    assert [m.id for m in found] == ["durablebeat.W003"]
    assert "DURABLEBEAT_STARTUP_GRACE_SECONDS" in found[0].msg


def test_a_staleness_bound_not_above_its_heartbeat_is_w004(settings):
    settings.DURABLEBEAT_WORKER_DEAD_AFTER = 30
    settings.DURABLEBEAT_WORKER_HEARTBEAT_INTERVAL = 30
    assert [m.id for m in db_checks.check_setting_pairs()] == ["durablebeat.W004"]
    settings.DURABLEBEAT_WORKER_DEAD_AFTER = 31
    assert db_checks.check_setting_pairs() == []


def test_a_pair_with_a_setting_beyond_a_float_is_left_to_e002(settings):
    settings.DURABLEBEAT_WORKER_DEAD_AFTER = 10**400
    assert db_checks.check_setting_pairs() == []
    assert [m.id for m in db_checks.check_settings()] == ["durablebeat.E002"]


def test_the_new_checks_are_registered():
    registered = checks.registry.registry.get_checks()
    for check in (
        db_checks.check_unknown_settings,
        db_checks.check_setting_pairs,
        db_checks.check_metrics_public,
    ):
        assert check in registered


# --- beat_schedule: the wrong type is refused by entry and field, nothing coerced --------


POLICY = ("catch_up", "catch_up_window", "startup_grace", "take_over", "overlap", "description")


def entry(**changes):
    base = {"task": "t", "schedule": 60, "options": {"durablebeat": {}}}
    for key, value in changes.items():
        if key in ("queue", "routing_key", "priority", "expires", "headers"):
            base["options"][key] = value
        elif key in POLICY:
            base["options"]["durablebeat"][key] = value
        else:
            base[key] = value
    return base


@pytest.mark.parametrize(
    ("changes", "words"),
    [
        ({"args": 5}, "args"),
        ({"args": "abc"}, "args"),
        ({"args": {"a": 1}}, "args"),
        ({"kwargs": "x"}, "kwargs"),
        ({"kwargs": [1]}, "kwargs"),
        ({"options": "x"}, "options"),
        ({"options": {"durablebeat": "x"}}, "options['durablebeat']"),
        ({"catch_up": "no"}, "catch_up"),
        ({"catch_up": 1}, "catch_up"),
        ({"take_over": "yes"}, "take_over"),
        ({"expires": True}, "expires"),
        ({"expires": "60"}, "expires"),
        ({"expires": math.inf}, "expires"),
        ({"expires": math.nan}, "expires"),
        ({"expires": -1}, "expire_seconds"),
        ({"expires": 10**12}, "expire_seconds"),
        ({"startup_grace": math.nan}, "startup_grace"),
        ({"startup_grace": math.inf}, "startup_grace"),
        ({"startup_grace": 10**20}, "startup_grace"),
        ({"startup_grace": -1}, "startup_grace"),
        ({"startup_grace": True}, "startup_grace"),
        ({"catch_up_window": 0}, "catch_up_window"),
        ({"catch_up_window": "1h"}, "catch_up_window"),
        ({"priority": True}, "priority"),
        ({"priority": 1.5}, "priority"),
        ({"priority": "5"}, "priority"),
        ({"priority": 256}, "priority"),
        ({"queue": 5}, "queue"),
        ({"queue": "mail\nfire"}, "queue"),
        ({"headers": "x"}, "headers"),
        ({"overlap": 5}, "overlap"),
        ({"task": 5}, "task"),
        ({"task": "t\nx"}, "task"),
        ({"schedule": True}, "schedule"),
        ({"schedule": 0.0009}, "every"),  # R25: under a millisecond only
        ({"schedule": math.nan}, "schedule"),
        ({"schedule": dt.timedelta(days=40_000)}, "every"),
        ({"schedule": dt.datetime(9999, 12, 31, tzinfo=dt.UTC)}, "clocked_at"),
        ({"kwargs": {"x": "y" * 100_000}}, "kwargs"),
        # nothing the database refuses reaches the boot's sync (R20)
        ({"headers": {"h": "\ud800"}}, "headers: the string at ['h'] must not contain a lone"),
        ({"description": "d\x00"}, "description: must not contain a NUL"),
        # nothing is coerced: JSON would turn {1: 2} into {"1": 2} (args and kwargs that
        # JSON cannot hold stay with the code, R25: tests/unit/test_live_values.py)
        ({"headers": {1: "x"}}, "headers: keys must be strings"),
        (
            {"headers": {"task": "other.task", "eta": "2099-01-01T00:00:00", "id": "fixed"}},
            "headers: 'eta', 'id', 'task' reserved",
        ),
        ({"relative": "false"}, "relative: 'false' value must be True or False, not str"),
        ({"schedule": celery_solar("sunrise", 10, 20), "args": "x"}, "args: 'x' value must be"),
    ],
)
def test_a_code_entry_of_the_wrong_type_or_range_names_entry_and_field(changes, words):
    with pytest.raises(BadEntry) as err:
        parse_entry("nightly", entry(**changes), "UTC", check_task=False)
    assert "beat_schedule['nightly']" in str(err.value)
    assert words in str(err.value)


def test_a_name_with_a_newline_is_refused():
    with pytest.raises(BadEntry, match="name: must be one printable line"):
        parse_entry("a\nfire schedule=b", entry(), "UTC", check_task=False)


def test_a_valid_code_entry_is_taken_exactly():
    code = parse_entry(
        "nightly",
        entry(args=(1, "two"), expires=60, catch_up=True, startup_grace=0, take_over=True),
        "UTC",
        check_task=False,
    )
    assert code.args == [1, "two"]
    assert code.expire_seconds == 60.0
    assert code.catch_up is True and code.take_over is True
    assert code.startup_grace == dt.timedelta(0)
    empty = parse_entry("n", {"task": "t", "schedule": 60, "args": None}, "UTC", check_task=False)
    assert (empty.args, empty.kwargs, empty.take_over) == ([], {}, False)
