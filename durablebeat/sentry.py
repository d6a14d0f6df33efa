"""Sentry Crons and traces for durablebeat's fires (R30), as sentry-sdk gives them to
Celery's own beat.

sentry-sdk's Celery integration wraps ``celery.beat.Scheduler.apply_entry``, which
durablebeat never calls (it publishes through ``beat.dispatch``). This module does, per
fire, what that wrapper does, through durablebeat's hook (``signals.before_publish``):

- a new trace: a new propagation context on the isolation scope, named as the wrapper names
  it, so that sentry-sdk's own ``send_task`` wrapper puts the new trace in the message and
  starts no span of its own;
- with ``CeleryIntegration(monitor_beat_tasks=True)``, for a schedule Sentry Crons can
  monitor (a crontab, an interval of whole minutes; not in ``exclude_beat_tasks``): an
  ``in_progress`` check-in, and the monitor's headers in the message (slug: the schedule's
  name; its config: crontab or interval, and time zone). sentry-sdk's own receivers in the
  worker read them and send ``ok`` or ``error``.

Beat connects it at boot when ``sentry_sdk`` is loaded in its process
(``schedulers.DurableScheduler.setup_schedule``); with no ``CeleryIntegration`` in Sentry's
client it does nothing. The core never imports this module's tool.

R36: a schedule that pauses itself after failures in a row (``signals.schedule_paused``,
sent by the worker or by beat, whichever wrote the run that reached the bound) is an issue
in Sentry: one event at level error, grouped per schedule, with the pause's note. Every
process that loads Django with ``sentry_sdk`` loaded connects it (``apps``), with any
integration: a pause is news whether or not Sentry watches Celery. Sentry Crons has no
"paused" check-in: a monitored schedule's monitor reports its slots missed meanwhile.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

import sentry_sdk
from celery import schedules
from sentry_sdk.crons import MonitorStatus, capture_checkin
from sentry_sdk.integrations.celery import CeleryIntegration

# The two private pieces of sentry-sdk this module relies on, in one place (each is checked
# to still exist, and to be what sentry-sdk's beat wrapper uses, by tests/unit/test_sentry.py):
# the monitor config of a Celery schedule object, and the name that wrapper gives the
# isolation scope (sentry-sdk's ``send_task`` wrapper then starts no span of its own).
from sentry_sdk.integrations.celery.beat import _get_monitor_config
from sentry_sdk.utils import match_regex_list

from . import signals
from .core import timing

BEAT_SCOPE_NAME = "celery-beat"
#: monitor configs kept, one per (schedule, timing); more are computed again
MAX_CONFIGS = 100_000


class Crons:
    """The ``before_publish`` receiver: a new trace per fire, Sentry Crons' check-in and
    headers."""

    def __init__(self, app: Any) -> None:
        self.__qualname__ = "durablebeat.sentry.Crons"  # how Django's signals name a receiver
        self.app = app
        self._configs: dict[tuple[str, timing.Spec], dict[str, Any]] = {}

    def __call__(
        self, sender: Any, schedule: str, spec: timing.Spec | None = None, **_: Any
    ) -> dict[str, Any] | None:
        integration = sentry_sdk.get_client().get_integration(CeleryIntegration)
        if integration is None:
            return None
        scope = sentry_sdk.get_isolation_scope()
        scope.set_new_propagation_context()  # each fire starts its own trace
        scope._name = BEAT_SCOPE_NAME
        if not integration.monitor_beat_tasks or spec is None:
            return None
        if match_regex_list(schedule, integration.exclude_beat_tasks):
            return None
        config = self.monitor_config(schedule, spec)
        if not config:
            return None
        check_in_id = capture_checkin(
            monitor_slug=schedule,
            monitor_config=config,  # type: ignore[arg-type]  # sentry's TypedDict, as built
            status=MonitorStatus.IN_PROGRESS,
        )
        return {
            "sentry-monitor-slug": schedule,
            "sentry-monitor-config": config,
            "sentry-monitor-check-in-id": check_in_id,
        }

    def monitor_config(self, schedule: str, spec: timing.Spec) -> dict[str, Any]:
        """Sentry's monitor config of ``spec``, as sentry-sdk makes it of the Celery schedule
        object Celery's beat would hold; {} for a timing Sentry Crons does not take."""
        key = (schedule, spec)
        config = self._configs.get(key)
        if config is None:
            if len(self._configs) >= MAX_CONFIGS:
                self._configs.clear()
            config = self._configs[key] = self._compute(schedule, spec)
        return config

    def _compute(self, schedule: str, spec: timing.Spec) -> dict[str, Any]:
        celery_schedule = celery_schedule_of(spec, self.app)
        if celery_schedule is None:
            return {}
        config: dict[str, Any] = dict(_get_monitor_config(celery_schedule, self.app, schedule))
        if config and isinstance(spec, timing.Crontab):
            config["timezone"] = spec.timezone  # the zone the schedule's slots are in
        return config


def celery_schedule_of(spec: timing.Spec, app: Any) -> Any:
    """The Celery schedule object Celery's beat would hold for ``spec``; None for a timing
    Sentry Crons does not monitor (clocked, solar)."""
    if isinstance(spec, timing.Interval):
        return schedules.schedule(run_every=spec.every, relative=spec.relative, app=app)
    if isinstance(spec, timing.Crontab):
        fields = {name: getattr(spec, name) for name in timing.CRONTAB_FIELDS}
        return schedules.crontab(**fields, app=app)
    if isinstance(spec, timing.Custom):
        return spec.schedule  # the object itself, as Celery's beat holds it
    return None


def paused(sender: Any, schedule: str, note: str, failures: int, at: dt.datetime, **_: Any) -> None:
    """The ``schedule_paused`` receiver (R36): one Sentry event per pause, grouped by the
    schedule's name."""
    if not sentry_sdk.get_client().is_active():
        return
    with sentry_sdk.new_scope() as scope:
        scope.set_tag("durablebeat.schedule", schedule)
        scope.set_context(
            "durablebeat", {"schedule": schedule, "failures": failures, "paused_at": at.isoformat()}
        )
        scope.fingerprint = ["durablebeat", "schedule_paused", schedule]
        sentry_sdk.capture_message(
            f"durablebeat: schedule {schedule} paused itself: {note}", level="error"
        )


def connect_pauses() -> None:
    """Wire ``paused`` (once per process; every process that may write a run's end)."""
    signals.schedule_paused.connect(paused, weak=False, dispatch_uid="durablebeat.sentry.paused")


def connect(app: Any) -> None:
    """Wire the receiver (once per process)."""
    signals.before_publish.connect(Crons(app), weak=False, dispatch_uid="durablebeat.sentry")
