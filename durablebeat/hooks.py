"""Work the beat loop does besides firing, each throttled on its own (e.g. R15 reclaim)."""

from __future__ import annotations

from .engine import Hook


def default_hooks() -> list[Hook]:
    return []
