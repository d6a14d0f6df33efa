"""R19 and the admin half of R20, through Django's test client: the schedule list in words,
filters, enable / disable / run now / reset, forms that name the bad field, code-defined
rows read-only, run history read-only, and the health summary."""

from __future__ import annotations

import datetime as dt
import re

import pytest
from django.contrib import admin
from django.contrib.auth.models import Permission, User
from django.urls import reverse

from durablebeat.admin.ledger import FIRES_COUNTED, BootAdmin
from durablebeat.beat import live, publishing
from durablebeat.core import timing
from durablebeat.enums import Reason, RunState, Source
from durablebeat.models import Boot, Run, Schedule
from tests.integration.admin_forms import schedule_form

pytestmark = pytest.mark.django_db

S = dt.timedelta(seconds=1)
MIN = dt.timedelta(minutes=1)
H = dt.timedelta(hours=1)
TASK = "tests.e2eapp.tasks.record"
CHANGELIST = "/admin/durablebeat/schedule/"
ADD = "/admin/durablebeat/schedule/add/"


@pytest.fixture(autouse=True)
def frozen(time_machine, t0):
    time_machine.move_to(t0, tick=False)


@pytest.fixture
def sent(monkeypatch):
    """The broker, recorded: run now's messages end up here."""
    claims = []
    monkeypatch.setattr(publishing, "send", lambda app, claim, producer=None: claims.append(claim))
    return claims


@pytest.fixture
def alive(make_boot, t0):
    return make_boot(started_at=t0 - H, heartbeat_at=t0 - 2 * S)


def change_url(row):
    return f"/admin/durablebeat/schedule/{row.pk}/change/"


#: the schedule most tests here edit: weekday mornings in Berlin
DIGEST = {
    "name": "digest",
    "kind": "crontab",
    "every": "",
    "minute": "0",
    "hour": "8",
    "day_of_week": "mon-fri",
    "timezone": "Europe/Berlin",
}


def form_data(**overrides):
    return schedule_form(**{**DIGEST, **overrides})


def errors_of(response):
    """{field: [messages]} of the admin form in a response."""
    form = response.context["adminform"].form
    return {k: list(v) for k, v in form.errors.items()}


def text(response):
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", response.content.decode()))


# --- the list -----------------------------------------------------------------------------


def test_list_shows_schedule_in_words_next_fire_completion_outcome_stuck(
    admin_client, alive, make_schedule, t0
):
    make_schedule(
        "digest",
        kind="crontab",
        minute="0",
        hour="8",
        day_of_week="mon-fri",
        timezone="Europe/Berlin",
        next_fire_at=t0 + 4 * MIN,
        last_completed_at=t0 - 3 * H,
        last_outcome=RunState.SUCCEEDED,
    )
    make_schedule(
        "starved",
        every=60,
        next_fire_at=t0 - 3 * H,
        stuck_since=t0 - 2 * H,
        stuck_reason="previous run is still started on w1",
    )
    page = text(admin_client.get(CHANGELIST))
    assert "At 08:00, Monday through Friday (Europe/Berlin)" in page
    assert "in 4 min 2026-03-02 12:04:00 UTC" in page
    assert "3 h ago" in page and "Succeeded" in page
    assert "overdue 3 h" in page
    assert "every 1 minute" in page and "for 2 h" in page


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("stuck=yes", {"stuck"}),
        ("overdue=yes", {"overdue"}),
        ("overdue=no", {"fine", "stuck", "off", "code"}),
        ("enabled__exact=0", {"off"}),
        ("kind__exact=crontab", {"fine"}),
        ("source__exact=code", {"code"}),
        ("invalid=yes", set()),
        ("q=stuc", {"stuck"}),
    ],
)
def test_list_filters_and_search(admin_client, make_schedule, t0, query, expected):
    make_schedule("fine", kind="crontab", minute="0", next_fire_at=t0 + H)
    make_schedule("stuck", every=60, next_fire_at=t0 + MIN, stuck_since=t0 - H)
    make_schedule("overdue", every=60, next_fire_at=t0 - H)
    make_schedule("off", every=60, next_fire_at=t0 - H, enabled=False)
    make_schedule("code", every=60, next_fire_at=t0 + H, source=Source.CODE)
    response = admin_client.get(f"{CHANGELIST}?{query}")
    assert response.status_code == 200
    shown = {r.name for r in response.context["cl"].result_list}
    assert shown == expected


def test_a_slot_just_passed_is_due_now_not_overdue(admin_client, make_schedule, t0):
    """Beat looks at most every MAX_INTERVAL: a few seconds past is its next look."""
    make_schedule("due", every=60, next_fire_at=t0 - 3 * S)
    make_schedule("late", every=60, next_fire_at=t0 - 30 * S)
    page = text(admin_client.get(CHANGELIST))
    assert "due now" in page and "overdue 30 s" in page and "overdue 3 s" not in page
    response = admin_client.get(f"{CHANGELIST}?overdue=yes")
    assert {r.name for r in response.context["cl"].result_list} == {"late"}


def test_health_summary_shows_when_check_would_fail(admin_client, make_schedule, t0):
    make_schedule("job", every=60, next_fire_at=t0 + MIN)
    page = text(admin_client.get(CHANGELIST))
    assert "durablebeat check would fail (critical)" in page
    assert "no_beat no beat has ever started" in page


def test_health_summary_is_absent_when_all_is_well(admin_client, alive, make_schedule, t0):
    make_schedule("job", every=60, next_fire_at=t0 + MIN, last_completed_at=t0 - 10 * S)
    page = admin_client.get(CHANGELIST).content.decode()
    assert "durablebeat-health" not in page


# --- the form: bad input refused with the field named (R20) --------------------------------


def test_add_form_offers_empty_json_not_null(admin_client):
    """What the page shows is what the browser sends back: "null" args would be refused."""
    page = admin_client.get(ADD).content.decode()
    shown = dict(
        re.findall(r'<textarea name="(args|kwargs|headers)"[^>]*>\s*([^<]*)</textarea>', page)
    )
    assert shown == {"args": "[]", "kwargs": "{}", "headers": "{}"}


def test_add_crontab_schedule(admin_client):
    response = admin_client.post(ADD, form_data())
    assert response.status_code == 302, errors_of(response)
    row = Schedule.objects.get(name="digest")
    assert (row.kind, row.minute, row.hour, row.timezone) == ("crontab", "0", "8", "Europe/Berlin")
    assert row.source == Source.DATABASE
    # R33: its first slot is written with it, the next 08:00 in Berlin after the save
    assert row.next_fire_at == timing.next_slot(row.to_spec(), row.created_at)


@pytest.mark.parametrize(
    ("overrides", "field", "words"),
    [
        ({"minute": "61"}, "minute", "61"),
        ({"hour": "x"}, "hour", ""),
        ({"day_of_week": "funday"}, "day_of_week", ""),
        ({"timezone": "Mars/Olympus"}, "timezone", "Mars/Olympus"),
        ({"kind": "interval", "every": "0"}, "every", "positive"),
        ({"kind": "interval", "every": "-5s"}, "every", ""),
        ({"kind": "interval", "every": ""}, "every", "interval"),
        ({"kind": "interval", "every": "soon"}, "every", "duration"),
        ({"task": "no.such.task"}, "task", "no task named 'no.such.task'"),
        ({"args": "[1,"}, "args", "Malformed JSON"),
        ({"args": '{"a": 1}'}, "args", "list"),
        ({"kwargs": "{'a': 1}"}, "kwargs", "Malformed JSON"),
        ({"kwargs": "[1]"}, "kwargs", "object"),
        ({"headers": "nope"}, "headers", "Malformed JSON"),
        ({"kind": "clocked"}, "clocked_at", "time"),
    ],
)
def test_form_refuses_bad_input_naming_the_field(admin_client, overrides, field, words):
    response = admin_client.post(ADD, form_data(**overrides))
    assert response.status_code == 200
    errors = errors_of(response)
    assert field in errors, errors
    assert words in " ".join(errors[field])
    assert not Schedule.objects.exists()


def test_add_solar_schedule_and_its_ranges_named(admin_client):
    """R25, R21: a solar schedule is made in the admin (event, latitude, longitude); a
    latitude or longitude off the globe, or a missing event, is refused naming its field."""
    solar = {"kind": "solar", "solar_event": "sunset", "latitude": "69.6492"}
    for bad, field in (
        ({"latitude": "91"}, "latitude"),
        ({"longitude": "-180.5"}, "longitude"),
        ({"solar_event": ""}, "solar_event"),
    ):
        response = admin_client.post(ADD, form_data(**{**solar, "longitude": "18.9553", **bad}))
        assert response.status_code == 200
        errors = errors_of(response)
        assert field in errors, errors
    assert not Schedule.objects.exists()
    response = admin_client.post(ADD, form_data(**solar, longitude="18.9553"))
    assert response.status_code == 302, errors_of(response)
    row = Schedule.objects.get(name="digest")
    assert (row.kind, row.solar_event, row.latitude, row.longitude) == (
        "solar",
        "sunset",
        69.6492,
        18.9553,
    )
    assert "at sunset at 69.6492°N, 18.9553°E" in admin_client.get(CHANGELIST).content.decode()


def test_a_custom_schedule_is_code_only_and_shown_read_only(admin_client, make_schedule, t0):
    response = admin_client.post(ADD, form_data(kind="custom"))
    assert response.status_code == 200
    assert "kind" in errors_of(response)
    row = make_schedule(
        "quarters",
        kind="custom",
        custom_schedule="app.schedules.Quarters: <quarters>",
        source=Source.CODE,
        next_fire_at=t0 + H,
    )
    page = admin_client.get(change_url(row)).content.decode()
    assert "app.schedules.Quarters: &lt;quarters&gt;" in page
    assert 'name="custom_schedule"' not in page


def test_interval_accepts_human_durations(admin_client):
    response = admin_client.post(ADD, form_data(kind="interval", every="90s", name="tick"))
    assert response.status_code == 302, errors_of(response)
    assert Schedule.objects.get(name="tick").every == 90 * S


def test_timing_change_resets_next_fire_other_edits_keep_it(admin_client, make_schedule, t0):
    """The page shows the next fire to the second; beat stores microseconds (now + grace).
    Sent back as shown, it is not an edit: the stored value stays exactly."""
    stored = t0 + H + dt.timedelta(microseconds=123456)
    row = make_schedule(
        "digest",
        kind="crontab",
        minute="0",
        hour="8",
        timezone="Europe/Berlin",
        next_fire_at=stored,
    )
    as_shown = {"day_of_week": "*", "next_fire_at_0": "2026-03-02", "next_fire_at_1": "13:00:00"}
    admin_client.post(change_url(row), form_data(description="edited", **as_shown))
    row.refresh_from_db()
    assert (row.description, row.next_fire_at) == ("edited", stored)
    admin_client.post(change_url(row), form_data(description="edited", minute="30", **as_shown))
    row.refresh_from_db()
    # R29, R33: the new timing's next slot (08:30 Berlin), written by the save
    assert (row.minute, row.next_fire_at) == ("30", timing.next_slot(row.to_spec(), row.updated_at))


def test_next_fire_set_by_hand_is_kept(admin_client, make_schedule, t0):
    row = make_schedule("job", every=60, next_fire_at=t0 + H)
    response = admin_client.post(
        change_url(row),
        form_data(
            kind="interval", every="2m", next_fire_at_0="2026-03-02", next_fire_at_1="12:30:00"
        ),
    )
    assert response.status_code == 302, errors_of(response)
    row.refresh_from_db()
    assert (row.every, row.next_fire_at) == (2 * MIN, t0 + 30 * MIN)


def test_edit_clears_a_bad_rows_error(admin_client, make_schedule, t0):
    row = make_schedule(
        "digest",
        kind="crontab",
        minute="0",
        hour="8",
        timezone="Europe/Berlin",
        day_of_week="mon-fri",
    )
    Schedule.objects.filter(pk=row.pk).update(error="minute: bad")
    response = admin_client.post(change_url(row), form_data())
    assert response.status_code == 302, errors_of(response)
    row.refresh_from_db()
    assert row.error == ""


def test_code_defined_schedule_timing_is_read_only(admin_client, make_schedule, t0):
    row = make_schedule(
        "code-job", kind="crontab", minute="0", source=Source.CODE, next_fire_at=t0 + H
    )
    page = admin_client.get(change_url(row)).content.decode()
    assert 'name="minute"' not in page and 'name="task"' not in page
    assert 'name="enabled"' in page
    assert "Defined in code (beat_schedule)" in page
    response = admin_client.post(
        change_url(row),
        {
            "enabled": "",
            "next_fire_at_0": "2026-03-02",
            "next_fire_at_1": "13:00:00",
            "minute": "5",
        },
    )
    assert response.status_code == 302, errors_of(response)
    row.refresh_from_db()
    assert (row.enabled, row.minute) == (False, "0")
    assert row.next_fire_at == t0 + H
    shown = {"next_fire_at_0": "2026-03-02", "next_fire_at_1": "13:00:00"}
    admin_client.post(change_url(row), {"enabled": "on", **shown})
    row.refresh_from_db()
    assert (row.enabled, row.enabled_at) == (True, t0)  # check counts its periods from now


# --- actions ------------------------------------------------------------------------------


def act(client, action, *rows):
    return client.post(
        CHANGELIST, {"action": action, "_selected_action": [r.pk for r in rows]}, follow=True
    )


def test_enable_and_disable(admin_client, make_schedule, t0):
    row = make_schedule("job", every=60, next_fire_at=t0 + MIN)
    act(admin_client, "disable", row)
    row.refresh_from_db()
    assert (row.enabled, row.next_fire_at) == (False, t0 + MIN)
    act(admin_client, "enable", row)
    row.refresh_from_db()
    assert (row.enabled, row.next_fire_at, row.enabled_at) == (True, t0 + MIN, t0)
    act(admin_client, "enable", row)  # already enabled: not enabled "again"
    assert Schedule.objects.get(pk=row.pk).enabled_at == t0


def test_enable_recomputes_a_next_fire_that_passed_while_disabled(admin_client, make_schedule, t0):
    row = make_schedule("job", every=60, next_fire_at=t0 - H, enabled=False)
    act(admin_client, "enable", row)
    row.refresh_from_db()
    assert (row.enabled, row.next_fire_at) == (True, None)


def test_reset_next_fire(admin_client, make_schedule, t0):
    row = make_schedule("job", every=60, next_fire_at=t0 + H, next_fire_reason=Reason.STARTUP_GRACE)
    response = act(admin_client, "reset_next_fire", row)
    row.refresh_from_db()
    assert (row.next_fire_at, row.next_fire_reason) == (None, Reason.SCHEDULED)
    assert "beat sets each next fire" in text(response)


def test_run_now_action_fires_through_the_ledger_with_the_schedules_options(
    admin_client, make_schedule, sent, t0
):
    row = make_schedule(
        "job", every=60, next_fire_at=t0 + H, args=[1], kwargs={"a": 2}, queue="low", priority=5
    )
    response = act(admin_client, "run_now", row)
    [claim] = sent
    assert (claim.schedule, claim.reason) == ("job", Reason.MANUAL)
    assert claim.message.args == [1] and claim.message.kwargs == {"a": 2}
    assert claim.message.options["queue"] == "low" and claim.message.options["priority"] == 5
    run = Run.objects.get()
    assert (run.reason, run.state, run.task_id) == (
        Reason.MANUAL,
        RunState.PUBLISHED,
        claim.task_id,
    )
    row.refresh_from_db()
    assert row.next_fire_at == t0 + H  # a manual fire does not move the schedule
    assert row.last_fired_at == run.claimed_at  # ... but it is the schedule's last fire
    assert f"Job: sent now (task id {claim.task_id})" in text(response)  # admin capitalises


def test_run_now_with_the_broker_down_says_so_and_keeps_the_run(
    admin_client, make_schedule, monkeypatch
):
    def down(app, claim, producer=None):
        raise ConnectionError("Error 111 connecting to redis")

    monkeypatch.setattr(publishing, "send", down)
    row = make_schedule("job", every=60)
    response = act(admin_client, "run_now", row)
    assert "could not be sent to the broker: Error 111" in text(response)
    assert Run.objects.get().state == RunState.CLAIMED


def test_run_now_refuses_a_bad_row(admin_client, make_schedule, sent):
    row = make_schedule("job", every=60)
    Schedule.objects.filter(pk=row.pk).update(error="every: bad")
    response = act(admin_client, "run_now", row)
    assert "was not run: fix it first" in text(response)
    assert sent == [] and not Run.objects.exists()


def test_run_now_refuses_a_row_broken_behind_the_form(admin_client, make_schedule, sent):
    """R20: kwargs stored around the form (SQL, a fixture) are refused, nothing written."""
    row = make_schedule("job", every=60)
    Schedule.objects.filter(pk=row.pk).update(kwargs=[1])
    response = act(admin_client, "run_now", row)
    assert "was not run: fix it first (kwargs: must be a JSON object" in text(response)
    assert sent == [] and not Run.objects.exists()


def test_run_now_refuses_a_code_row_whose_values_this_process_lacks(
    admin_client, make_schedule, sent
):
    """R25: a code row shows its in-memory values as markers; a web process whose Celery app
    has no such beat_schedule entry cannot send them, and writes no run for it."""
    row = make_schedule("coded", every=60, source="code")
    Schedule.objects.filter(pk=row.pk).update(args=[{live.PYTHON: "Decimal('1.5')"}])
    response = act(admin_client, "run_now", row)
    said = [str(m) for m in response.context["messages"]]
    assert len(said) == 1 and said[0].startswith("coded was not run")
    assert "has no entry 'coded'" in said[0]
    assert sent == [] and not Run.objects.exists()


def test_run_now_button_on_the_schedule_page(admin_client, make_schedule, sent):
    row = make_schedule("job", every=60)
    page = admin_client.get(change_url(row)).content.decode()
    url = reverse("admin:durablebeat_schedule_run_now", args=[row.pk])
    assert f'action="{url}"' in page
    assert admin_client.get(url).status_code == 405
    response = admin_client.post(url)
    assert response.status_code == 302 and response["Location"] == change_url(row)
    assert len(sent) == 1
    page = text(admin_client.get(change_url(row)))
    assert "Manual" in page and "Published" in page  # the recent runs on its page
    assert "Created: 2026-03-02 12:00:00 UTC (0 s ago)" in page


# --- permissions --------------------------------------------------------------------------


@pytest.fixture
def viewer(client):
    user = User.objects.create_user("viewer", password="pw", is_staff=True)
    user.user_permissions.add(
        *Permission.objects.filter(codename__in=["view_schedule", "view_run"])
    )
    client.force_login(user)
    return client


def test_view_only_user_gets_no_actions_and_cannot_run_now(viewer, make_schedule, sent):
    row = make_schedule("job", every=60)
    response = viewer.get(CHANGELIST)
    assert response.status_code == 200
    assert "run_now" not in response.content.decode()
    assert (
        viewer.post(reverse("admin:durablebeat_schedule_run_now", args=[row.pk])).status_code == 403
    )
    act(viewer, "run_now", row)
    act(viewer, "disable", row)
    assert sent == []
    assert Schedule.objects.get().enabled


@pytest.mark.parametrize("object_id", ["existing", "999999", "abc", "1%20OR%201=1"])
def test_run_now_checks_permission_before_it_looks_the_row_up(
    viewer, make_schedule, sent, object_id
):
    """R21: a user without the change permission learns nothing about which ids exist."""
    row = make_schedule("job", every=60)
    object_id = str(row.pk) if object_id == "existing" else object_id
    response = viewer.post(f"/admin/durablebeat/schedule/{object_id}/run-now/")
    assert response.status_code == 403
    assert sent == []


@pytest.mark.parametrize("object_id", ["999999", "abc", "1%20OR%201=1", "-1"])
def test_run_now_with_a_missing_or_malformed_id_is_404(admin_client, sent, object_id):
    response = admin_client.post(f"/admin/durablebeat/schedule/{object_id}/run-now/")
    assert response.status_code == 404
    assert sent == []


# --- run history --------------------------------------------------------------------------


def test_run_history_is_read_only_and_filterable(
    admin_client, make_schedule, make_boot, make_run, t0
):
    boot = make_boot(started_at=t0 - H)
    a = make_schedule("a", every=60)
    b = make_schedule("b", every=60)
    run = make_run(a, t0 - 10 * MIN, boot=boot, state=RunState.FAILED, error="Traceback\nBoom")
    make_run(a, t0 - 5 * MIN, reason=Reason.MANUAL)
    make_run(b, t0 - 5 * MIN, boot=boot, state=RunState.SKIPPED, detail="previous run busy")
    base = "/admin/durablebeat/run/"

    def shown(query):
        response = admin_client.get(f"{base}?{query}")
        assert response.status_code == 200
        return sorted((r.schedule.name, r.state) for r in response.context["cl"].result_list)

    assert shown(f"schedule__id__exact={a.pk}") == [("a", "failed"), ("a", "succeeded")]
    assert shown("state__exact=skipped") == [("b", "skipped")]
    assert shown("reason__exact=manual") == [("a", "succeeded")]
    assert shown(f"boot__id__exact={boot.pk}") == [("a", "failed"), ("b", "skipped")]
    page = text(admin_client.get(base))
    assert "Boom" in page and "previous run busy" in page
    assert admin_client.get(f"{base}add/").status_code == 403
    detail = admin_client.get(f"{base}{run.pk}/change/")
    assert detail.status_code == 200
    assert 'name="state"' not in detail.content.decode()  # shown, not editable
    assert admin_client.post(f"{base}{run.pk}/delete/").status_code == 403


def test_boots_list(admin_client, make_boot, make_schedule, make_run, t0):
    boot = make_boot(started_at=t0 - H, heartbeat_at=t0 - 2 * S, hostname="pod-7")
    job = make_schedule("job", every=60)
    make_run(job, t0 - MIN, boot=boot)
    make_run(job, t0 - 2 * MIN, boot=boot, state=RunState.SKIPPED)
    response = admin_client.get("/admin/durablebeat/boot/")
    assert response.status_code == 200
    page = text(response)
    assert "pod-7" in page
    [listed] = response.context["cl"].result_list
    runs = admin_client.get(f"/admin/durablebeat/run/?boot__id__exact={listed.pk}")
    assert runs.status_code == 200
    assert f"?boot__id__exact={listed.pk}" in response.content.decode()  # the list links them
    assert {r.state for r in runs.context["cl"].result_list} == {"succeeded", "skipped"}
    page = text(admin_client.get(f"/admin/durablebeat/boot/{listed.pk}/change/"))
    assert "Fires: 1 " in page
    assert BootAdmin(Boot, admin.site).fires(listed) == "1"


def test_boots_list_reads_no_run(admin_client, make_boot, make_schedule, make_run, t0):
    """Issue 31: the list reads the boots alone, whatever the ledger holds; the count of a
    boot's fires is on its page."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    boot = make_boot(started_at=t0 - H)
    make_run(make_schedule("job", every=60), t0 - MIN, boot=boot)
    with CaptureQueriesContext(connection) as queries:
        assert admin_client.get("/admin/durablebeat/boot/").status_code == 200
    assert not [q["sql"] for q in queries if "durablebeat_run" in q["sql"]]


def test_boots_list_counts_a_boots_fires_to_a_bound(make_boot, make_schedule, t0):
    """Issue 31: the count reads at most FIRES_COUNTED + 1 runs of a boot, whatever the
    ledger holds, and says when there are more."""
    boot = make_boot(started_at=t0 - H)
    job = make_schedule("job", every=1)
    fires = BootAdmin(Boot, admin.site).fires
    slots = [t0 - (FIRES_COUNTED + 1 - i) * S for i in range(FIRES_COUNTED + 1)]
    runs = [
        Run(schedule=job, slot=s, claimed_at=s, boot=boot, task_id=f"t{s:%H%M%S}") for s in slots
    ]
    Run.objects.bulk_create(runs[:-1])
    assert fires(boot) == f"{FIRES_COUNTED:,}"
    Run.objects.bulk_create(runs[-1:])
    assert fires(boot) == f"{FIRES_COUNTED:,}+"


@pytest.mark.parametrize(
    "url",
    [
        "/admin/durablebeat/schedule/?kind__exact=%00",  # PostgreSQL: DataError
        "/admin/durablebeat/run/?state=%00",
        "/admin/durablebeat/schedule/?next_fire_at__year=99999",  # ValueError
        "/admin/durablebeat/boot/?hostname=%00",
    ],
)
def test_a_lookup_the_database_refuses_is_a_bad_lookup_not_a_500(admin_client, make_schedule, url):
    make_schedule(name="a", every=60)
    response = admin_client.get(url)
    assert response.status_code in (200, 302)
    if response.status_code == 302:
        assert response["Location"].endswith("?e=1")


@pytest.mark.parametrize(
    "url", ["/admin/durablebeat/schedule/", "/admin/durablebeat/schedule/?overdue=yes"]
)
def test_an_invalid_setting_shows_the_page_with_an_error_naming_it(
    admin_client, make_schedule, settings, t0, url
):
    make_schedule(name="a", every=60, next_fire_at=t0 - dt.timedelta(hours=1))
    settings.DURABLEBEAT_LATE_AFTER = -1
    response = admin_client.get(url)
    assert response.status_code == 200
    said = [str(m) for m in response.context["messages"]]
    assert any(m.startswith("DURABLEBEAT_LATE_AFTER is invalid") for m in said), said
