"""What a ``check`` finding is (R17): a stable code, its one severity, a sentence; and the
guard every finder computes its rows through, so that a row it cannot compute with is a
``bad_row`` naming it, never a crash (R21)."""

from __future__ import annotations

import enum
import logging
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass
from typing import Any

from django.db import DatabaseError

from ..models import Schedule
from ..words import one_line

logger = logging.getLogger("durablebeat")


class Severity(enum.IntEnum):
    """How bad a finding is; ``check`` exits with the worst one (0 when there is none)."""

    WARNING = 1  #: something went wrong and needs a look; schedules still fire
    CRITICAL = 2  #: schedules are not firing now


#: every finding code and its severity: the one place a severity is written
SEVERITIES = {
    "no_beat": Severity.CRITICAL,
    "overdue": Severity.CRITICAL,
    "stuck": Severity.CRITICAL,
    "paused_on_failure": Severity.CRITICAL,
    "lost_runs": Severity.WARNING,
    "unresolved_runs": Severity.WARNING,
    "no_news": Severity.WARNING,
    "unconsumed_queue": Severity.WARNING,
    "untracked_worker": Severity.WARNING,
    "unpublishable": Severity.WARNING,
    "no_success": Severity.WARNING,
    "bad_row": Severity.WARNING,
    "clock_skew": Severity.WARNING,
    "listen_deaf": Severity.WARNING,
    "database_unreachable": Severity.CRITICAL,
    "migrations_pending": Severity.WARNING,
    "database_error": Severity.CRITICAL,
    "check_failed": Severity.CRITICAL,
    "bad_setting": Severity.CRITICAL,
}
CODES = tuple(SEVERITIES)


@dataclass(frozen=True)
class Finding:
    """One line of ``check``: a stable ``code`` to grep or alert on, and a sentence."""

    code: str
    message: str
    schedule: str | None = None

    def __post_init__(self) -> None:
        if self.code not in SEVERITIES:
            raise ValueError(f"unknown finding code {self.code!r}: add it to SEVERITIES")

    @property
    def severity(self) -> Severity:
        return SEVERITIES[self.code]

    def line(self) -> str:
        """One line, whatever a name or an error holds: a newline cannot forge a finding."""
        return one_line(f"{self.severity.name} {self.code}: {self.message}")

    def as_dict(self) -> dict[str, Any]:
        return asdict(self) | {"severity": self.severity.name.lower()}


# --- a broken row is a finding, never a crash (R21) ----------------------------------------


def unreadable_row(name: str, what: str, exc: Exception) -> Finding:
    """A row whose values ``check`` cannot compute with: named, so that a person can fix it."""
    logger.warning(
        "check cannot compute %s for schedule=%s: %r",
        what,
        name,
        exc,
        extra={"event": "check_row_error", "schedule": name},
    )
    return Finding(
        "bad_row",
        f"{name}: check cannot compute {what} from this row ({type(exc).__name__}: {exc}); "
        "fix or reset it",
        name,
    )


def each_row(
    rows: Iterable[Schedule], what: str, build: Callable[[Schedule], Finding | None]
) -> list[Finding]:
    """``build`` for every row; a row it raises on becomes a ``bad_row`` finding naming it.

    Any exception, not a list of known ones: rows hold what a migration, a script or an older
    version left, and the check is what an operator reads when something is wrong. Only a
    database error propagates (``check`` reports it as ``database_unreachable``).
    """
    found = []
    for row in rows:
        try:
            finding = build(row)
        except DatabaseError:
            raise
        except Exception as exc:
            finding = unreadable_row(row.name, what, exc)
        if finding is not None:
            found.append(finding)
    return found


def active_schedules() -> Any:
    return Schedule.objects.filter(enabled=True, error="")


# --- a read costs what it shows (R33) -------------------------------------------------------

#: a finder names this many schedules, then says how many more: a thousand overdue rows are
#: one incident, and the probe answers in the same time with a million as with ten
SHOWN = 100
#: the rest are counted up to here ("more than 10,000"): a count never reads the whole table
COUNTED = 10_000


def count_words(n: int, cap: int | None = None) -> str:
    """``n`` as ``counted`` returns it (to ``cap`` + 1): "1,234", "10,000" when there are
    exactly ``cap`` (``COUNTED``), "more than 10,000" past it."""
    cap = COUNTED if cap is None else cap
    return f"more than {cap:,}" if n > cap else f"{n:,}"


def counted(rows: Any, skip: int = 0, cap: int | None = None) -> int:
    """How many of ``rows`` come after the first ``skip``, counted to ``cap`` (``COUNTED``)
    + 1 at most: ``cap`` + 1 means "more than ``cap``", so that exactly ``cap`` is said as
    it is. A ``COUNT`` over a ``LIMIT``: it reads ``skip + cap + 1`` index entries at most."""
    cap = COUNTED if cap is None else cap
    # Unordered: how many there are does not depend on the order, and an ORDER BY lets the
    # planner walk another index (the name's) past a million rows to find a few.
    return int(rows.order_by()[skip : skip + cap + 1].count())


def each_shown(
    rows: Any, what: str, build: Callable[[Schedule], Finding | None], code: str, more: str
) -> list[Finding]:
    """``each_row`` of the first ``SHOWN`` of ``rows`` (a query, ordered), then one ``code``
    finding saying how many more there are (``more``: what they are, e.g. "schedules
    overdue"). The exit status is the same: the finding's severity is its code's."""
    shown = list(rows[:SHOWN])
    found = each_row(shown, what, build)
    if len(shown) == SHOWN and (rest := counted(rows, SHOWN)) > 0:
        found.append(Finding(code, f"and {count_words(rest)} more {more}"))
    return found
