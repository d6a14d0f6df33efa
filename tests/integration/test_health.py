"""R17: ``durablebeat check``: each finding fires on a situation built for it and stays
silent on a healthy one; exit codes 0 / 1 / 2; one line per finding; ``--json``."""

from __future__ import annotations

import datetime as dt
import io
import json

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import DatabaseError
from django.test import override_settings

from durablebeat.beat.claims import UNPUBLISHABLE
from durablebeat.enums import Failure, RunState
from durablebeat.management.commands.durablebeat import Command as DurablebeatCommand
from durablebeat.models import Boot, Schedule, WorkerHeartbeat
from durablebeat.ops import health, queues, run_findings
from durablebeat.worker import completion

pytestmark = pytest.mark.django_db

S = dt.timedelta(seconds=1)
MIN = dt.timedelta(minutes=1)
H = dt.timedelta(hours=1)


@pytest.fixture
def alive(make_boot, t0):
    """A beat that is running now, and has been for longer than any period counted here."""
    return make_boot(started_at=t0 - 60 * 24 * H, heartbeat_at=t0 - 5 * S)


@pytest.fixture
def healthy(alive, make_schedule, created_at, t0):
    """A minute job that fired and succeeded on time, due again in 30 s."""
    row = make_schedule(
        "minutely", every=60, next_fire_at=t0 + 30 * S, last_completed_at=t0 - 25 * S
    )
    created_at(row, t0 - 2 * H)
    return row


def codes(now):
    return [f.code for f in health.findings(now)]


def run_check(*args):
    out = io.StringIO()
    try:
        call_command("durablebeat", "check", *args, stdout=out)
    except SystemExit as exc:
        return int(exc.code), out.getvalue()
    return 0, out.getvalue()


# --- the healthy baseline -----------------------------------------------------------------


def test_healthy_system_has_no_findings_and_check_exits_0(healthy, t0, time_machine):
    time_machine.move_to(t0, tick=False)
    assert health.findings(t0) == []
    code, out = run_check()
    assert code == 0
    assert out.startswith("OK")


# --- no beat ------------------------------------------------------------------------------


def test_no_beat_ever_started_is_critical(t0):
    [finding] = health.findings(t0)
    assert (finding.code, finding.severity) == ("no_beat", health.Severity.CRITICAL)
    assert "no beat has ever started" in finding.message


def test_stale_heartbeat_is_critical_naming_the_host(make_boot, t0):
    make_boot(started_at=t0 - 5 * H, heartbeat_at=t0 - 3 * H, hostname="old-pod")
    [finding] = health.findings(t0)
    assert finding.code == "no_beat"
    assert "old-pod" in finding.message and "3 h" in finding.message


def test_stopped_boot_is_not_alive_even_with_a_fresh_heartbeat(make_boot, t0):
    make_boot(started_at=t0 - H, heartbeat_at=t0 - 2 * S, stopped_at=t0 - 2 * S)
    assert not health.beat_alive(t0)


# --- deploys (R27) ------------------------------------------------------------------------


def test_a_clean_stop_is_quiet_within_the_deploy_grace(make_boot, t0):
    """The issue's alert per merge: a clean stop 35 s ago is a deploy, not an outage."""
    make_boot(started_at=t0 - H, heartbeat_at=t0 - 35 * S, stopped_at=t0 - 35 * S)
    assert codes(t0) == []
    assert codes(t0 + 85 * S) == []  # at the bound (120 s): still quiet


def test_a_clean_stop_with_no_successor_past_the_deploy_grace_is_critical(make_boot, t0):
    make_boot(started_at=t0 - H, heartbeat_at=t0, stopped_at=t0, hostname="web-7")
    [finding] = health.findings(t0 + 2 * MIN + S)
    assert (finding.code, finding.severity) == ("no_beat", health.Severity.CRITICAL)
    assert "web-7" in finding.message and "stopped 2 min ago" in finding.message
    assert "deploy grace (2 min)" in finding.message


def test_a_successor_booted_within_the_grace_is_quiet_after_it(make_boot, t0):
    make_boot(started_at=t0 - H, heartbeat_at=t0, stopped_at=t0)
    make_boot(started_at=t0 + 20 * S, heartbeat_at=t0 + 3 * MIN)
    assert codes(t0 + 3 * MIN) == []


@pytest.mark.parametrize("quiet_for", [0, 30, 600])
def test_the_deploy_grace_follows_the_setting(settings, make_boot, t0, quiet_for):
    settings.DURABLEBEAT_DEPLOY_GRACE = quiet_for
    make_boot(started_at=t0 - H, heartbeat_at=t0, stopped_at=t0)
    assert codes(t0 + quiet_for * S) == []
    assert codes(t0 + quiet_for * S + S) == ["no_beat"]


def test_a_beat_gone_without_stopping_keeps_the_heartbeat_bound(make_boot, t0):
    """No clean stop: a crash, not a deploy. The deploy grace does not apply: critical once
    the heartbeat is older than HEARTBEAT_STALE_AFTER (60 s), as before."""
    make_boot(started_at=t0 - H, heartbeat_at=t0)
    assert codes(t0 + 60 * S) == []
    assert codes(t0 + 61 * S) == ["no_beat"]


def test_a_successor_that_died_without_stopping_is_critical_inside_the_grace(make_boot, t0):
    make_boot(started_at=t0 - H, heartbeat_at=t0, stopped_at=t0)
    make_boot(started_at=t0 + 5 * S, heartbeat_at=t0 + 6 * S)  # crashed at once
    assert codes(t0 + 70 * S) == ["no_beat"]


def test_fresh_heartbeat_is_alive(alive, t0):
    assert "no_beat" not in codes(t0)


@override_settings(DURABLEBEAT_HEARTBEAT_STALE_AFTER=10)
def test_heartbeat_staleness_follows_the_setting(make_boot, t0):
    make_boot(started_at=t0 - H, heartbeat_at=t0 - 15 * S)
    assert codes(t0) == ["no_beat"]


# --- overdue (starvation) -----------------------------------------------------------------


def test_overdue_while_beat_is_alive_is_critical(healthy, make_schedule, t0):
    make_schedule("starved", every=60, next_fire_at=t0 - 3 * MIN)
    [finding] = health.findings(t0)
    assert (finding.code, finding.schedule) == ("overdue", "starved")
    assert finding.severity == health.Severity.CRITICAL
    assert "3 min ago" in finding.message


def test_late_within_tolerance_is_not_overdue(healthy, make_schedule, t0):
    make_schedule("late", every=60, next_fire_at=t0 - MIN)
    assert codes(t0) == []


def test_overdue_is_not_reported_when_no_beat_is_alive(make_schedule, t0):
    """Every schedule is late when beat is down: one no_beat line says it, not 100 lines."""
    make_schedule("starved", every=60, next_fire_at=t0 - H)
    assert codes(t0) == ["no_beat"]


def test_disabled_schedule_is_never_overdue(healthy, make_schedule, t0):
    make_schedule("off", every=60, next_fire_at=t0 - H, enabled=False)
    assert codes(t0) == []


# --- stuck --------------------------------------------------------------------------------


def test_stuck_longer_than_threshold_is_critical(healthy, t0):
    Schedule.objects.filter(pk=healthy.pk).update(
        stuck_since=t0 - 7 * H, stuck_reason="previous run is still started on w1"
    )
    [finding] = health.findings(t0)
    assert (finding.code, finding.severity) == ("stuck", health.Severity.CRITICAL)
    assert "7 h" in finding.message and "still started on w1" in finding.message


def test_stuck_shorter_than_threshold_is_silent(healthy, t0):
    Schedule.objects.filter(pk=healthy.pk).update(stuck_since=t0 - 5 * H, stuck_reason="x")
    assert codes(t0) == []


# --- lost and unresolved runs -------------------------------------------------------------


def test_recently_lost_run_is_a_warning(healthy, make_run, t0):
    make_run(healthy, t0 - 2 * H, state=RunState.LOST, finished_at=t0 - H)
    [finding] = health.findings(t0)
    assert (finding.code, finding.severity) == ("lost_runs", health.Severity.WARNING)
    assert finding.schedule == "minutely" and "1 run(s) lost" in finding.message


def test_lost_run_older_than_the_lookback_is_silent(healthy, make_run, t0):
    make_run(healthy, t0 - 50 * H, state=RunState.LOST, finished_at=t0 - 49 * H)
    make_run(healthy, t0 - H, state=RunState.SUCCEEDED, finished_at=t0 - H)
    assert codes(t0) == []


def test_claimed_but_never_published_is_unresolved(healthy, make_run, t0):
    make_run(healthy, t0 - 10 * MIN, state=RunState.CLAIMED)
    [finding] = health.findings(t0)
    assert finding.code == "unresolved_runs"
    assert "never confirmed on the broker" in finding.message


def test_published_and_never_started_past_the_no_news_bound_is_no_news(healthy, make_run, t0):
    """R22: reported when it stops holding its schedule (2 min by default), not an hour later."""
    make_run(healthy, t0 - 3 * MIN, state=RunState.PUBLISHED, published_at=t0 - 3 * MIN)
    [finding] = health.findings(t0)
    assert (finding.code, finding.severity) == ("no_news", health.Severity.WARNING)
    assert finding.schedule == "minutely" and "no worker started" in finding.message
    assert health.exit_code([finding]) == 1


# --- a worker without durablebeat's tracking (R13, R27) ------------------------------------


def _task_result(run, status):
    from django_celery_results.models import TaskResult

    TaskResult.objects.create(task_id=run.task_id, status=status)


@pytest.mark.parametrize("state", [RunState.PUBLISHED, RunState.NO_NEWS])
@pytest.mark.parametrize("status", ["SUCCESS", "FAILURE", "STARTED"])
def test_runs_the_result_backend_shows_executed_are_untracked_worker_not_no_news(
    healthy, make_run, t0, state, status
):
    """The issue's wrong diagnosis: a worker without durablebeat in INSTALLED_APPS ran the
    task (the result backend says so) and check said "message lost by the broker"."""
    run = make_run(healthy, t0 - 3 * MIN, state=state, published_at=t0 - 3 * MIN)
    _task_result(run, status)
    [finding] = health.findings(t0)
    assert (finding.code, finding.severity) == ("untracked_worker", health.Severity.WARNING)
    assert finding.schedule == "minutely"
    assert "no worker reported" in finding.message and "INSTALLED_APPS" in finding.message


def test_a_pending_result_is_no_evidence_and_stays_no_news(healthy, make_run, t0):
    run = make_run(healthy, t0 - 3 * MIN, state=RunState.PUBLISHED, published_at=t0 - 3 * MIN)
    _task_result(run, "PENDING")
    assert codes(t0) == ["no_news"]


def test_a_run_finished_by_the_reconciliation_with_no_start_is_untracked(healthy, make_run, t0):
    run = make_run(healthy, t0 - 8 * MIN, state=RunState.PUBLISHED, published_at=t0 - 8 * MIN)
    event = completion.Finished(run.task_id, t0 - 7 * MIN, succeeded=True, from_backend=True)
    assert completion.finish(event)
    assert codes(t0) == ["untracked_worker"]
    assert codes(t0 + 25 * H) == ["no_beat"]  # past the look-back (and the beat's heartbeat)


def test_a_started_run_finished_by_the_reconciliation_is_not_untracked(healthy, make_run, t0):
    """A worker that reported the start and was then killed (a hard time limit: only the
    result backend tells the end, R12) is tracked."""
    run = make_run(
        healthy, t0 - 8 * MIN, state=RunState.STARTED, started_at=t0 - 8 * MIN, worker="w@h"
    )
    event = completion.Finished(run.task_id, t0 - 7 * MIN, succeeded=False, from_backend=True)
    assert completion.finish(event)
    assert codes(t0) == []


def test_a_completion_a_worker_sent_is_not_untracked(healthy, make_run, t0):
    """A worker that dropped an expired message reports it (revoked) without a start."""
    run = make_run(healthy, t0 - 3 * MIN, state=RunState.PUBLISHED, published_at=t0 - 3 * MIN)
    assert completion.finish(completion.Finished(run.task_id, t0 - 2 * MIN, succeeded=False))
    assert codes(t0) == []


def test_a_slot_whose_message_was_refused_is_reported_by_name(healthy, make_run, t0):
    """R21: a message the broker client refuses for its own content fails its slot at once;
    check says so now, not after no_success's few periods."""
    detail = f"{UNPUBLISHABLE}: OverflowError: Python int too large to convert"
    make_run(
        healthy,
        t0 - 2 * MIN,
        state=RunState.FAILED,
        finished_at=t0 - 2 * MIN,
        detail=detail,
        failure=Failure.UNPUBLISHABLE,
    )
    make_run(healthy, t0 - MIN, state=RunState.FAILED, finished_at=t0 - MIN, error="boom")
    # a body that failed with the same words in its detail is not a refused message
    make_run(healthy, t0 - 3 * MIN, state=RunState.FAILED, finished_at=t0 - MIN, detail=detail)
    [finding] = health.findings(t0)
    assert (finding.code, finding.schedule) == ("unpublishable", "minutely")
    assert "1 slot(s) not sent" in finding.message
    assert "unpublishable" not in codes(t0 + 25 * H)  # past CHECK_LOOKBACK


def test_published_within_the_no_news_bound_is_silent(healthy, make_run, t0):
    make_run(healthy, t0 - 90 * S, state=RunState.PUBLISHED, published_at=t0 - 90 * S)
    assert codes(t0) == []


def test_a_countdowns_run_has_no_news_only_past_its_eta_plus_the_bound(healthy, make_run, t0):
    """R22 + R25: a message delayed by countdown is not started before its ETA; check, the
    no-news round and the overlap evidence wait for it, then say so as for any run."""
    from durablebeat.beat import reclaim
    from durablebeat.beat.claims import _in_flight

    Schedule.objects.filter(pk=healthy.pk).update(countdown=600)
    run = make_run(healthy, t0 - 5 * MIN, state=RunState.PUBLISHED, published_at=t0 - 5 * MIN)
    assert codes(t0) == []
    assert reclaim.no_news_round(t0) == 0
    assert _in_flight([healthy.pk], t0)[healthy.pk] == [run]  # still holds the schedule
    later = t0 + 8 * MIN  # 13 min after the publish: past 10 min + 2 min
    assert reclaim.no_news_round(later) == 1
    run.refresh_from_db()
    assert run.state == RunState.NO_NEWS
    assert "no_news" in codes(later)


def test_run_marked_no_news_is_reported_for_the_lookback_unless_news_came(healthy, make_run, t0):
    run = make_run(healthy, t0 - H, state=RunState.NO_NEWS, published_at=t0 - H)
    make_run(healthy, t0 - 30 * H, state=RunState.NO_NEWS, published_at=t0 - 30 * H)
    [finding] = health.findings(t0)
    assert finding.code == "no_news" and "1 run(s)" in finding.message
    run.state = RunState.SUCCEEDED  # a late completion (R11)
    run.save()
    assert codes(t0) == []


def test_started_past_its_hard_limit_plus_margin_is_unresolved(healthy, make_run, t0):
    make_run(
        healthy,
        t0 - 10 * MIN,
        state=RunState.STARTED,
        started_at=t0 - 10 * MIN,
        hard_time_limit=60,
        worker="w1",
    )
    assert codes(t0) == ["unresolved_runs"]


def test_runs_in_flight_within_their_limits_are_silent(healthy, make_run, t0):
    make_run(
        healthy,
        t0 - 10 * MIN,
        state=RunState.STARTED,
        started_at=t0 - 10 * MIN,
        hard_time_limit=3600,
    )
    make_run(healthy, t0 - 1 * MIN, state=RunState.PUBLISHED, published_at=t0 - 1 * MIN)
    make_run(healthy, t0 - 30 * S, state=RunState.CLAIMED)
    assert codes(t0) == []


# --- no success ---------------------------------------------------------------------------


def test_no_success_over_the_last_periods_is_a_warning(healthy, t0):
    Schedule.objects.filter(pk=healthy.pk).update(
        last_completed_at=t0 - 10 * MIN, last_outcome=RunState.FAILED
    )
    [finding] = health.findings(t0)
    assert (finding.code, finding.severity) == ("no_success", health.Severity.WARNING)
    assert "last 3 periods" in finding.message and "failed" in finding.message


def test_never_succeeded_daily_job_restarted_away_is_flagged(alive, make_schedule, created_at, t0):
    """The §1 story: next fire always in the future (never overdue), yet no run in days."""
    row = make_schedule("daily", every=24 * 3600, next_fire_at=t0 + 20 * H)
    created_at(row, t0 - 4 * 24 * H)
    assert codes(t0) == ["no_success"]


def test_new_schedule_is_not_flagged_before_its_periods_pass(alive, make_schedule, created_at, t0):
    row = make_schedule("daily", every=24 * 3600, next_fire_at=t0 + 23 * H)
    created_at(row, t0 - H)
    assert codes(t0) == []


def test_a_schedule_enabled_again_counts_its_periods_from_then(
    alive, make_schedule, created_at, t0
):
    """Disabled for weeks, then enabled again (admin, form or code): no warning for its old
    silence, one once it has again gone its periods without a success."""
    row = make_schedule("hourly", every=3600, next_fire_at=t0 + H)
    created_at(row, t0 - 30 * 24 * H)
    Schedule.objects.filter(pk=row.pk).update(last_completed_at=t0 - 20 * 24 * H)
    assert codes(t0) == ["no_success"]
    Schedule.objects.filter(pk=row.pk).update(enabled_at=t0)
    assert run_findings.find_no_success(t0 + 10 * MIN) == []
    Boot.objects.filter(pk=alive.pk).update(heartbeat_at=t0 + 5 * H)  # beat still running
    assert len(run_findings.find_no_success(t0 + 5 * H)) == 1


def test_crontab_no_success_counts_its_slots(alive, make_schedule, created_at, t0):
    row = make_schedule("hourly", kind="crontab", minute="0", next_fire_at=t0 + H)
    created_at(row, t0 - 10 * H)
    Schedule.objects.filter(pk=row.pk).update(last_completed_at=t0 - 2 * H - MIN)
    assert codes(t0) == []  # two slots since: 10:00, 11:00 (12:00 is within the tolerance)
    Schedule.objects.filter(pk=row.pk).update(last_completed_at=t0 - 4 * H)
    assert codes(t0) == ["no_success"]


# --- only time a beat was alive counts (R27) -----------------------------------------------


@pytest.fixture
def deploy(make_boot, make_schedule, created_at, t0):
    """A 10-s job that succeeded until a clean stop at t0; the next beat boots 2 min later."""
    make_boot(started_at=t0 - 30 * 24 * H, heartbeat_at=t0, stopped_at=t0)
    row = make_schedule("ten-s", every=10, next_fire_at=t0 + 5 * S, last_completed_at=t0 - S)
    created_at(row, t0 - 24 * H)
    return row


def _successor(make_boot, started_at, now):
    return make_boot(started_at=started_at, heartbeat_at=now - S)


def _beat_runs_it(row, boot, now, t0, succeeds):
    """What the beat booted at t0 + 2 min does to the row by ``now``: at boot the overdue
    slot waits for the startup grace (R2: t0 + 3 min); then it fires every 10 s."""
    Boot.objects.filter(pk=boot.pk).update(heartbeat_at=now - S)
    first = t0 + 3 * MIN
    fired = [first + n * 10 * S for n in range(100) if first + n * 10 * S <= now]
    changes = {"next_fire_at": fired[-1] + 10 * S if fired else first}
    if succeeds and fired and now - fired[-1] >= S:
        changes["last_completed_at"] = fired[-1] + S
    Schedule.objects.filter(pk=row.pk).update(**changes)


def test_a_two_minute_deploy_with_a_ten_second_interval_raises_nothing(deploy, make_boot, t0):
    """The issue's false warning: downtime and startup grace counted as periods (no_success
    said so from t0 + 2 min 31 s until the first fire after the grace succeeded)."""
    boot = _successor(make_boot, t0 + 2 * MIN, t0 + 2 * MIN)
    for now in (t0 + n * 5 * S for n in range(24, 73)):  # t0 + 2 min .. t0 + 6 min
        _beat_runs_it(deploy, boot, now, t0, succeeds=True)
        assert codes(now) == [], now


def test_a_failure_streak_after_a_deploy_is_still_reported(deploy, make_boot, t0):
    """Three periods (30 s) of beat time with no success: the 1 s before the stop, and
    29 s past the new beat's grace (t0 + 3 min), reached once the tolerance (120 s) passed."""
    now = t0 + 3 * MIN + 29 * S + 2 * MIN
    boot = _successor(make_boot, t0 + 2 * MIN, now)
    _beat_runs_it(deploy, boot, now - S, t0, succeeds=False)
    assert codes(now - S) == []
    _beat_runs_it(deploy, boot, now, t0, succeeds=False)
    assert codes(now) == ["no_success"]


def test_time_with_no_beat_alive_does_not_count_toward_no_success(make_boot, deploy, t0):
    """A beat gone without stopping: its silence until the next boot is not counted."""
    Boot.objects.update(stopped_at=None)
    boot = _successor(make_boot, t0 + 2 * MIN, t0 + 2 * MIN)
    _beat_runs_it(deploy, boot, t0 + 5 * MIN + 28 * S, t0, succeeds=False)
    assert codes(t0 + 5 * MIN + 28 * S) == []  # 1 s + 28 s of beat time: not 3 periods


def test_a_beat_alive_throughout_counts_every_period(make_boot, deploy, t0):
    """The same silence with a beat alive all along is a failure streak."""
    Boot.objects.update(stopped_at=None, heartbeat_at=t0 + 3 * MIN)
    Schedule.objects.update(next_fire_at=t0 + 3 * MIN)
    assert codes(t0 + 3 * MIN) == ["no_success"]


def test_overdue_counts_only_time_a_beat_was_alive_past_its_grace(make_boot, make_schedule, t0):
    """After a 5-min outage the new beat is alive, but the crontab it has not yet moved on is
    not starved: it becomes overdue only once the beat has had tolerance past its grace."""
    make_boot(started_at=t0 - 30 * 24 * H, heartbeat_at=t0, stopped_at=t0)
    make_schedule("cron", kind="crontab", minute="*", next_fire_at=t0 + MIN)
    boot = _successor(make_boot, t0 + 5 * MIN, t0 + 5 * MIN)
    edge = t0 + 5 * MIN + MIN + 2 * MIN  # boot + grace (60 s) + tolerance (120 s)
    for now in (t0 + 5 * MIN + S, edge - S, edge):
        Boot.objects.filter(pk=boot.pk).update(heartbeat_at=now - S)
        assert codes(now) == [], now
    Boot.objects.filter(pk=boot.pk).update(heartbeat_at=edge)
    assert codes(edge + S) == ["overdue"]


# --- bad rows -----------------------------------------------------------------------------


def test_bad_row_is_a_warning_with_its_error(healthy, t0):
    Schedule.objects.filter(pk=healthy.pk).update(error="minute: 61 is out of range")
    [finding] = health.findings(t0)
    assert (finding.code, finding.severity) == ("bad_row", health.Severity.WARNING)
    assert "61 is out of range" in finding.message


def test_bad_row_cleared_by_an_edit_is_silent(healthy, t0):
    Schedule.objects.filter(pk=healthy.pk).update(error="minute: bad")
    healthy.refresh_from_db()
    healthy.save()  # an admin edit: beat validates it afresh
    assert codes(t0) == []


# --- the command --------------------------------------------------------------------------


def test_check_exits_1_on_warnings_one_line_per_finding(healthy, make_run, t0, time_machine):
    time_machine.move_to(t0, tick=False)
    make_run(healthy, t0 - 2 * H, state=RunState.LOST, finished_at=t0 - H)
    Schedule.objects.filter(pk=healthy.pk).update(error="hour: bad")
    code, out = run_check()
    assert code == 1
    lines = out.strip().splitlines()
    assert len(lines) == 2
    assert {ln.split(":")[0] for ln in lines} == {"WARNING lost_runs", "WARNING bad_row"}


def test_check_exits_2_on_critical_worst_first(healthy, make_schedule, make_run, t0, time_machine):
    time_machine.move_to(t0, tick=False)
    make_run(healthy, t0 - 2 * H, state=RunState.LOST, finished_at=t0 - H)
    make_schedule("starved", every=60, next_fire_at=t0 - H)
    code, out = run_check()
    assert code == 2
    assert out.splitlines()[0].startswith("CRITICAL overdue: starved")


def test_check_json_lists_findings(t0, time_machine):
    time_machine.move_to(t0, tick=False)
    code, out = run_check("--json")
    assert code == 2
    [finding] = json.loads(out)
    assert finding["code"] == "no_beat" and finding["severity"] == "critical"


def test_check_only_reports_the_codes_asked_for(healthy, t0, time_machine):
    """A beat liveness probe must not restart beat because a task fails."""
    time_machine.move_to(t0, tick=False)
    Schedule.objects.filter(pk=healthy.pk).update(error="hour: bad")
    assert run_check("--only", "no_beat")[0] == 0
    assert run_check("--only", "no_beat,bad_row")[0] == 1


def test_check_says_the_database_is_unreachable(monkeypatch):
    def down(now, only=None):
        raise DatabaseError("connection refused")

    monkeypatch.setattr(health, "findings", down)
    code, out = run_check()
    assert code == 2
    assert out.startswith("CRITICAL database_unreachable: cannot read the database")


def test_liveness_probe_does_not_fail_on_a_database_outage_it_cannot_fix(monkeypatch):
    """Beat fires from memory through a database outage (R5): restarting it would not help."""

    def down(now, only=None):
        raise DatabaseError("connection refused")

    monkeypatch.setattr(health, "findings", down)
    code, out = run_check("--only", "no_beat,overdue")
    assert code == 0
    assert "database_unreachable" in out  # said, not counted
    assert run_check("--only", "no_beat,database_unreachable")[0] == 2


def test_check_refuses_an_unknown_code():
    with pytest.raises(CommandError, match="unknown finding codes: nope"):
        run_check("--only", "no_beat,nope")


# --- a queue nobody consumes (issue 39 item 5) -----------------------------------------------


def test_a_queue_no_worker_consumes_is_a_warning_naming_it_and_the_fix(
    healthy, make_schedule, make_run, created_at, real_queue, t0, time_machine
):
    """Issue 39: docs/from-code.md's digest sends to queue ``mail``; the README's worker
    consumes only ``celery``. Its message waits in the real Redis broker, and check says so
    45 s after the send, not only once the no-news bound (2 min) has passed."""
    digest = make_schedule("digest-acme", every=3600, queue=real_queue.name, next_fire_at=t0 + H)
    created_at(digest, t0 - 2 * H)
    sent = t0 - 45 * S
    task_id = real_queue.send()
    make_run(digest, sent, state=RunState.PUBLISHED, published_at=sent, task_id=task_id)
    WorkerHeartbeat.objects.create(worker="celery@web", pid=7, seen_at=t0 - 5 * S, queues="celery")
    [finding] = health.findings(t0)
    assert (finding.code, finding.severity) == ("unconsumed_queue", health.Severity.WARNING)
    assert f"queue '{real_queue.name}': 1 message(s) waiting" in finding.message
    assert "(digest-acme)" in finding.message and "the oldest 45 s ago" in finding.message
    assert "2026-03-02 11:59:15 UTC" in finding.message
    assert "no live worker consumes it (they consume celery)" in finding.message
    assert f"celery -A project worker -Q {real_queue.name})" in finding.message
    assert f"-Q celery,{real_queue.name}" in finding.message
    time_machine.move_to(t0, tick=False)
    code, out = run_check("--only", "unconsumed_queue")
    assert code == 1 and out.startswith("WARNING unconsumed_queue: ")


def test_a_queue_a_live_worker_consumes_is_silent_on_the_healthy_fixture(
    healthy, make_run, real_queue, t0
):
    """The healthy fixture, with a run of its own waiting in a queue a live worker lists."""
    healthy.queue = real_queue.name
    healthy.save()
    sent = t0 - 45 * S
    task_id = real_queue.send()
    make_run(healthy, sent, state=RunState.PUBLISHED, published_at=sent, task_id=task_id)
    queues_ = f"celery\n{real_queue.name}"
    WorkerHeartbeat.objects.create(worker="celery@web", pid=7, seen_at=t0 - 5 * S, queues=queues_)
    assert queues.find_unconsumed_queues(t0) == []
    assert codes(t0) == []


def test_every_finding_at_once_each_with_its_documented_severity(
    make_boot, make_schedule, make_run, created_at, real_queue, t0
):
    """Everything broken at once: one line each, severities as SEVERITIES documents them."""
    stale = make_boot(started_at=t0 - 5 * H, heartbeat_at=t0 - 3 * H)
    starved = make_schedule("starved", every=60, next_fire_at=t0 - H)
    created_at(starved, t0 - 10 * H)
    Schedule.objects.filter(pk=starved.pk).update(stuck_since=t0 - 7 * H, stuck_reason="busy")
    make_run(starved, t0 - 2 * H, boot=stale, state=RunState.LOST, finished_at=t0 - H)
    make_run(starved, t0 - 10 * MIN, boot=stale, state=RunState.CLAIMED)
    make_run(starved, t0 - 30 * MIN, state=RunState.PUBLISHED, published_at=t0 - 30 * MIN)
    refused = f"{UNPUBLISHABLE}: OverflowError: expires"
    make_run(
        starved,
        t0 - 20 * MIN,
        state=RunState.FAILED,
        finished_at=t0,
        detail=refused,
        failure=Failure.UNPUBLISHABLE,
    )
    make_run(starved, t0 - 40 * MIN, finished_at=t0 - 30 * MIN, detail=completion.UNTRACKED)
    mail = make_schedule("mail", every=3600, queue=real_queue.name, next_fire_at=t0 + H)
    make_run(
        mail, t0 - MIN, state=RunState.PUBLISHED, published_at=t0 - MIN, task_id=real_queue.send()
    )
    broken = make_schedule("broken", every=60)
    Schedule.objects.filter(pk=broken.pk).update(error="every: bad")
    flaky = make_schedule("flaky", every=60, pause_after_failures=3)
    Schedule.objects.filter(pk=flaky.pk).update(enabled=False)  # R36: as pausing writes it
    Schedule.objects.filter(pk=flaky.pk).update(
        failures_in_a_row=3, paused_note="paused after 3 failures in a row", paused_on_failure=True
    )
    from durablebeat.beat import dberrors

    dberrors.record("ProgrammingError: permission denied", stale.pk, t0 - MIN)
    without_beat = {f.code for f in health.findings(t0)}
    # beat back (on a host whose clock is off, R26): now it starves
    make_boot(started_at=t0 - H, heartbeat_at=t0 - 5 * S, clock_offset_seconds=-30.0)
    found = health.findings(t0)
    # check_failed is no state of the data: test_monitoring_extremes injects it.
    # bad_setting is reported alone (no other finding can be computed with it): its own test.
    # migrations_pending needs a schema rolled back: test_expand_contract.py.
    # listen_deaf needs a beat behind a pooler: test_pooler.py.
    unbuilt = {"database_unreachable", "check_failed", "bad_setting", "migrations_pending"}
    unbuilt |= {"listen_deaf"}
    assert {f.code for f in found} | without_beat == set(health.CODES) - unbuilt
    assert "no_beat" in without_beat and "overdue" not in without_beat
    for f in found:
        assert f.severity == health.SEVERITIES[f.code], f
    assert [f.severity for f in found] == sorted((f.severity for f in found), reverse=True)


@pytest.mark.parametrize("only", [(), ("--only", "no_beat,overdue")])
def test_an_invalid_setting_is_a_critical_finding_exit_2(settings, only):
    """Not Django's SystemCheckError (exit 1): one line per setting, whatever --only asks."""
    settings.DURABLEBEAT_LATE_AFTER = -1
    settings.DURABLEBEAT_METRICS_PUBLIC = "yes"
    out = io.StringIO()
    command = DurablebeatCommand(stdout=out)
    with pytest.raises(SystemExit) as exc:  # as from a shell: Django's checks not skipped
        command.run_from_argv(["manage.py", "durablebeat", "check", *only])
    assert exc.value.code == 2
    lines = out.getvalue().splitlines()
    assert len(lines) == 2
    assert all(line.startswith("CRITICAL bad_setting: DURABLEBEAT_") for line in lines)
    assert {"LATE_AFTER", "METRICS_PUBLIC"} == {line.split()[2][12:] for line in lines}
