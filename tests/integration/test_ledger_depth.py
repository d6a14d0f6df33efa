"""Flat in history (issue 31 item 2): what reads the run ledger reads a bounded range of an
index, and the runs list asks nothing that grows with the ledger; the runs table keeps only
indexes a query names (``Run.Meta``, migrations 0016, 0017), and a claim adds its runs at
the end of the indexes it writes, not at a random leaf of a year of runs. The figures are
benchmarks/deep_ledger.py's; these tests hold the means."""

from __future__ import annotations

import datetime as dt

import pytest
from django.db import connection
from django.db.models import QuerySet
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from durablebeat.admin import ledger
from durablebeat.beat import batch_claim, claims
from durablebeat.enums import IN_FLIGHT_STATES, UNTRACKED, Failure, RunState
from durablebeat.models import Run
from durablebeat.ops import run_findings

pytestmark = pytest.mark.django_db

H = dt.timedelta(hours=1)
DAY = dt.timedelta(days=1)
RUNS = "/admin/durablebeat/run/"
postgres = pytest.mark.skipif(connection.vendor != "postgresql", reason="PostgreSQL's planner")

#: every index of the runs table, with what needs it: Run.Meta's comment says it in words
INDEXES = {
    ("id",),  # the primary key: confirmations by id
    ("task_id",),  # unique: a worker's start and completion
    ("schedule_id", "slot"),  # R4's unique constraint; every read by schedule
    ("boot_id",),  # a boot's fires; ON DELETE SET NULL of a boot
    ("state", "claimed_at"),  # check's in-flight findings, the in-doubt look
    ("schedule_id", "state"),  # overlap=skip's run in flight (partial where it can be)
    ("claimed_at",),  # report and fires per deploy (R18)
    ("slot",),  # the runs list, newest first
    ("finished_at",),  # check's untracked and unpublishable (partial where it can be)
}


def _indexes() -> set[tuple[str, ...]]:
    with connection.cursor() as cursor:
        found = connection.introspection.get_constraints(cursor, Run._meta.db_table)
    return {
        tuple(c["columns"]) for c in found.values() if c["index"] or c["unique"] or c["primary_key"]
    }


def test_the_runs_table_has_no_index_no_query_names():
    """``schedule_id`` alone sits under the unique ``(schedule_id, slot)``; PostgreSQL's
    ``varchar_pattern_ops`` copy of ``task_id`` served no query (0016 drops both)."""
    assert _indexes() == INDEXES
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT count(*) FROM pg_indexes WHERE tablename = 'durablebeat_run' "
                "AND indexdef LIKE '%%varchar_pattern_ops%%'"
            )
            assert cursor.fetchone()[0] == 0


@postgres
def test_the_in_flight_look_reads_an_index_of_the_runs_in_flight_only(make_schedule):
    """overlap=skip's look (R14) reads a partial index that holds no finished run, so a claim
    or a confirmation writes into a small index, not a leaf per schedule of a year of runs
    (the burst of 10,000 was ~20 % slower with 10 million old runs)."""
    job = make_schedule("job", every=60)
    look = Run.objects.filter(
        batch_claim.ids_in("schedule_id", [job.pk]), state__in=IN_FLIGHT_STATES
    )
    assert "durablebeat_run_inflight_idx" in _plan(look)
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT indexdef FROM pg_indexes WHERE indexname = 'durablebeat_run_inflight_idx'"
        )
        (definition,) = cursor.fetchone()
    assert "WHERE" in definition


@pytest.mark.skipif(connection.vendor != "sqlite", reason="SQLite's planner")
def test_on_sqlite_the_in_flight_look_reads_the_in_flight_index(make_schedule, t0):
    """SQLite keeps the whole ``(schedule_id, state)`` index (a partial one would go unused:
    its planner matches a partial index's WHERE only as spelled, and the states are bound
    parameters), so with a history it knows of (ANALYZE) the look reads a schedule's runs
    in flight, not all its runs."""
    jobs = [make_schedule(f"job-{i}", every=60) for i in range(4)]
    Run.objects.bulk_create(
        Run(schedule=job, slot=t0 - k * H, claimed_at=t0 - k * H, state=RunState.SUCCEEDED)
        for job in jobs
        for k in range(1, 2000)
    )
    sql, params = claims.in_flight_runs([jobs[0].pk, jobs[1].pk]).query.sql_with_params()
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE")
        cursor.execute("EXPLAIN QUERY PLAN " + sql, params)
        plan = " ".join(str(row[-1]) for row in cursor.fetchall())
    assert "durablebeat_run_inflight_idx" in plan, plan


@pytest.mark.django_db(transaction=True)
def test_claims_write_time_ordered_task_ids(make_engine, make_schedule, t0):
    """Each fire's task id is a UUID version 7 (time first), so the unique ``task_id`` index
    takes a burst's runs at its end, not each at a random leaf (R3's run is written before
    the message goes; Celery takes the id as it is)."""
    import uuid

    for k in range(10):
        make_schedule(f"job-{k:02d}", every=60, next_fire_at=t0)
    make_engine().tick(t0)
    make_schedule("later", every=60, next_fire_at=t0 + dt.timedelta(seconds=1))
    make_engine().tick(t0 + dt.timedelta(seconds=1))
    runs = list(Run.objects.order_by("claimed_at", "task_id"))
    assert len(runs) == 11
    assert {uuid.UUID(r.task_id).version for r in runs} == {7}
    assert runs[-1].schedule.name == "later"
    assert max(r.task_id for r in runs[:-1]) < runs[-1].task_id


def _plan(queryset) -> str:
    sql, params = queryset.query.sql_with_params()
    with connection.cursor() as cursor:
        cursor.execute("SET LOCAL enable_seqscan = off")  # the plan a large table gets
        cursor.execute("EXPLAIN " + sql, params)
        return "\n".join(row[0] for row in cursor.fetchall())


@postgres
def test_check_reads_flagged_runs_through_their_partial_index(t0):
    """``untracked_worker`` and ``unpublishable`` read the few flagged runs by when they
    ended, not every run of the ledger (a sequential scan: 4 s at 10 million runs)."""
    since = t0 - DAY
    untracked = Run.objects.exclude(task_id=None).filter(detail=UNTRACKED, finished_at__gte=since)
    refused = Run.objects.filter(
        state=RunState.FAILED, failure=Failure.UNPUBLISHABLE, finished_at__gte=since
    )
    for queryset in (untracked, refused):
        assert "durablebeat_run_flagged_idx" in _plan(queryset)


def test_untracked_and_unpublishable_are_still_found(make_schedule, make_run, t0, time_machine):
    """The partial index changes how they are read, not what they find."""
    time_machine.move_to(t0)
    job = make_schedule("job", every=60)
    make_run(job, t0 - 2 * H, detail=UNTRACKED, finished_at=t0 - H)
    make_run(
        job,
        t0 - H,
        state=RunState.FAILED,
        failure=Failure.UNPUBLISHABLE,
        finished_at=t0 - H,
        task_id=None,
    )
    make_run(job, t0 - 400 * DAY, detail=UNTRACKED, finished_at=t0 - 400 * DAY)  # long past
    assert [f.code for f in run_findings.find_untracked(t0)] == ["untracked_worker"]
    assert [f.code for f in run_findings.find_unpublishable(t0)] == ["unpublishable"]


@pytest.mark.parametrize(
    ("kind", "query"),
    [
        ("year", ""),
        ("month", "?slot__year={t.year}"),
        ("day", "?slot__year={t.year}&slot__month={t.month}"),
    ],
)
def test_runs_list_periods_are_django_own(admin_client, make_schedule, make_run, t0, kind, query):
    """The date drill-down's years, months and days, probed one per period, are the ones
    Django's ``datetimes(slot, kind)`` gives, at the calendar's turns included."""
    job = make_schedule("job", every=60)
    month_start = t0.replace(day=1, hour=0, minute=0, second=0, microsecond=0)
    for slot in (
        t0 - 800 * DAY,
        t0 - 799 * DAY,
        t0 - 30 * DAY,
        month_start,
        month_start + dt.timedelta(microseconds=1),
        month_start - dt.timedelta(microseconds=1),
        t0 - DAY,
        t0,
    ):
        make_run(job, slot)
    with CaptureQueriesContext(connection) as queries:
        response = admin_client.get(RUNS + query.format(t=timezone.localtime(t0)))
    assert response.status_code == 200
    assert not [q for q in queries if "DISTINCT" in q["sql"]]  # no read of every run
    queryset = response.context["cl"].queryset
    ours = list(queryset.datetimes("slot", kind))
    django = list(QuerySet(Run).filter(pk__in=queryset.values("pk")).datetimes("slot", kind))
    assert ours == django and len(ours) >= 2
    for start in ours:
        assert f"slot__{kind}={getattr(start, kind)}" in response.content.decode()


def test_runs_list_with_many_schedules_shows_the_chosen_one_and_still_filters(
    admin_client, make_schedule, make_run, t0, monkeypatch
):
    monkeypatch.setattr(ledger, "FILTER_CHOICES", 2)
    jobs = [make_schedule(f"job-{i}", every=60) for i in range(3)]
    for job in jobs:
        make_run(job, t0 - H)
    page = admin_client.get(RUNS).content.decode()
    assert f"schedule__id__exact={jobs[0].pk}" not in page  # no list of every schedule
    response = admin_client.get(f"{RUNS}?schedule__id__exact={jobs[1].pk}")
    assert [r.schedule.name for r in response.context["cl"].result_list] == ["job-1"]
    assert f"schedule__id__exact={jobs[1].pk}" in response.content.decode()


def test_runs_list_with_few_schedules_offers_those_with_runs(
    admin_client, make_schedule, make_run, t0
):
    a, b = make_schedule("a", every=60), make_schedule("b", every=60)
    without = make_schedule("none", every=60)
    make_run(a, t0 - H)
    make_run(b, t0 - H)
    page = admin_client.get(RUNS).content.decode()
    assert f"schedule__id__exact={a.pk}" in page and f"schedule__id__exact={b.pk}" in page
    assert f"schedule__id__exact={without.pk}" not in page


@postgres
def test_runs_list_says_the_size_of_a_large_ledger_from_statistics(
    admin_client, make_schedule, make_run, t0, monkeypatch
):
    """Unfiltered, past ``ESTIMATE_FROM`` rows, the count is PostgreSQL's estimate
    (``reltuples``), not a ``COUNT(*)`` of every run; filtered, it is exact."""
    job = make_schedule("job", every=60)
    for k in range(3):
        make_run(job, t0 - k * H)
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE durablebeat_run")
    monkeypatch.setattr(ledger.LedgerPaginator, "ESTIMATE_FROM", 1)
    with CaptureQueriesContext(connection) as captured:
        response = admin_client.get(RUNS)
    sent = [q["sql"] for q in captured.captured_queries]
    assert [q for q in sent if "COUNT(" in q.upper() and '"durablebeat_run"' in q] == []
    assert response.context["cl"].result_count == 3  # ANALYZE saw all three
    filtered = admin_client.get(f"{RUNS}?state__exact=succeeded")
    assert filtered.context["cl"].result_count == 3
