"""Real ``celery beat`` and ``celery worker`` processes for end-to-end tests.

Processes run in their own session so that SIGKILL reaches the whole group (a prefork
worker's children die with it, as they would in a killed container).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
#: put first on PYTHONPATH with E2E_CLOCK_OFFSET, it sets a process's wall clock off (R26)
SKEW = Path(__file__).resolve().with_name("skew")
CELERY = str(Path(sys.executable).with_name("celery"))
#: a folder per run (database and suffix): the PostgreSQL and MariaDB runs go side by side
OUTPUT = (
    ROOT
    / "test-output"
    / "e2e"
    / (
        os.environ.get("DURABLEBEAT_TEST_DB", "postgres")
        + os.environ.get("DURABLEBEAT_TEST_SUFFIX", "")
    )
)


#: the tests that need the machine quiet (a burst of thousands of slots, Chromium, timings
#: within a second or two): under pytest-xdist's ``--dist loadgroup`` (scripts/test.sh) they
#: run one after another on one worker, so never beside each other; the restart storms and
#: outages, which mostly wait, run beside them on the other workers.
QUIET = pytest.mark.xdist_group("quiet")


def wait_until(
    condition: Callable[[], Any], timeout: float, interval: float = 0.2, what: str = ""
) -> Any:
    """Poll ``condition`` until it returns something truthy; fail after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what or condition}")
        time.sleep(interval)


class Proc:
    """One celery process with its log in test-output/e2e/."""

    def __init__(
        self,
        name: str,
        args: list[str],
        env: dict[str, str],
        *,
        program: tuple[str, ...] = (CELERY, "-A", "project"),
        cwd: Path = ROOT,
    ) -> None:
        """``program`` and ``cwd``: another project's celery (the docs' own, issue 39)."""
        OUTPUT.mkdir(parents=True, exist_ok=True)
        self.name = name
        self.log_path = OUTPUT / f"{name}.log"
        self._log = open(self.log_path, "wb")  # noqa: SIM115 - closed in stop()
        self.popen = subprocess.Popen(
            [*program, *args],
            cwd=cwd,
            env=env,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

    @property
    def alive(self) -> bool:
        return self.popen.poll() is None

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def booted(self) -> bool:
        """A beat that reached its database (the line ``Engine`` logs at each boot)."""
        return "database reachable" in self.log()

    def ready(self) -> bool:
        """A beat that reached its database, or a worker that says it is ready."""
        log = self.log()
        return "database reachable" in log or "ready." in log

    def signal(self, sig: int) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.popen.pid, sig)

    def kill(self) -> None:
        self.signal(signal.SIGKILL)
        self.popen.wait(timeout=10)
        self._log.close()

    def terminate(self, timeout: float = 20) -> int:
        self.signal(signal.SIGTERM)
        try:
            code = self.popen.wait(timeout=timeout)
        except subprocess.TimeoutExpired as exc:
            self.dump_stack()
            self.kill()
            raise AssertionError(f"{self.name} did not stop within {timeout}s on SIGTERM") from exc
        self._log.close()
        return code

    def dump_stack(self) -> None:
        """Where a process hangs, for the person reading a failed CI run."""
        py_spy = Path(sys.executable).with_name("py-spy")
        if py_spy.exists():
            dump = subprocess.run(
                [str(py_spy), "dump", "--pid", str(self.popen.pid)], capture_output=True, text=True
            )
            (OUTPUT / f"{self.name}.stack").write_text(dump.stdout + dump.stderr)

    def stop(self) -> None:
        if self.alive:
            self.kill()
        elif not self._log.closed:
            self._log.close()


class Cluster:
    """Starts beat and worker processes against the test database and broker."""

    def __init__(self, database_url: str, broker_url: str, label: str) -> None:
        self.database_url = database_url
        self.broker_url = broker_url
        self.label = label
        self.procs: list[Proc] = []
        self.beat_schedule: dict[str, Any] = {}
        self.settings: dict[str, str] = {}
        self._count = 0

    def env(self, extra: dict[str, str] | None = None) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST")}
        env |= {
            "DJANGO_SETTINGS_MODULE": "tests.settings",
            "DATABASE_URL": self.database_url,
            "CELERY_BROKER_URL": self.broker_url,
            "E2E_BEAT_SCHEDULE": json.dumps(self.beat_schedule),
            "PYTHONUNBUFFERED": "1",
        }
        return env | self.settings | (extra or {})

    def _name(self, kind: str) -> str:
        self._count += 1
        return f"{self.label}-{self._count:02d}-{kind}"

    def skewed(self, clock_offset: float, extra: dict[str, str]) -> dict[str, str]:
        """The environment of a process whose wall clock is ``clock_offset`` seconds off."""
        if not clock_offset:
            return self.env(extra)
        path = os.pathsep.join(p for p in (str(SKEW), os.environ.get("PYTHONPATH", "")) if p)
        return self.env(extra | {"PYTHONPATH": path, "E2E_CLOCK_OFFSET": str(clock_offset)})

    def beat(self, clock_offset: float = 0, *, options: tuple[str, ...] = (), **extra: str) -> Proc:
        """A ``celery beat``; ``options`` follow the harness's own (a later one wins)."""
        proc = Proc(
            self._name("beat"),
            [
                "beat",
                "-S",
                "durablebeat.schedulers:DurableScheduler",
                "--loglevel",
                "INFO",
                "--pidfile=",
                *options,
            ],
            self.skewed(clock_offset, extra),
        )
        self.procs.append(proc)
        return proc

    def worker(
        self,
        concurrency: int = 2,
        clock_offset: float = 0,
        *,
        options: tuple[str, ...] = (),
        **extra: str,
    ) -> Proc:
        """A ``celery worker``; ``options`` follow the harness's own (``-B``: beat inside)."""
        name = self._name("worker")
        proc = Proc(
            name,
            [
                "worker",
                "--loglevel",
                "INFO",
                "-c",
                str(concurrency),
                "-n",
                f"{name}@%h",
                "--without-gossip",
                "--without-mingle",
                "--pidfile=",
                *options,
            ],
            self.skewed(clock_offset, extra),
        )
        self.procs.append(proc)
        return proc

    def check(self) -> tuple[int, list[dict[str, Any]]]:
        """``manage.py durablebeat check --json``, the real command: exit code and findings."""
        done = subprocess.run(
            [sys.executable, "manage.py", "durablebeat", "check", "--json"],
            cwd=ROOT,
            env=self.env(),
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.stdout.strip(), done.stderr[-3000:]
        return done.returncode, json.loads(done.stdout)

    def stop_all(self) -> None:
        for proc in self.procs:
            proc.stop()
