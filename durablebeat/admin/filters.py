"""The schedule list's own filters (R19): stuck, overdue, bad row."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.db.models import Q, QuerySet
from django.http import HttpRequest

from ..core import clock
from ..models import Schedule
from .base import late_after


class StuckFilter(admin.SimpleListFilter):
    title = "stuck"
    parameter_name = "stuck"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [("yes", "Stuck (every fire skipped)"), ("no", "Not stuck")]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Schedule]) -> QuerySet[Schedule]:
        if self.value() == "yes":
            return queryset.filter(stuck_since__isnull=False)
        if self.value() == "no":
            return queryset.filter(stuck_since__isnull=True)
        return queryset


class OverdueFilter(admin.SimpleListFilter):
    title = "overdue"
    parameter_name = "overdue"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [("yes", "Overdue"), ("no", "On time")]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Schedule]) -> QuerySet[Schedule]:
        # As the list says it: "due now" within LATE_AFTER, "overdue" past it.
        bound = late_after()
        if bound is None:
            return queryset  # unfiltered; the page's message names the setting
        late = clock.now() - bound
        overdue = Q(enabled=True, error="", next_fire_at__lt=late)
        if self.value() == "yes":
            return queryset.filter(overdue)
        if self.value() == "no":
            return queryset.exclude(overdue)
        return queryset


class ProblemFilter(admin.SimpleListFilter):
    title = "bad row"
    parameter_name = "invalid"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [("yes", "Beat cannot use it")]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Schedule]) -> QuerySet[Schedule]:
        if self.value() == "yes":
            return queryset.exclude(error="")
        return queryset


# --- schedules ------------------------------------------------------------------------------
