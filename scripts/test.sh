#!/usr/bin/env bash
# The whole test suite, as CI runs it: lint; unit, integration and e2e (real celery beat and
# worker processes, the admin in headless Chromium) on PostgreSQL and Redis; beside it, the
# integration suite on SQLite and the matrix of supported stacks (docs/configuration.md,
# "Supported versions"), each cell in a venv of its own (.venv-<cell>) with its Django
# pinned; then the e2e restart and outage tests on MariaDB and RabbitMQ. Exits non-zero when
# any test fails or none ran. DURABLEBEAT_MATRIX=0 skips the matrix (a quicker local run).
set -uo pipefail
cd "$(dirname "$0")/.."
scripts/bootstrap.sh || exit 1
scripts/services.sh || exit 1
scripts/system-tools.sh || exit 1
PY=.venv/bin/python
mkdir -p test-output

status=0
run() {  # python, pytest arguments...
    local py=$1
    shift
    "$py" -m pytest "$@"
    rc=$?
    # 5 = no tests collected: an empty run is a failure, never a pass.
    if [ $rc -ne 0 ]; then status=$rc; fi
}
"$PY" -m ruff check . || status=1
"$PY" -m ruff format --check . || status=1
"$PY" -m mypy || status=1  # strict, on durablebeat/ and project/ (pyproject's [tool.mypy])

python_for() {  # "3.12" -> the newest 3.12.x interpreter pyenv has; fails loudly without
    if ! command -v pyenv >/dev/null 2>&1; then
        echo "the test matrix needs Python $1 from pyenv, and pyenv is not installed" >&2
        return 1
    fi
    local version
    version=$(pyenv versions --bare | grep -E "^$1(\.[0-9]+)?$" | sort -V | tail -1)
    if [ -z "$version" ]; then
        echo "the test matrix needs Python $1: not among pyenv's (pyenv install $1)" >&2
        return 1
    fi
    echo "$(pyenv root)/versions/$version/bin/python"
}

timings=()
cell_start=0
CELL_PY=
cell() {  # name, python, django requirement: makes .venv-<name>, sets CELL_PY
    local name=$1 python=$2 django=$3 venv=".venv-$1" interpreter
    cell_start=$SECONDS
    echo "=== matrix cell $name: Python $python, Django $django"
    if ! interpreter=$(python_for "$python"); then status=1; return 1; fi
    if [ ! -x "$venv/bin/python" ]; then
        "$interpreter" -m venv "$venv" || { status=1; return 1; }
    fi
    # The newest django-celery-beat that installs beside this Django comes with the dev
    # extra (pip backtracks to it); the cell prints what it got.
    if ! "$venv/bin/python" -m pip install --quiet --upgrade pip \
        || ! "$venv/bin/python" -m pip install --quiet -e ".[dev]" "django$django"; then
        echo "matrix cell $name: could not install its packages" >&2
        status=1
        return 1
    fi
    "$venv/bin/python" - <<'PY'
import sys
from importlib.metadata import version

names = ("django", "celery", "kombu", "django-celery-beat", "django-celery-results")
print("   python", sys.version.split()[0], *(f"{n} {version(n)}" for n in names))
PY
    CELL_PY="$venv/bin/python"
}
cell_done() {
    timings+=("$1: $((SECONDS - cell_start)) s")
}

# The runs without real processes (unit and integration tests: the SQLite run and every
# matrix cell's) go side by side with the PostgreSQL run, whose end-to-end tests mostly
# wait on real beat and worker processes: the whole suite in about two thirds of the time
# it takes one run after another. They run niced, on test databases and a Redis database
# of their own (DURABLEBEAT_TEST_SUFFIX, DURABLEBEAT_TEST_REDIS_DB), their output kept in
# test-output/side.log and printed when they end. The e2e runs stay one at a time.
side() {
    renice -n 10 -p "$BASHPID" >/dev/null 2>&1 || true  # what it starts inherits it
    export DURABLEBEAT_TEST_SUFFIX=_side DURABLEBEAT_TEST_REDIS_DB=13
    DURABLEBEAT_TEST_DB=sqlite run "$PY" tests/integration -m "not postgres_only" "$@"
    if [ "${DURABLEBEAT_MATRIX:-1}" != "0" ]; then
        # Every Python (3.11 above), Django (5.2 above) and database at least once.
        if cell py312-django6-mariadb 3.12 "~=6.0"; then
            DURABLEBEAT_TEST_DB=mariadb run "$CELL_PY" tests/unit tests/integration \
                -m "not postgres_only"
            cell_done py312-django6-mariadb
        fi
        if cell py313-django6 3.13 "~=6.0"; then
            DURABLEBEAT_TEST_DB=postgres run "$CELL_PY" tests/unit tests/integration
            DURABLEBEAT_TEST_DB=sqlite run "$CELL_PY" tests/integration -m "not postgres_only"
            cell_done py313-django6
        fi
        # Django 4.2 on PostgreSQL: on SQLite it has no IMMEDIATE transactions (Django 5.1+),
        # so two beats at once there meet "database is locked" (docs/configuration.md,
        # "Supported versions").
        if cell py312-django42-postgres 3.12 "~=4.2.0"; then
            DURABLEBEAT_TEST_DB=postgres run "$CELL_PY" tests/unit tests/integration
            cell_done py312-django42-postgres
        fi
        printf 'matrix cell time: %s\n' "${timings[@]}"
    fi
    echo "side runs: $((SECONDS - side_start)) s"  # the subshell's SECONDS goes on from here
    exit $status
}
side_start=$SECONDS
(side "$@") >test-output/side.log 2>&1 &
side_pid=$!
trap 'kill "$side_pid" 2>/dev/null' EXIT

main_start=$SECONDS
DURABLEBEAT_TEST_DB=postgres run "$PY" tests "$@"
echo "PostgreSQL run (unit, integration, e2e): $((SECONDS - main_start)) s"

wait "$side_pid" || status=1
trap - EXIT
echo "=== the side runs (SQLite, matrix cells' unit and integration tests), as they printed"
cat test-output/side.log

if [ "${DURABLEBEAT_MATRIX:-1}" != "0" ] && [ -x .venv-py312-django6-mariadb/bin/python ]; then
    # The end-to-end restart and outage tests once on MariaDB with RabbitMQ as the broker.
    e2e_start=$SECONDS
    DURABLEBEAT_TEST_DB=mariadb DURABLEBEAT_TEST_BROKER=amqp run \
        .venv-py312-django6-mariadb/bin/python tests/e2e/test_restarts.py tests/e2e/test_outages.py
    echo "MariaDB + RabbitMQ e2e: $((SECONDS - e2e_start)) s"
fi
exit $status
