"""Every state and reason a schedule or a run can carry, each documented once."""

from __future__ import annotations

from django.db import models

from .core import enums as core


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
    """``core.enums.Overlap`` (documented there) as model choices (R14)."""

    SKIP = core.Overlap.SKIP.value, "Skip while running"
    ALLOW = core.Overlap.ALLOW.value, "Allow overlap"
    BUFFER_ONE = core.Overlap.BUFFER_ONE.value, "Buffer one, send it when the run ends"
    REPLACE = core.Overlap.REPLACE.value, "Replace the run in flight"


class Reason(models.TextChoices):
    """``core.enums.Reason`` (documented there) as model choices (R18)."""

    SCHEDULED = core.Reason.SCHEDULED.value, "Scheduled"
    STARTUP_GRACE = core.Reason.STARTUP_GRACE.value, "Startup grace"
    CATCH_UP = core.Reason.CATCH_UP.value, "Catch-up"
    MANUAL = core.Reason.MANUAL.value, "Manual"
    REPUBLISH = core.Reason.REPUBLISH.value, "Re-publish"
    BACKFILL = core.Reason.BACKFILL.value, "Backfill"
    BUFFERED = core.Reason.BUFFERED.value, "Buffered"


class RunState(models.TextChoices):
    """Where one fire is in its life (R11, R22, R34). Terminal: succeeded, failed, lost, skipped,
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
    #: revoked by beat for a newer slot of an ``overlap=replace`` schedule (R34); final:
    #: whatever its worker says later does not move it
    REPLACED = "replaced", "Replaced"


#: the detail of a run the result backend finished that no worker ever reported started:
#: its worker runs without durablebeat's tracking (``check`` finding ``untracked_worker``).
#: Here, not in ``worker.completion``, because the runs index check reads by is declared
#: on the model (``durablebeat_run_flagged_idx``) and names it
UNTRACKED = "executed per the result backend; no worker reported it"

#: who asked for a "run now" (reason ``manual``), as its run's ``detail`` says it, through
#: its start and finish (``worker.completion.KEEP_DETAIL``): ``report`` names them apart
RUN_NOW_ADMIN = "run now (admin)"
RUN_NOW_API = "run now (API)"
RUN_NOW_DETAILS = (RUN_NOW_ADMIN, RUN_NOW_API)


class Failure(models.TextChoices):
    """Why a failed run failed, where the ledger knows more than its error (R21). Blank: the
    task's body failed, or the run did not fail."""

    #: never sent: the broker client refused the message for its own content (an expiry it
    #: cannot encode, an unserialisable argument); ``check`` reports it as ``unpublishable``
    UNPUBLISHABLE = "unpublishable", "Message refused"


IN_FLIGHT_STATES = (RunState.CLAIMED, RunState.PUBLISHED, RunState.STARTED)
FINAL_STATES = (
    RunState.SUCCEEDED,
    RunState.FAILED,
    RunState.LOST,
    RunState.SKIPPED,
    RunState.MISSED,
    RunState.REPLACED,
)
