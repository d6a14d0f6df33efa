"""``durablebeat status``: the admin's schedule list for a terminal, and the live beats."""

from __future__ import annotations

import datetime as dt

from .. import schema
from ..models import Schedule
from ..words import absolute, duration_words, next_fire_words, one_line, relative, schedule_words
from . import health

STATUS_COLUMNS = ("name", "schedule", "enabled", "next fire", "last completion", "outcome", "stuck")


def _status_row(row: Schedule, now: dt.datetime) -> tuple[str, ...]:
    next_fire = next_fire_words(row, now)
    if row.enabled and row.next_fire_at is not None and not row.error:
        next_fire += f" ({absolute(row.next_fire_at)})"
    return (
        row.name,
        schedule_words(row),
        "yes" if row.enabled else "no",
        next_fire,
        relative(row.last_completed_at, now) or "never",
        row.last_outcome or "-",
        f"for {duration_words(now - row.stuck_since)}" if row.stuck_since else "",
    )


def status_rows(now: dt.datetime) -> list[tuple[str, ...]]:
    """One line per schedule, whatever it holds (R21): control characters are escaped, and a
    row whose values cannot be put in words says so in its line."""
    rows: list[tuple[str, ...]] = []
    for row in Schedule.objects.order_by("name"):
        try:
            cells = _status_row(row, now)
        except Exception as exc:
            cells = (row.name, f"cannot show this row: {type(exc).__name__}: {exc}")
            cells += ("",) * (len(STATUS_COLUMNS) - len(cells))
        rows.append(tuple(one_line(str(c)) for c in cells))
    return rows


def format_table(header: tuple[str, ...], rows: list[tuple[str, ...]]) -> str:
    widths = [max(len(str(c)) for c in col) for col in zip(header, *rows, strict=False)]
    lines = [
        "  ".join(str(c).ljust(w) for c, w in zip(r, widths, strict=True)).rstrip()
        for r in (header, *rows)
    ]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def format_status(now: dt.datetime) -> str:
    if missing := schema.pending():  # R32: no row can be read: check's line instead
        return "\n".join(f.line() for f in health.waiting_for_migrations(missing, now))
    rows = status_rows(now)
    table = format_table(STATUS_COLUMNS, rows) if rows else "no schedules"
    boots = health.live_boots(now)
    if boots:
        beat = "beat alive: " + ", ".join(
            f"{b.hostname}:{b.pid} (up {duration_words(now - b.started_at)})" for b in boots
        )
    else:
        beat = "no beat alive"
    return f"{table}\n\n{one_line(beat)}"
