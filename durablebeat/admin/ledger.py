"""The ledger, read-only (R11, R17, R19): runs, boots, missed slots, incidents and worker
liveness rows; view permission shows them, nobody edits history here."""

from __future__ import annotations

import datetime as dt
import logging
from typing import Any

from django.contrib import admin, messages
from django.contrib.admin.views.main import ChangeList
from django.core.paginator import Paginator
from django.db import DatabaseError, connections
from django.db.models import Exists, Max, Min, OuterRef, Q, QuerySet
from django.http import HttpRequest
from django.urls import reverse
from django.utils import timezone
from django.utils.functional import cached_property
from django.utils.html import format_html

from .. import conf, words
from ..beat import boots
from ..core import clock
from ..enums import Reason, RunState
from ..models import Boot, Incident, MissedSlots, Run, WorkerHeartbeat
from ..ops import backfill
from .base import ReadOnlyAdmin, local, outcome_html

logger = logging.getLogger("durablebeat")


class _SlotPeriods(QuerySet[Run]):
    """The runs list's queryset: the date drill-down's years, months and days (Django's
    ``datetimes(slot, kind)``, a ``DISTINCT`` over every run of the list, or of the year
    or month it shows: a ledger of one year is read whole for its months) are found by one
    probe of the slot index per period instead: the first slot, then the first slot of
    each later period (issue 31)."""

    def datetimes(self, field_name: str, kind: Any, *args: Any, **kwargs: Any) -> Any:
        if field_name != "slot" or kind not in _PERIOD or args or kwargs:
            return super().datetimes(field_name, kind, *args, **kwargs)
        starts: list[dt.datetime] = []
        after = None
        while True:
            rows = self if after is None else self.filter(slot__gte=after)
            first = rows.aggregate(first=Min("slot"))["first"]
            if first is None:
                return starts
            start = _PERIOD[kind](timezone.localtime(first))
            starts.append(start)
            try:
                after = timezone.make_aware(_next_period(start.replace(tzinfo=None, fold=0), kind))
            except (OverflowError, ValueError):  # the calendar's last period
                return starts


#: the start of the period a local instant is in, per ``datetimes`` kind
_PERIOD = {
    "year": lambda t: t.replace(month=1, day=1, hour=0, minute=0, second=0, microsecond=0),
    "month": lambda t: t.replace(day=1, hour=0, minute=0, second=0, microsecond=0),
    "day": lambda t: t.replace(hour=0, minute=0, second=0, microsecond=0),
}


def _next_period(start: dt.datetime, kind: str) -> dt.datetime:
    """The start of the period after the one starting at ``start`` (naive, local)."""
    if kind == "day":
        return start + dt.timedelta(days=1)
    if kind == "month" and start.month < 12:
        return start.replace(month=start.month + 1)
    return start.replace(year=start.year + 1, month=1)


#: a list filter offers its choices while they are this few; past it, a list of links
#: nobody scans (the schedule's own page links to its runs, the search finds it by name)
FILTER_CHOICES = 200


class WithRunsFilter(admin.RelatedOnlyFieldListFilter):
    """Django's "only those with runs", asked per schedule (or boot) of the run index
    (``EXISTS``) instead of reading every run's key: the same choices, at a cost that does
    not grow with the ledger (issue 31). With more than ``FILTER_CHOICES`` of them, only
    the one chosen is shown (a link to a schedule's runs still filters)."""

    def field_choices(self, field: Any, request: HttpRequest, model_admin: Any) -> Any:
        related = field.related_model._default_manager
        chosen: Any = self.lookup_val
        if isinstance(chosen, str):  # Django < 5.0: one value, not a list
            chosen = [chosen]
        if related.count() > FILTER_CHOICES:
            rows = related.filter(pk__in=chosen) if chosen else related.none()
            return [(row.pk, str(row)) for row in rows]
        has_runs = Exists(Run.objects.filter(**{field.name: OuterRef("pk")}))
        ordering = self.field_admin_ordering(field, request, model_admin)
        return field.get_choices(
            include_blank=False, limit_choices_to=Q(has_runs), ordering=ordering
        )

    def has_output(self) -> bool:
        return super().has_output() or bool(self.lookup_val)


class LedgerPaginator(Paginator):  # type: ignore[type-arg]
    """The unfiltered list of a large ledger says its size from PostgreSQL's statistics
    (``pg_class.reltuples``, kept by (auto)analyze) instead of counting every row, as
    ``COUNT(*)`` must: a count that takes seconds at millions of runs (issue 31). Exact
    below ``ESTIMATE_FROM`` rows, filtered, and on other databases."""

    ESTIMATE_FROM = 100_000

    @cached_property
    def count(self) -> int:
        estimate = self.large_estimate()
        return int(super().count) if estimate is None else estimate

    def large_estimate(self) -> int | None:
        """The database's estimate of the unfiltered list's size when it has one (PostgreSQL)
        and it is ``ESTIMATE_FROM`` rows or more; else None."""
        query = getattr(self.object_list, "query", None)
        if query is not None and not query.where:
            estimate = _estimated_rows(self.object_list)
            if estimate is not None and estimate >= self.ESTIMATE_FROM:
                return estimate
        return None


def _estimated_rows(queryset: Any) -> int | None:
    connection = connections[queryset.db]
    if connection.vendor != "postgresql":
        return None
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT reltuples FROM pg_class WHERE oid = %s::regclass",
            [queryset.model._meta.db_table],
        )
        row = cursor.fetchone()
    return int(row[0]) if row and row[0] >= 0 else None


@admin.register(Run)
class RunAdmin(ReadOnlyAdmin):
    list_display = (
        "slot_at",
        "schedule_link",
        "reason",
        "state_coloured",
        "boot_short",
        "worker",
        "claimed",
        "took",
        "note",
    )
    list_filter = (
        ("schedule", WithRunsFilter),
        "state",
        "reason",
        ("boot", WithRunsFilter),
        "soft_time_limit_exceeded",
    )
    list_select_related = ("schedule", "boot")
    search_fields = ("task_id", "schedule__name", "worker", "detail")
    date_hierarchy = "slot"
    # issue 31: the page costs the same with a year of runs as with none; "N runs" of an
    # unfiltered list is PostgreSQL's estimate, and no second count of all runs is made
    paginator = LedgerPaginator
    show_full_result_count = False

    def get_queryset(self, request: HttpRequest) -> QuerySet[Run]:
        queryset = super().get_queryset(request)
        return _SlotPeriods(queryset.model, queryset.query, queryset.db)

    def evaluate(self, changelist: ChangeList) -> None:
        """Django's date drill-down raises at the calendar's edges: for ``slot__year=9999``
        (the year after it does not exist: a bad lookup, ``GuardedAdmin``) and for slots
        with no local time, which hides the drill-down."""
        super().evaluate(changelist)
        edges = changelist.queryset.aggregate(first=Min("slot"), last=Max("slot"))
        try:
            for value in edges.values():
                if value is not None:
                    timezone.localtime(value)
        except OverflowError:
            changelist.date_hierarchy = None

    @admin.display(description="slot", ordering="slot")
    def slot_at(self, obj: Run) -> str:
        return local(obj.slot)

    @admin.display(description="schedule", ordering="schedule__name")
    def schedule_link(self, obj: Run) -> str:
        url = reverse("admin:durablebeat_schedule_change", args=[obj.schedule_id])
        return format_html('<a href="{}">{}</a>', url, obj.schedule.name)

    @admin.display(description="state", ordering="state")
    def state_coloured(self, obj: Run) -> str:
        return outcome_html(obj.state)

    @admin.display(description="boot", ordering="boot__started_at")
    def boot_short(self, obj: Run) -> str:
        if obj.boot is None:
            return obj.reason if obj.reason in (Reason.MANUAL, Reason.BACKFILL) else "-"
        return format_html('<span title="{}">{}</span>', obj.boot, str(obj.boot_id)[:8])

    @admin.display(description="claimed", ordering="claimed_at")
    def claimed(self, obj: Run) -> str:
        return local(obj.claimed_at)

    @admin.display(description="took")
    def took(self, obj: Run) -> str:
        if obj.started_at and obj.finished_at:
            return words.duration_words(obj.finished_at - obj.started_at)
        return ""

    @admin.display(description="detail")
    def note(self, obj: Run) -> str:
        last_error_line = obj.error.strip().splitlines()[-1] if obj.error.strip() else ""
        text = obj.detail or last_error_line
        if obj.soft_time_limit_exceeded:
            text = f"soft time limit exceeded; {text}" if text else "soft time limit exceeded"
        return text[:160]


#: a boot's page counts its fires up to this many
FIRES_COUNTED = 1000


@admin.register(Boot)
class BootAdmin(ReadOnlyAdmin):
    list_display = (
        "started",
        "hostname",
        "pid",
        "heartbeat",
        "stopped",
        "alive",
        "clock_offset",
        "runs",
        "version",
    )
    search_fields = ("hostname", "id")
    #: the boot's page counts its fires; the list links to them and counts nothing, so it
    #: reads the boots alone whatever the ledger holds (issue 31: 100 boots' counts read
    #: 100,000 runs at 10 million, 3x the page of an empty ledger)
    readonly_fields = ("fires",)

    @admin.display(description="started", ordering="started_at")
    def started(self, obj: Boot) -> str:
        return local(obj.started_at)

    @admin.display(description="last heartbeat", ordering="heartbeat_at")
    def heartbeat(self, obj: Boot) -> str:
        return words.relative(obj.heartbeat_at, clock.now())

    @admin.display(description="stopped", ordering="stopped_at")
    def stopped(self, obj: Boot) -> str:
        return local(obj.stopped_at) if obj.stopped_at else ""

    @admin.display(description="alive", boolean=True)
    def alive(self, obj: Boot) -> bool | None:
        try:
            return boots.is_alive(obj, clock.now())
        except conf.InvalidSetting:  # the page's message names it
            return None

    @admin.display(description="clock offset", ordering="clock_offset_seconds")
    def clock_offset(self, obj: Boot) -> str:
        """R26: the database's clock minus the host's, as the boot last measured it."""
        return words.offset_words(obj.clock_offset_seconds)

    @admin.display(description="runs")
    def runs(self, obj: Boot) -> str:
        """The runs list of this boot's runs (its fires, skips and misses)."""
        url = reverse("admin:durablebeat_run_changelist")
        return format_html('<a href="{}?boot__id__exact={}">runs</a>', url, obj.pk)

    @admin.display(description="fires")
    def fires(self, obj: Boot) -> str:
        """The messages the boot sent, counted to ``FIRES_COUNTED`` at most: a bounded range
        of the ``boot_id`` index, whatever the ledger holds (issue 31; a count of every
        boot's runs grew to seconds at 10 million)."""
        sent = Run.objects.filter(boot=obj, task_id__isnull=False).exclude(
            state__in=[RunState.SKIPPED, RunState.MISSED]
        )
        # unordered: the runs' newest-first would walk the slot index past every other boot's
        n = sent.order_by()[: FIRES_COUNTED + 1].count()
        return f"{FIRES_COUNTED:,}+" if n > FIRES_COUNTED else f"{n:,}"


@admin.register(MissedSlots)
class MissedSlotsAdmin(ReadOnlyAdmin):
    list_display = (
        "recorded_at_shown",
        "schedule",
        "count",
        "first_slot_shown",
        "last_slot_shown",
        "reason",
    )
    list_filter = (("schedule", admin.RelatedOnlyFieldListFilter),)
    list_select_related = ("schedule",)
    actions = ("backfill_ranges",)

    def has_backfill_permission(self, request: HttpRequest) -> bool:
        """Firing a schedule's task is what changing schedules allows ("run now")."""
        return request.user.has_perm("durablebeat.change_schedule")

    @admin.action(
        description="Backfill: fire each slot of the selected ranges once", permissions=["backfill"]
    )
    def backfill_ranges(self, request: HttpRequest, queryset: QuerySet[MissedSlots]) -> None:
        """R27: ``ops.backfill`` per range; a slot that has a run is left alone and said."""
        now = clock.now()
        for missed in queryset.select_related("schedule").order_by("first_slot"):
            name = missed.schedule.name
            try:
                done = backfill.backfill(name, missed.first_slot, missed.last_slot, now)
            except backfill.BackfillRefused as exc:
                self.message_user(request, f"not backfilled: {exc}", messages.ERROR)
                continue
            except DatabaseError:
                raise
            except Exception as exc:  # the broker's errors are many; say which one
                self.message_user(
                    request,
                    f"{name}: backfill stopped, the broker refused a message: {exc}; "
                    "the slots sent so far are kept, run it again for the rest",
                    messages.ERROR,
                )
                continue
            logger.info(
                "backfill schedule=%s fired=%d left_alone=%d user=%s",
                name,
                len(done.fired),
                len(done.left_alone),
                request.user,
                extra={"event": "backfill", "schedule": name, "count": len(done.fired)},
            )
            said = "; ".join(done.lines()[:1] + _left(done))
            self.message_user(request, f"Backfill of {said}", messages.SUCCESS)


def _left(done: backfill.Backfill) -> list[str]:
    """The slots left alone, at most five of them named."""
    said = [f"{slot:%Y-%m-%d %H:%M} UTC ({why})" for slot, why in done.left_alone[:5]]
    if len(done.left_alone) > 5:
        said.append(f"and {len(done.left_alone) - 5} more")
    return [f"left alone: {', '.join(said)}"] if said else []


@admin.register(Incident)
class IncidentAdmin(ReadOnlyAdmin):
    list_display = ("at_shown", "kind", "count", "detail")
    list_filter = ("kind",)


@admin.register(WorkerHeartbeat)
class WorkerHeartbeatAdmin(ReadOnlyAdmin):
    list_display = ("worker", "pid", "seen_at_shown", "clock_offset", "queues_shown")

    @admin.display(description="clock offset", ordering="clock_offset_seconds")
    def clock_offset(self, obj: WorkerHeartbeat) -> str:
        """R26: the database's clock minus the worker host's, as last measured."""
        return words.offset_words(obj.clock_offset_seconds)

    @admin.display(description="queues")
    def queues_shown(self, obj: WorkerHeartbeat) -> str:
        """The queues it consumes (check's unconsumed_queue); a release before 0020 says
        none."""
        if obj.queues is None:
            return "not recorded"
        return ", ".join(obj.queues.splitlines())
