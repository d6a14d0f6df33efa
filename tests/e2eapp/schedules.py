"""A custom schedule class for the e2e tests (R25): what a project's own BaseSchedule looks
like to a real ``celery beat``."""

from __future__ import annotations

import datetime as dt

from celery.schedules import BaseSchedule


class EveryNSeconds(BaseSchedule):  # type: ignore[misc]  # celery is untyped
    """Due at every multiple of ``n`` seconds since the epoch (UTC)."""

    def __init__(self, n: int) -> None:
        super().__init__()
        self.n = n

    def _next(self, after: dt.datetime) -> dt.datetime:
        seconds = int(after.timestamp()) // self.n * self.n + self.n
        return dt.datetime.fromtimestamp(seconds, dt.UTC)

    def remaining_estimate(self, last_run_at: dt.datetime) -> dt.timedelta:
        now: dt.datetime = self.now()
        return self._next(last_run_at) - now

    def is_due(self, last_run_at: dt.datetime) -> tuple[bool, float]:
        rem = self.remaining_estimate(last_run_at).total_seconds()
        if rem <= 0:
            return True, self.remaining_estimate(self.now()).total_seconds()
        return False, rem

    def __repr__(self) -> str:
        return f"<every {self.n} s since the epoch>"
