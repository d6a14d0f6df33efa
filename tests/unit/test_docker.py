"""docker/: what the compose file and the image must guarantee, checked without a Docker engine.

The stack's services exist and are health-checked, one beat runs the durable scheduler, the
migrations run before the app, the database is chosen by ``DATABASE_URL`` (PostgreSQL, or
MariaDB under its profile), the image installs what that stack needs and runs as non-root;
``docker-compose config`` validates the file when it is installed (scripts/system-tools.sh).
"""

from __future__ import annotations

import ast
import os
import re
import shlex
import shutil
import subprocess
import tomllib
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

yaml = pytest.importorskip("yaml")

ROOT = Path(__file__).resolve().parents[2]
COMPOSE_FILE = ROOT / "docker" / "compose.yaml"
DOCKERFILE = ROOT / "docker" / "Dockerfile"
SCHEDULER = "durablebeat.schedulers:DurableScheduler"
#: the extra each backing service's image needs in the app image
EXTRA_FOR_IMAGE = {"postgres": "postgres", "mariadb": "mysql", "mysql": "mysql", "redis": "redis"}

COMPOSE: dict[str, Any] = yaml.safe_load(COMPOSE_FILE.read_text())
SERVICES: dict[str, dict[str, Any]] = COMPOSE["services"]
DEFAULT = {name: s for name, s in SERVICES.items() if not s.get("profiles")}
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
SETTINGS = (ROOT / "project" / "settings.py").read_text()


def argv(service: dict[str, Any]) -> list[str]:
    command = service.get("command", [])
    return shlex.split(command) if isinstance(command, str) else [str(a) for a in command]


def long_running(service: dict[str, Any]) -> bool:
    return service.get("restart", "no") != "no"


def app_services() -> dict[str, dict[str, Any]]:
    """The services that run the image built from this repository."""
    return {name: s for name, s in SERVICES.items() if "build" in s}


def dockerfile_stages() -> list[list[tuple[str, str]]]:
    """Each stage's (INSTRUCTION, arguments), continuation lines joined, comments dropped."""
    text = re.sub(r"\\\n", " ", DOCKERFILE.read_text())
    stages: list[list[tuple[str, str]]] = []
    for line in text.splitlines():
        if line.strip() and not line.lstrip().startswith("#"):
            instruction, _, args = line.strip().partition(" ")
            if instruction.upper() == "FROM":
                stages.append([])
            stages[-1].append((instruction.upper(), args))
    return stages


def installed_extras(stage: list[tuple[str, str]]) -> set[str]:
    runs = " ".join(args for i, args in stage if i == "RUN" and "pip " in args)
    return {e.strip() for m in re.findall(r"\[([a-z,\s]+)\]", runs) for e in m.split(",")}


def test_the_stack_runs_by_default_and_mariadb_under_its_profile():
    assert {"web", "worker", "beat", "postgres", "redis"} <= set(DEFAULT)
    assert SERVICES["mariadb"]["profiles"] == ["mariadb"]
    assert SERVICES["mariadb"]["image"].split(":")[0] in ("mariadb", "mysql")


@pytest.mark.parametrize("name", sorted(n for n, s in SERVICES.items() if long_running(s)))
def test_a_long_running_service_is_health_checked_and_waits_for_what_it_needs(name):
    service = SERVICES[name]
    assert service.get("healthcheck", {}).get("test"), f"{name} has no healthcheck"
    for needed, how in service.get("depends_on", {}).items():
        # A default service may not need a profile's: a plain `up` would refuse to start.
        assert needed in (DEFAULT if name in DEFAULT else SERVICES), (name, needed)
        condition = how["condition"]
        if condition == "service_healthy":
            assert "healthcheck" in SERVICES[needed], f"{needed} is never healthy"
        else:  # a one-shot that must have finished, like the migrations
            assert condition == "service_completed_successfully", (name, needed, condition)
            assert not long_running(SERVICES[needed]), f"{needed} never completes"


def test_exactly_one_beat_runs_the_durable_scheduler():
    beats = {
        n: argv(s) for n, s in SERVICES.items() if argv(s)[:1] == ["celery"] and "beat" in argv(s)
    }
    assert len(beats) == 1, beats  # two beats would be two schedulers racing (no harm, no use)
    ((name, args),) = beats.items()
    flags = [args[i + 1] for i, a in enumerate(args[:-1]) if a in ("-S", "--scheduler")]
    assert flags == [SCHEDULER] or (not flags and f'"{SCHEDULER}"' in SETTINGS), args
    module, _, cls = SCHEDULER.partition(":")
    tree = ast.parse((ROOT / (module.replace(".", "/") + ".py")).read_text())
    assert cls in {n.name for n in tree.body if isinstance(n, ast.ClassDef)}
    assert SERVICES[name].get("deploy", {}).get("replicas", 1) == 1


def test_the_migrations_run_once_before_every_app_service():
    migrate = [n for n, s in app_services().items() if "manage.py migrate" in " ".join(argv(s))]
    assert len(migrate) == 1, migrate
    assert not long_running(SERVICES[migrate[0]])
    for name in app_services().keys() - migrate:
        waits = SERVICES[name]["depends_on"][migrate[0]]["condition"]
        assert waits == "service_completed_successfully", name


def test_the_app_reaches_its_database_and_broker_by_url_defaulting_to_the_stack():
    for name, service in app_services().items():
        env = service["environment"]
        url = re.fullmatch(r"\$\{DATABASE_URL:-(.+)\}", env["DATABASE_URL"])
        assert url, f"{name}: DATABASE_URL cannot be switched by the environment"
        for value in (url.group(1), env["CELERY_BROKER_URL"]):
            assert urlsplit(value).hostname in DEFAULT, (name, value)


def test_the_image_installs_what_the_stack_and_the_settings_need():
    *build, final = dockerfile_stages()
    needed = {EXTRA_FOR_IMAGE[s["image"].split(":")[0]] for s in SERVICES.values() if "image" in s}
    needed |= {"results"} if "django_celery_results" in SETTINGS else set()
    extras = installed_extras(final)
    assert needed <= extras <= set(PYPROJECT["optional-dependencies"])
    runs = " ".join(a for i, a in final if i == "RUN")
    assert "dj_database_url" in SETTINGS and "dj-database-url" in runs
    if "--no-index" in runs:  # from the build stage's wheels: they must hold every extra
        assert build and extras <= installed_extras(build[-1])
    if "mysql" in extras:  # mysqlclient's library at run time
        assert re.search(r"libmariadb\d|libmysqlclient\d", runs)


def test_the_image_runs_as_non_root_on_a_supported_python():
    final = dockerfile_stages()[-1]
    users = [a for i, a in final if i == "USER"]
    assert users and users[-1].split(":")[0] not in ("root", "0")
    minimum = tuple(
        map(int, re.fullmatch(r">=(\d+)\.(\d+)", PYPROJECT["requires-python"]).groups())
    )
    for stage in dockerfile_stages():
        version = re.match(r"python:(\d+)\.(\d+)", stage[0][1])
        assert version and tuple(map(int, version.groups())) >= minimum, stage[0]


@pytest.mark.parametrize("profile", ["", "mariadb"])
def test_compose_config_validates(profile):
    tool = shutil.which("docker-compose")
    if tool is None:
        missing = "no docker-compose (scripts/system-tools.sh installs it)"
        if os.environ.get("CI"):  # CI installs it first: a skip would hide a broken install
            pytest.fail(missing, pytrace=False)
        pytest.skip(missing)
    env = {**os.environ, "COMPOSE_PROFILES": profile}
    if profile:
        env["DATABASE_URL"] = "mysql://durablebeat:durablebeat@mariadb:3306/durablebeat"
    result = subprocess.run(
        [tool, "-f", str(COMPOSE_FILE), "config", "-q"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr or result.stdout
