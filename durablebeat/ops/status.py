"""``durablebeat status``: what a person reads first, then the schedules, and the live beats.

A read costs what it shows (R33): the counts by state, then the schedules that need a look
(late, stuck, failing, set aside: each read from an index, the first ``limit`` of each and
how many more), then the first ``limit`` schedules by name, ``--name PATTERN``'s or, with
``--all``, every one, streamed a chunk at a time, never held at once. ``--json`` writes one
object per line (JSON Lines), as it goes.
"""

from __future__ import annotations

import datetime as dt
import fnmatch
import itertools
import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from django.db.models import Count, Q, QuerySet

from .. import conf, db, schema
from ..enums import RunState
from ..models import Schedule
from ..words import (
    absolute,
    duration_words,
    next_fire_words,
    one_line,
    pause_words,
    relative,
    schedule_words,
)
from . import health
from .findings import COUNTED, active_schedules, count_words, counted

STATUS_COLUMNS = ("name", "schedule", "enabled", "next fire", "last completion", "outcome", "stuck")
#: rows of each part shown unless ``--limit`` says otherwise
DEFAULT_LIMIT = 50
#: outcomes that make a schedule "failing", as the admin's outcome filter says them
FAILING = (RunState.FAILED, RunState.LOST)


@dataclass(frozen=True)
class Part:
    """One part of the status: a title, its rows (a query, ordered) and what they are."""

    key: str
    title: str
    rows: QuerySet[Schedule]


def attention(now: dt.datetime) -> list[Part]:
    """The schedules a person looks at first, each part found through an index (R33)."""
    active = active_schedules()
    late = conf.settings.LATE_AFTER
    return [
        Part(
            "late",
            f"late (next fire past by more than {duration_words(late)})",
            # the due index, oldest first
            active.filter(next_fire_at__lt=now - late).order_by("next_fire_at", "pk"),
        ),
        Part(
            "stuck",
            "stuck (every fire skipped)",
            # durablebeat_stuck_idx
            active.filter(stuck_since__isnull=False).order_by("stuck_since", "pk"),
        ),
        Part(
            "failing",
            "failing (last outcome failed or lost)",
            # durablebeat_outcome_idx finds the failing rows; ordered by their last failure,
            # which no index holds: a sort of the failing rows, not of the table
            Schedule.objects.filter(enabled=True, last_outcome__in=FAILING).order_by(
                "-last_failed_at", "pk"
            ),
        ),
        Part(
            "set_aside",
            "set aside (beat cannot use the row)",
            health.set_aside_rows(),  # durablebeat_paused_or_bad_idx
        ),
        Part(
            "paused_on_failure",
            "paused on failure (after failures in a row: resume once fixed)",
            health.paused_on_failure_rows(),  # durablebeat_paused_or_bad_idx (R36)
        ),
    ]


def counts(now: dt.datetime, parts: Iterable[Part]) -> dict[str, int]:
    """The schedules by state: one pass over the table for the totals, and each part's
    rows counted through its index, up to ``findings.COUNTED``."""
    totals = Schedule.objects.aggregate(
        schedules=Count("pk"),
        enabled=Count("pk", filter=Q(enabled=True)),
        deleted=Count("pk", filter=Q(deleted_at__isnull=False)),
    )
    found = {
        "schedules": totals["schedules"],
        "enabled": totals["enabled"],
        "paused": totals["schedules"] - totals["enabled"] - totals["deleted"],
        "deleted": totals["deleted"],
    }
    return found | {part.key: counted(part.rows) for part in parts}


def counts_line(found: dict[str, int]) -> str:
    parts = ", ".join(
        f"{count_words(found[key])} {key.replace('_', ' ')}"
        for key in ("late", "stuck", "failing", "set_aside", "paused_on_failure")
    )
    return (
        f"schedules: {found['schedules']:,} ({found['enabled']:,} enabled, "
        f"{found['paused']:,} paused, {found['deleted']:,} deleted); {parts}"
    )


def named(pattern: str) -> QuerySet[Schedule]:
    """The rows whose name may match ``pattern`` (shell-style: ``*``, ``?``, ``[...]``),
    read by the prefix before its first wildcard through the name's index."""
    prefix = pattern
    for i, char in enumerate(pattern):
        if char in "*?[":
            prefix = pattern[:i]
            break
    rows = Schedule.objects.order_by("name")
    if prefix == pattern:
        return rows.filter(name=pattern)
    return rows.filter(name__startswith=prefix) if prefix else rows


def _matching(pattern: str | None, limit: int | None) -> Iterator[Schedule]:
    """The schedules ``status --all`` or ``--name`` shows, by name, a page at a time
    (``db.by_name_pages``): every one, or those whose name matches ``pattern`` whole;
    at most ``limit``."""
    rows = Schedule.objects.order_by("name") if pattern is None else named(pattern)
    found = (
        row
        for row in db.by_name_pages(rows)
        if pattern is None or fnmatch.fnmatchcase(row.name, pattern)
    )
    return found if limit is None else itertools.islice(found, limit)


def _status_row(row: Schedule, now: dt.datetime) -> tuple[str, ...]:
    next_fire = next_fire_words(row, now)
    if row.enabled and row.next_fire_at is not None and not row.error:
        next_fire += f" ({absolute(row.next_fire_at)})"
    return (
        row.name,
        schedule_words(row),
        "yes" if row.enabled else f"no ({pause_words(row, now)})",
        next_fire,
        relative(row.last_completed_at, now) or "never",
        row.last_outcome or "-",
        f"for {duration_words(now - row.stuck_since)}" if row.stuck_since else "",
    )


def _cells(row: Schedule, now: dt.datetime) -> tuple[str, ...]:
    """A row's cells, whatever it holds (R21): control characters are escaped, and a row
    whose values cannot be put in words says so in its line."""
    try:
        cells = _status_row(row, now)
    except Exception as exc:
        cells = (row.name, f"cannot show this row: {type(exc).__name__}: {exc}")
        cells += ("",) * (len(STATUS_COLUMNS) - len(cells))
    return tuple(one_line(str(c)) for c in cells)


def status_rows(now: dt.datetime, rows: Iterable[Schedule] | None = None) -> list[tuple[str, ...]]:
    """One line of cells per row of ``rows`` (default: every schedule by name)."""
    if rows is None:
        rows = db.by_name_pages(Schedule.objects.all())
    return [_cells(row, now) for row in rows]


def format_table(header: tuple[str, ...], rows: list[tuple[str, ...]]) -> str:
    return "\n".join(_table_lines(header, rows))


def _widths(header: tuple[str, ...], rows: list[tuple[str, ...]]) -> list[int]:
    return [max(len(str(c)) for c in col) for col in zip(header, *rows, strict=False)]


def _line(cells: tuple[str, ...], widths: list[int]) -> str:
    return "  ".join(str(c).ljust(w) for c, w in zip(cells, widths, strict=True)).rstrip()


def _table_lines(
    header: tuple[str, ...], rows: list[tuple[str, ...]], widths: list[int] | None = None
) -> Iterator[str]:
    widths = widths or _widths(header, rows)
    yield _line(header, widths)
    yield "  ".join("-" * w for w in widths)
    for r in rows:
        yield _line(r, widths)


def _streamed_table(cells: Iterator[tuple[str, ...]]) -> Iterator[str]:
    """A table of any length: the columns as wide as the first page's rows need
    (``db.PAGE``; a longer cell later pushes its line on), each line written as it is
    made."""
    first = list(itertools.islice(cells, db.PAGE))
    if not first:
        yield "no schedules"
        return
    widths = _widths(STATUS_COLUMNS, first)
    yield from _table_lines(STATUS_COLUMNS, first, widths)
    for row in cells:
        yield _line(row, widths)


def _more(shown: int, rows: QuerySet[Schedule], limit: int) -> str | None:
    if shown < limit:
        return None
    rest = counted(rows, limit)
    return f"and {count_words(rest)} more" if rest else None


def _beats_line(now: dt.datetime) -> str:
    boots = health.live_boots(now)
    if not boots:
        return "no beat alive"
    return one_line(
        "beat alive: "
        + ", ".join(
            f"{b.hostname}:{b.pid} (up {duration_words(now - b.started_at)})" for b in boots
        )
    )


def status_lines(
    now: dt.datetime,
    *,
    every: bool = False,
    name: str | None = None,
    limit: int | None = DEFAULT_LIMIT,
) -> Iterator[str]:
    """The lines of ``durablebeat status``, each made as it is written.

    Without ``every`` and ``name``: the counts, the schedules that need a look, then the
    first ``limit`` schedules by name. ``name``: the schedules matching that pattern;
    ``every``: all of them (``limit``, when given, still bounds them).
    """
    if missing := schema.pending():  # R32: no row can be read: check's line instead
        for f in health.waiting_for_migrations(missing, now):
            yield f.line()
        return
    if every or name is not None:
        yield from _streamed_table(_cells(row, now) for row in _matching(name, limit))
        yield ""
        yield _beats_line(now)
        return
    limit = DEFAULT_LIMIT if limit is None else limit
    parts = attention(now)
    found = counts(now, parts)
    yield counts_line(found)
    for part in parts:
        if not found[part.key]:
            continue
        shown = [_cells(row, now) for row in part.rows[:limit]]
        yield ""
        yield f"{part.title}:"
        yield from _table_lines(STATUS_COLUMNS, shown)
        if more := _more(len(shown), part.rows, limit):
            yield more
    every_row = Schedule.objects.order_by("name")
    shown = [_cells(row, now) for row in every_row[:limit]]
    yield ""
    if not shown:
        yield "no schedules"
    else:
        yield "schedules by name:"
        yield from _table_lines(STATUS_COLUMNS, shown)
        if more := _more(len(shown), every_row, limit):
            yield f"{more} (status --all, --name PATTERN, --limit N)"
    yield ""
    yield _beats_line(now)


def format_status(
    now: dt.datetime,
    *,
    every: bool = False,
    name: str | None = None,
    limit: int | None = DEFAULT_LIMIT,
) -> str:
    return "\n".join(status_lines(now, every=every, name=name, limit=limit))


def _as_dict(row: Schedule, now: dt.datetime, part: str | None) -> dict[str, Any]:
    def at(value: dt.datetime | None) -> str | None:
        return None if value is None else value.isoformat()

    try:
        next_fire = next_fire_words(row, now)
    except Exception as exc:  # R21: the row is still written, its problem said
        next_fire = f"cannot show: {type(exc).__name__}: {exc}"
    found: dict[str, Any] = {"part": part} if part is not None else {}
    return found | {
        "name": row.name,
        "task": row.task,
        "schedule": schedule_words(row),
        "enabled": row.enabled,
        "next_fire_at": at(row.next_fire_at),
        "next_fire": next_fire,
        "last_completed_at": at(row.last_completed_at),
        "last_outcome": row.last_outcome,
        "stuck_since": at(row.stuck_since),
        "error": row.error,
        "deleted": row.deleted_at is not None,
        # R36: the pause, its note, whether it paused itself, and the count that did it
        "paused_at": at(row.paused_at),
        "paused_note": row.paused_note,
        "paused_on_failure": bool(row.paused_on_failure),
        "failures_in_a_row": row.failures_in_a_row or 0,
    }


def status_json(
    now: dt.datetime,
    *,
    every: bool = False,
    name: str | None = None,
    limit: int | None = DEFAULT_LIMIT,
) -> Iterator[str]:
    """``status --json``: JSON Lines, each written as it is made. Without ``every`` and
    ``name``, a first line ``{"counts": ..., "counted_to": 10000, "beats": ...}``, then an
    object per schedule that needs a look (its ``"part"``: late, stuck, failing,
    set_aside, paused_on_failure); with them, an object per schedule, in name order, never
    a list of them all."""
    if missing := schema.pending():
        for f in health.waiting_for_migrations(missing, now):
            yield json.dumps(f.as_dict())
        return
    if every or name is not None:
        for row in _matching(name, limit):
            yield json.dumps(_as_dict(row, now, None))
        return
    limit = DEFAULT_LIMIT if limit is None else limit
    parts = attention(now)
    beats = [
        {"hostname": b.hostname, "pid": b.pid, "started_at": b.started_at.isoformat()}
        for b in health.live_boots(now)
    ]
    # a part's count stops at COUNTED + 1 (more than "counted_to"): "counted_to" says where
    yield json.dumps({"counts": counts(now, parts), "counted_to": COUNTED, "beats": beats})
    for part in parts:
        for row in part.rows[:limit]:
            yield json.dumps(_as_dict(row, now, part.key))
