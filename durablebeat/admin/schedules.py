"""The schedule admin (R19, R20): the list with next fire in words, enable / disable / run
now / reset, the form's edit rules, recent runs, and a health summary when ``check`` would
fail; the timeline's URL."""

from __future__ import annotations

import datetime as dt
import logging
from typing import Any

from django.contrib import admin, messages
from django.contrib.admin.utils import unquote
from django.core.exceptions import PermissionDenied
from django.db import DatabaseError, models
from django.db.models import Case, F, Q, QuerySet, TextField, Value, When
from django.db.models.functions import Concat
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.urls import URLPattern, path, reverse
from django.utils.functional import cached_property
from django.utils.html import escape, format_html, format_html_join
from django.views.decorators.http import require_POST

from .. import conf, words
from ..beat import entry_options, live, publishing
from ..core import clock, pause, timing
from ..enums import Reason, Source
from ..forms import CODE_OWNED_FIELDS, ScheduleForm, ShownToTheSecondField
from ..models import LIMIT_FIELDS, MESSAGE_FIELDS, POLICY_FIELDS, Schedule, edit_rules
from ..ops import findings, health
from . import timeline
from .base import (
    RECENT_RUNS,
    EdgeSafeSplitDateTime,
    GuardedAdmin,
    instant,
    local,
    next_fire_cell,
    outcome_html,
)
from .filters import OverdueFilter, ProblemFilter, StuckFilter
from .ledger import LedgerPaginator

logger = logging.getLogger("durablebeat")


class SchedulePaginator(LedgerPaginator):
    """The schedule list's count (R33): a large table's size from the database's statistics
    where it keeps one (``LedgerPaginator.large_estimate``, PostgreSQL); every other list,
    filtered or not and on every database, counted up to ``findings.COUNTED`` rows (a
    ``COUNT`` over a ``LIMIT``), so that neither a million rows on MariaDB, MySQL or SQLite
    nor a filter matching most of them is counted row by row on every page. Past
    ``COUNTED`` the list says "10000" and pages to there; a narrower filter or search finds
    the rest."""

    @cached_property
    def count(self) -> int:
        estimate = self.large_estimate()
        if estimate is not None:
            return estimate
        if getattr(self.object_list, "query", None) is None:
            return int(super(LedgerPaginator, self).count)  # a list, not a query
        return min(findings.counted(self.object_list), findings.COUNTED)


@admin.register(Schedule)
class ScheduleAdmin(GuardedAdmin):
    form = ScheduleForm
    list_display = (
        "name",
        "task",
        "schedule_in_words",
        "enabled",
        "pause",
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
    # R33: the search an operator makes to find a customer's schedule, by the start of its
    # name ("digest-42"), read through an index (PostgreSQL: durablebeat_name_upper_idx,
    # migration 0021). A substring of the name, the task or the description matched every
    # row of a million (no B-tree serves "%...%": 14 s).
    search_fields = ("^name",)
    actions = ("enable", "disable", "run_now", "reset_next_fire")
    formfield_overrides = {
        models.DateTimeField: {"form_class": ShownToTheSecondField, "widget": EdgeSafeSplitDateTime}
    }
    save_on_top = True
    # At 100,000 schedules a second count(*) of the whole table per list load is waste,
    # and the paginator counts no more than it must (R33, ``SchedulePaginator``).
    show_full_result_count = False
    paginator = SchedulePaginator
    _status_fields = (
        "schedule_in_words",
        "next_fire_detail",
        "next_fire_reason",
        "last_fired",
        "last_completed",
        "last_failed",
        "outcome",
        "stuck_detail",
        "pause_detail",
        "kept_slot",
        "error_detail",
        "source",
        "removed_from_code",
        "created",
        "updated",
    )
    fieldsets = (
        (None, {"fields": ("name", "task", "description", "enabled", "paused_note")}),
        (
            "Timing",
            {
                "fields": (
                    "kind",
                    "every",
                    ("minute", "hour", "day_of_week", "day_of_month", "month_of_year"),
                    "relative",
                    "timezone",
                    "clocked_at",
                    ("solar_event", "latitude", "longitude"),
                    "custom_schedule",
                ),
                "description": "Interval: fill in <b>every</b> (<b>relative</b>: each fire "
                "rounded down to its unit in the time zone, as Celery's relative=True). "
                "Crontab: the five fields (Celery's syntax, day_of_week 0 = Sunday) and the "
                "time zone. One-off: the time. Solar: the sun event, latitude and longitude. "
                "Custom: a schedule object in code, shown here, edited there. A change here "
                "makes beat compute the next fire afresh.",
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
        said = next_fire_cell(obj)
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
        said = format_html("{} ({})", next_fire_cell(obj), local(obj.next_fire_at))
        slot = obj.jittered_slot()
        if slot is None or obj.next_fire_at is None:
            return said
        return format_html(  # R35: the instant is the slot's, moved later by its jitter
            "{}: slot {}, sent {} after it (jitter)",
            said,
            local(slot),
            words.duration_words(obj.next_fire_at - slot),
        )

    # Instants on the page read like the list's: "2026-03-02 12:04:00 UTC", and how long ago.
    @admin.display(description="last fired")
    def last_fired(self, obj: Schedule) -> str:
        return instant(obj.last_fired_at)

    @admin.display(description="last completed")
    def last_completed(self, obj: Schedule) -> str:
        return instant(obj.last_completed_at)

    @admin.display(description="last failed")
    def last_failed(self, obj: Schedule) -> str:
        return instant(obj.last_failed_at)

    @admin.display(description="removed from code")
    def removed_from_code(self, obj: Schedule) -> str:
        return instant(obj.removed_from_code_at)

    @admin.display(description="created")
    def created(self, obj: Schedule) -> str:
        return instant(obj.created_at)

    @admin.display(description="updated")
    def updated(self, obj: Schedule) -> str:
        return instant(obj.updated_at)

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
        return outcome_html(obj.last_outcome)

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

    @admin.display(description="paused", ordering="paused_at")
    def pause(self, obj: Schedule) -> str:
        """R36: the pause and its note; red when the schedule paused itself."""
        said = words.pause_words(obj, clock.now())
        if not obj.paused_on_failure:
            return said
        return format_html('<span style="color:#c62828">{}</span>', said)

    @admin.display(description="pause")
    def pause_detail(self, obj: Schedule) -> str:
        """R36: the pause, and the count of failures in a row against its bound."""
        said = words.pause_words(obj, clock.now()) or "not paused"
        if obj.paused_on_failure:
            said += " (it paused itself: check reports it until it is resumed)"
        limit = pause.bound(obj.pause_after_failures, conf.settings.PAUSE_AFTER_FAILURES)
        if limit is not None:
            said += f"; failures in a row: {obj.failures_in_a_row or 0} of {limit}"
        return said

    @admin.display(description="slot kept")
    def kept_slot(self, obj: Schedule) -> str:
        """R34, ``overlap=buffer_one``: the slot kept behind the run in flight."""
        if obj.buffered_slot is None:
            return "none"
        return format_html("{}: sent when the run in flight ends", local(obj.buffered_slot))

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
                    outcome_html(r.state),
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
        fields = [*self._status_fields, "recent_runs", "custom_schedule"]
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
            if live.holds_code_values(obj.args) or live.holds_code_values(obj.kwargs):
                note += (
                    f" Its args/kwargs hold values only its code has (R25): "
                    f"{live.COMPUTED} marks a value computed at send time by the beat, "
                    f"{live.PYTHON} a value JSON cannot hold, shown as its repr; every fire "
                    "sends the real values."
                )
            entry = _entry_in_code(obj.name)
            if links := entry_options.callbacks_shown(entry):
                note += (
                    " Every publish passes its entry's callbacks on, as Celery's beat does "
                    f"(R25): {escape('; '.join(links))}."
                )
            if superseded := entry_options.superseded_options(entry):
                note += (
                    " Celery publish options its entry gives, superseded by beat's own "
                    f"publish (R5, R25): {escape('; '.join(superseded))}."  # shown unescaped
                )
            return [(None, {"fields": (), "description": note}), *self.fieldsets]
        return self.fieldsets

    # --- saving -------------------------------------------------------------------------

    def save_model(self, request: HttpRequest, obj: Schedule, form: Any, change: bool) -> None:
        now = clock.now()
        if not obj.enabled and {"enabled", "paused_note"} & set(form.changed_data):
            # R36: a person's pause, or a person's note on a pause: who and when, and
            # an automatic pause becomes theirs (check no longer reports it)
            if "enabled" in form.changed_data:
                by = _paused_by(request, now)
                obj.paused_note = f"{obj.paused_note} ({by})" if obj.paused_note else by
            obj.paused_on_failure = None
        notes = edit_rules(obj, set(form.changed_data), not change, now)
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
        # R36: the note says who and when; a pause the schedule made itself becomes this
        # person's, its own note kept after theirs (check no longer reports it)
        note = _paused_by(request, clock.now())
        itself = Concat(Value(f"{note}; before: "), F("paused_note"), output_field=TextField())
        n = queryset.filter(Q(enabled=True) | Q(paused_on_failure=True)).update(
            enabled=False,
            paused_note=Case(
                When(paused_on_failure=True, then=itself),
                default=Value(note),
                output_field=TextField(),
            ),
            paused_on_failure=None,
        )
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
        except (timing.InvalidSchedule, live.SendTimeValueError) as exc:  # nothing written
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
        return timeline.timeline_view(self, request)

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
        if row is not None and self.has_view_or_change_permission(request, row):
            extra_context["timeline"] = timeline.detail(request, row)
        return super().change_view(request, object_id, form_url, extra_context)


def _paused_by(request: HttpRequest, now: dt.datetime) -> str:
    """R36: a pause's note as the admin writes it."""
    return f"paused in the admin by {request.user} at {words.absolute(now)}"


def _entry_in_code(name: str) -> Any:
    """A code schedule's ``beat_schedule`` entry, code being the source of truth (R6): its
    callbacks and the publish options beat supersedes are not stored on the row."""
    from celery import current_app

    beat_schedule = current_app._get_current_object().conf.beat_schedule or {}
    return beat_schedule.get(name)


def health_context(now: dt.datetime) -> dict[str, Any]:
    """The changelist's health summary: shown only when ``check`` would fail."""
    found = health.check(now)
    return {
        "findings": found,
        "critical": any(f.severity == health.Severity.CRITICAL for f in found),
    }
