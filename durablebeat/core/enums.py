"""The states the pure core decides with, as plain string enums: no Django here.

``durablebeat.enums`` builds the model choices (with their admin labels) from these values,
so a value the core returns is the value a row stores and compares equal to its choice."""

from __future__ import annotations

import enum


class Overlap(enum.StrEnum):
    """What a fire does when an earlier run of the same schedule is still in flight (R14)."""

    SKIP = "skip"  #: at most one run in flight; the fire is recorded as skipped
    #: fire, up to the schedule's ``max_in_flight`` runs in flight (none set: always)
    ALLOW = "allow"
    #: at most one run in flight and one slot kept behind it, sent the moment that run
    #: ends; further slots meanwhile are skipped (R34)
    BUFFER_ONE = "buffer_one"
    #: the run in flight is revoked (terminated only with ``terminate``), ends
    #: ``replaced``, and the new slot is sent (R34)
    REPLACE = "replace"


class Reason(enum.StrEnum):
    """Why a slot was fired (R18 counts fires by these)."""

    SCHEDULED = "scheduled"  #: the slot came due while beat was running
    STARTUP_GRACE = "startup_grace"  #: a new or overdue interval schedule (R2, R7)
    CATCH_UP = "catch_up"  #: a delivery slot missed while no beat ran (R8)
    MANUAL = "manual"  #: "run now" from the admin or the API
    REPUBLISH = "republish"  #: an in-doubt slot sent again after the settle time (R9)
    BACKFILL = "backfill"  #: a missed slot fired later by a person (R27, R3)
    BUFFERED = "buffered"  #: a slot kept while a run was in flight, sent when it ended (R34)
