"""The states the pure core decides with, as plain string enums: no Django here.

``durablebeat.enums`` builds the model choices (with their admin labels) from these values,
so a value the core returns is the value a row stores and compares equal to its choice."""

from __future__ import annotations

import enum


class Overlap(enum.StrEnum):
    """What a fire does when an earlier run of the same schedule is still in flight (R14)."""

    SKIP = "skip"  #: at most one run in flight; the fire is recorded as skipped
    ALLOW = "allow"  #: always fire


class Reason(enum.StrEnum):
    """Why a slot was fired (R18 counts fires by these)."""

    SCHEDULED = "scheduled"  #: the slot came due while beat was running
    STARTUP_GRACE = "startup_grace"  #: a new or overdue interval schedule (R2, R7)
    CATCH_UP = "catch_up"  #: a delivery slot missed while no beat ran (R8)
    MANUAL = "manual"  #: "run now" from the admin or the API
    REPUBLISH = "republish"  #: an in-doubt slot sent again after the settle time (R9)
    BACKFILL = "backfill"  #: a missed slot fired later by a person (R27, R3)
