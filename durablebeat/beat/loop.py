"""What a beat loop hook sees of the engine (``engine.Engine``): a small public surface, so
that a hook never reaches into the loop's own state."""

from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from .messages import Claim


@dataclass(frozen=True)
class Refused:
    """Why a publish did not go out. ``outage``: the broker could not be reached (the
    claim is kept and retried, R5); otherwise the message was refused for its own content
    (its slot fails, the rest of its group goes out, R21)."""

    error: str
    outage: bool


class Loop(Protocol):
    """The engine as its hooks use it."""

    @property
    def boot_id(self) -> uuid.UUID: ...

    def try_publish(self, claim: Claim, now: dt.datetime) -> Refused | None:
        """Publish one claim; why it did not go out, or None when it went out."""

    def unpublishable(self, refused: list[tuple[Claim, str]], now: dt.datetime) -> None:
        """R21: fail the runs of claims whose message was refused for its own content."""

    def retry_later(
        self, claim: Claim, give_up_at: dt.datetime, now: dt.datetime, error: str
    ) -> None:
        """Keep a claim whose broker is unreachable, and retry it until ``give_up_at``."""

    def set_aside(self, schedule_id: int, name: str, why: str) -> None:
        """R20, R21: set a row aside with its error; the others keep firing."""


#: work the loop does besides firing while the database answers, each throttled on its own
Hook = Callable[[Loop, dt.datetime], None]
