"""The admin's timeline, what a lane holds: a slot's mark, a dense lane's buckets, missed-slot
ranges, a stuck band, and the boots across all lanes; values made from rows, each placed
on the page and able to say itself in words (the table, the labels)."""

from __future__ import annotations

import datetime as dt
import uuid
from dataclasses import dataclass, field
from urllib.parse import urlencode

from ..words import absolute, relative
from .timeline import STYLES, Style, worst


@dataclass(frozen=True)
class Mark:
    """One slot's run."""

    run_id: int
    slot: dt.datetime
    kind: str
    said: str
    detail: str
    boot_id: uuid.UUID | None
    x: float

    @property
    def style(self) -> Style:
        return STYLES[self.kind]

    @property
    def when(self) -> str:
        return absolute(self.slot)

    @property
    def label(self) -> str:
        note = f": {self.detail}" if self.detail else ""
        return f"{self.when}: {self.style.label} ({self.said}){note}"


@dataclass(frozen=True)
class Bucket:
    """The slots of a dense lane in one unit of time, counted by kind."""

    start: dt.datetime
    end: dt.datetime
    counts: dict[str, int]
    x: float
    width: float
    height: float

    @property
    def total(self) -> int:
        return sum(self.counts.values())

    @property
    def kind(self) -> str:
        return worst(self.counts)

    @property
    def style(self) -> Style:
        return STYLES[self.kind]

    @property
    def said(self) -> str:
        return ", ".join(f"{self.counts[k]} {STYLES[k].label}" for k in STYLES if k in self.counts)

    @property
    def when(self) -> str:
        return f"{absolute(self.start)} to {absolute(self.end)}"

    @property
    def label(self) -> str:
        return f"{self.when}: {self.total} slots: {self.said}"

    @property
    def top(self) -> float:
        """The bar's top in its lane (bars stand on the lane's bottom)."""
        return round(31 - self.height, 1)

    @property
    def middle(self) -> float:
        return round(self.x + self.width / 2, 1)

    @property
    def query(self) -> str:
        """The run list's lookups for this bucket's slots."""
        return urlencode({"slot__gte": self.start.isoformat(), "slot__lt": self.end.isoformat()})


@dataclass(frozen=True)
class MissedRange:
    """A ``MissedSlots`` row: crontab slots that passed while no beat ran."""

    id: int
    first: dt.datetime
    last: dt.datetime
    count: int
    reason: str
    x: float
    width: float

    @property
    def when(self) -> str:
        return f"{absolute(self.first)} to {absolute(self.last)}"

    @property
    def label(self) -> str:
        return f"{self.count} slots missed while no beat ran, {self.when}: {self.reason}"


@dataclass(frozen=True)
class Band:
    """Stuck since ``since``: every fire skipped behind a run that does not end."""

    since: dt.datetime
    reason: str
    x: float
    width: float

    @property
    def when(self) -> str:
        return absolute(self.since)

    @property
    def label(self) -> str:
        return f"stuck since {self.when}: {self.reason}"


@dataclass
class Lane:
    schedule_id: int
    name: str
    enabled: bool
    error: str
    y: float
    #: the schedule's last fire and the window's end, for a lane with nothing in it
    last_fired: dt.datetime | None = None
    until: dt.datetime | None = None
    total: int = 0
    marks: list[Mark] = field(default_factory=list)
    buckets: list[Bucket] = field(default_factory=list)
    missed: list[MissedRange] = field(default_factory=list)
    stuck: Band | None = None
    unit: str = ""

    @property
    def note(self) -> str:
        """What the lane is besides its marks: disabled, a bad row, aggregated."""
        notes = []
        if not self.enabled:
            notes.append("disabled")
        if self.error:
            notes.append("bad row: not firing")
        if self.buckets:
            notes.append(
                f"aggregated: {self.total:,} slots in {len(self.buckets)} buckets of {self.unit}"
            )
        elif not self.total and not self.missed:
            notes.append(f"no slot in this window; {self.last_fire_words}")
        return "; ".join(notes)

    @property
    def last_fire_words(self) -> str:
        """ "never fired" or "last fired 12 d ago" (before the window's end): a starved
        schedule is seen as one."""
        if self.last_fired is None:
            return "never fired"
        if self.until is None or self.last_fired >= self.until:
            return "fired after this window"
        return f"last fired {relative(self.last_fired, self.until)}"


@dataclass(frozen=True)
class BootMark:
    """A beat boot (a deploy): a vertical line at its start."""

    id: uuid.UUID
    hostname: str
    pid: int
    started_at: dt.datetime
    x: float

    @property
    def time(self) -> str:
        return f"{self.started_at:%H:%M}"

    @property
    def caption(self) -> str:
        """The label by its line: the host, cut at 18 characters, and the time."""
        host = self.hostname if len(self.hostname) <= 18 else self.hostname[:17] + "…"
        return f"{host} {self.time}"

    @property
    def when(self) -> str:
        return absolute(self.started_at)

    @property
    def label(self) -> str:
        return f"beat started on {self.hostname} (pid {self.pid}) at {self.when}"
