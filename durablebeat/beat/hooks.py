"""Work the beat loop does besides firing, each throttled on its own: the one list of them."""

from __future__ import annotations

from .loop import Hook
from .reclaim import OrphanReclaim
from .resend import InDoubtResend
from .retention import RetentionRound


def default_hooks() -> list[Hook]:
    """A fresh set per engine, in the order the loop runs them (after the publish retries):
    the in-doubt resend (R9), then orphan reclaim (R13, R15, R22)."""
    return [InDoubtResend(), OrphanReclaim()]


def after_due_hooks() -> list[Hook]:
    """A fresh set per engine, run after a tick's due work when beat would sleep: the
    retention's pruning (R32)."""
    return [RetentionRound()]
