"""A corpus of ``beat_schedule`` configurations written the way real projects write them, for
the compatibility suite (R25, tests/unit/test_celery_compat.py) and the boot test
(tests/integration/test_schedule_kinds.py).

Each ``Project`` is one Celery app's zone settings and its ``beat_schedule``; ``projects()``
builds fresh schedule objects on every call, since Celery binds them to an app and caches
their zone. Message-side entries (options, arguments) may be added to a project in
``projects()``: the comparison reads each whole entry, through Celery's scheduler and
durablebeat's code sync alike.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from celery import signature
from celery.schedules import BaseSchedule, crontab, schedstate, schedule, solar
from kombu import Exchange, Queue

TASK = "tests.e2eapp.tasks.record"


class EveryQuarterHourOnWeekdays(BaseSchedule):
    """A custom schedule as projects write them: Monday to Friday, every 15 minutes (UTC),
    answering ``is_due`` the way Celery's own schedules do, its "ask again" a hint capped
    at 10 minutes (so an answer "not due yet" is part of the comparison)."""

    def _next(self, after: dt.datetime) -> dt.datetime:
        after = after.astimezone(dt.UTC)
        slot = after.replace(minute=after.minute // 15 * 15, second=0, microsecond=0)
        while slot <= after or slot.weekday() >= 5:
            slot += dt.timedelta(minutes=15)
        return slot

    def remaining_estimate(self, last_run_at: dt.datetime) -> dt.timedelta:
        return self._next(last_run_at) - self.now()

    def is_due(self, last_run_at: dt.datetime) -> tuple[bool, float]:
        rem = self.remaining_estimate(last_run_at).total_seconds()
        if rem <= 0:
            return schedstate(True, self.remaining_estimate(self.now()).total_seconds())
        return schedstate(False, min(rem, 600))  # a hint: ask again in at most 10 min

    def __repr__(self) -> str:
        return "<every 15 min on weekdays>"


@dataclass
class Project:
    name: str
    #: ``app.conf.timezone``; None leaves it unset (UTC, Celery's ``enable_utc`` default)
    timezone: str | None
    beat_schedule: dict[str, dict[str, Any]] = field(default_factory=dict)


def _entries(pairs: dict[str, Any]) -> dict[str, dict[str, Any]]:
    out = {}
    for name, value in pairs.items():
        entry = value if isinstance(value, dict) else {"schedule": value}
        out[name] = {"task": TASK, **entry}
    return out


def _crontabs() -> dict[str, Any]:
    return {
        "every-minute": crontab(),
        "quarter-hours": crontab(minute="*/15"),
        "int-fields": crontab(minute=30, hour=2),  # inside both DST changes in Europe
        "list-fields": crontab(minute=[0, 30], hour=[1, 2, 3]),
        "range-step": crontab(minute="5-50/15", hour="8-18"),
        "weekday-names": crontab(minute=0, hour=9, day_of_week="mon-fri"),
        "weekend": crontab(minute="0", hour="10", day_of_week="sat,sun"),
        "first-of-month": crontab(minute=0, hour=0, day_of_month=1),
        "quarterly": crontab(minute=0, hour=6, day_of_month="1", month_of_year="*/3"),
        "new-year": crontab(minute=0, hour=0, day_of_month=1, month_of_year=1),
        "first-monday": crontab(minute=0, hour=7, day_of_month="1-7", day_of_week="mon"),
        "hourly-half": crontab(minute="30"),
    }


def _intervals() -> dict[str, Any]:
    return {
        "timedelta-5m": dt.timedelta(minutes=5),
        "int-seconds": 90,
        "float-seconds": 12.5,
        "schedule-obj": schedule(dt.timedelta(hours=1)),
        "daily-timedelta": dt.timedelta(days=1),
        "relative-entry-hour": {"schedule": dt.timedelta(hours=1), "relative": True},
        "relative-entry-int": {"schedule": 600, "relative": True},
        "relative-schedule-90m": schedule(dt.timedelta(minutes=90), relative=True),
        "relative-schedule-day": schedule(dt.timedelta(days=1), relative=True),
        "relative-on-crontab": {"schedule": crontab(minute="*/10"), "relative": True},
    }


def _solars() -> dict[str, Any]:
    return {
        "sunrise-london": solar("sunrise", 51.5074, -0.1278),
        "sunset-sydney": solar("sunset", -33.8688, 151.2093),
        "noon-kolkata": solar("solar_noon", 22.5726, 88.3639),
        "dusk-civil-tromso": solar("dusk_civil", 69.6492, 18.9553),
        "sunrise-longyearbyen": solar("sunrise", 78.2232, 15.6267),
    }


def _sub_second() -> dict[str, Any]:
    """Intervals under a second, as Celery's beat runs them (R25). Not here: ``relative=True``
    under a second, whose fires under Celery's beat follow its loop's own sleeps (the
    docs/switching.md's "Coming from Celery's beat" says what durablebeat does)."""
    return {
        "half-second-float": 0.5,
        "timedelta-200ms": dt.timedelta(milliseconds=200),
        "schedule-250ms": schedule(run_every=dt.timedelta(seconds=0.25)),
    }


def _field() -> dict[str, Any]:
    """Entries shaped like public projects' ``beat_schedule`` (options and arguments as they
    write them): each must boot, and its slots are compared like any other (R24, R25)."""
    return {
        "reminders-expire": {"schedule": crontab(minute="*/15"), "options": {"expires": 300}},
        "tuple-args": {"schedule": dt.timedelta(seconds=10), "args": ("task-5", "/schedule")},
        "nightly-queue-no-retry": {
            "schedule": crontab(hour="2", minute="30"),
            "options": {"queue": "periodic", "retry": False},
        },
        "heartbeat-retry-policy": {
            "schedule": 30.0,
            "options": {
                "retry": True,
                "retry_policy": {
                    "max_retries": 3,
                    "interval_start": 0,
                    "interval_step": 0.2,
                    "interval_max": 0.5,
                },
            },
        },
        "publish-timeouts": {
            "schedule": dt.timedelta(minutes=10),
            "options": {"timeout": 10, "confirm_timeout": 5, "expires": 540},
        },
        "kombu-queue": {
            "schedule": crontab(minute=0, hour="*/3"),
            "options": {
                "queue": Queue(
                    "reports", Exchange("reports", type="direct"), routing_key="reports"
                ),
                "priority": 5,
            },
        },
        "kombu-exchange": {
            "schedule": crontab(minute=0, hour=0),
            "kwargs": {"days": 30},
            "options": {
                "exchange": Exchange("maintenance", type="topic"),
                "routing_key": "maintenance.cleanup",
            },
        },
        "limits": {
            "schedule": crontab(minute="*/5"),
            "options": {"expires": 60.0, "time_limit": 240, "soft_time_limit": 200},
        },
        "explicit-empties": {
            "schedule": dt.timedelta(hours=6),
            "relative": False,
            "args": [],
            "kwargs": {},
            "options": {},
        },
        "weekly-report-kwargs": {
            "schedule": crontab(minute=0, hour=8, day_of_week=1),
            "kwargs": {"period": "week", "send": True},
            "options": {"queue": "mail", "expires": 3600, "ignore_result": True},
        },
        "sub-second-poll": {"schedule": 0.5, "options": {"expires": 1}},
        "report-then-notify": {
            "schedule": crontab(minute=0, hour=7),
            "options": {
                "link": signature(TASK, args=("notified",)),
                "link_error": [signature(TASK, args=("failed",), immutable=True)],
            },
        },
    }


def projects() -> list[Project]:
    """Fresh projects: every kind, several zones (and none set)."""
    custom = {"custom-weekday-quarters": EveryQuarterHourOnWeekdays()}
    return [
        Project("no-zone", None, _entries({**_crontabs(), **_intervals(), **custom})),
        Project("london", "Europe/London", _entries({**_crontabs(), **_intervals()})),
        Project("new-york", "America/New_York", _entries({**_crontabs(), **_intervals()})),
        Project("sydney", "Australia/Sydney", _entries({**_crontabs(), **_intervals()})),
        Project("kolkata", "Asia/Kolkata", _entries({**_crontabs(), **_intervals()})),
        Project("solar", None, _entries(_solars())),
        Project("sub-second", None, _entries(_sub_second())),
        Project("sub-second-paris", "Europe/Paris", _entries(_sub_second())),
        Project("field", "Europe/Berlin", _entries(_field())),
    ]


def utc(*args: int) -> dt.datetime:
    return dt.datetime(*args, tzinfo=dt.UTC)


#: boots to compare from, by what they test; a project is run from the ones for its zone
#: (and every project from the ordinary day and the year end)
STARTS: dict[str, list[tuple[str, dt.datetime]]] = {
    "*": [
        ("ordinary day", utc(2026, 6, 10, 9, 17, 23)),
        ("year end", utc(2026, 12, 31, 22, 44, 51)),
    ],
    "Europe/London": [
        ("spring forward", utc(2026, 3, 29, 0, 20, 7)),
        ("fall back", utc(2026, 10, 25, 0, 20, 7)),
    ],
    "America/New_York": [
        ("spring forward", utc(2026, 3, 8, 6, 20, 7)),
        ("fall back", utc(2026, 11, 1, 5, 20, 7)),
    ],
    "Australia/Sydney": [
        ("fall back", utc(2026, 4, 4, 15, 20, 7)),
        ("spring forward", utc(2026, 10, 3, 15, 20, 7)),
    ],
}


def starts_for(project: Project) -> list[tuple[str, dt.datetime]]:
    return STARTS["*"] + STARTS.get(project.timezone or "", [])


#: a builder per project name, for a test that wants one project only
BUILDERS: dict[str, Callable[[], Project]] = {
    p.name: (lambda name=p.name: next(q for q in projects() if q.name == name)) for p in projects()
}
