"""Every state and reason a schedule or a run can carry, each documented once."""

from __future__ import annotations

from django.db import models


class Kind(models.TextChoices):
    """How a schedule's slots are computed (see ``timing``)."""

    INTERVAL = "interval", "Interval"  #: every N seconds on a grid anchored at its first fire
    CRONTAB = "crontab", "Crontab"  #: wall-clock times in the schedule's own time zone
    CLOCKED = "clocked", "One-off"  #: a single instant; disabled after its one fire
    SOLAR = "solar", "Solar"  #: a sun event (sunrise, dusk...) seen from a latitude and longitude
    CUSTOM = "custom", "Custom (code)"  #: a schedule object in code, asked is_due (R25)


class Source(models.TextChoices):
    """Where a schedule is defined, i.e. what is its source of truth."""

    CODE = "code", "Code (beat_schedule)"  #: upserted from ``app.conf.beat_schedule`` at boot
    DATABASE = "database", "Database (admin)"  #: created in the admin or the ORM


class Overlap(models.TextChoices):
    """What a fire does when an earlier run of the same schedule is still in flight (R14)."""

    SKIP = (
        "skip",
        "Skip while running",
    )  #: at most one run in flight; the fire is recorded as skipped
    ALLOW = "allow", "Allow overlap"  #: always fire


class Reason(models.TextChoices):
    """Why a slot was fired (R18 counts fires by these)."""

    SCHEDULED = "scheduled", "Scheduled"  #: the slot came due while beat was running
    STARTUP_GRACE = "startup_grace", "Startup grace"  #: a new or overdue interval schedule (R2, R7)
    CATCH_UP = "catch_up", "Catch-up"  #: a delivery slot missed while no beat ran (R8)
    MANUAL = "manual", "Manual"  #: "run now" from the admin or the API
    REPUBLISH = "republish", "Re-publish"  #: an in-doubt slot sent again after the settle time (R9)
    BACKFILL = "backfill", "Backfill"  #: a missed slot fired later by a person (R27, R3)


class RunState(models.TextChoices):
    """Where one fire is in its life (R11, R22). Terminal: succeeded, failed, lost, skipped,
    missed. ``no_news`` is the one documented non-terminal resting state."""

    CLAIMED = "claimed", "Claimed"  #: slot claimed and next fire advanced; not yet on the broker
    PUBLISHED = "published", "Published"  #: the broker accepted the message
    STARTED = "started", "Started"  #: a worker began the body
    SUCCEEDED = "succeeded", "Succeeded"  #: the body returned normally (even past its soft limit)
    FAILED = "failed", "Failed"  #: an exception escaped the body, or the hard time limit killed it
    LOST = "lost", "Lost"  #: reclaimed: its worker is gone or it outlived its hard limit (R15)
    #: published, then no worker news within the bound (``DURABLEBEAT_NO_NEWS_AFTER``, or the
    #: message's expiry when shorter): the message was lost or its queue is not consumed. It
    #: no longer holds an ``overlap=skip`` schedule; a later start or completion still moves
    #: it on (R11, R22)
    NO_NEWS = "no_news", "No news"
    SKIPPED = "skipped", "Skipped"  #: not sent: overlap policy or another recorded reason (R14)
    MISSED = "missed", "Missed"  #: not sent: the slot could not go out while it was worth sending


IN_FLIGHT_STATES = (RunState.CLAIMED, RunState.PUBLISHED, RunState.STARTED)
FINAL_STATES = (
    RunState.SUCCEEDED,
    RunState.FAILED,
    RunState.LOST,
    RunState.SKIPPED,
    RunState.MISSED,
)
