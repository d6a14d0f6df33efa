"""Work the beat loop does besides firing, each throttled on its own."""

from __future__ import annotations

from ..worker.reclaim import OrphanReclaim
from .engine import Hook


def default_hooks() -> list[Hook]:
    """A fresh set per engine: orphan reclaim (R13, R15) is part of the loop itself."""
    return [OrphanReclaim()]
