"""R18: ``durablebeat report --since 48h`` counts fires per boot and reason and flags any
schedule that fired more than 1.5x what its period allows; ``status`` is a table."""

from __future__ import annotations

import datetime as dt
import io
import json

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from durablebeat import words
from durablebeat.enums import Reason, RunState
from durablebeat.models import MissedSlots, Run, Schedule
from durablebeat.ops import report

pytestmark = pytest.mark.django_db

S = dt.timedelta(seconds=1)
MIN = dt.timedelta(minutes=1)
H = dt.timedelta(hours=1)
DAY = dt.timedelta(days=1)


def window(t0):
    return t0 - 48 * H, t0


def command(*args):
    out = io.StringIO()
    call_command("durablebeat", *args, stdout=out)
    return out.getvalue()


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("48h", 48 * 3600),
        ("2d", 2 * 86400),
        ("1h30m", 5400),
        ("90s", 90),
        ("600", 600),
        ("1w", 7 * 86400),
        ("1.5h", 5400),
    ],
)
def test_parse_duration(text, seconds):
    assert words.parse_duration(text) == dt.timedelta(seconds=seconds)


@pytest.mark.parametrize("text", ["", "48x", "h", "48h tomorrow", "-5m"])
def test_parse_duration_refuses_nonsense(text):
    with pytest.raises(ValueError, match="not a duration"):
        words.parse_duration(text)


def test_fires_are_counted_per_boot_and_reason(make_schedule, make_boot, make_run, t0):
    job = make_schedule("job", every=600)
    first = make_boot(started_at=t0 - 30 * H, heartbeat_at=t0 - 20 * H, stopped_at=t0 - 20 * H)
    second = make_boot(started_at=t0 - 20 * H, heartbeat_at=t0 - 5 * S, hostname="pod-2")
    make_run(job, t0 - 29 * H, boot=first, reason=Reason.STARTUP_GRACE)
    make_run(job, t0 - 28 * H, boot=first)
    make_run(job, t0 - 27 * H, boot=first)
    make_run(job, t0 - 19 * H, boot=second, reason=Reason.CATCH_UP)
    make_run(job, t0 - 18 * H, boot=second, reason=Reason.REPUBLISH)
    make_run(job, t0 - 17 * H, reason=Reason.MANUAL)  # admin "run now": no boot
    # Not fires: a skipped slot, a missed one, and a fire before the window.
    make_run(job, t0 - 16 * H, boot=second, state=RunState.SKIPPED, detail="still running")
    make_run(job, t0 - 15 * H, boot=second, state=RunState.MISSED)
    # Claimed (so it has a task id) but never sent, then given up on: not a fire either.
    make_run(job, t0 - 14 * H, boot=second, state=RunState.MISSED, task_id="never-sent")
    make_run(job, t0 - 60 * H, boot=first)
    MissedSlots.objects.create(
        schedule=job,
        boot=second,
        count=7,
        first_slot=t0 - 20 * H,
        last_slot=t0 - 19 * H,
        reason="no beat was running",
        recorded_at=t0 - 19 * H,
    )

    built = report.build_report(*window(t0))

    assert built.total == 6
    assert built.by_reason == {
        Reason.SCHEDULED: 2,
        Reason.STARTUP_GRACE: 1,
        Reason.CATCH_UP: 1,
        Reason.MANUAL: 1,
        Reason.REPUBLISH: 1,
    }
    by_boot = {b.id: b for b in built.boots}
    assert by_boot[first.pk].fires == {Reason.STARTUP_GRACE: 1, Reason.SCHEDULED: 2}
    assert by_boot[first.pk].stopped and by_boot[first.pk].ended_at == t0 - 20 * H
    assert by_boot[second.pk].fires == {Reason.CATCH_UP: 1, Reason.REPUBLISH: 1}
    assert (by_boot[second.pk].skipped, by_boot[second.pk].missed_slots) == (1, 7)
    assert by_boot[None].fires == {Reason.MANUAL: 1}
    assert built.by_schedule == {"job": 6}
    assert built.overfired == []


def test_daily_job_that_ran_43_times_is_flagged(make_schedule, make_run, t0, time_machine):
    """The §2 story: a catch-up rule re-ran a daily job on every restart."""
    time_machine.move_to(t0, tick=False)
    daily = make_schedule("daily", every=24 * 3600)
    for i in range(43):
        make_run(daily, t0 - 40 * H + i * 30 * MIN, reason=Reason.STARTUP_GRACE)
    [flag] = report.build_report(*window(t0)).overfired
    assert (flag.schedule, flag.fired, flag.allowed) == ("daily", 43, 3)
    out = command("report", "--since", "48h")
    assert "FLAGGED" in out
    assert "daily: fired 43 times, its period allows 3" in out


def test_daily_job_firing_on_its_period_is_not_flagged(make_schedule, make_run, t0, time_machine):
    time_machine.move_to(t0, tick=False)
    daily = make_schedule("daily", every=24 * 3600)
    for k in range(3):  # 3 slots fit in a closed 48 h window
        make_run(daily, t0 - 47 * H + k * DAY)
    assert report.build_report(*window(t0)).overfired == []
    assert "no schedule fired more than 1.5x" in command("report")


@pytest.mark.parametrize(("fired", "flagged"), [(4, False), (5, True)])
def test_the_flag_is_at_one_and_a_half_times_the_allowance(
    make_schedule, make_run, t0, fired, flagged
):
    """48 h allow 3 daily fires: one extra startup-grace fire after a deploy (4) is within
    1.5x; 5 is not."""
    daily = make_schedule("daily", every=24 * 3600)
    for i in range(fired):
        reason = Reason.STARTUP_GRACE if i == fired - 1 else Reason.SCHEDULED
        make_run(daily, t0 - 47 * H + i * 11 * H, reason=reason)
    overfired = report.build_report(*window(t0)).overfired
    assert [(o.schedule, o.fired, o.allowed) for o in overfired] == (
        [("daily", fired, 3)] if flagged else []
    )


def test_crontab_allowance_is_its_slot_count(make_schedule, make_run, t0):
    hourly = make_schedule("hourly", kind="crontab", minute="0")
    for k in range(48):
        make_run(hourly, t0 - k * H)
    assert report.build_report(*window(t0)).overfired == []
    for k in range(30):
        make_run(hourly, t0 - k * H - 30 * MIN, reason=Reason.CATCH_UP)
    [flag] = report.build_report(*window(t0)).overfired
    assert (flag.fired, flag.allowed) == (78, 48)


def test_manual_fires_do_not_count_against_the_period(make_schedule, make_run, t0):
    daily = make_schedule("daily", every=24 * 3600)
    for i in range(10):
        make_run(daily, t0 - i * H, reason=Reason.MANUAL)
    assert report.build_report(*window(t0)).overfired == []


@pytest.mark.django_db(transaction=True)
def test_report_of_a_restarted_daily_job_counts_one_fire_a_day(make_engine, publisher, t0):
    """Driven through the engine: restarts every 2 h, then the report of those 3 days."""
    daily = {"daily": {"task": "tests.e2eapp.tasks.record", "schedule": dt.timedelta(hours=24)}}
    now, end = t0, t0 + 3 * DAY
    while now < end:
        engine = make_engine(daily)
        boot_end = now + 2 * H
        engine.tick(now)
        while (nxt := Schedule.objects.get(name="daily").next_fire_at) <= boot_end:
            now = max(now, nxt)
            engine.tick(now)
            Run.objects.filter(state=RunState.PUBLISHED).update(state=RunState.SUCCEEDED)
        engine.close(boot_end)
        now = boot_end
    built = report.build_report(t0, end)
    assert built.by_schedule == {"daily": 3}
    assert built.by_reason == {Reason.SCHEDULED: 2, Reason.STARTUP_GRACE: 1}
    assert len([b for b in built.boots if b.id]) == 36
    assert built.overfired == []


def test_report_command_text_and_json(make_schedule, make_boot, make_run, t0, time_machine):
    time_machine.move_to(t0, tick=False)
    job = make_schedule("job", every=600)
    boot = make_boot(started_at=t0 - 3 * H, heartbeat_at=t0 - 5 * S, hostname="pod-1")
    make_run(job, t0 - H, boot=boot)
    text = command("report", "--since", "48h")
    assert "1 fires: 1 scheduled" in text
    assert "pod-1:4242: started 2026-03-02 09:00:00 UTC, last seen 2026-03-02 11:59:55 UTC" in text
    data = json.loads(command("report", "--since", "2d", "--json"))
    assert data["total_fires"] == 1
    assert data["boots"][0]["fires"] == {"scheduled": 1}


def test_report_refuses_a_bad_window():
    with pytest.raises(CommandError, match="not a duration"):
        command("report", "--since", "yesterday")


def test_status_is_a_table_like_the_admin_list(make_schedule, make_boot, t0, time_machine):
    time_machine.move_to(t0, tick=False)
    make_boot(started_at=t0 - H, heartbeat_at=t0 - 2 * S, hostname="pod-1")
    make_schedule(
        "digest",
        kind="crontab",
        minute="0",
        hour="8",
        timezone="Europe/Berlin",
        next_fire_at=t0 + 4 * MIN,
        last_completed_at=t0 - 3 * H,
        last_outcome=RunState.SUCCEEDED,
    )
    make_schedule("starved", every=60, next_fire_at=t0 - 3 * H, stuck_since=t0 - 7 * H)
    make_schedule("off", every=60, enabled=False)
    out = command("status")
    lines = out.splitlines()
    # R33: the counts by state first, then what needs a look (here "starved", late and
    # stuck), then the schedules by name (every one, as there are fewer than --limit)
    assert lines[0] == (
        "schedules: 3 (2 enabled, 1 paused, 0 deleted); 1 late, 1 stuck, 0 failing, "
        "0 set aside, 0 paused on failure"
    )
    assert lines[2].startswith("late (") and lines[3].startswith("name")
    assert lines[5].startswith("starved")
    lines = lines[lines.index("schedules by name:") + 1 :]
    assert lines[0].split() == [
        "name",
        "schedule",
        "enabled",
        "next",
        "fire",
        "last",
        "completion",
        "outcome",
        "stuck",
    ]
    digest = next(ln for ln in lines if ln.startswith("digest"))
    assert "(Europe/Berlin)" in digest and "in 4 min" in digest and "3 h ago" in digest
    assert "succeeded" in digest
    starved = next(ln for ln in lines if ln.startswith("starved"))
    assert "overdue 3 h" in starved and "for 7 h" in starved
    assert "disabled" in next(ln for ln in lines if ln.startswith("off"))
    assert "beat alive: pod-1:4242 (up 1 h)" in out


def test_report_names_a_run_now_by_who_asked_through_its_start_and_finish(
    make_schedule, make_run, monkeypatch, t0, time_machine
):
    """Issue 39: ``api.run_now`` read "no boot (admin run now)". A run now's detail says who
    asked, kept when the worker starts and finishes it; a backfill is said as one."""
    from durablebeat import api
    from durablebeat.beat import publishing
    from durablebeat.worker import completion

    time_machine.move_to(t0 - H, tick=False)
    monkeypatch.setattr(publishing, "send", lambda app, claim, producer=None: None)
    job = make_schedule("job", every=600)
    task_id = api.run_now("job")
    assert Run.objects.get(task_id=task_id).detail == "run now (API)"
    assert completion.start(completion.Started(task_id, t0 - H, "w@h", 1, None))
    assert completion.finish(completion.Finished(task_id, t0 - H + S, True))
    assert Run.objects.get(task_id=task_id).detail == "run now (API)"  # kept, not cleared
    built = report.build_report(*window(t0))
    [line] = [b for b in built.boots if b.id is None]
    assert line.label == "no boot: run now (API)"
    time_machine.move_to(t0 - H + 5 * S, tick=False)
    publishing.run_now(job)  # the admin's action calls this
    make_run(job, t0 - 3 * H, reason=Reason.BACKFILL)
    labels = [b.label for b in report.build_report(*window(t0)).boots if b.id is None]
    assert labels == ["no boot: run now (admin), run now (API), backfill"]
    assert "no boot: run now (admin), run now (API), backfill:" in report.format_report(
        report.build_report(*window(t0))
    )
