"""The admin's timeline page and the schedule page's timeline (R19): lanes of slots
against the deploys, drawn as inline SVG by templates, with the same data as a table.

The lanes are the schedule list's own rows: ``ScheduleAdmin``'s changelist (its filters,
search and ordering) selects them, a page at a time. ``ops.timeline`` holds the pure part,
``ops.timeline_query`` the queries.
"""

from __future__ import annotations

import copy
from typing import TYPE_CHECKING, Any

from django.contrib import messages
from django.contrib.admin.options import IncorrectLookupParameters
from django.contrib.admin.views.main import ChangeList
from django.core.exceptions import PermissionDenied
from django.core.paginator import Page, Paginator
from django.http import HttpRequest, HttpResponse, QueryDict
from django.template.loader import render_to_string
from django.template.response import TemplateResponse
from django.urls import reverse

from .. import dbclock
from ..beat import retention
from ..core import clock
from ..models import Schedule
from ..ops import timeline, timeline_query

if TYPE_CHECKING:
    from django.contrib.admin import ModelAdmin

LANES_PER_PAGE = 50
#: the page's drawing: a label column, then the window across ``PLOT_WIDTH`` pixels
LABEL_WIDTH = 190.0
PLOT_WIDTH = 800.0
LANE_HEIGHT = 34.0
#: boots drawn with a label each; with more, the lines alone (each still says itself)
LABELLED_BOOTS = 12
CHART_HEIGHT = 80.0
#: the timeline's own query parameters; the others are the schedule list's filters
OWN_PARAMS = ("window", "from", "to", "page", "as", "show")


def _scale(window: timeline.Window) -> timeline.Scale:
    return timeline.Scale(window.since, window.until, LABEL_WIDTH, PLOT_WIDTH)


def _urls() -> dict[str, str]:
    """Link prefixes: reversing a URL per mark would cost more than drawing it."""
    return {
        "run_base": reverse("admin:durablebeat_run_changelist"),
        "boot_base": reverse("admin:durablebeat_boot_changelist"),
        "schedule_base": reverse("admin:durablebeat_schedule_changelist"),
        "missed_base": reverse("admin:durablebeat_missedslots_changelist"),
    }


def _drawing(window: timeline.Window, rows: list[Schedule], labels: bool = True) -> dict[str, Any]:
    """Everything the lanes' SVG needs, for the rows in this order."""
    scale = _scale(window)
    width = LABEL_WIDTH + PLOT_WIDTH + 10
    boots, boots_total = timeline_query.boots(scale)
    tags: list[timeline.Tag | None] = [None] * len(boots)
    if labels and len(boots) <= LABELLED_BOOTS:
        tags = [*timeline.place_tags([(b.x, b.caption) for b in boots], width)]
    header = timeline.Header(max((t.row + 1 for t in tags if t), default=1))
    lanes = timeline_query.lanes(rows, scale, LANE_HEIGHT, header.height)
    return {
        "window": window,
        "lanes": lanes,
        "boots": boots,
        "boot_tags": list(zip(boots, tags, strict=True)),
        "boots_total": boots_total,
        "header": header,
        "ticks": [(scale.x(at), text) for at, text in timeline.ticks(window.since, window.until)],
        "width": width,
        "height": header.height + LANE_HEIGHT * max(len(lanes), 1) + 8,
        "label_width": LABEL_WIDTH,
        "plot_x0": LABEL_WIDTH,
        "plot_x1": LABEL_WIDTH + PLOT_WIDTH,
        "lane_height": LANE_HEIGHT,
        "styles": list(timeline.STYLES.values()),
        "bucket_above": timeline.BUCKET_ABOVE,
        **_urls(),
    }


def _with(request: HttpRequest, **changes: str | None) -> str:
    """This page's query string with ``changes`` (None removes a parameter)."""
    query = request.GET.copy()
    for key, value in changes.items():
        query.pop(key, None)
        if value is not None:
            query[key] = value
    return "?" + query.urlencode()


def _changelist(
    model_admin: ModelAdmin[Schedule], request: HttpRequest
) -> tuple[ChangeList | None, str]:
    """The schedule list's changelist for the filters in this request, or why there is none."""
    filters = copy.copy(request)
    query = QueryDict(mutable=True)
    for key, values in request.GET.lists():
        if key not in OWN_PARAMS:
            query.setlist(key, values)
    query._mutable = False
    filters.GET = query  # type: ignore[assignment]  # the stubs want the immutable kind
    try:
        changelist = model_admin.get_changelist_instance(filters)
    except IncorrectLookupParameters as exc:
        return None, f"These filters cannot be used: {exc or 'a bad lookup'}."
    # Its filter and search links keep the window (and go back to the first page).
    for key in ("window", "from", "to", "as", "show"):
        if key in request.GET:
            changelist.params[key] = request.GET[key]
            if hasattr(changelist, "filter_params"):  # Django 5.0+; 4.2 reads params alone
                changelist.filter_params[key] = request.GET.getlist(key)
    return changelist, ""


def timeline_view(model_admin: ModelAdmin[Schedule], request: HttpRequest) -> HttpResponse:
    if not model_admin.has_view_or_change_permission(request):
        raise PermissionDenied
    dbclock.refresh()  # R26: the window ends at "now" on the database's clock
    now = clock.now()
    window, window_error = timeline.parse_window(request.GET, now)
    if window_error:
        messages.error(request, window_error)
    if pruned := retention.edge_note(window.since, now):  # R32: gone, not missing
        messages.info(request, pruned)
    changelist, filter_error = _changelist(model_admin, request)
    if filter_error:
        messages.error(request, filter_error)
    queryset = changelist.queryset if changelist else Schedule.objects.none()
    paginator = Paginator(queryset, LANES_PER_PAGE)
    if changelist is not None:  # the list counted this filtered set already: not twice
        paginator.count = changelist.result_count
    page: Page[Schedule] = paginator.get_page(request.GET.get("page"))
    context: dict[str, Any] = {
        **model_admin.admin_site.each_context(request),
        "opts": Schedule._meta,
        "title": "Timeline",
        "cl": changelist,
        "page": page,
        "as_table": request.GET.get("as") == "table",
        "show_deploys": request.GET.get("show") == "deploys",
        "window_links": [
            (key, _with(request, window=key, **{"from": None, "to": None, "page": None}))
            for key in timeline.SPANS
            if key != "30d"
        ],
        "from_value": request.GET.get("from", ""),
        "to_value": request.GET.get("to", ""),
        "hidden": [
            (k, v)
            for k, values in request.GET.lists()
            if k not in ("from", "to", "window", "page")
            for v in values
        ],
        "table_url": _with(request, **{"as": "table"}),
        "picture_url": _with(request, **{"as": None}),
        "deploys_url": _with(request, show="deploys", page=None),
        "lanes_url": _with(request, show=None),
        "page_urls": {
            "previous": _with(request, page=str(page.number - 1)) if page.has_previous() else "",
            "next": _with(request, page=str(page.number + 1)) if page.has_next() else "",
        },
        **_drawing(window, list(page.object_list)),
    }
    if context["show_deploys"]:
        context["deploys"] = timeline_query.deploys(window, PLOT_WIDTH - 200)
    return TemplateResponse(request, "admin/durablebeat/schedule/timeline.html", context)


def detail(request: HttpRequest, row: Schedule) -> dict[str, str]:
    """The schedule page's timeline, drawn (``html``), and the timeline page's URL for it."""
    context = detail_context(request, row)
    html = render_to_string("durablebeat/timeline/detail.html", context, request)
    return {"html": html, "url": context["timeline_url"]}


def detail_context(request: HttpRequest, row: Schedule) -> dict[str, Any]:
    """The schedule page's timeline: its lane over a longer window (7 days unless the page's
    ``timeline`` parameter picks another) and its lateness and duration charts."""
    params = {"window": request.GET.get("timeline", "7d")}
    window, error = timeline.parse_window(params, clock.now(), default="7d")
    drawing = _drawing(window, [row], labels=False)
    scale = _scale(window)
    late, took, capped = timeline_query.fire_points(row.pk, window)
    return {
        **drawing,
        "window_error": error,
        "window_links": [(key, f"?timeline={key}") for key in ("24h", "7d", "30d")],
        "lateness": timeline.chart(late, scale, CHART_HEIGHT),
        "duration": timeline.chart(took, scale, CHART_HEIGHT, row.time_limit),
        "capped": capped,
        "chart_points": timeline_query.CHART_POINTS,
        "chart_height": CHART_HEIGHT,
        "timeline_url": reverse("admin:durablebeat_schedule_timeline") + f"?id__exact={row.pk}",
    }
