"""Issue 30 item 5: durablebeat on whatever database Django routes it to. With
``DATABASE_ROUTERS`` sending its models to ``scheduler``, beat, the worker side, the commands,
``check`` and the admin all use that database (transactions, raw SQL, LISTEN, the clock);
with a router that sends reads to a replica, what beat and its tools read comes from the
database they write, never from a stale copy (R3, R4, R31).

``default`` and ``scheduler`` (and ``replica``) are separate PostgreSQL test databases with
every table: each test shows that nothing of durablebeat lands on, or is read from, the
database the router does not name.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator

import pytest
from django.core.management import call_command
from django.db import connections
from django.test import override_settings
from django.test.utils import CaptureQueriesContext

from durablebeat import db, dbclock
from durablebeat.beat import notify
from durablebeat.core import clock
from durablebeat.enums import RunState
from durablebeat.models import Boot, Run, Schedule
from durablebeat.ops import health
from durablebeat.worker import completion
from tests.e2eapp.routers import REPLICA, SCHEDULER

pytestmark = [pytest.mark.postgres_only]
ROUTED = pytest.mark.django_db(transaction=True, databases=["default", SCHEDULER])
REPLICATED = pytest.mark.django_db(transaction=True, databases=["default", REPLICA])
TASK = "tests.e2eapp.tasks.record"
S = dt.timedelta(seconds=1)


@pytest.fixture
def routed() -> Iterator[None]:
    with override_settings(DATABASE_ROUTERS=["tests.e2eapp.routers.SchedulerRouter"]):
        yield


@pytest.fixture
def replicated() -> Iterator[None]:
    with override_settings(DATABASE_ROUTERS=["tests.e2eapp.routers.ReplicaRouter"]):
        yield


def _on(alias: str, model: type) -> int:
    return int(model._default_manager.using(alias).count())


@ROUTED
def test_the_write_alias_is_the_routers(routed):
    assert db.alias() == SCHEDULER
    assert db.connection() is connections[SCHEDULER]
    assert Schedule.objects.all().db == SCHEDULER  # reads too
    assert Schedule.objects.using("default").db == "default"  # an explicit using() wins


@ROUTED
def test_beat_boots_claims_fires_and_records_in_the_routed_database(
    routed, make_engine, make_schedule, publisher
):
    make_schedule("every-minute", every=60)
    engine = make_engine()
    now = clock.now()
    engine.tick(now)  # boots (select_for_update in its transaction), plans the first fire
    engine.tick(now + 61 * S)
    engine.tick(now + 122 * S)
    assert publisher.slots("every-minute"), "nothing fired through the router"
    runs = list(Run.objects.using(SCHEDULER).filter(schedule__name="every-minute"))
    assert len(runs) == len(publisher.slots("every-minute"))
    assert _on(SCHEDULER, Boot) == 1
    for model in (Schedule, Run, Boot):
        assert _on("default", model) == 0, f"a {model.__name__} landed on default"

    # the worker side: its start and its completion land where the run is
    run = runs[0]
    at = clock.now()
    assert completion.start(completion.Started(run.task_id or "", at, "w@h", 1, None))
    assert completion.finish(completion.Finished(run.task_id or "", at + S, succeeded=True))
    run.refresh_from_db()
    assert run.state == RunState.SUCCEEDED and run._state.db == SCHEDULER


@ROUTED
@pytest.mark.dbclock
def test_the_clock_and_listen_are_the_routed_databases(routed, make_schedule):
    with CaptureQueriesContext(connections[SCHEDULER]) as there:
        assert dbclock.measure() is not None
    assert any("clock_timestamp" in q["sql"] for q in there.captured_queries)
    listener = notify.Listener()
    assert listener._database().alias == SCHEDULER
    try:
        assert listener.available()
        assert listener.wait(0.5) is False  # its probe, sent on the routed database, came back
        assert listener.listening() is True
        make_schedule("saved", every=300)  # the trigger on scheduler's table notifies
        assert listener.wait(10) is True
    finally:
        listener.close()


@ROUTED
def test_check_status_report_and_the_admin_read_the_routed_database(
    routed, make_engine, make_schedule, admin_client, capsys
):
    make_schedule("only-on-scheduler", every=60)
    engine, now = make_engine(), clock.now()
    engine.tick(now)
    engine.tick(now + 61 * S)
    call_command("durablebeat", "status")
    assert "only-on-scheduler" in capsys.readouterr().out
    call_command("durablebeat", "report")
    assert "boots (1)" in capsys.readouterr().out  # the boot in the routed ledger
    codes = {f.code for f in health.findings(clock.now())}
    assert "no_beat" not in codes  # the boot just registered on scheduler is seen
    page = admin_client.get("/admin/durablebeat/schedule/").content.decode()
    assert "only-on-scheduler" in page
    runs = admin_client.get("/admin/durablebeat/boot/").content.decode()
    assert "1 boot" in runs
    assert _on("default", Schedule) == 0


@REPLICATED
def test_with_reads_sent_to_a_replica_beat_decides_on_the_written_rows(
    replicated, make_engine, make_schedule, publisher, admin_client
):
    """The replica lags: it still holds the row before its latest writes (here: as it was
    created, enabled, a fire due an hour ago). Beat and its tools read the written one."""
    now = clock.now()
    stale = Schedule(name="paused", task=TASK, kind="interval", every=60 * S, overlap="allow")
    stale.next_fire_at = now - 3600 * S
    stale.save(using=REPLICA)
    make_schedule("paused", every=60, enabled=False)
    assert Schedule.objects.get(name="paused").enabled is False  # not the replica's row
    engine = make_engine()
    engine.tick(now)
    engine.tick(now + 61 * S)
    assert publisher.slots("paused") == []
    assert _on(REPLICA, Run) == 0 and _on(REPLICA, Boot) == 0
    page = admin_client.get("/admin/durablebeat/schedule/?q=paused").content.decode()
    assert "disabled" in page


@REPLICATED
def test_with_reads_sent_to_a_replica_a_related_row_is_read_where_it_was_written(
    replicated, make_schedule, admin_client
):
    """``run.schedule`` (no select_related) goes through the model's base manager, which is
    its ``DurableManager``: the row written, not the replica's stale copy of it, on a run's
    admin page too."""
    fresh = make_schedule("renamed", every=60)
    stale = Schedule(pk=fresh.pk, name="before-rename", task=TASK, kind="interval")
    stale.every, stale.overlap = 60 * S, "allow"
    stale.save(using=REPLICA)
    now = clock.now()
    run = Run.objects.create(schedule=fresh, slot=now, claimed_at=now, task_id="t-1")
    assert Run.objects.get(pk=run.pk).schedule.name == "renamed"
    page = admin_client.get(f"/admin/durablebeat/run/{run.pk}/change/").content.decode()
    assert "renamed" in page and "before-rename" not in page
