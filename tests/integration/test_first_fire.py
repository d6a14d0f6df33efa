"""R33: a new row's first fire is known when its write commits, on every write path; rows
that reach the table without one are filled by beat after its due work, in bounded slices,
never before it; ``api.add_schedules`` streams its entries."""

from __future__ import annotations

import datetime as dt
import itertools
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from celery.schedules import crontab
from django.db import connection, transaction

from durablebeat import api, first_fire
from durablebeat.beat import codesync, due
from durablebeat.beat import engine as engine_module
from durablebeat.beat.codesync import parse_beat_schedule
from durablebeat.enums import Reason
from durablebeat.models import Boot, Schedule

pytestmark = pytest.mark.django_db(transaction=True)

TASK = "tests.e2eapp.tasks.record"
S = dt.timedelta(seconds=1)
DAILY_8 = crontab(minute=0, hour=8)


@pytest.fixture
def frozen(time_machine: Any, t0: dt.datetime) -> dt.datetime:
    time_machine.move_to(t0, tick=False)  # 12:00 UTC: 08:00's next slot is tomorrow's
    return t0


def tomorrow_8(t0: dt.datetime) -> dt.datetime:
    return t0.replace(hour=8) + dt.timedelta(days=1)


def beat_alive(now: dt.datetime) -> None:
    Boot.objects.create(id=uuid.uuid4(), hostname="h", pid=1, started_at=now, heartbeat_at=now)


def _api_one(name: str) -> None:
    api.add_schedule(name, TASK, DAILY_8)


def _api_many(name: str) -> None:  # COPY on PostgreSQL, bulk_create elsewhere
    api.add_schedules(
        {name: {"task": TASK, "schedule": DAILY_8}, "other": {"task": TASK, "schedule": 60}}
    )


def _api_replaced(name: str) -> None:  # _rewrite: a timing change
    api.add_schedule(name, TASK, crontab(minute=0, hour=7))
    Schedule.objects.filter(name=name).update(next_fire_at=None)
    api.add_schedules({name: {"task": TASK, "schedule": DAILY_8}})


def _api_update(name: str) -> None:
    api.add_schedule(name, TASK, crontab(minute=0, hour=7))
    api.update_schedule(name, schedule=DAILY_8)


def _save(name: str) -> None:
    row = Schedule(name=name, task=TASK, kind="crontab", minute="0", hour="8")
    row.save()


def _create(name: str) -> None:
    Schedule.objects.create(name=name, task=TASK, kind="crontab", minute="0", hour="8")


def _bulk_create(name: str) -> None:
    Schedule.objects.bulk_create(
        [Schedule(name=name, task=TASK, kind="crontab", minute="0", hour="8")]
    )


def _bulk_update(name: str) -> None:
    _save(name)
    row = Schedule.objects.get(name=name)
    row.hour = "7"
    Schedule.objects.bulk_update([row], ["hour"])
    row.hour = "8"
    Schedule.objects.bulk_update([row], ["hour"])


@pytest.mark.parametrize(
    "write",
    [_api_one, _api_many, _api_replaced, _api_update, _save, _create, _bulk_create, _bulk_update],
)
def test_every_write_path_stores_a_crontabs_first_fire_at_write(
    frozen: dt.datetime, write: Callable[[str], None]
) -> None:
    """No beat has run: the row holds its next slot as it commits (R2's, by the function
    beat fills with: ``core.policy.first_fire``)."""
    write("digest")
    row = Schedule.objects.get(name="digest")
    assert (row.next_fire_at, row.next_fire_reason) == (tomorrow_8(frozen), Reason.SCHEDULED)


def test_the_code_sync_stores_the_first_fire_at_its_instant(t0: dt.datetime) -> None:
    """The code sync runs in a booting beat: its interval's grace starts at the sync (R2),
    its crontab's next slot is written too."""
    beat = {
        "digest": {"task": TASK, "schedule": DAILY_8},
        "poll": {"task": TASK, "schedule": dt.timedelta(seconds=20)},
    }
    codesync.sync(parse_beat_schedule(beat, "UTC"), t0)
    fires = {r.name: (r.next_fire_at, r.next_fire_reason) for r in Schedule.objects.all()}
    assert fires == {
        "digest": (tomorrow_8(t0), Reason.SCHEDULED),
        "poll": (t0 + 60 * S, Reason.STARTUP_GRACE),
    }
    changed = {"digest": {"task": TASK, "schedule": crontab(minute=0, hour=9)}}
    codesync.sync(parse_beat_schedule(changed, "UTC"), t0 + S)  # a timing change in code
    assert Schedule.objects.get(name="digest").next_fire_at == tomorrow_8(t0) + dt.timedelta(
        hours=1
    )


def test_an_interval_waits_its_grace_from_the_write_while_a_beat_runs(frozen: dt.datetime) -> None:
    """R2 anchors a new interval's grace where a running beat first sees it: with a beat
    alive, the write's instant; with none (never booted, stopped, stale), beat's boot, so
    the writer leaves it to beat (the one case it cannot know)."""
    api.add_schedule("before-any-beat", TASK, 60)
    assert Schedule.objects.get(name="before-any-beat").next_fire_at is None
    beat_alive(frozen - 10 * S)
    api.add_schedules({"poll": {"task": TASK, "schedule": 60}})
    _save_interval("saved", dt.timedelta(seconds=30))
    fires = {r.name: (r.next_fire_at, r.next_fire_reason) for r in Schedule.objects.all()}
    assert fires["poll"] == (frozen + 60 * S, Reason.STARTUP_GRACE)
    assert fires["saved"] == (frozen + 30 * S, Reason.STARTUP_GRACE)  # its own grace
    Boot.objects.update(stopped_at=frozen)  # a clean stop: no beat alive
    api.add_schedule("after-the-stop", TASK, 60)
    assert Schedule.objects.get(name="after-the-stop").next_fire_at is None


def _save_interval(name: str, grace: dt.timedelta) -> None:
    Schedule(name=name, task=TASK, kind="interval", every=60 * S, startup_grace=grace).save()


def test_the_importer_stores_a_never_run_intervals_grace_while_a_beat_runs(
    frozen: dt.datetime,
) -> None:
    from django_celery_beat.models import IntervalSchedule, PeriodicTask

    from durablebeat.ops import importer

    every = IntervalSchedule.objects.create(every=5, period=IntervalSchedule.MINUTES)
    PeriodicTask.objects.create(name="fresh", task=TASK, interval=every)
    # due since its last change, never ran: "fires one startup grace after beat starts"
    PeriodicTask.objects.filter(name="fresh").update(date_changed=frozen - dt.timedelta(hours=1))
    beat_alive(frozen)
    importer.run_import(frozen, dry_run=False)
    row = Schedule.objects.get(name="fresh")
    assert (row.next_fire_at, row.next_fire_reason) == (frozen + 60 * S, Reason.STARTUP_GRACE)


def test_timing_math_once_per_distinct_timing_and_zone(
    frozen: dt.datetime, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A digest per customer in ten zones: ten computations, not one per row."""
    calls: list[Any] = []
    real = first_fire.first_fire

    def counted(spec: Any, now: dt.datetime, grace: dt.timedelta) -> Any:
        calls.append(spec)
        return real(spec, now, grace)

    monkeypatch.setattr(first_fire, "first_fire", counted)
    zones = [f"Etc/GMT-{i}" for i in range(10)]
    entries = {
        f"digest-{i}": {
            "task": TASK,
            "schedule": DAILY_8,
            "timezone": zones[i % 10],
            "kwargs": {"customer": i},
        }
        for i in range(3000)
    }
    assert api.add_schedules(entries).created == 3000
    assert len(calls) == 10
    assert Schedule.objects.filter(next_fire_at__isnull=True).count() == 0


def test_add_schedules_streams_a_generator_in_chunks_all_or_nothing(
    frozen: dt.datetime, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A generator of (name, entry) pairs is read a chunk at a time: when its 26th entry is
    asked for, the first two chunks of ten are written (in the call's transaction), the
    rest not yet read. A bad entry in the last chunk still writes nothing (R29)."""
    monkeypatch.setattr(api, "WRITE_CHUNK", 10)
    written_when_asked: dict[int, int] = {}

    def entries(bad_at: int | None = None) -> Iterator[tuple[str, dict[str, Any]]]:
        for i in range(35):
            written_when_asked[i] = Schedule.objects.count()
            task = "no such task" if i == bad_at else TASK
            yield f"digest-{i}", {"task": task, "schedule": DAILY_8}

    assert api.add_schedules(entries()) == api.Written(created=35, replaced=0, unchanged=0)
    assert written_when_asked[25] == 20 and written_when_asked[9] == 0
    Schedule.objects.all().delete()
    with pytest.raises(api.InvalidSchedule):
        api.add_schedules(entries(bad_at=33))
    assert written_when_asked[33] == 30
    assert not Schedule.objects.exists()


def _rows_without_next_fire(n: int) -> None:
    """Rows that reached the table without a next fire (raw SQL, an ``update()``)."""
    api.add_schedules((f"new-{i}", {"task": TASK, "schedule": DAILY_8}) for i in range(n))
    Schedule.objects.filter(name__startswith="new-").update(next_fire_at=None)


def test_beat_fires_the_due_row_before_filling_rows_without_a_next_fire(
    make_engine: Any, make_schedule: Any, publisher: Any, t0: dt.datetime
) -> None:
    """R33: a table of rows without a next fire and one due row: the due one is claimed
    and published in the first tick, before any of them is filled."""
    _rows_without_next_fire(300)
    make_schedule("due", every=20, next_fire_at=t0)
    unfilled_at_publish: list[int] = []
    publisher.on_publish = lambda claim: unfilled_at_publish.append(
        Schedule.objects.filter(next_fire_at__isnull=True).count()
    )
    engine = make_engine()
    engine.tick(t0 + S)
    assert publisher.slots("due") == [t0]
    assert unfilled_at_publish == [300]  # published before the fill began
    assert Schedule.objects.filter(next_fire_at__isnull=True).count() < 300  # then filled


def test_the_fill_is_bounded_per_tick_and_goes_on_after_each_ticks_due_work(
    make_engine: Any, make_schedule: Any, publisher: Any, t0: dt.datetime, monkeypatch: Any
) -> None:
    """One slice per tick when its time is up (FILL_SECONDS 0): at most FILL_SLICE rows,
    then no sleep (more to fill) until the table is filled; every row gets the value beat
    computes (the next 08:00), and the due schedule fires at every tick in between."""
    monkeypatch.setattr(engine_module, "FILL_SECONDS", 0.0)
    slice_ = engine_module.FILL_SLICE
    total = 3 * slice_ + 5
    _rows_without_next_fire(total)
    make_schedule("due", every=1, next_fire_at=t0)
    engine = make_engine()
    now, filled, sleeps = t0, [0], []
    while filled[-1] < total and len(sleeps) < 10 * total:
        now += S
        sleeps.append(engine.tick(now))
        new = Schedule.objects.filter(name__startswith="new-").exclude(next_fire_at=None)
        filled.append(new.count())
    steps = [b - a for a, b in itertools.pairwise(filled)]
    # the first slice is FILL_SLICE rows; the next ones are sized to the time left (none
    # here: one row each), each read by key from where the last one ended: none comes
    # back short before the table's end
    assert steps == [slice_] + [1] * (total - slice_)
    assert filled[-1] == total and sleeps == [0.0] * len(sleeps)  # no sleep while filling
    assert engine.tick(now + S) > 0  # all filled: beat sleeps again
    sleeps.append(0.0)
    assert len(publisher.slots("due")) == len(sleeps)  # one fire per tick, fill or not
    fires = set(Schedule.objects.filter(name__startswith="new-").values_list("next_fire_at"))
    assert fires == {(t0.replace(hour=8) + dt.timedelta(days=1),)}


@pytest.mark.parametrize("order", ["as stored", "last key first"])
def test_a_row_the_fill_cannot_move_on_never_makes_a_busy_loop(
    make_engine: Any, publisher: Any, t0: dt.datetime, monkeypatch: Any, order: str
) -> None:
    """R21, R25: custom schedules of another code version stay without a next fire; the
    fill passes them by (by primary key) and beat sleeps, however many there are. Whatever
    order a slice comes back in (before ``durablebeat_unfilled_idx`` PostgreSQL read them
    in no order, and a clean clone's fast loop once got the table's last key first, which
    ends the pass at once), a pass that moved nothing on starts over at the next tick, not
    straight away."""
    monkeypatch.setattr(engine_module, "FILL_SECONDS", 0.0)
    if order == "last key first":
        real = engine_module.due_query.fetch_unfilled

        def last_key_first(after: int, limit: int, lock: bool = False) -> list[Schedule]:
            rows = real(after, 10**9, lock)
            return sorted(rows, key=lambda row: -row.pk)[:limit]

        monkeypatch.setattr(engine_module.due_query, "fetch_unfilled", last_key_first)
    n = engine_module.FILL_SLICE * 2
    api.add_schedules((f"custom-{i}", {"task": TASK, "schedule": DAILY_8}) for i in range(n))
    Schedule.objects.update(kind="custom", custom_schedule="Other()")  # as raw SQL writes it
    engine = make_engine()
    sleeps = [engine.tick(t0 + k * S) for k in range(1, 4)]
    assert all(s > 0 for s in sleeps)
    assert Schedule.objects.filter(next_fire_at__isnull=True).count() == n


def _plan(sql: str, params: Any) -> str:
    """The plan a large table gets for ``sql`` (PostgreSQL: without sequential scans)."""
    vendor = connection.vendor
    analyze = {"sqlite": "ANALYZE", "postgresql": "ANALYZE durablebeat_schedule"}
    with connection.cursor() as cursor:
        cursor.execute(analyze.get(vendor, "ANALYZE TABLE durablebeat_schedule"))
        if vendor == "postgresql":
            cursor.execute("SET LOCAL enable_seqscan = off")
        cursor.execute(("EXPLAIN QUERY PLAN " if vendor == "sqlite" else "EXPLAIN ") + sql, params)
        return "\n".join(" ".join(map(str, row)) for row in cursor.fetchall())


def test_a_fill_slice_reads_from_the_last_ones_key_on_without_a_sort() -> None:
    """R33: a slice of the rows to fill starts at the previous slice's key, in key order,
    through an index that orders them by key (on PostgreSQL ``durablebeat_unfilled_idx``;
    on SQLite and MariaDB the due index, whose entries end with the key): neither the rows
    before it nor a sort of every row to fill. Through PostgreSQL's due index, whose NULL
    entries are in no key order, each slice walked every row before it: at a million
    schedules beat filled 30 rows a second."""
    _rows_without_next_fire(300)
    keys = sorted(Schedule.objects.filter(next_fire_at=None).values_list("pk", flat=True))
    after = keys[99]
    # rows written again are stored anew: out of key order in the table (and on
    # PostgreSQL under the due index's NULL)
    Schedule.objects.filter(pk__in=keys[100:150:2]).update(description="written again")
    with transaction.atomic():
        assert [row.pk for row in due.fetch_unfilled(after, 50, lock=True)] == keys[100:150]
        query = due._probe(0, due._SENTINELS[0], 50, lock=True, after=after)
        plan = _plan(*query.query.sql_with_params())
    if connection.vendor == "postgresql":
        assert "durablebeat_unfilled_idx" in plan and "Index Cond: (id > " in plan, plan
        assert "Sort" not in plan, plan
    elif connection.vendor == "sqlite":
        assert "TEMP B-TREE" not in plan, plan
    else:
        assert "filesort" not in plan, plan
