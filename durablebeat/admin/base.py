"""What every durablebeat admin page shares: instants in the admin's zone that never fail
at the calendar's edges, run outcomes in colour, and the guard that turns an odd query
string or an invalid setting into a message instead of a 500 (R21)."""

from __future__ import annotations

import datetime as dt
import logging
from typing import TYPE_CHECKING, Any

from django.contrib import admin, messages
from django.contrib.admin.options import IncorrectLookupParameters
from django.contrib.admin.views.main import ChangeList
from django.contrib.admin.widgets import AdminSplitDateTime
from django.db import DataError, models
from django.http import HttpRequest, HttpResponse
from django.utils import timezone
from django.utils.html import format_html

from .. import conf, db, dbclock, words
from ..core import clock
from ..enums import RunState
from ..models import Schedule

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
    RunState.REPLACED: "#882255",
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


def instant(value: dt.datetime | None) -> str:
    if value is None:
        return "-"
    return f"{local(value)} ({words.relative(value, clock.now())})"


def outcome_html(state: str) -> str:
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
            with db.atomic():  # a savepoint: a refused query leaves no aborted txn
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
        say_invalid_settings(request)
        dbclock.refresh()  # R26: "now" on the database's clock, measured at most once a minute
        return super().changelist_view(request, extra_context)

    def change_view(
        self,
        request: HttpRequest,
        object_id: str,
        form_url: str = "",
        extra_context: dict[str, Any] | None = None,
    ) -> HttpResponse:
        if request.method == "GET":
            say_invalid_settings(request)
        dbclock.refresh()  # R26
        return super().change_view(request, object_id, form_url, extra_context)


def say_invalid_settings(request: HttpRequest) -> None:
    for name, why in conf.invalid_settings().items():
        messages.error(request, f"{name} is invalid, fix it in settings: {why}")


def late_after() -> dt.timedelta | None:
    """``LATE_AFTER``, or None while it is invalid (the page says which setting)."""
    try:
        return conf.settings.LATE_AFTER
    except conf.InvalidSetting:
        return None


def next_fire_cell(obj: Schedule) -> str:
    try:
        return words.next_fire_words(obj, clock.now())
    except conf.InvalidSetting:  # LATE_AFTER: the page's message names it
        return "(DURABLEBEAT_LATE_AFTER is invalid)"


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
