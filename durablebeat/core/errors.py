"""The one error of the pure math: a schedule refused where it enters (R20)."""

from __future__ import annotations


class InvalidSchedule(ValueError):
    """A schedule refused where it enters, naming the field at fault (R20)."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(field, message)  # both in args, so the exception pickles
        self.field = field
        self.message = message

    def __str__(self) -> str:
        return f"{self.field}: {self.message}"
