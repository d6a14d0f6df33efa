"""The Django admin (R19): schedules with their next fire in words, enable / disable / run
now / reset, read-only run history, and a health summary when ``check`` would fail.

Permissions are Django's model permissions: the actions need "change schedule"; the run
history, boots, missed slots and incidents are view-only for everyone.
"""

from __future__ import annotations

import datetime as dt
import logging
from typing import TYPE_CHECKING, Any

from django.contrib import admin, messages
from django.contrib.admin.options import IncorrectLookupParameters
from django.contrib.admin.utils import unquote
from django.contrib.admin.views.main import ChangeList
from django.contrib.admin.widgets import AdminSplitDateTime
from django.core.exceptions import PermissionDenied
from django.db import DatabaseError, DataError, models, transaction
from django.db.models import Count, Max, Min, Q, QuerySet
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.urls import URLPattern, path, reverse
from django.utils import timezone
from django.utils.html import format_html, format_html_join
from django.views.decorators.http import require_POST

from . import admin_timeline, conf
from .beat import publishing
from .core import clock, timing
from .enums import Reason, RunState, Source
from .forms import CODE_OWNED_FIELDS, ScheduleForm, ShownToTheSecondField, apply_edit_rules
from .models import (
    LIMIT_FIELDS,
    MESSAGE_FIELDS,
    POLICY_FIELDS,
    Boot,
    Incident,
    MissedSlots,
    Run,
    Schedule,
    WorkerHeartbeat,
)
from .ops import health, words

logger = logging.getLogger("durablebeat")

if TYPE_CHECKING:
    _AnyAdminBase = admin.ModelAdmin[Any]
else:  # Django's classes are generic for the type checker only
    _AnyAdminBase = admin.ModelAdmin

RECENT_RUNS = 20
_OUTCOME_COLOURS = {
    RunState.SUCCEEDED: "#2e7d32",
    RunState.FAILED: "#c62828",
    RunState.LOST: "#c62828",
    RunState.SKIPPED: "#ef6c00",
    RunState.MISSED: "#ef6c00",
}


def local(value: dt.datetime | None) -> str:
    """An instant in the admin's time zone, with the zone said; in UTC at the calendar's
    edges, where the local time would fall outside it (R21)."""
    if value is None:
        return "-"
    try:
        value = timezone.localtime(value)
    except OverflowError:
        return words.absolute(value)
    return f"{value.year:04d}{value:-%m-%d %H:%M:%S %Z}"


class EdgeSafeSplitDateTime(AdminSplitDateTime):
    """The admin's date and time boxes; an instant that has no local time (the calendar's
    edges, in a zone east or west of UTC) is shown as its UTC value instead of a 500."""

    def decompress(self, value: Any) -> tuple[dt.date | None, dt.time | None]:
        try:
            return super().decompress(value)
        except OverflowError:
            return (value.date(), value.time())


def _instant(value: dt.datetime | None) -> str:
    if value is None:
        return "-"
    return f"{local(value)} ({words.relative(value, clock.now())})"


def _outcome(state: str) -> str:
    if not state:
        return "-"
    colour = _OUTCOME_COLOURS.get(RunState(state), "inherit")
    return format_html('<span style="color:{}">{}</span>', colour, RunState(state).label)


class GuardedAdmin(_AnyAdminBase):
    """What every durablebeat admin page shares: odd query strings and broken settings
    answer a page, never a 500 (R21).

    A lookup value the database refuses (``?state=%00`` on PostgreSQL) or that Python
    cannot compute with (``?next_fire_at__year=99999``) is a bad lookup: Django redirects
    with ``?e=1``. The list's queries run inside the guard (``evaluate``), not later in the
    template. An invalid ``DURABLEBEAT_*`` setting (system checks do not run under
    gunicorn) is an error message naming it, on a page that still shows.
    """

    def get_changelist_instance(self, request: HttpRequest) -> ChangeList:
        try:
            with transaction.atomic():  # a savepoint: a refused query leaves no aborted txn
                changelist = super().get_changelist_instance(request)
                self.evaluate(changelist)
        except (ValueError, OverflowError, DataError) as exc:
            raise IncorrectLookupParameters(exc) from exc
        return changelist

    def evaluate(self, changelist: ChangeList) -> None:
        """Run the list's queries now, inside the guard (the page then reads the cache)."""
        len(changelist.result_list)

    def changelist_view(
        self, request: HttpRequest, extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        _say_invalid_settings(request)
        return super().changelist_view(request, extra_context)

    def change_view(
        self,
        request: HttpRequest,
        object_id: str,
        form_url: str = "",
        extra_context: dict[str, Any] | None = None,
    ) -> HttpResponse:
        if request.method == "GET":
            _say_invalid_settings(request)
        return super().change_view(request, object_id, form_url, extra_context)


def _say_invalid_settings(request: HttpRequest) -> None:
    for name, why in health.invalid_settings().items():
        messages.error(request, f"{name} is invalid, fix it in settings: {why}")


def _late_after() -> dt.timedelta | None:
    """``LATE_AFTER``, or None while it is invalid (the page says which setting)."""
    try:
        return conf.settings.LATE_AFTER
    except conf.InvalidSetting:
        return None


def _next_fire_words(obj: Schedule) -> str:
    try:
        return words.next_fire_words(obj, clock.now())
    except conf.InvalidSetting:  # LATE_AFTER: the page's message names it
        return "(DURABLEBEAT_LATE_AFTER is invalid)"


# --- schedule list filters ------------------------------------------------------------------


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
        late_after = _late_after()
        if late_after is None:
            return queryset  # unfiltered; the page's message names the setting
        late = clock.now() - late_after
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


@admin.register(Schedule)
class ScheduleAdmin(GuardedAdmin):
    form = ScheduleForm
    list_display = (
        "name",
        "task",
        "schedule_in_words",
        "enabled",
        "next_fire",
        "last_completion",
        "outcome",
        "stuck",
    )
    list_filter = (
        "enabled",
        "kind",
        "source",
        "last_outcome",  # "failing": the timeline selects its lanes by these too
        StuckFilter,
        OverdueFilter,
        ProblemFilter,
    )
    search_fields = ("name", "task", "description")
    actions = ("enable", "disable", "run_now", "reset_next_fire")
    formfield_overrides = {
        models.DateTimeField: {"form_class": ShownToTheSecondField, "widget": EdgeSafeSplitDateTime}
    }
    save_on_top = True
    _status_fields = (
        "schedule_in_words",
        "next_fire_detail",
        "next_fire_reason",
        "last_fired",
        "last_completed",
        "last_failed",
        "outcome",
        "stuck_detail",
        "error_detail",
        "source",
        "removed_from_code",
        "created",
        "updated",
    )
    fieldsets = (
        (None, {"fields": ("name", "task", "description", "enabled")}),
        (
            "Timing",
            {
                "fields": (
                    "kind",
                    "every",
                    ("minute", "hour", "day_of_week", "day_of_month", "month_of_year"),
                    "timezone",
                    "clocked_at",
                ),
                "description": "Interval: fill in <b>every</b>. Crontab: the five fields "
                "(Celery's syntax, day_of_week 0 = Sunday) and the time zone. One-off: the "
                "time. A change here makes beat compute the next fire afresh.",
            },
        ),
        ("Next fire", {"fields": ("next_fire_at",)}),
        (
            "Time limits",
            {
                "fields": (LIMIT_FIELDS,),
                "description": "Seconds, sent with every fire (Celery's time_limit and "
                "soft_time_limit). Empty: the task's or the app's own.",
            },
        ),
        (
            "Message",
            {
                "fields": tuple(f for f in MESSAGE_FIELDS if f not in LIMIT_FIELDS),
                "classes": ("collapse",),
            },
        ),
        ("Policy", {"fields": POLICY_FIELDS}),
        ("Status", {"fields": (*_status_fields, "recent_runs")}),
    )

    # --- what it shows ------------------------------------------------------------------

    @admin.display(description="schedule")
    def schedule_in_words(self, obj: Schedule) -> str:
        return words.schedule_words(obj)

    @admin.display(description="next fire", ordering="next_fire_at")
    def next_fire(self, obj: Schedule) -> str:
        said = _next_fire_words(obj)
        if obj.next_fire_at is None or not obj.enabled or obj.error:
            return said
        colour = "#c62828" if said.startswith("overdue") else "inherit"
        return format_html(
            '<span style="color:{}">{}</span><br><small>{}</small>',
            colour,
            said,
            local(obj.next_fire_at),
        )

    @admin.display(description="next fire")
    def next_fire_detail(self, obj: Schedule) -> str:
        if obj.pk is None:
            return "-"
        return format_html("{} ({})", _next_fire_words(obj), local(obj.next_fire_at))

    # Instants on the page read like the list's: "2026-03-02 12:04:00 UTC", and how long ago.
    @admin.display(description="last fired")
    def last_fired(self, obj: Schedule) -> str:
        return _instant(obj.last_fired_at)

    @admin.display(description="last completed")
    def last_completed(self, obj: Schedule) -> str:
        return _instant(obj.last_completed_at)

    @admin.display(description="last failed")
    def last_failed(self, obj: Schedule) -> str:
        return _instant(obj.last_failed_at)

    @admin.display(description="removed from code")
    def removed_from_code(self, obj: Schedule) -> str:
        return _instant(obj.removed_from_code_at)

    @admin.display(description="created")
    def created(self, obj: Schedule) -> str:
        return _instant(obj.created_at)

    @admin.display(description="updated")
    def updated(self, obj: Schedule) -> str:
        return _instant(obj.updated_at)

    @admin.display(description="last completion", ordering="last_completed_at")
    def last_completion(self, obj: Schedule) -> str:
        if obj.last_completed_at is None:
            return "never"
        return format_html(
            "{}<br><small>{}</small>",
            words.relative(obj.last_completed_at, clock.now()),
            local(obj.last_completed_at),
        )

    @admin.display(description="last outcome", ordering="last_outcome")
    def outcome(self, obj: Schedule) -> str:
        return _outcome(obj.last_outcome)

    @admin.display(description="stuck", ordering="stuck_since")
    def stuck(self, obj: Schedule) -> str:
        if obj.stuck_since is None:
            return ""
        return format_html(
            '<span style="color:#ef6c00" title="{}">for {}</span>',
            obj.stuck_reason,
            words.duration_words(clock.now() - obj.stuck_since),
        )

    @admin.display(description="stuck")
    def stuck_detail(self, obj: Schedule) -> str:
        if obj.stuck_since is None:
            return "no"
        return format_html(
            "since {} ({}): {}",
            local(obj.stuck_since),
            words.duration_words(clock.now() - obj.stuck_since),
            obj.stuck_reason,
        )

    @admin.display(description="error")
    def error_detail(self, obj: Schedule) -> str:
        return obj.error or "none"

    @admin.display(description="recent runs")
    def recent_runs(self, obj: Schedule) -> str:
        if obj.pk is None:
            return "-"
        runs = list(obj.runs.select_related("boot").order_by("-slot")[:RECENT_RUNS])
        history = reverse("admin:durablebeat_run_changelist") + f"?schedule__id__exact={obj.pk}"
        if not runs:
            return format_html('No runs yet. <a href="{}">Run history</a>', history)
        rows = format_html_join(
            "",
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            (
                (
                    local(r.slot),
                    Reason(r.reason).label,
                    _outcome(r.state),
                    r.worker or "-",
                    r.detail or r.error[:120] or "",
                )
                for r in runs
            ),
        )
        return format_html(
            "<table><thead><tr><th>slot</th><th>reason</th><th>state</th><th>worker</th>"
            "<th>detail</th></tr></thead><tbody>{}</tbody></table>"
            '<p><a href="{}">All runs of this schedule</a></p>',
            rows,
            history,
        )

    def get_readonly_fields(self, request: HttpRequest, obj: Schedule | None = None) -> Any:
        fields = [*self._status_fields, "recent_runs"]
        if obj is not None and obj.source == Source.CODE:
            # Code is its source of truth: codesync rewrites these at every boot (R6).
            fields.extend(CODE_OWNED_FIELDS)
        return fields

    def get_fieldsets(self, request: HttpRequest, obj: Schedule | None = None) -> Any:
        if obj is None:
            return [fs for fs in self.fieldsets if fs[0] != "Status"]
        if obj.source == Source.CODE:
            note = (
                "Defined in code (beat_schedule): its task, timing and options are edited "
                "there; here you can enable, disable, run now or move its next fire."
            )
            return [(None, {"fields": (), "description": note}), *self.fieldsets]
        return self.fieldsets

    # --- saving -------------------------------------------------------------------------

    def save_model(self, request: HttpRequest, obj: Schedule, form: Any, change: bool) -> None:
        notes = apply_edit_rules(obj, set(form.changed_data), not change, clock.now())
        super().save_model(request, obj, form, change)
        for note in notes:
            self.message_user(request, f"{obj.name}: {note}", messages.INFO)

    # --- actions ------------------------------------------------------------------------

    @admin.action(description="Enable selected schedules", permissions=["change"])
    def enable(self, request: HttpRequest, queryset: QuerySet[Schedule]) -> None:
        now = clock.now()
        # A next fire that passed while disabled is recomputed, not reported as missed.
        queryset.filter(enabled=False, next_fire_at__lt=now).update(
            next_fire_at=None, next_fire_reason=Reason.SCHEDULED
        )
        # check's no_success counts a re-enabled schedule's periods from now.
        queryset.filter(enabled=False).update(enabled_at=now)
        n = queryset.update(enabled=True, error="")
        self._log_action(request, "enable", queryset)
        self.message_user(request, f"{n} schedule(s) enabled.", messages.SUCCESS)

    @admin.action(description="Disable selected schedules", permissions=["change"])
    def disable(self, request: HttpRequest, queryset: QuerySet[Schedule]) -> None:
        n = queryset.update(enabled=False)
        self._log_action(request, "disable", queryset)
        self.message_user(request, f"{n} schedule(s) disabled.", messages.SUCCESS)

    @admin.action(description="Reset next fire (beat computes it afresh)", permissions=["change"])
    def reset_next_fire(self, request: HttpRequest, queryset: QuerySet[Schedule]) -> None:
        n = queryset.update(next_fire_at=None, next_fire_reason=Reason.SCHEDULED, error="")
        self._log_action(request, "reset_next_fire", queryset)
        self.message_user(
            request,
            f"{n} schedule(s) reset: beat sets each next fire on its next look "
            "(interval: now + startup grace; crontab and one-off: the next slot).",
            messages.SUCCESS,
        )

    @admin.action(description="Run selected schedules now", permissions=["change"])
    def run_now(self, request: HttpRequest, queryset: QuerySet[Schedule]) -> None:
        for row in queryset:
            self._run_one(request, row)

    def _run_one(self, request: HttpRequest, row: Schedule) -> None:
        if row.error:
            self.message_user(
                request, f"{row.name} was not run: fix it first ({row.error}).", messages.ERROR
            )
            return
        try:
            claim = publishing.run_now(row)
        except timing.InvalidSchedule as exc:  # stored around the form; nothing was written
            self.message_user(
                request, f"{row.name} was not run: fix it first ({exc}).", messages.ERROR
            )
            return
        except DatabaseError:
            raise  # not a broker problem: Django's error page says it better
        except Exception as exc:  # the broker's errors are many; say which one
            logger.error(
                "run now failed schedule=%s: %s",
                row.name,
                exc,
                extra={"event": "run_now_failed", "schedule": row.name},
            )
            self.message_user(
                request,
                f"{row.name}: the run was recorded but could not be sent to the broker: {exc}",
                messages.ERROR,
            )
            return
        logger.info(
            "run now schedule=%s task_id=%s user=%s",
            row.name,
            claim.task_id,
            request.user,
            extra={"event": "run_now", "schedule": row.name, "task_id": claim.task_id},
        )
        self.message_user(
            request, f"{row.name}: sent now (task id {claim.task_id}).", messages.SUCCESS
        )

    def _log_action(self, request: HttpRequest, action: str, queryset: QuerySet[Schedule]) -> None:
        names = list(queryset.values_list("name", flat=True))
        logger.info(
            "admin %s by %s: %s",
            action,
            request.user,
            ", ".join(names),
            extra={"event": f"admin_{action}", "schedules": names},
        )

    # --- pages --------------------------------------------------------------------------

    def get_urls(self) -> list[URLPattern]:
        run_now = self.admin_site.admin_view(self.run_now_view)
        timeline = self.admin_site.admin_view(self.timeline_view)
        return [
            path("timeline/", timeline, name="durablebeat_schedule_timeline"),
            path("<path:object_id>/run-now/", run_now, name="durablebeat_schedule_run_now"),
            *super().get_urls(),
        ]

    def timeline_view(self, request: HttpRequest) -> HttpResponse:
        return admin_timeline.timeline_view(self, request)

    def run_now_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        return require_POST(self._run_now_view)(request, object_id)

    def _run_now_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        # Permission first: a 404 for an unknown id would tell anyone which ids exist.
        if not self.has_change_permission(request):
            raise PermissionDenied
        row = self.get_object(request, unquote(object_id))  # None for "abc" too, not a 500
        if row is None:
            raise Http404(f"no schedule with id {object_id!r}")
        if not self.has_change_permission(request, row):
            raise PermissionDenied
        self._run_one(request, row)
        return HttpResponseRedirect(reverse("admin:durablebeat_schedule_change", args=[row.pk]))

    def changelist_view(
        self, request: HttpRequest, extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        extra_context = {**(extra_context or {}), "health": health_context(clock.now())}
        return super().changelist_view(request, extra_context)

    def change_view(
        self,
        request: HttpRequest,
        object_id: str,
        form_url: str = "",
        extra_context: dict[str, Any] | None = None,
    ) -> HttpResponse:
        history = reverse("admin:durablebeat_run_changelist") + f"?schedule__id__exact={object_id}"
        extra_context = {**(extra_context or {}), "run_history_url": history}
        row = self.get_object(request, unquote(object_id)) if request.method == "GET" else None
        if row is not None:
            extra_context["timeline"] = admin_timeline.detail(request, row)
        return super().change_view(request, object_id, form_url, extra_context)


def health_context(now: dt.datetime) -> dict[str, Any]:
    """The changelist's health summary: shown only when ``check`` would fail."""
    found = health.check(now)
    return {
        "findings": found,
        "critical": any(f.severity == health.Severity.CRITICAL for f in found),
    }


# --- history: read-only -------------------------------------------------------------------


class ReadOnlyAdmin(GuardedAdmin):
    """View permission shows it; nobody adds, edits or deletes history here.

    Every datetime field ``x`` is shown as ``x_shown``, through ``local``: Django's own
    display converts to the admin's time zone and raises at the calendar's edges (R21).
    """

    def __init__(self, model: Any, admin_site: Any) -> None:
        super().__init__(model, admin_site)
        self._instants = {
            f.name: f.verbose_name
            for f in model._meta.fields
            if isinstance(f, models.DateTimeField)
        }
        for name, label in self._instants.items():
            shown = admin.display(description=label, ordering=name)(
                lambda obj, name=name: local(getattr(obj, name))
            )
            setattr(self, f"{name}_shown", shown)

    def get_fields(self, request: HttpRequest, obj: Any = None) -> Any:
        fields = super().get_fields(request, obj)
        return [f"{f}_shown" if f in self._instants else f for f in fields]

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


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
        ("schedule", admin.RelatedOnlyFieldListFilter),
        "state",
        "reason",
        ("boot", admin.RelatedOnlyFieldListFilter),
        "soft_time_limit_exceeded",
    )
    list_select_related = ("schedule", "boot")
    search_fields = ("task_id", "schedule__name", "worker", "detail")
    date_hierarchy = "slot"

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
        return _outcome(obj.state)

    @admin.display(description="boot", ordering="boot__started_at")
    def boot_short(self, obj: Run) -> str:
        if obj.boot is None:
            return "manual" if obj.reason == Reason.MANUAL else "-"
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


@admin.register(Boot)
class BootAdmin(ReadOnlyAdmin):
    list_display = (
        "started",
        "hostname",
        "pid",
        "heartbeat",
        "stopped",
        "alive",
        "fires",
        "version",
    )
    search_fields = ("hostname", "id")

    def get_queryset(self, request: HttpRequest) -> QuerySet[Boot]:
        real = Q(run__task_id__isnull=False) & ~Q(
            run__state__in=[RunState.SKIPPED, RunState.MISSED]
        )
        queryset: QuerySet[Boot] = super().get_queryset(request)
        return queryset.annotate(n_fires=Count("run", filter=real))

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
            fresh = clock.now() - conf.settings.HEARTBEAT_STALE_AFTER
        except conf.InvalidSetting:  # the page's message names it
            return None
        return obj.stopped_at is None and obj.heartbeat_at >= fresh

    @admin.display(description="fires", ordering="n_fires")
    def fires(self, obj: Any) -> int:
        return int(obj.n_fires)


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


@admin.register(Incident)
class IncidentAdmin(ReadOnlyAdmin):
    list_display = ("at_shown", "kind", "count", "detail")
    list_filter = ("kind",)


@admin.register(WorkerHeartbeat)
class WorkerHeartbeatAdmin(ReadOnlyAdmin):
    list_display = ("worker", "pid", "seen_at_shown")
