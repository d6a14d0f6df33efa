from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator
from urllib.parse import urlsplit

import pytest
import redis
from django.conf import settings
from django.db import connection

from .harness import Cluster

SUFFIX = os.environ.get("DURABLEBEAT_TEST_SUFFIX", "")
# The broker of this test process's own Celery app (tests/settings.py: Redis database 15 by
# default; a parallel run sets DURABLEBEAT_TEST_REDIS_DB to its own), as in a deployment:
# a schedule saved here (as the admin would) wakes the beats a test started through it
# (R6, R31). It was Redis database 14 while this process published on 15: a beat behind a
# deaf LISTEN never heard this process's wake-ups in the whole suite's run (issue 30).
# DURABLEBEAT_TEST_BROKER=amqp runs on the local RabbitMQ instead, in a virtual host of
# this run's own (durablebeat<suffix>), made on first use.
if os.environ.get("DURABLEBEAT_TEST_BROKER") == "amqp":
    _worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    BROKER = f"amqp://guest:guest@127.0.0.1:5672/durablebeat{SUFFIX}{_worker}"
else:
    BROKER = settings.CELERY_BROKER_URL

#: where the processes started by a test find the test database pytest-django made
SCHEMES = {"postgresql": "postgres", "mysql": "mysql"}
#: the cluster of the test running, for its failure report
CLUSTER = pytest.StashKey[Cluster]()
#: lines of each process's log a failed test's report shows (CI keeps no test-output/)
LOG_TAIL = 80


def _database_url() -> str:
    s = connection.settings_dict
    if connection.vendor not in SCHEMES:
        pytest.skip("e2e tests run on a database server: PostgreSQL, MariaDB or MySQL")
    scheme = SCHEMES[connection.vendor]
    user = s.get("USER") or ("postgres" if scheme == "postgres" else "root")
    auth = f"{user}:{s['PASSWORD']}" if s.get("PASSWORD") else user
    port = s.get("PORT") or (5432 if scheme == "postgres" else 3306)
    return f"{scheme}://{auth}@{s.get('HOST') or '127.0.0.1'}:{port}/{s['NAME']}"


@pytest.fixture(scope="session")
def _amqp_vhost() -> str:
    """This run's RabbitMQ virtual host, so that runs side by side never share a queue."""
    vhost = urlsplit(BROKER).path.lstrip("/")
    ctl = shutil.which("rabbitmqctl")
    if ctl is None:
        pytest.fail("DURABLEBEAT_TEST_BROKER=amqp needs rabbitmqctl (RabbitMQ on this host)")
    existing = subprocess.run([ctl, "-q", "list_vhosts"], capture_output=True, text=True)
    if vhost not in existing.stdout.split():
        subprocess.run([ctl, "-q", "add_vhost", vhost], check=True, capture_output=True)
    subprocess.run(
        [ctl, "-q", "set_permissions", "-p", vhost, "guest", ".*", ".*", ".*"],
        check=True,
        capture_output=True,
    )
    return vhost


def _empty_broker() -> None:
    """No message of an earlier test reaches this one's worker."""
    if BROKER.startswith("redis"):
        redis.Redis.from_url(BROKER).flushdb()
        return
    from kombu import Connection, Exchange, Queue

    with Connection(BROKER, connect_timeout=10) as conn:
        channel = conn.default_channel
        # The queue celery declares by default, declared alike (a durable direct queue).
        queue = Queue("celery", Exchange("celery", "direct"), routing_key="celery")(channel)
        queue.declare()
        queue.purge()


@pytest.fixture
def cluster(request: pytest.FixtureRequest, transactional_db: None) -> Iterator[Cluster]:
    if BROKER.startswith("amqp"):
        request.getfixturevalue("_amqp_vhost")
    _empty_broker()
    c = Cluster(_database_url(), BROKER, request.node.name.replace("[", "-").rstrip("]"))
    request.node.stash[CLUSTER] = c
    try:
        yield c
    finally:
        c.stop_all()
        connection.close()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Iterator[pytest.TestReport]:
    """A failed e2e test's report carries the end of each process's log: the only trace
    of what beat and the workers did that reaches a CI run's output."""
    report: pytest.TestReport = yield
    cluster = item.stash.get(CLUSTER, None)
    if report.when == "call" and report.failed and cluster is not None:
        for proc in cluster.procs:
            lines = proc.log().splitlines()[-LOG_TAIL:]
            report.sections.append((f"{proc.name}: last {len(lines)} lines", "\n".join(lines)))
    return report
