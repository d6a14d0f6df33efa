"""durablebeat's Sentry integration without a process (R30): the monitor config each timing
gets, as sentry-sdk makes it for Celery's beat, and the private pieces of sentry-sdk it
relies on (tests/e2e/test_seen_as_beat.py has the check-ins of real processes)."""

from __future__ import annotations

import datetime as dt
import inspect

import pytest
from celery import Celery
from celery.schedules import crontab
from sentry_sdk.integrations.celery import _wrap_task_run
from sentry_sdk.integrations.celery import beat as sentry_beat

from durablebeat import sentry
from durablebeat.core import timing


@pytest.fixture
def crons() -> sentry.Crons:
    app = Celery("sentry-test", set_as_current=False)
    app.conf.timezone = "Europe/Paris"
    return sentry.Crons(app)


@pytest.mark.parametrize(
    ("spec", "schedule"),
    [
        (
            timing.Interval(dt.timedelta(minutes=1)),
            {"type": "interval", "value": 1, "unit": "minute"},
        ),
        (timing.Interval(dt.timedelta(hours=2)), {"type": "interval", "value": 2, "unit": "hour"}),
        (
            timing.Crontab(minute="0", hour="8", day_of_week="1-5"),
            {"type": "crontab", "value": "0 8 * * 1-5"},
        ),
    ],
)
def test_a_monitored_timing_gets_sentrys_config(crons, spec, schedule):
    """The config sentry-sdk gives the Celery object Celery's beat would hold; an interval
    in the app's zone, a crontab in its own (UTC here, the zone its slots are in)."""
    zone = "UTC" if isinstance(spec, timing.Crontab) else "Europe/Paris"
    assert crons.monitor_config("job", spec) == {"schedule": schedule, "timezone": zone}


def test_a_crontab_in_its_own_zone_is_monitored_in_it(crons):
    spec = timing.Crontab(minute="30", hour="6", timezone="America/New_York")
    assert crons.monitor_config("job", spec)["timezone"] == "America/New_York"


@pytest.mark.parametrize(
    "spec",
    [
        timing.Interval(dt.timedelta(seconds=10)),  # Sentry Crons takes whole minutes only
        timing.Interval(dt.timedelta(seconds=90)),
        timing.Clocked(dt.datetime(2030, 1, 1, tzinfo=dt.UTC)),
        timing.Custom("an object", object()),
    ],
)
def test_a_timing_sentry_crons_does_not_take_is_not_monitored(crons, spec):
    assert crons.monitor_config("job", spec) == {}


def test_a_custom_celery_schedule_object_is_monitored_as_itself(crons):
    custom = timing.Custom("crontab", crontab(minute="*/5"))
    assert crons.monitor_config("job", custom)["schedule"] == {
        "type": "crontab",
        "value": "*/5 * * * *",
    }


def test_the_private_pieces_of_sentry_sdk_are_still_there():
    """The integration calls sentry-sdk's ``_get_monitor_config`` and names the isolation
    scope as its beat wrapper does, the name its ``send_task`` wrapper reads: a sentry-sdk
    release that changes either fails here first."""
    assert sentry._get_monitor_config is sentry_beat._get_monitor_config
    assert list(inspect.signature(sentry_beat._get_monitor_config).parameters) == [
        "celery_schedule",
        "app",
        "monitor_name",
    ]
    name = f'scope._name = "{sentry.BEAT_SCOPE_NAME}"'
    assert name in inspect.getsource(sentry_beat._wrap_beat_scheduler)
    assert f'_name == "{sentry.BEAT_SCOPE_NAME}"' in inspect.getsource(_wrap_task_run)
