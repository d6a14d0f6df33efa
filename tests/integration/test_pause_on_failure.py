"""R36, pause on failure, against a real database: a schedule with ``pause_after_failures``
pauses itself after that many runs in a row failed or were lost, with a note naming them;
check, status, the admin, the API and the signal say it; a resume clears it; a success
resets the count. Any pause keeps a person's note. Real processes:
tests/e2e/test_pause_on_failure.py."""

from __future__ import annotations

import datetime as dt
import io
import json
import logging
import uuid

import pytest
from django.core.exceptions import ValidationError
from django.core.management import call_command

from durablebeat import api, conf, signals
from durablebeat.beat import claims, reclaim
from durablebeat.beat.codesync import BadEntry, parse_beat_schedule
from durablebeat.enums import RunState
from durablebeat.models import Run, Schedule
from durablebeat.ops import health, status
from durablebeat.worker import completion

pytestmark = pytest.mark.django_db(transaction=True)

S = dt.timedelta(seconds=1)
MIN = dt.timedelta(minutes=1)
H = dt.timedelta(hours=1)
TASK = "tests.e2eapp.tasks.record"
CHANGELIST = "/admin/durablebeat/schedule/"


@pytest.fixture(autouse=True)
def frozen(time_machine, t0):
    time_machine.move_to(t0, tick=False)


@pytest.fixture
def paused_signals():
    """Every ``schedule_paused`` sent, with its arguments."""
    sent: list[dict[str, object]] = []

    def receiver(sender, **kwargs):
        sent.append(kwargs)

    signals.schedule_paused.connect(receiver, weak=False, dispatch_uid="test_pause")
    yield sent
    signals.schedule_paused.disconnect(dispatch_uid="test_pause")


def _job(name: str = "flaky", **policy: object) -> Schedule:
    policy.setdefault("pause_after_failures", 3)
    api.add_schedule(name, TASK, dt.timedelta(minutes=1), options={"durablebeat": policy})
    return Schedule.objects.get(name=name)


def _run(job: Schedule, slot: dt.datetime, state: str = RunState.STARTED, **fields) -> Run:
    fields.setdefault("published_at", slot)
    if state == RunState.STARTED:
        fields.setdefault("started_at", slot)
        fields.setdefault("worker", "w1@host")
    return Run.objects.create(
        schedule=job, slot=slot, state=state, claimed_at=slot, task_id=str(uuid.uuid4()), **fields
    )


def _end(job: Schedule, i: int, ok: bool, t0: dt.datetime) -> Run:
    """The run of slot ``i`` (a minute apart) ends, as the worker says it, 5 s after."""
    run = _run(job, t0 + i * MIN)
    error = "" if ok else "RuntimeError: failing on purpose"
    at = t0 + i * MIN + 5 * S
    assert completion.finish(completion.Finished(run.task_id, at, succeeded=ok, error=error))
    return run


def _row(name: str = "flaky") -> Schedule:
    return Schedule.objects.get(name=name)


# --- counting and the pause -----------------------------------------------------------------


def test_n_failures_in_a_row_pause_the_schedule_with_a_note_naming_them(t0, paused_signals, caplog):
    """R36: the third failure pauses it (enabled False), once, with a note naming the three
    runs and when the last failed; a warning in the log and the signal, once."""
    job = _job()
    _end(job, 0, False, t0)
    _end(job, 1, False, t0)
    assert (_row().enabled, _row().failures_in_a_row) == (True, 2)
    with caplog.at_level(logging.WARNING, logger="durablebeat"):
        _end(job, 2, False, t0)
    row = _row()
    assert (row.enabled, row.paused_on_failure, row.failures_in_a_row) == (False, True, 3)
    assert row.paused_at == t0
    assert row.paused_note == (
        "paused after 3 failures in a row (failed or lost): runs of slots "
        "2026-03-02 12:00:00 UTC, 2026-03-02 12:01:00 UTC, 2026-03-02 12:02:00 UTC; "
        "the last failed at 2026-03-02 12:02:05 UTC"
    )
    [record] = [r for r in caplog.records if getattr(r, "event", None) == "paused"]
    assert record.schedule == "flaky" and "3 failures in a row" in record.getMessage()
    assert paused_signals == [
        {
            "signal": signals.schedule_paused,
            "schedule": "flaky",
            "note": row.paused_note,
            "failures": 3,
            "at": t0,
        }
    ]
    # a run still in flight that fails later counts, but pauses nothing twice
    _end(job, 3, False, t0)
    assert _row().failures_in_a_row == 4 and len(paused_signals) == 1
    assert _row().paused_note == row.paused_note


def test_a_success_in_between_resets_the_count(t0):
    job = _job()
    _end(job, 0, False, t0)
    _end(job, 1, False, t0)
    _end(job, 2, True, t0)
    assert _row().failures_in_a_row == 0
    _end(job, 3, False, t0)
    _end(job, 4, False, t0)
    assert (_row().enabled, _row().failures_in_a_row) == (True, 2)
    _end(job, 5, False, t0)
    assert not _row().enabled


def test_a_lost_run_counts_and_its_later_failure_is_not_counted_again(t0, paused_signals):
    """R36 with R15 and R11: the reclaim's lost counts; the result backend's failure of that
    same run later does not count it a second time."""
    job = _job()
    _end(job, 0, False, t0)
    dead = _run(job, t0 + MIN)  # its worker never wrote a liveness row: dead past the bound
    now = t0 + 30 * MIN
    assert reclaim.reclaim(now, None) == 1
    assert Run.objects.get(pk=dead.pk).state == RunState.LOST
    assert _row().failures_in_a_row == 2
    late = completion.Finished(dead.task_id, now + S, succeeded=False, from_backend=True)
    assert completion.finish(late)
    assert Run.objects.get(pk=dead.pk).state == RunState.FAILED
    assert (_row().enabled, _row().failures_in_a_row) == (True, 2)
    _end(job, 2, False, t0)
    row = _row()
    assert not row.enabled and len(paused_signals) == 1
    assert "runs of slots 2026-03-02 12:00:00 UTC, 2026-03-02 12:01:00 UTC, " in row.paused_note


def test_a_lost_run_is_the_last_the_note_says_it_was_lost(t0):
    job = _job(pause_after_failures=1)
    _run(job, t0)
    assert reclaim.reclaim(t0 + 30 * MIN, None) == 1
    assert _row().paused_note.endswith("the last was lost at 2026-03-02 12:30:00 UTC")


def test_a_lost_run_that_succeeded_after_all_resets(t0):
    job = _job()
    _end(job, 0, False, t0)
    lost = _run(job, t0 + MIN)
    reclaim.reclaim(t0 + 30 * MIN, None)
    assert _row().failures_in_a_row == 2
    done = completion.Finished(lost.task_id, t0 + 31 * MIN, succeeded=True, from_backend=True)
    assert completion.finish(done)
    assert _row().failures_in_a_row == 0


def test_no_news_skipped_and_missed_neither_count_nor_reset(t0):
    """R36: no news is not a failure (the message may still come); a slot skipped or missed
    ran no body."""
    job = _job()
    _end(job, 0, False, t0)
    _end(job, 1, False, t0)
    published = _run(job, t0 + 2 * MIN, state=RunState.PUBLISHED)
    reclaim.no_news_round(t0 + 30 * MIN)
    assert Run.objects.get(pk=published.pk).state == RunState.NO_NEWS
    claimed = _run(job, t0 + 3 * MIN, state=RunState.CLAIMED)
    claims.mark_missed([claimed.pk], "could not go out", t0 + 30 * MIN)
    Run.objects.create(
        schedule=job, slot=t0 + 4 * MIN, state=RunState.SKIPPED, claimed_at=t0 + 4 * MIN
    )
    assert (_row().enabled, _row().failures_in_a_row) == (True, 2)
    # its news comes at last: a failure, which counts
    late = completion.Finished(published.task_id, t0 + 31 * MIN, succeeded=False)
    assert completion.finish(late)
    assert not _row().enabled


def test_a_message_the_broker_client_refuses_counts_as_a_failure(t0):
    job = _job(pause_after_failures=2)
    refused = [_run(job, t0 + i * MIN, state=RunState.CLAIMED).pk for i in range(2)]
    claims.mark_unpublishable(refused, "OverflowError: expires", t0 + 3 * MIN)
    row = _row()
    assert (row.enabled, row.failures_in_a_row, row.paused_on_failure) == (False, 2, True)


def test_the_setting_is_the_bound_of_a_schedule_without_its_own_and_0_is_never(settings, t0):
    settings.DURABLEBEAT_PAUSE_AFTER_FAILURES = 2
    by_setting = _job("by-setting", pause_after_failures=None)
    never = _job("never", pause_after_failures=0)
    for i in range(2):
        _end(by_setting, i, False, t0)
        _end(never, i, False, t0)
    assert not _row("by-setting").enabled
    assert _row("never").enabled and _row("never").failures_in_a_row is None


def test_without_a_bound_nothing_is_counted(t0):
    """Off by default: a run's end costs no query more than before R36."""
    job = _job(pause_after_failures=None)
    for i in range(4):
        _end(job, i, False, t0)
    row = _row()
    assert (row.enabled, row.failures_in_a_row) == (True, None)


def test_a_pause_clears_the_slot_a_buffer_one_schedule_kept(t0):
    """R34 with R36: the pause goes through the edit rules, so no kept slot outlives it."""
    job = _job(pause_after_failures=1, overlap="buffer_one")
    Schedule.objects.filter(pk=job.pk).update(buffered_slot=t0 + 2 * MIN)
    _end(job, 0, False, t0)
    row = _row()
    assert (row.enabled, row.buffered_slot) == (False, None)


# --- resume, and a person's pause -----------------------------------------------------------


def test_resume_through_the_api_clears_the_pause_its_note_and_the_count(t0):
    job = _job()
    for i in range(3):
        _end(job, i, False, t0)
    info = api.get_schedule("flaky")
    assert (info.enabled, info.paused_on_failure, info.paused_at) == (False, True, t0)
    assert info.paused_note.startswith("paused after 3 failures in a row")
    info = api.resume_schedule("flaky")
    assert (info.enabled, info.paused_note, info.paused_at, info.paused_on_failure) == (
        True,
        None,
        None,
        False,
    )
    row = _row()
    assert (row.failures_in_a_row, row.paused_on_failure) == (None, None)
    _end(job, 3, False, t0)
    assert (_row().enabled, _row().failures_in_a_row) == (True, 1)  # counts from 0 again


def test_resume_through_save_or_a_bulk_update_clears_it_too(t0):
    job = _job(pause_after_failures=1)
    _end(job, 0, False, t0)
    row = _row()
    row.enabled = True
    row.save()
    assert (_row().paused_note, _row().failures_in_a_row) == (None, None)
    _end(job, 1, False, t0)
    assert not _row().enabled
    Schedule.objects.filter(name="flaky").update(enabled=True)
    row = _row()
    assert (row.enabled, row.paused_note, row.paused_at, row.paused_on_failure) == (
        True,
        None,
        None,
        None,
    )


def test_an_enable_of_a_schedule_already_enabled_keeps_its_count(t0):
    job = _job()
    _end(job, 0, False, t0)
    Schedule.objects.filter(name="flaky").update(enabled=True)  # e.g. an admin's enable
    assert _row().failures_in_a_row == 1


def test_a_pause_through_the_api_keeps_its_note_and_check_does_not_report_it(t0):
    job = _job()
    info = api.pause_schedule("flaky", note="ops (ana): the partner API is down, INC-42")
    assert (info.enabled, info.paused_note, info.paused_at) == (
        False,
        "ops (ana): the partner API is down, INC-42",
        t0,
    )
    assert not info.paused_on_failure
    assert health.find_paused_on_failure(t0) == []
    assert _row().paused_note == info.paused_note
    assert api.pause_schedule("flaky").paused_note == info.paused_note  # idempotent
    assert job.pk == _row().pk


def test_a_persons_note_on_a_pause_the_schedule_made_takes_it_over(t0):
    """To keep an auto-paused schedule paused on purpose: pause it with a note; check no
    longer reports it."""
    job = _job(pause_after_failures=1)
    _end(job, 0, False, t0)
    assert [f.code for f in health.find_paused_on_failure(t0)] == ["paused_on_failure"]
    info = api.pause_schedule("flaky", note="kept paused until the vendor fixes it (ana)")
    assert (info.enabled, info.paused_on_failure) == (False, False)
    assert health.find_paused_on_failure(t0) == []


@pytest.mark.parametrize(
    "note", ["x" * 2001, "NUL \x00 inside", 42], ids=["too-long", "nul", "not-text"]
)
def test_a_bad_note_is_refused_naming_its_field(note):
    _job()
    with pytest.raises(api.InvalidSchedule) as raised:
        api.pause_schedule("flaky", note=note)
    assert raised.value.field == "paused_note"
    assert _row().enabled


# --- the admin ------------------------------------------------------------------------------


def _act(client, action, *rows):
    return client.post(
        CHANGELIST, {"action": action, "_selected_action": [r.pk for r in rows]}, follow=True
    )


def test_the_admin_shows_the_pause_and_its_note_on_the_list_and_the_change_page(admin_client, t0):
    job = _job()
    for i in range(3):
        _end(job, i, False, t0)
    listed = admin_client.get(CHANGELIST).content.decode()
    assert "paused 0 s ago: paused after 3 failures in a row" in listed
    page = admin_client.get(f"{CHANGELIST}{job.pk}/change/").content.decode()
    assert "it paused itself: check reports it until it is resumed" in page
    assert "failures in a row: 3 of 3" in page


def test_the_admins_disable_writes_who_and_when_and_enable_clears_it(admin_client, t0):
    job = _job()
    _end(job, 0, False, t0)
    _act(admin_client, "disable", job)
    row = _row()
    assert not row.enabled
    assert row.paused_note == "paused in the admin by admin at 2026-03-02 12:00:00 UTC"
    assert "paused in the admin by admin" in admin_client.get(CHANGELIST).content.decode()
    _act(admin_client, "enable", job)
    row = _row()
    assert (row.enabled, row.paused_note, row.failures_in_a_row) == (True, None, None)


def test_the_admins_disable_of_an_automatic_pause_keeps_its_note_after_its_own(admin_client, t0):
    job = _job(pause_after_failures=1)
    _end(job, 0, False, t0)
    before = _row().paused_note
    _act(admin_client, "disable", job)
    row = _row()
    assert (
        row.paused_note
        == f"paused in the admin by admin at 2026-03-02 12:00:00 UTC; before: {before}"
    )
    assert not row.paused_on_failure and row.paused_at == t0


def test_unticking_enabled_on_the_change_page_keeps_the_typed_note_with_who(admin_client, t0):
    from tests.integration.admin_forms import schedule_form

    job = _job()
    url = f"{CHANGELIST}{job.pk}/change/"
    data = schedule_form(name="flaky", enabled=None, paused_note="vendor outage")
    data |= {"pause_after_failures": "3"}
    response = admin_client.post(url, data, follow=True)
    assert response.status_code == 200, response.content.decode()[:2000]
    row = _row()
    assert not row.enabled
    assert (
        row.paused_note == "vendor outage (paused in the admin by admin at 2026-03-02 12:00:00 UTC)"
    )


# --- check, status, the API's view ----------------------------------------------------------


def test_check_reports_an_automatic_pause_critical_with_its_note(t0):
    job = _job()
    for i in range(3):
        _end(job, i, False, t0)
    [finding] = health.findings(t0, ["paused_on_failure"])
    assert (finding.code, finding.severity, finding.schedule) == (
        "paused_on_failure",
        health.Severity.CRITICAL,
        "flaky",
    )
    assert finding.message.startswith(
        "flaky: not firing, it paused itself 0 s ago: paused after 3 failures in a row"
    )
    assert "resume it once its task is fixed" in finding.message
    out = io.StringIO()
    with pytest.raises(SystemExit) as exited:
        call_command("durablebeat", "check", "--only", "paused_on_failure", stdout=out)
    assert exited.value.code == 2
    assert out.getvalue().startswith("CRITICAL paused_on_failure: flaky: not firing")
    api.resume_schedule("flaky")
    assert health.findings(t0, ["paused_on_failure"]) == []


def test_status_shows_the_pause_and_its_note(t0):
    job = _job()
    for i in range(3):
        _end(job, i, False, t0)
    api.add_schedule("quiet", TASK, dt.timedelta(minutes=5))
    api.pause_schedule("quiet", note="holiday freeze (ana)")
    text = "\n".join(status.status_lines(t0))
    assert "1 paused on failure" in text.splitlines()[0]
    assert "paused on failure (after failures in a row: resume once fixed):" in text
    assert "no (paused 0 s ago: paused after 3 failures in a row" in text
    assert "no (paused 0 s ago: holiday freeze (ana))" in text
    rows = [json.loads(line) for line in status.status_json(t0, every=True)]
    by_name = {row["name"]: row for row in rows}
    assert by_name["flaky"]["paused_on_failure"] is True
    assert by_name["flaky"]["failures_in_a_row"] == 3
    assert by_name["quiet"]["paused_note"] == "holiday freeze (ana)"
    assert by_name["quiet"]["paused_at"] == t0.isoformat()


# --- the bound's values ---------------------------------------------------------------------


@pytest.mark.parametrize("bound", [-1, 10_001, "3", True, 2.5])
def test_a_bad_bound_is_refused_naming_its_field(bound):
    with pytest.raises(api.InvalidSchedule) as raised:
        _job(pause_after_failures=bound)
    assert raised.value.field == "pause_after_failures"


def test_a_bad_bound_in_beat_schedule_fails_the_entry_and_a_bad_row_its_save():
    entry = {"task": TASK, "schedule": 60.0, "options": {"durablebeat": {}}}
    entry["options"]["durablebeat"]["pause_after_failures"] = "3"
    with pytest.raises(BadEntry, match="pause_after_failures"):
        parse_beat_schedule({"bad": entry}, "UTC", check_task=False)
    entry["options"]["durablebeat"]["pause_after_failures"] = 3
    [code] = parse_beat_schedule({"good": entry}, "UTC", check_task=False)
    assert code.pause_after_failures == 3
    row = _job()
    row.pause_after_failures = 20_000
    with pytest.raises(ValidationError, match="pause_after_failures"):
        row.save()


def test_the_bound_travels_through_update_and_back_out_of_the_api():
    _job()
    api.update_schedule("flaky", options={"durablebeat": {"pause_after_failures": 5}})
    assert _row().pause_after_failures == 5
    api.update_schedule("flaky", options={"durablebeat": {"pause_after_failures": None}})
    assert _row().pause_after_failures is None


@pytest.mark.parametrize("value", [0, -1, 10_001, "3", 2.0])
def test_an_invalid_setting_is_refused_naming_it(settings, value):
    settings.DURABLEBEAT_PAUSE_AFTER_FAILURES = value
    with pytest.raises(conf.InvalidSetting, match="DURABLEBEAT_PAUSE_AFTER_FAILURES"):
        _ = conf.settings.PAUSE_AFTER_FAILURES
