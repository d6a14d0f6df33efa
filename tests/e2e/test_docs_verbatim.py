"""Issue 39: the README's Quickstart and docs/from-code.md, run as a newcomer runs them.

A fresh ``django-admin startproject shop`` with ``startapp news``; then each marked step of
the two pages in their order (tests/docs_blocks.py): the files written as the blocks say,
the commands run (``migrate`` and ``check`` must pass), the worker and beat started with the
pages' own command lines, the shell code run in ``manage.py shell``. The Quickstart's first
task runs and the per-customer digest is delivered (the worker prints its mail), each seen
in the ledger as a run that succeeded, and the ledger's query of the from-code page prints
it. An edit to the pages is what this runs.

The test changes only what it must, in a settings module of its own that imports the
pages' settings (``OVERRIDES``, each line saying why): the database (one of its own on the
test PostgreSQL, created and dropped here), the broker (this run's Redis database) and the
startup grace (1 s, not 60 s: the first interval fire within the test's time). Nothing is
installed: durablebeat is the checkout's, on ``PYTHONPATH``.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
import redis
from django.conf import settings

from tests import docs_blocks
from tests.docs_blocks import Step

from .conftest import CLUSTER
from .harness import CELERY, ROOT, Cluster, Proc, wait_until

pytestmark = [pytest.mark.e2e]

SUFFIX = os.environ.get("DURABLEBEAT_TEST_SUFFIX", "")
DATABASE = f"docs_shop{SUFFIX}"
PROGRAMS = {"python": sys.executable, "celery": CELERY}
#: the test's settings module, beside the project's own (DJANGO_SETTINGS_MODULE names it)
OVERRIDES = """\
# tests/e2e/test_docs_verbatim.py: the pages' settings, and only what the test must change.
from shop.settings import *  # noqa: F403

# a database of the test's own on the test PostgreSQL, made and dropped by the test
DATABASES = {{"default": {database!r}}}
# this test run's Redis database (DURABLEBEAT_TEST_REDIS_DB), not the page's 0
CELERY_BROKER_URL = {broker!r}
# a new interval's first fire 1 s after beat's boot, not 60 s (README: "startup grace")
DURABLEBEAT_STARTUP_GRACE = 1
"""


def _server() -> dict[str, Any]:
    db = settings.DATABASES["default"]
    if db["ENGINE"] != "django.db.backends.postgresql":
        pytest.skip("the pages' project runs on PostgreSQL (DURABLEBEAT_TEST_DB=postgres)")
    return {
        "host": db.get("HOST") or "127.0.0.1",
        "port": int(db.get("PORT") or 5432),
        "user": db.get("USER") or "postgres",
        "password": db.get("PASSWORD") or "",
    }


def _admin(server: dict[str, Any], sql: str) -> None:
    with psycopg.connect(dbname="postgres", autocommit=True, **server) as conn:
        conn.execute(sql)


@pytest.fixture
def database() -> Iterator[dict[str, Any]]:
    """A fresh PostgreSQL database for the project, dropped after the test."""
    server = _server()
    _admin(server, f'DROP DATABASE IF EXISTS "{DATABASE}" WITH (FORCE)')
    _admin(server, f'CREATE DATABASE "{DATABASE}"')
    try:
        yield server
    finally:
        _admin(server, f'DROP DATABASE IF EXISTS "{DATABASE}" WITH (FORCE)')


class Newcomer:
    """Follows the pages' steps in a fresh project; the processes it starts are the
    cluster's, so that a failure's report shows their logs (tests/e2e/conftest.py)."""

    def __init__(self, project: Path, env: dict[str, str], cluster: Cluster) -> None:
        self.project, self.env, self.cluster = project, env, cluster
        self.started: list[tuple[list[str], Proc]] = []
        self.outputs: list[str] = []

    def follow(self, page: str) -> None:
        for step in docs_blocks.steps(page):
            getattr(self, f"do_{step.action}")(step)

    def do_write(self, step: Step) -> None:
        (self.project / step.path).write_text(step.code, encoding="utf-8")

    def do_append(self, step: Step) -> None:
        with (self.project / step.path).open("a", encoding="utf-8") as file:
            file.write("\n" + step.code)

    def do_run(self, step: Step) -> None:
        for command in step.commands():
            self.outputs.append(self.run(shlex.split(command), step.where))

    def do_start(self, step: Step) -> None:
        for command in step.commands():
            argv = shlex.split(command)
            assert argv[0] == "celery", f"{step.where}: starts {argv[0]!r}, not celery"
            self.start(argv)

    def do_restart(self, step: Step) -> None:
        started, self.started = self.started, []
        for _, proc in started:
            assert proc.terminate() == 0, f"{proc.name} did not stop cleanly ({step.where})"
        for argv, _ in started:
            self.start(argv)

    def do_shell(self, step: Step) -> None:
        self.outputs.append(self.shell(step))

    def shell(self, step: Step) -> str:
        return self.run(["python", "manage.py", "shell", "-c", step.code], step.where)

    def start(self, argv: list[str]) -> Proc:
        kind = argv[3] if len(argv) > 3 else "celery"
        proc = Proc(
            f"{self.cluster.label}-{len(self.cluster.procs) + 1:02d}-{kind}",
            argv[1:],
            self.env,
            program=(CELERY,),
            cwd=self.project,
        )
        self.cluster.procs.append(proc)
        self.started.append((argv, proc))
        # as a person watching it, the next step waits for the process to be up
        wait_until(lambda: proc.ready() or not proc.alive, 30, what=f"{proc.name} up")
        assert proc.alive, f"{proc.name} exited at start"
        return proc

    def run(self, argv: list[str], where: str) -> str:
        done = subprocess.run(
            [PROGRAMS.get(argv[0], argv[0]), *argv[1:]],
            cwd=self.project,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        out = done.stdout + done.stderr
        assert done.returncode == 0, f"{where}: {shlex.join(argv)} failed:\n{out[-4000:]}"
        return out

    def proc(self, kind: str) -> Proc:
        return next(p for argv, p in self.started if kind in argv)


def _states(server: dict[str, Any], schedule: str) -> list[tuple[str, str]]:
    """The ledger's runs of ``schedule``: (reason, state), read as any SQL client would."""
    with psycopg.connect(dbname=DATABASE, **server) as conn:
        return conn.execute(
            "SELECT r.reason, r.state FROM durablebeat_run r"
            " JOIN durablebeat_schedule s ON s.id = r.schedule_id WHERE s.name = %s",
            (schedule,),
        ).fetchall()


def test_the_quickstart_and_the_from_code_page_run_verbatim(
    request: pytest.FixtureRequest, tmp_path: Path, database: dict[str, Any]
) -> None:
    broker = settings.CELERY_BROKER_URL
    assert broker.startswith("redis"), "the pages' project uses Redis"
    redis.Redis.from_url(broker).flushdb()
    django_admin = str(Path(sys.executable).with_name("django-admin"))
    subprocess.run([django_admin, "startproject", "shop"], cwd=tmp_path, check=True)
    project = tmp_path / "shop"
    db = {"ENGINE": "django.db.backends.postgresql", "NAME": DATABASE}
    db |= {key.upper(): str(value) for key, value in database.items()}
    (project / "shop" / "docs_test_settings.py").write_text(
        OVERRIDES.format(database=db, broker=broker), encoding="utf-8"
    )
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("PYTEST", "DJANGO_", "CELERY_", "E2E_", "DATABASE_URL"))
    }
    env |= {
        "DJANGO_SETTINGS_MODULE": "shop.docs_test_settings",
        "PYTHONPATH": os.pathsep.join([str(project), str(ROOT)]),
        "PYTHONUNBUFFERED": "1",
    }
    # the harness's cluster only to carry the processes' logs into a failure's report
    cluster = Cluster(database_url="", broker_url=broker, label=request.node.name)
    request.node.stash[CLUSTER] = cluster
    newcomer = Newcomer(project, env, cluster)
    try:
        newcomer.run(["python", "manage.py", "startapp", "news"], "the test")

        newcomer.follow("README.md")
        check = next(out for out in newcomer.outputs if "System check" in out)
        assert "System check identified no issues" in check, check
        wait_until(
            lambda: ("startup_grace", "succeeded") in _states(database, "cleanup"),
            45,
            what="the Quickstart's cleanup run, succeeded",
        )

        newcomer.follow("docs/from-code.md")
        wait_until(
            lambda: ("manual", "succeeded") in _states(database, "digest-1"),
            45,
            what="the digest of customer 1, run now and succeeded",
        )
        mail = newcomer.proc("worker").log()
        assert "Subject: Your morning digest" in mail and "To: ada@example.com" in mail
        query = next(s for s in docs_blocks.steps("docs/from-code.md") if "Run.objects" in s.code)
        ledger = newcomer.shell(query)
        assert "digest-1 " in ledger and " manual succeeded " in ledger, ledger
        assert "0 failed" in ledger, ledger
        for _, proc in newcomer.started:
            assert proc.terminate() == 0, f"{proc.name} did not stop cleanly"
    finally:
        cluster.stop_all()
