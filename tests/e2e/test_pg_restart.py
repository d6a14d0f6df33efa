"""A PostgreSQL restart is an outage like any other (R5, R31; issue 30 item 4): the server
restarted (``pg_ctl restart -m fast``: every connection terminated by the administrator) at
idle and in the middle of a burst: every slot sent once, no crash, beat back within
``DB_RETRY_INTERVAL`` of the server. A cluster of the test's own (initdb on a free port),
never the shared server.
"""

from __future__ import annotations

import contextlib
import glob
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import psycopg
import pytest
import redis

from .conftest import BROKER
from .harness import QUIET, ROOT, Cluster, wait_until

pytestmark = [QUIET, pytest.mark.e2e, pytest.mark.postgres_only]

BIN = (
    Path(sorted(glob.glob("/usr/lib/postgresql/*/bin"))[-1])
    if glob.glob("/usr/lib/postgresql/*/bin")
    else Path("/nonexistent")
)
#: slots in the mid-burst restart; the issue's 10,000 is a run of its own (outside CI time):
#: DURABLEBEAT_PG_RESTART_BURST=10000 pytest tests/e2e/test_pg_restart.py
BURST = int(os.environ.get("DURABLEBEAT_PG_RESTART_BURST", "3000"))


@dataclass
class OwnServer:
    """A PostgreSQL server of this test's own."""

    data: Path
    port: int

    @property
    def url(self) -> str:
        return f"postgres://postgres@127.0.0.1:{self.port}/durablebeat"

    def as_owner(self, *args: str) -> None:
        """A PostgreSQL tool as the cluster's owner (initdb and the server refuse root)."""
        cmd = [str(BIN / args[0]), *args[1:]]
        if os.geteuid() == 0:
            cmd = ["runuser", "-u", "postgres", "--", *cmd]
        subprocess.run(cmd, check=True, capture_output=True, timeout=120)

    def ctl(self, action: str) -> None:
        self.as_owner(
            "pg_ctl",
            "-D",
            str(self.data / "data"),
            "-l",
            str(self.data / "server.log"),
            "-o",
            f"-p {self.port} -k {self.data} -c listen_addresses=127.0.0.1 -c fsync=off",
            "-m",
            "fast",
            "-w",
            action,
        )

    def query(self, sql: str) -> list[tuple]:
        with psycopg.connect(self.url, autocommit=True, connect_timeout=5) as conn:
            return conn.execute(sql).fetchall()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _manage(server: OwnServer, *args: str) -> None:
    env = dict(os.environ, DJANGO_SETTINGS_MODULE="tests.settings", DATABASE_URL=server.url)
    env = {k: v for k, v in env.items() if not k.startswith("PYTEST")}
    subprocess.run([sys.executable, "manage.py", *args], cwd=ROOT, env=env, check=True, timeout=300)


@pytest.fixture
def own_server() -> Iterator[OwnServer]:
    if not (BIN / "initdb").exists():
        pytest.fail("this test needs PostgreSQL's initdb (Debian's postgresql package)")
    # Not under pytest's own temporary root (0700: the server's user could not reach it)
    base = Path(tempfile.mkdtemp(prefix="durablebeat-own-pg-"))
    if os.geteuid() == 0:
        shutil.chown(base, "postgres")
    server = OwnServer(base, _free_port())
    server.as_owner("initdb", "-D", str(base / "data"), "-U", "postgres", "--auth=trust")
    server.ctl("start")
    try:
        with psycopg.connect(
            f"postgres://postgres@127.0.0.1:{server.port}/postgres", autocommit=True
        ) as conn:
            conn.execute("CREATE DATABASE durablebeat")
        _manage(server, "migrate", "--verbosity", "0")
        yield server
    finally:
        server.as_owner("pg_ctl", "-D", str(base / "data"), "-m", "immediate", "stop")
        shutil.rmtree(base, ignore_errors=True)


@contextlib.contextmanager
def _pgbouncer(server: OwnServer) -> Iterator[str]:
    """PgBouncer in transaction pooling in front of ``server``: the URL beat uses."""
    port = _free_port()
    users, ini, pid = server.data / "users.txt", server.data / "pgb.ini", server.data / "pgb.pid"
    users.write_text('"postgres" ""\n')
    ini.write_text(
        f"[databases]\n* = host=127.0.0.1 port={server.port}\n[pgbouncer]\n"
        f"listen_addr = 127.0.0.1\nlisten_port = {port}\nunix_socket_dir =\n"
        f"auth_type = trust\nauth_file = {users}\npool_mode = transaction\n"
        "ignore_startup_parameters = extra_float_digits,options\n"
        # its default (15 s) holds every query that long after a restart (docs: pooler)
        "server_login_retry = 1\n"
        f"pidfile = {pid}\nlogfile = {server.data / 'pgb.log'}\n"
    )
    cmd = ["/usr/sbin/pgbouncer", "-d", str(ini)]
    if os.geteuid() == 0:
        shutil.chown(users, "postgres")
        shutil.chown(ini, "postgres")
        cmd[2:2] = ["-u", "postgres"]
    subprocess.run(cmd, check=True, capture_output=True, timeout=30)
    try:
        wait_until(pid.exists, 10, what="PgBouncer up")
        yield server.url.replace(f":{server.port}/", f":{port}/")
    finally:
        with contextlib.suppress(OSError, ValueError):
            os.kill(int(pid.read_text()), signal.SIGTERM)


def _messages() -> list[str]:
    """The task ids of the messages on the broker's default queue (no worker consumes)."""
    raw = redis.Redis.from_url(BROKER).lrange("celery", 0, -1)
    return [json.loads(m)["headers"]["id"] for m in raw]


@pytest.mark.parametrize("path", ["direct", "pgbouncer"])
def test_a_postgresql_restart_at_idle_and_mid_burst_loses_and_doubles_nothing(
    cluster: Cluster, own_server: OwnServer, path: str
):
    with contextlib.ExitStack() as stack:
        if path == "direct":
            cluster.database_url = own_server.url
        else:  # transaction pooling, Django's advice for it (R31)
            cluster.database_url = stack.enter_context(_pgbouncer(own_server))
            cluster.settings["E2E_DB_POOLED"] = "1"
        _restarts(cluster, own_server)
        cluster.stop_all()


def _restarts(cluster: Cluster, own_server: OwnServer) -> None:
    cluster.beat_schedule = {
        "every1": {
            "task": "tests.e2eapp.tasks.record",
            "every": 1,
            "durablebeat": {"startup_grace": 0},
        }
    }
    beat = cluster.beat()
    wait_until(beat.booted, 60, what="beat boot")
    wait_until(lambda: own_server.query("SELECT count(*) FROM durablebeat_run")[0][0] >= 3, 30)

    # At idle: every connection terminated, the server back at once.
    own_server.ctl("restart")
    back, restarted = time.monotonic(), own_server.query("SELECT now()")[0][0]
    since = f"SELECT count(*) FROM durablebeat_run WHERE claimed_at > '{restarted.isoformat()}'"
    wait_until(lambda: own_server.query(since)[0][0], 30, what="beat back")
    # DB_RETRY_INTERVAL (1 s here) and a boot's work; through PgBouncer beat sees no outage
    assert time.monotonic() - back < 1 + 5

    # Mid-burst: BURST one-offs due at one instant, the server restarted while beat fires them.
    code = (
        "import datetime as dt; from durablebeat.core import clock; "
        "from durablebeat.models import Schedule; "
        "at = clock.now() + dt.timedelta(seconds=4); "
        "Schedule.objects.bulk_create([Schedule(name=f'burst-{i}', task='tests.e2eapp.tasks."
        f"record', kind='clocked', clocked_at=at) for i in range({BURST})])"
    )
    _manage(own_server, "shell", "-c", code)
    sent = "SELECT count(*) FROM durablebeat_run r JOIN durablebeat_schedule s ON "
    sent += "s.id = r.schedule_id WHERE s.name LIKE 'burst-%'"
    wait_until(lambda: own_server.query(sent)[0][0] > 0, 60, interval=0.02, what="burst began")
    own_server.ctl("restart")
    wait_until(lambda: own_server.query(sent)[0][0] == BURST, 120, what="every slot recorded")
    assert beat.alive, beat.log()[-3000:]
    assert "Traceback" not in beat.log()
    # Every slot of the ledger went out once, and nothing else went out.
    runs = own_server.query("SELECT task_id FROM durablebeat_run WHERE task_id IS NOT NULL")
    wait_until(lambda: len(_messages()) >= len(runs), 30, what="every message on the broker")
    messages = _messages()
    assert len(messages) == len(set(messages)), "a message went out twice"
    assert set(messages) == {
        r[0]
        for r in own_server.query("SELECT task_id FROM durablebeat_run WHERE task_id IS NOT NULL")
    }
    missed = own_server.query("SELECT count(*) FROM durablebeat_run WHERE state = 'missed'")
    assert missed == [(0,)]
    # every1 (no worker: its runs stay published, its later slots skipped, R14) fires on
    # after both restarts; a slot skipped before an outage is not sent from memory during it
    # (it was: a message the ledger called skipped)
    recent = "SELECT count(*) FROM durablebeat_run WHERE claimed_at > now() - interval '3 s'"
    wait_until(lambda: own_server.query(recent)[0][0], 30, what="beat firing after the restarts")
