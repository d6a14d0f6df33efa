"""R27 backfill: each missed slot of a range fires once, reason backfill, through the path
"run now" takes; a slot with a run is left alone and said (R3, R4); absurd ranges are
refused (R21). The library, the command and the admin action."""

from __future__ import annotations

import datetime as dt
import io

import pytest
from django.contrib.auth.models import Permission, User
from django.core.management import call_command
from django.core.management.base import CommandError

from durablebeat.beat import publishing
from durablebeat.beat.claims import claim_backfill
from durablebeat.enums import Reason, RunState
from durablebeat.models import MissedSlots, Run
from durablebeat.ops import backfill, report, timeline

pytestmark = pytest.mark.django_db

S = dt.timedelta(seconds=1)
M = dt.timedelta(minutes=1)
H = dt.timedelta(hours=1)


@pytest.fixture
def sent(monkeypatch):
    """The broker, recorded: backfill's messages end up here."""
    claims = []
    monkeypatch.setattr(publishing, "send", lambda app, claim, producer=None: claims.append(claim))
    return claims


@pytest.fixture
def sync(make_schedule, make_run, t0):
    """A minutely housekeeping job that missed 12:00-12:04 while no beat ran, but 12:02
    went out (an in-doubt slot, a run now at that instant: any run)."""
    row = make_schedule("sync", kind="crontab", next_fire_at=t0 + H)
    make_run(row, t0 + 2 * M, state=RunState.SUCCEEDED)
    return row


@pytest.fixture
def an_hour_later(time_machine, t0):
    """The command and the admin take now from the clock: an hour after the slots, well
    within the retention (R32: a slot before its cutoff is left alone, test_retention)."""
    time_machine.move_to(t0 + H, tick=False)


def _backfill(t0, dry_run=False, name="sync"):
    return backfill.backfill(name, t0, t0 + 4 * M, t0 + H, dry_run=dry_run)


def test_each_slot_without_a_run_fires_once_with_reason_backfill(sync, sent, t0):
    done = _backfill(t0)
    expected = [t0, t0 + M, t0 + 3 * M, t0 + 4 * M]
    assert done.fired == expected
    assert done.left_alone == [(t0 + 2 * M, "it has a run already (succeeded)")]
    assert [(c.slot, c.reason) for c in sent] == [(s, Reason.BACKFILL) for s in expected]
    runs = Run.objects.filter(reason=Reason.BACKFILL).order_by("slot")
    assert [(r.slot, r.state) for r in runs] == [(s, RunState.PUBLISHED) for s in expected]
    assert {c.task_id for c in sent} == {r.task_id for r in runs}
    assert sent[0].headers()["durablebeat_reason"] == Reason.BACKFILL


def test_a_second_backfill_of_the_same_range_fires_nothing(sync, sent, t0):
    _backfill(t0)
    again = _backfill(t0)
    assert again.fired == [] and len(again.left_alone) == 5
    assert len(sent) == 4
    assert Run.objects.filter(schedule=sync).count() == 5


def test_the_schedules_next_fire_is_left_where_it_is(sync, sent, t0):
    _backfill(t0)
    sync.refresh_from_db()
    assert sync.next_fire_at == t0 + H


def test_a_dry_run_lists_what_would_fire_and_writes_nothing(sync, sent, t0):
    done = _backfill(t0, dry_run=True)
    assert done.fired == [t0, t0 + M, t0 + 3 * M, t0 + 4 * M]
    assert done.lines()[0] == "sync: would fire 4 slot(s), left alone 1"
    assert sent == [] and Run.objects.count() == 1


def test_a_slot_claimed_meanwhile_is_left_to_whoever_wrote_it_first(sync, t0):
    """The one-run-per-slot constraint decides (R3, R4), not the earlier read."""
    assert claim_backfill(sync, t0 + 2 * M, t0 + H) is None
    assert claim_backfill(sync, t0 + M, t0 + H) is not None
    assert claim_backfill(sync, t0 + M, t0 + H) is None
    assert Run.objects.filter(schedule=sync, slot=t0 + M).count() == 1


@pytest.mark.parametrize(
    ("since", "until", "said"),
    [
        (0, -60, "is after --to"),
        (0, 2 * 3600, "is in the future"),
        (-8 * 24 * 3600, 0, "more than 10,000 slots"),
    ],
)
def test_absurd_ranges_are_refused_with_nothing_written(sync, sent, t0, since, until, said):
    with pytest.raises(backfill.BackfillRefused, match=said):
        backfill.backfill("sync", t0 + since * S, t0 + until * S, t0 + H)
    assert sent == [] and Run.objects.count() == 1


def test_ten_thousand_slots_are_allowed(make_schedule, sent, t0):
    make_schedule("sync", kind="crontab", next_fire_at=t0 + H)
    done = backfill.backfill("sync", t0 - 9999 * M, t0, t0, dry_run=True)
    assert len(done.fired) == backfill.MAX_BACKFILL_SLOTS


def test_an_interval_schedule_and_an_unknown_name_are_refused(make_schedule, t0):
    make_schedule("every", every=60)
    with pytest.raises(backfill.BackfillRefused, match="interval schedule"):
        backfill.backfill("every", t0, t0 + M, t0 + H)
    with pytest.raises(backfill.BackfillRefused, match="no schedule named 'nope'"):
        backfill.backfill("nope", t0, t0 + M, t0 + H)


def test_backfill_runs_are_marked_on_the_timeline_and_counted_in_report(sync, sent, t0):
    _backfill(t0)
    assert timeline.mark_kind(RunState.SUCCEEDED, Reason.BACKFILL) == "backfill"
    Run.objects.filter(reason=Reason.BACKFILL).update(claimed_at=t0 + 10 * M)
    built = report.build_report(t0, t0 + H)
    assert built.by_reason.get(Reason.BACKFILL) == 4
    assert report.find_overfired(t0, t0 + H) == []  # a person's doing, like run now


# --- the command ---------------------------------------------------------------------------


def _command(*args):
    out = io.StringIO()
    call_command("durablebeat", "backfill", *args, stdout=out)
    return out.getvalue()


def test_the_command_fires_and_says_what_it_left_alone(sync, sent, t0, an_hour_later):
    out = _command("sync", "--from", t0.isoformat(), "--to", (t0 + 4 * M).isoformat())
    assert out.splitlines()[0] == "sync: fired 4 slot(s), left alone 1"
    assert f"left alone {(t0 + 2 * M).isoformat()}: it has a run already" in out
    assert len(sent) == 4


def test_the_command_dry_run_and_a_time_without_offset_is_utc(sync, sent, t0, an_hour_later):
    out = _command("sync", "--from", "2026-03-02T12:00", "--to", "2026-03-02T12:01", "--dry-run")
    assert out.splitlines() == [
        "sync: would fire 2 slot(s), left alone 0",
        f"  would fire {t0.isoformat()}",
        f"  would fire {(t0 + M).isoformat()}",
    ]
    assert sent == []


def test_the_command_refuses_with_the_reason(sync, t0):
    with pytest.raises(CommandError, match="more than 10,000 slots"):
        _command("sync", "--from", "2020-01-01", "--to", "2026-01-01")
    with pytest.raises(CommandError, match="not an ISO 8601"):
        _command("sync", "--from", "yesterday", "--to", "2026-01-01")


# --- the admin action on missed-slot ranges -------------------------------------------------

CHANGELIST = "/admin/durablebeat/missedslots/"


def _missed(row, t0):
    return MissedSlots.objects.create(
        schedule=row, count=5, first_slot=t0, last_slot=t0 + 4 * M, recorded_at=t0 + 5 * M
    )


def test_the_admin_action_backfills_the_selected_ranges(
    admin_client, sync, sent, t0, an_hour_later
):
    missed = _missed(sync, t0)
    page = admin_client.post(
        CHANGELIST,
        {"action": "backfill_ranges", "_selected_action": [missed.pk], "index": 0},
        follow=True,
    )
    assert page.status_code == 200
    text = page.content.decode()
    assert "Backfill of sync: fired 4 slot(s), left alone 1" in text
    assert "2026-03-02 12:02 UTC (it has a run already (succeeded))" in text
    assert Run.objects.filter(reason=Reason.BACKFILL).count() == 4


def test_a_view_only_user_gets_no_backfill_action(client, sync, sent, t0):
    missed = _missed(sync, t0)
    user = User.objects.create_user("viewer", password="pw", is_staff=True)
    user.user_permissions.add(*Permission.objects.filter(codename="view_missedslots"))
    client.force_login(user)
    assert "backfill_ranges" not in client.get(CHANGELIST).content.decode()
    client.post(
        CHANGELIST, {"action": "backfill_ranges", "_selected_action": [missed.pk], "index": 0}
    )
    assert sent == [] and Run.objects.count() == 1
