"""Issue 39 item 5: ``check``'s ``unconsumed_queue``, a schedule's queue whose messages wait
in the broker with nobody consuming it: real messages on the real Redis broker (and on
RabbitMQ), the workers' liveness rows, and the ledger's waiting runs. The finding itself,
its silence on the healthy fixture and its place among every finding are in
``test_health.py``."""

from __future__ import annotations

import datetime as dt
import socket
import threading
import time
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import pytest
from celery import Celery
from django.db import connection
from kombu import Queue

from durablebeat.enums import RunState
from durablebeat.models import Run, WorkerHeartbeat
from durablebeat.ops import queues
from durablebeat.worker import tracking

from .conftest import RealQueue

pytestmark = pytest.mark.django_db

S = dt.timedelta(seconds=1)
MIN = dt.timedelta(minutes=1)
H = dt.timedelta(hours=1)
RABBITMQ = "amqp://guest:guest@127.0.0.1:5672//"


@pytest.fixture
def digest(make_schedule, real_queue, t0):
    """docs/from-code.md's digest: a schedule that sends to a queue of its own."""
    return make_schedule("digest", every=3600, queue=real_queue.name, next_fire_at=t0 + H)


def waiting_run(make_run, schedule, queue, at, **options):
    """A run published at ``at`` whose message is in ``queue`` now."""
    task_id = queue.send(**options)
    return make_run(schedule, at, state=RunState.PUBLISHED, published_at=at, task_id=task_id)


def worker(t0, queues_: str | None, seen: dt.timedelta = 5 * S, name: str = "w@host") -> None:
    WorkerHeartbeat.objects.create(worker=name, pid=1, seen_at=t0 - seen, queues=queues_)


def found(now, app=None):
    return [f.message for f in queues.find_unconsumed_queues(now, app)]


# --- who consumes -------------------------------------------------------------------------


def test_a_live_worker_that_lists_the_queue_clears_it(digest, make_run, real_queue, t0):
    waiting_run(make_run, digest, real_queue, t0 - MIN)
    worker(t0, "celery")
    assert len(found(t0)) == 1
    worker(t0, f"celery\n{real_queue.name}", name="mail@host")
    assert found(t0) == []


def test_a_live_worker_of_a_release_that_records_no_queues_is_no_false_alarm(
    digest, make_run, real_queue, t0
):
    """R32: a worker of the previous release writes its liveness row without ``queues``
    (NULL): it may consume the queue, so the rows say nothing."""
    waiting_run(make_run, digest, real_queue, t0 - MIN)
    worker(t0, "celery")
    worker(t0, None, name="old@host")
    assert found(t0) == []


def test_a_dead_worker_that_listed_the_queue_consumes_nothing(
    settings, digest, make_run, real_queue, t0
):
    settings.DURABLEBEAT_WORKER_DEAD_AFTER = 120
    waiting_run(make_run, digest, real_queue, t0 - MIN)
    worker(t0, real_queue.name, seen=121 * S)
    [message] = found(t0)
    assert "no live worker consumes it (no worker's liveness row is fresh)" in message


# --- how long, and whose messages ---------------------------------------------------------


@pytest.mark.parametrize("interval", [10, 30, 90])
def test_a_message_is_in_question_only_once_it_waited_the_heartbeat_interval(
    settings, digest, make_run, real_queue, t0, interval
):
    """A worker records its queues at every heartbeat: a message younger than one interval
    may be taken by a worker that began consuming its queue since."""
    settings.DURABLEBEAT_WORKER_HEARTBEAT_INTERVAL = interval
    waiting_run(make_run, digest, real_queue, t0)
    worker(t0, "celery")
    assert found(t0 + (interval - 1) * S) == []
    assert len(found(t0 + interval * S)) == 1


def test_messages_left_in_the_queue_by_others_are_not_these_runs(digest, make_run, real_queue, t0):
    """The run's message was taken (by a worker durablebeat does not know of, say), and the
    queue holds another task's message: not this finding."""
    real_queue.send()  # not a run of the ledger
    make_run(digest, t0 - MIN, state=RunState.PUBLISHED, published_at=t0 - MIN)
    worker(t0, "celery")
    assert found(t0) == []


def test_a_run_with_a_countdown_waits_from_its_eta(make_schedule, make_run, real_queue, t0):
    """R25: a countdown holds the message back on purpose."""
    later = make_schedule("later", every=3600, queue=real_queue.name, countdown=120)
    waiting_run(make_run, later, real_queue, t0 - MIN)
    worker(t0, "celery")
    assert found(t0) == []
    assert len(found(t0 + 2 * MIN)) == 1


def test_a_run_marked_no_news_whose_message_still_waits_is_still_said(
    digest, make_run, real_queue, t0
):
    run = waiting_run(make_run, digest, real_queue, t0 - 5 * MIN)
    run.state = RunState.NO_NEWS
    run.save()
    worker(t0, "celery")
    [message] = found(t0)
    assert "the oldest 5 min ago" in message


def test_every_priority_step_is_looked_at(digest, make_run, real_queue, t0):
    """kombu's Redis transport keeps a list per priority step (``mail\\x06\\x169``)."""
    waiting_run(make_run, digest, real_queue, t0 - MIN, priority=9)
    worker(t0, "celery")
    [message] = found(t0)
    assert "1 message(s) waiting" in message


def test_the_finding_counts_the_schedules_and_names_the_first_few(
    make_schedule, make_run, real_queue, t0
):
    for n in range(7):
        row = make_schedule(f"digest-{n}", every=3600, queue=real_queue.name)
        waiting_run(make_run, row, real_queue, t0 - (n + 1) * MIN)
    worker(t0, "celery")
    [message] = found(t0)
    assert "7 message(s) waiting, 7 of them sent by schedules" in message
    assert "(digest-0, digest-1, digest-2, digest-3, digest-4 and 2 more)" in message
    assert "the oldest 7 min ago" in message


def test_the_finding_never_says_more_of_them_from_schedules_than_are_waiting(t0):
    """On RabbitMQ the ledger's runs are a sample the broker shows no message of: three
    runs and one message waiting is "1 message(s) waiting, 1 of them", not "3 of them"."""
    runs = {f"id-{n}": (f"digest-{n}", t0 - (n + 1) * MIN) for n in range(3)}
    group = queues.Waiting("mail", t0 - 3 * MIN, runs)
    finding = queues._finding(group, queues.Depth(1, consumers=0), None, t0, None)
    assert "1 message(s) waiting, 1 of them sent by schedules" in finding.message


def test_a_schedule_without_a_queue_is_looked_for_where_celery_routes_its_task(
    settings, make_schedule, make_run, t0
):
    """An empty queue is the app's: ``task_routes``, else ``task_default_queue``, as
    ``send_task`` picks it for beat's message."""
    app = Celery("routed", broker=settings.CELERY_BROKER_URL, set_as_current=False)
    queue = RealQueue(app)
    app.conf.task_routes = {"tests.e2eapp.tasks.record": {"queue": queue.name}}
    try:
        row = make_schedule("routed", every=3600)
        task_id = queue.send(queue="")
        make_run(row, t0 - MIN, state=RunState.PUBLISHED, published_at=t0 - MIN, task_id=task_id)
        worker(t0, "celery")
        [message] = found(t0, app)
        assert f"queue '{queue.name}'" in message and "(routed)" in message
        worker(t0, queue.name, name="routed@host")
        assert found(t0, app) == []
    finally:
        _forget(settings.CELERY_BROKER_URL, queue.name)


def _forget(url: str, name: str) -> None:
    import redis

    client = redis.Redis.from_url(url)
    for key in client.scan_iter(f"*{name}*"):
        client.delete(key)


def test_the_decision_clears_a_queue_a_live_worker_lists_even_with_its_message_waiting(t0):
    """``unconsumed`` alone (pure): the rows clear what they list, whatever the broker holds;
    without a count of consumers, rows that are not all recorded clear everything."""
    group = queues.Waiting("mail", t0, {"t1": ("digest", t0)})
    depth = {"mail": queues.Depth(1, None, frozenset({"t1"}))}
    assert queues.unconsumed({"mail": group}, {"celery", "mail"}, depth) == []
    assert queues.unconsumed({"mail": group}, None, depth) == []
    assert queues.unconsumed({"mail": group}, {"celery"}, depth) == [group]
    counted = {"mail": queues.Depth(1, 0)}
    assert queues.unconsumed({"mail": group}, {"mail"}, counted) == [group]


# --- a broker that cannot tell ------------------------------------------------------------


@pytest.fixture
def silent_server() -> Iterator[str]:
    """A TCP server that accepts and never answers: a broker hung, or behind a black hole."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    accepted: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        server.settimeout(0.1)
        while not stop.is_set():
            try:
                accepted.append(server.accept()[0])
            except TimeoutError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield f"127.0.0.1:{server.getsockname()[1]}"
    stop.set()
    thread.join(5)
    for conn in accepted:
        conn.close()
    server.close()


@pytest.mark.parametrize("broker", ["redis://127.0.0.1:1/0", "silent-redis", "silent-amqp"])
def test_a_broker_down_or_mute_makes_the_finder_silent_within_its_bound(
    monkeypatch, digest, make_run, real_queue, silent_server, t0, broker, caplog
):
    """No answer is no finding (the broker's own trouble shows as unresolved runs, and the
    runs as no_news after its bound), and never a hung ``check``."""
    monkeypatch.setattr(queues, "PROBE_TIMEOUT", 0.5)
    waiting_run(make_run, digest, real_queue, t0 - MIN)
    worker(t0, "celery")
    if broker.startswith("silent"):
        broker = f"{broker[7:]}://{silent_server}/0".replace("amqp://", "amqp://guest:guest@")
    app = Celery("down", broker=broker, set_as_current=False)
    started = time.monotonic()
    assert found(t0, app) == []
    assert time.monotonic() - started < 2.0
    assert "the broker could not say" in caplog.text


# --- RabbitMQ: the broker counts the consumers --------------------------------------------


@pytest.fixture
def rabbit() -> Iterator[RealQueue]:
    """A queue of this test's own on the local RabbitMQ, deleted after it."""
    app = Celery("rabbit", broker=RABBITMQ, set_as_current=False)
    queue = RealQueue(app)
    try:
        with app.connection_for_write(connect_timeout=2) as conn:
            conn.ensure_connection(max_retries=0)
    except Exception as exc:
        pytest.fail(f"RabbitMQ on 127.0.0.1:5672 is needed ({exc}); scripts/services.sh starts it")
    yield queue
    with app.connection_for_write() as conn:
        conn.default_channel.queue_delete(queue.name)
    app.close()


def test_rabbitmq_says_no_consumer_whatever_a_worker_row_says(make_schedule, make_run, rabbit, t0):
    """The broker's count of consumers is the truth: a worker row lists the queue (it is a
    heartbeat old), or a worker of an old release records none, and nobody consumes it."""
    row = make_schedule("digest", every=3600, queue=rabbit.name)
    waiting_run(make_run, row, rabbit, t0 - MIN)
    worker(t0, rabbit.name)
    worker(t0, None, name="old@host")
    [message] = found(t0, rabbit.app)
    assert f"queue '{rabbit.name}': 1 message(s) waiting" in message
    assert "the broker counts no consumer on it" in message


def test_rabbitmq_with_a_consumer_is_slow_not_unconsumed(make_schedule, make_run, rabbit, t0):
    row = make_schedule("digest", every=3600, queue=rabbit.name)
    waiting_run(make_run, row, rabbit, t0 - MIN)
    waiting_run(make_run, row, rabbit, t0 - 2 * MIN)
    with rabbit.app.connection_for_read() as conn:
        channel = conn.channel()
        channel.basic_qos(0, 1, False)  # takes one message and holds it: one stays ready
        held: list[Any] = []
        with conn.Consumer(
            Queue(rabbit.name, no_declare=True),
            channel=channel,
            no_ack=False,
            callbacks=[lambda body, message: held.append(message)],
        ):
            conn.drain_events(timeout=5)
            assert len(held) == 1
            assert found(t0, rabbit.app) == []


# --- the worker records its queues ---------------------------------------------------------


def consumer(*names: str) -> Any:
    return SimpleNamespace(task_consumer=SimpleNamespace(queues=[Queue(n) for n in names]))


def test_the_worker_records_the_queues_it_consumes_at_each_heartbeat(t0):
    """From its consumer (Celery's ``worker_ready`` sender), again at each heartbeat: what
    ``add_consumer`` and ``cancel_consumer`` change shows."""
    live = consumer("celery", "mail")
    heartbeat = tracking._Heartbeat("w@host", 321, live)
    heartbeat._write()
    assert WorkerHeartbeat.objects.get(worker="w@host").queues == "celery\nmail"
    live.task_consumer.queues.pop()
    heartbeat._write()
    assert WorkerHeartbeat.objects.get(worker="w@host").queues == "celery"


def test_a_consumer_without_a_task_consumer_says_the_apps_queues():
    from project.celery import app

    before = SimpleNamespace(app=app, task_consumer=None)
    assert tracking.consumed_queues(before) == list(app.amqp.queues.consume_from)


def test_a_consumer_that_does_not_say_leaves_the_queues_unrecorded():
    heartbeat = tracking._Heartbeat("odd@host", 9, SimpleNamespace())
    heartbeat._write()
    assert WorkerHeartbeat.objects.get(worker="odd@host").queues is None


# --- what it costs ------------------------------------------------------------------------


def test_the_waiting_runs_are_read_from_the_runs_state_index(make_schedule, make_run, t0):
    """A bounded range of (state, claimed_at) per state, cut at ``SAMPLE``: not every run of
    the look-back, and not the schedules table (no DISTINCT over a million schedules'
    queues). With a day of finished runs the planner knows of (ANALYZE)."""
    jobs = [make_schedule(f"job-{i}", every=30) for i in range(4)]
    Run.objects.bulk_create(
        Run(
            schedule=job,
            slot=t0 - k * 30 * S,
            claimed_at=t0 - k * 30 * S,
            state=RunState.SUCCEEDED,
            task_id=None,
        )
        for job in jobs
        for k in range(1, 2000)
    )
    make_run(jobs[0], t0 - 61 * S, state=RunState.PUBLISHED, published_at=t0 - MIN)
    if connection.vendor != "mysql":  # MySQL's ANALYZE TABLE commits the test's rows
        with connection.cursor() as cursor:
            cursor.execute("ANALYZE")
    for state in queues.WAITING:
        plan = _plan(queues.waiting_query(state, t0, t0 - MIN))
        # the state's range of (state, claimed_at), or PostgreSQL's partial index of the
        # runs in flight: never the day's runs by claimed_at, never the whole table
        if connection.vendor == "mysql":  # the key chosen, after the possible ones
            plan = plan.split()[5]
        assert "durablebeat_run_state_idx" in plan or "durablebeat_run_inflight_idx" in plan
        assert "durablebeat_run_claimed_idx" not in plan, plan
        assert "Seq Scan on durablebeat_run " not in plan, plan
    assert len(queues.waiting_runs(t0, t0 - MIN)) == 1


def _plan(queryset: Any) -> str:
    return str(queryset.explain())


def test_nothing_waiting_asks_the_broker_nothing(monkeypatch, digest, make_run, real_queue, t0):
    """A healthy system: one indexed read of the ledger, no broker connection."""

    def no_broker(*args: Any) -> None:
        raise AssertionError("the broker was asked")

    monkeypatch.setattr(queues, "probe", no_broker)
    monkeypatch.setattr(queues, "counts_consumers", no_broker)
    worker(t0, "celery")
    make_run(digest, t0 - 2 * MIN, published_at=t0 - 2 * MIN, started_at=t0 - 2 * MIN)
    waiting_run(make_run, digest, real_queue, t0 - 10 * S)  # younger than the interval
    assert found(t0) == []


def test_the_admin_shows_each_workers_queues(admin_client, t0):
    worker(t0, "celery\nmail")
    worker(t0, None, name="old@host")
    page = admin_client.get("/admin/durablebeat/workerheartbeat/").content.decode()
    assert "celery, mail" in page and "not recorded" in page
