"""docker/: the compose file, the Dockerfile and .dockerignore, checked without a Docker engine.

The structure is read with PyYAML (skipped when it is not installed); ``config -q`` runs
when a ``docker-compose`` binary or the ``docker compose`` plugin is on PATH. Every name the
commands use (the Celery app, manage.py, the scheduler path, the WSGI app, the management
command) is checked against the source tree, statically: no Django, no database.
"""

from __future__ import annotations

import ast
import importlib.util
import os
import re
import shlex
import shutil
import subprocess
import tomllib
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCKER_DIR = ROOT / "docker"
COMPOSE_FILE = DOCKER_DIR / "compose.yaml"
DOCKERFILE = DOCKER_DIR / "Dockerfile"
DOCKERIGNORE = ROOT / ".dockerignore"

SCHEDULER = "durablebeat.schedulers:DurableScheduler"
APP_SERVICES = ("migrate", "web", "worker", "beat")
LONG_RUNNING = ("postgres", "redis", "web", "worker", "beat")
EXTRAS = {"redis", "results", "postgres", "prometheus"}
DATABASE_URL = "postgres://durablebeat:durablebeat@postgres:5432/durablebeat"
BROKER_URL = "redis://redis:6379/0"


# --- helpers ----------------------------------------------------------------------------
@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    yaml = pytest.importorskip("yaml", reason="PyYAML is not installed: cannot parse compose")
    data = yaml.safe_load(COMPOSE_FILE.read_text())
    assert isinstance(data, dict)
    return data


@pytest.fixture(scope="module")
def services(compose: dict[str, Any]) -> dict[str, dict[str, Any]]:
    services: dict[str, dict[str, Any]] = compose["services"]
    return services


def argv(command: str | list[str]) -> list[str]:
    """A compose ``command`` (list or string form) as the argv Docker runs."""
    return shlex.split(command) if isinstance(command, str) else [str(a) for a in command]


def health_cmd(service: dict[str, Any]) -> str:
    """The healthcheck as one shell-ish string (CMD, CMD-SHELL and string forms)."""
    test = service["healthcheck"]["test"]
    if isinstance(test, str):
        return test
    kind, *rest = test
    assert kind in ("CMD", "CMD-SHELL"), test
    return " ".join(rest)


def option(args: list[str], *names: str) -> str | None:
    """The value of ``-X v``, ``--x v`` or ``--x=v`` in ``args``."""
    for i, arg in enumerate(args):
        for name in names:
            if arg == name and i + 1 < len(args):
                return args[i + 1]
            if name.startswith("--") and arg.startswith(name + "="):
                return arg[len(name) + 1 :]
    return None


def duration_seconds(value: str) -> float:
    """Compose durations: ``1m30s``, ``45s``, ``500ms``."""
    units = {"h": 3600, "m": 60, "s": 1, "ms": 0.001, "us": 1e-6}
    parts = re.findall(r"(\d+(?:\.\d+)?)(ms|us|h|m|s)", str(value))
    assert parts and "".join(n + u for n, u in parts) == str(value), value
    return sum(float(n) * units[u] for n, u in parts)


def env_default(value: str, name: str) -> str:
    """The default of ``${NAME:-default}``; fails when the value is not that form."""
    match = re.fullmatch(r"\$\{" + name + r":-(.+)\}", value)
    assert match, f"{name} should be ${{{name}:-<dev default>}}, is {value!r}"
    return match.group(1)


def defines(path: Path, name: str) -> bool:
    """Does the module at ``path`` define ``name`` at top level (class, def or assignment)?"""
    tree = ast.parse(path.read_text())
    for node in tree.body:
        if isinstance(node, ast.ClassDef | ast.FunctionDef) and node.name == name:
            return True
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == name for t in node.targets
        ):
            return True
    return False


def dockerfile_instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) pairs, continuation lines joined, comments dropped."""
    logical: list[str] = []
    pending = ""
    for raw in DOCKERFILE.read_text().splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        logical.append(pending + line)
        pending = ""
    assert not pending, "Dockerfile ends in a line continuation"
    return [(ln.split(None, 1)[0].upper(), ln.split(None, 1)[1]) for ln in logical]


def dockerfile_env() -> dict[str, str]:
    env: dict[str, str] = {}
    for instruction, args in dockerfile_instructions():
        if instruction == "ENV":
            for pair in shlex.split(args):
                key, _, value = pair.partition("=")
                env[key] = value
    return env


def pip_install_line() -> str:
    lines = [a for i, a in dockerfile_instructions() if i == "RUN" and "pip install" in a]
    assert len(lines) == 1, lines
    return lines[0]


def pyproject() -> dict[str, Any]:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


# --- compose: structure -----------------------------------------------------------------
def test_services_are_the_stack_plus_migrate(services: dict[str, Any]) -> None:
    assert set(services) == {*LONG_RUNNING, "migrate"}


@pytest.mark.parametrize("name", LONG_RUNNING)
def test_every_long_running_service_has_a_healthcheck(services: dict[str, Any], name: str) -> None:
    check = services[name].get("healthcheck")
    assert check and not check.get("disable"), f"{name} has no healthcheck"
    assert health_cmd(services[name]).strip()


def test_backing_services(services: dict[str, Any], compose: dict[str, Any]) -> None:
    postgres, redis = services["postgres"], services["redis"]
    assert postgres["image"] == "postgres:15"
    assert "pg_isready" in health_cmd(postgres)
    volume = postgres["volumes"][0].split(":")[0]
    assert volume in (compose.get("volumes") or {}), "postgres data should be a named volume"
    assert redis["image"] == "redis:7"
    assert "redis-cli ping" in health_cmd(redis)
    env = postgres["environment"]
    assert (env["POSTGRES_USER"], env["POSTGRES_PASSWORD"], env["POSTGRES_DB"]) == (
        "durablebeat",
        "durablebeat",
        "durablebeat",
    )


@pytest.mark.parametrize("name", APP_SERVICES)
def test_app_services_build_the_one_image_from_the_repo_root(
    services: dict[str, Any], name: str
) -> None:
    build = services[name]["build"]
    assert (DOCKER_DIR / build["context"]).resolve() == ROOT
    assert (ROOT / build["dockerfile"]).resolve() == DOCKERFILE
    assert DOCKERFILE.is_file()


@pytest.mark.parametrize("name", APP_SERVICES)
def test_app_services_environment(services: dict[str, Any], name: str) -> None:
    env = services[name]["environment"]
    assert env["DATABASE_URL"] == DATABASE_URL
    assert env["CELERY_BROKER_URL"] == BROKER_URL
    assert env_default(env["DJANGO_SECRET_KEY"], "DJANGO_SECRET_KEY")
    # The web healthcheck asks for 127.0.0.1, so the default must let it in.
    hosts = env_default(env["DJANGO_ALLOWED_HOSTS"], "DJANGO_ALLOWED_HOSTS").split(",")
    assert {"localhost", "127.0.0.1"} <= set(hosts)


@pytest.mark.parametrize("name", APP_SERVICES)
def test_every_depends_on_has_a_condition_that_can_be_met(
    services: dict[str, Any], name: str
) -> None:
    depends = services[name]["depends_on"]
    assert isinstance(depends, dict), "use the long form, with conditions"
    for target, spec in depends.items():
        assert target in services
        condition = spec["condition"]
        if condition == "service_healthy":
            assert "healthcheck" in services[target], f"{target} cannot become healthy"
        else:
            assert condition == "service_completed_successfully"
            assert target == "migrate"


def test_migrate_is_a_one_shot_after_postgres(services: dict[str, Any]) -> None:
    migrate = services["migrate"]
    assert argv(migrate["command"]) == ["python", "manage.py", "migrate", "--no-input"]
    assert migrate["depends_on"]["postgres"]["condition"] == "service_healthy"
    assert str(migrate.get("restart", "no")) == "no"
    assert "healthcheck" not in migrate


@pytest.mark.parametrize("name", ("web", "worker", "beat"))
def test_long_running_app_services_wait_for_migrations_and_backing_services(
    services: dict[str, Any], name: str
) -> None:
    depends = services[name]["depends_on"]
    assert depends["migrate"]["condition"] == "service_completed_successfully"
    assert depends["postgres"]["condition"] == "service_healthy"
    assert depends["redis"]["condition"] == "service_healthy"
    assert services[name]["restart"] == "unless-stopped"


def test_web_serves_the_admin_on_8000(services: dict[str, Any]) -> None:
    web = services["web"]
    args = argv(web["command"])
    if args[0] == "gunicorn":
        assert "project.wsgi:application" in args
        assert option(args, "-b", "--bind") == "0.0.0.0:8000"
    else:
        assert args == ["python", "manage.py", "runserver", "0.0.0.0:8000"]
    assert any(str(p).split(":")[-1] == "8000" for p in web["ports"])
    check = health_cmd(web)
    assert "urllib" in check
    assert "http://127.0.0.1:8000/admin/login/" in check


def test_worker_command_and_ping_healthcheck(services: dict[str, Any]) -> None:
    worker = services["worker"]
    args = argv(worker["command"])
    assert args[:4] == ["celery", "-A", "project", "worker"]
    check = health_cmd(worker)
    assert check.startswith("celery -A project inspect ping")
    # $$ is compose's escape: the shell sees $HOSTNAME, the worker's default node name.
    assert "celery@$$HOSTNAME" in check


def test_beat_runs_the_durable_scheduler(services: dict[str, Any]) -> None:
    beat = services["beat"]
    args = argv(beat["command"])
    assert args[:4] == ["celery", "-A", "project", "beat"]
    assert option(args, "-S", "--scheduler") == SCHEDULER
    assert "--pidfile=" in args
    assert beat["restart"] == "unless-stopped"
    # Longer than Docker's 10 s default, so beat closes cleanly, but not unbounded.
    assert 10 < duration_seconds(beat["stop_grace_period"]) <= 120


def test_beat_healthcheck_is_durablebeat_check(services: dict[str, Any]) -> None:
    check = services["beat"]["healthcheck"]
    assert check["test"][0] == "CMD-SHELL"
    assert "python manage.py durablebeat check" in check["test"][1]
    # The command exits 2 when critical, which Docker reserves: it must be mapped to 1.
    assert "|| exit 1" in check["test"][1]


# --- compose: the names the commands use exist -------------------------------------------
def test_every_command_runs_something_the_image_has(services: dict[str, Any]) -> None:
    installed = pip_install_line()
    for name in APP_SERVICES:
        program = argv(services[name]["command"])[0]
        assert program in ("python", "celery", "gunicorn"), (name, program)
        if program == "gunicorn":
            assert "gunicorn" in installed, "the web service runs gunicorn: install it"


def test_celery_app_project_exists() -> None:
    # `celery -A project` finds project.celery_app / project.celery:app.
    assert defines(ROOT / "project" / "celery.py", "app")
    assert "celery_app" in (ROOT / "project" / "__init__.py").read_text()


def test_manage_py_and_settings_exist() -> None:
    assert (ROOT / "manage.py").is_file()
    module = dockerfile_env()["DJANGO_SETTINGS_MODULE"]
    assert (ROOT / Path(*module.split("."))).with_suffix(".py").is_file()


def test_wsgi_application_exists() -> None:
    assert defines(ROOT / "project" / "wsgi.py", "application")


def test_scheduler_path_is_importable() -> None:
    module, _, cls = SCHEDULER.partition(":")
    spec = importlib.util.find_spec(module)  # locates it; runs only durablebeat/__init__
    assert spec is not None and spec.origin, f"{module} is not importable"
    assert defines(Path(spec.origin), cls), f"{module} defines no {cls}"


def test_durablebeat_check_management_command_exists() -> None:
    command = ROOT / "durablebeat" / "management" / "commands" / "durablebeat.py"
    assert command.is_file(), "the beat healthcheck runs `manage.py durablebeat check`"
    assert defines(command, "Command")


def compose_tool() -> list[str] | None:
    if path := shutil.which("docker-compose"):
        return [path]
    if docker := shutil.which("docker"):
        probe = subprocess.run(
            [docker, "compose", "version"], capture_output=True, timeout=30, check=False
        )
        if probe.returncode == 0:
            return [docker, "compose"]
    return None


def test_compose_config_validates() -> None:
    tool = compose_tool()
    if tool is None:
        missing = "no docker-compose and no `docker compose` (scripts/system-tools.sh installs it)"
        if os.environ.get("CI"):
            # CI runs scripts/system-tools.sh first: a skip there would hide a broken install.
            pytest.fail(missing, pytrace=False)
        pytest.skip(missing)
    result = subprocess.run(
        [*tool, "-f", str(COMPOSE_FILE), "config", "-q"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr or result.stdout


# --- Dockerfile and .dockerignore -------------------------------------------------------
def test_dockerfile_base_image_satisfies_requires_python() -> None:
    froms = [a for i, a in dockerfile_instructions() if i == "FROM"]
    assert froms == ["python:3.11-slim"]
    required = pyproject()["project"]["requires-python"]
    assert required == ">=3.11", "update the base image along with requires-python"


def test_dockerfile_runs_as_non_root() -> None:
    users = [a for i, a in dockerfile_instructions() if i == "USER"]
    assert users, "no USER: the image would run as root"
    assert users[-1].split(":")[0] not in ("root", "0")


def test_dockerfile_environment() -> None:
    env = dockerfile_env()
    assert env["DJANGO_SETTINGS_MODULE"] == "project.settings"
    assert env["PYTHONUNBUFFERED"] == "1"


def test_dockerfile_extras_exist_in_pyproject() -> None:
    match = re.search(r"\.\[([^\]]+)\]", pip_install_line())
    assert match, "pip install should install the project with extras"
    extras = {e.strip() for e in match.group(1).split(",")}
    assert extras == EXTRAS
    assert extras <= set(pyproject()["project"]["optional-dependencies"])


def test_dockerfile_installs_dj_database_url() -> None:
    # project/settings.py imports dj_database_url.
    assert "dj_database_url" in (ROOT / "project" / "settings.py").read_text()
    deps = " ".join(pyproject()["project"]["dependencies"])
    assert "dj-database-url" in deps or "dj-database-url" in pip_install_line()


def test_dockerfile_copies_what_the_commands_need() -> None:
    copied: set[str] = set()
    for instruction, args in dockerfile_instructions():
        if instruction == "COPY":
            *sources, _dest = shlex.split(args)
            for source in sources:
                if not source.startswith("--") and not re.search(r"[*?\[]", source):
                    assert (ROOT / source).exists(), f"COPY {source}: not in the repo"
                    copied.add(source.rstrip("/"))
    assert {"pyproject.toml", "durablebeat", "manage.py", "project"} <= copied


def test_dockerignore_keeps_local_state_out() -> None:
    patterns = {
        line.strip().rstrip("/").removeprefix("/")
        for line in DOCKERIGNORE.read_text().splitlines()
        if line.strip() and not line.startswith("#")
    }
    assert {".venv", "var", "test-output", ".git"} <= patterns
    # Nothing the Dockerfile copies may be ignored.
    assert not patterns & {"pyproject.toml", "durablebeat", "manage.py", "project", "docker"}
