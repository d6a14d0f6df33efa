#!/usr/bin/env bash
# The whole test suite, as CI runs it (.ci/run): lint and types; unit, integration and e2e
# (real celery beat and worker processes, the admin in headless Chromium) on PostgreSQL and
# Redis; the integration suite on SQLite; the matrix of supported stacks
# (docs/configuration.md, "Supported versions"), each cell in a venv of its own
# (.venv-<cell>) with its Django pinned; the e2e restart and outage tests on MariaDB with
# RabbitMQ. About 12 minutes on the 2-core CI machine (docs/development.md says what each
# part costs). Exits non-zero when any test fails or a run collected none.
#
#   scripts/test.sh            everything
#   scripts/test.sh --fast     unit and integration tests on SQLite and PostgreSQL: no e2e,
#                              no matrix, no lint (the loop before a push, ~2.5-3 min)
#   scripts/test.sh ARGS...    pytest arguments for the PostgreSQL and SQLite runs (-k ...)
#
# Every run is parallel (pytest-xdist): each worker has its own test databases (pytest-django
# suffixes their names) and its own Redis database (tests/settings.py counts down from the
# run's DURABLEBEAT_TEST_REDIS_DB). Runs that go side by side have their own suffix and
# Redis databases. The e2e tests run four at a time: those that need the machine quiet
# share one xdist group (tests/e2e/harness.py's QUIET), the long ones start first. The runs
# without real processes go niced, so the e2e processes' timings get the CPU first.
set -uo pipefail
cd "$(dirname "$0")/.."
# Compiled modules are kept (__pycache__, which git ignores): a run starts hundreds of Python
# processes (xdist workers, e2e beats and workers), and under PYTHONDONTWRITEBYTECODE (set on
# the CI machine) each compiled durablebeat and the tests (pytest's assertion rewriting, ~6 s
# a worker) again, and in the matrix cells' venvs (uv writes no .pyc) Django and Celery too.
unset PYTHONDONTWRITEBYTECODE
fast=0
if [ "${1:-}" = "--fast" ]; then
    fast=1
    shift
fi
scripts/bootstrap.sh || exit 1
scripts/services.sh || exit 1
if [ $fast = 0 ]; then scripts/system-tools.sh || exit 1; fi
PY=.venv/bin/python
OUT=test-output
rm -rf "$OUT/runs"
mkdir -p "$OUT/runs"
start=$SECONDS

# run NAME REDIS_DB SUFFIX PYTHON PYTEST-ARGS...: one pytest run, its output in
# test-output/runs/NAME.log, its results in NAME.xml, its time and exit code in NAME.rc
run() {
    local name=$1 redis_db=$2 suffix=$3 py=$4 began=$SECONDS rc
    shift 4
    DURABLEBEAT_TEST_REDIS_DB=$redis_db DURABLEBEAT_TEST_SUFFIX=$suffix \
        "$py" -m pytest -q --junitxml="$OUT/runs/$name.xml" "$@" \
        >"$OUT/runs/$name.log" 2>&1
    rc=$?  # 5 = no tests collected: an empty run is a failure, never a pass
    echo "$rc $((SECONDS - began))" >"$OUT/runs/$name.rc"
    printf '%-28s exit %s in %4d s: %s\n' "$name" "$rc" "$((SECONDS - began))" \
        "$(tail -1 "$OUT/runs/$name.log")"
    return "$rc"
}

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

cell() {  # name, python, django requirement: makes .venv-<name> with uv (seconds, not minutes)
    local name=$1 python=$2 django=$3 venv=".venv-$1" interpreter
    if ! interpreter=$(python_for "$python"); then return 1; fi
    if [ ! -x "$venv/bin/python" ]; then
        .venv/bin/uv venv --quiet --python "$interpreter" "$venv" || return 1
    fi
    # The newest django-celery-beat that installs beside this Django comes with the dev
    # extra (the resolver backtracks to it); the cell prints what it got.
    if ! .venv/bin/uv pip install --quiet --python "$venv/bin/python" -e ".[dev]" \
        "django$django"; then
        echo "matrix cell $name: could not install its packages" >&2
        return 1
    fi
    "$venv/bin/python" - <<'PY'
import sys
from importlib.metadata import version

names = ("django", "celery", "kombu", "django-celery-beat", "django-celery-results")
print("   python", sys.version.split()[0], *(f"{n} {version(n)}" for n in names))
PY
}

lint() {
    "$PY" -m ruff check . && "$PY" -m ruff format --check . \
        && "$PY" -m mypy  # strict, on durablebeat/ and project/ (pyproject's [tool.mypy])
}

if [ $fast = 1 ]; then
    # PostgreSQL and SQLite side by side, two workers each; the unit tests (no database)
    # go with SQLite's, whose run is the shorter (no database server's CPU beside it). A
    # worker that runs out of tests takes some of the other's (worksteal): the tests take
    # from milliseconds to 15 s, and an even split by count gave one worker 40 % more CPU.
    DURABLEBEAT_TEST_DB=sqlite run sqlite 9 _fast_sqlite "$PY" -n 2 --dist worksteal \
        tests/unit tests/integration -m "not postgres_only" "$@" &
    sqlite_pid=$!
    DURABLEBEAT_TEST_DB=postgres run postgres 15 "" "$PY" -n 2 --dist worksteal \
        tests/integration "$@"
    status=$?
    wait "$sqlite_pid" || status=1
    echo "fast loop: $((SECONDS - start)) s"
    "$PY" scripts/results.py "$OUT/runs" || status=1
    exit $status
fi

# --- the whole suite -------------------------------------------------------------------
# The unit and integration runs of the matrix cells and SQLite wait in a queue
# (test-output/runs/queue/todo); a lane takes the next one by moving it to taken/ (a rename:
# two lanes never take the same). The side lane (niced, so the e2e processes' timings get
# the CPU first) starts at once, after lint and the cells' venvs; the main lane joins it
# once the PostgreSQL and MariaDB e2e runs have ended.
QUEUE=$OUT/runs/queue
mkdir -p "$QUEUE/todo" "$QUEUE/taken"
# The longest first (each ~4-5 min here, the SQLite ones ~2), so that no long run starts
# last and holds the suite up alone.
for item in 1-py312-django6-mariadb 2-py313-django6-postgres 3-py312-django42-postgres \
    4-py313-django6-sqlite 5-sqlite; do
    touch "$QUEUE/todo/$item"
done

run_item() {  # one queued run, on the lane's Redis databases
    local redis_db=$1 item=$2 suffix=_${2#*-}
    suffix=${suffix//-/_}
    case ${item#*-} in
        py312-django6-mariadb)
            DURABLEBEAT_TEST_DB=mariadb run "${item#*-}" "$redis_db" "$suffix" \
                .venv-py312-django6-mariadb/bin/python -n 2 tests/unit tests/integration \
                -m "not postgres_only" ;;
        py313-django6-postgres)
            DURABLEBEAT_TEST_DB=postgres run "${item#*-}" "$redis_db" "$suffix" \
                .venv-py313-django6/bin/python -n 2 tests/unit tests/integration ;;
        py313-django6-sqlite)
            DURABLEBEAT_TEST_DB=sqlite run "${item#*-}" "$redis_db" "$suffix" \
                .venv-py313-django6/bin/python -n 2 tests/integration -m "not postgres_only" ;;
        # Django 4.2 on PostgreSQL: on SQLite it has no IMMEDIATE transactions (Django
        # 5.1+), so two beats at once there meet "database is locked" (configuration.md).
        py312-django42-postgres)
            DURABLEBEAT_TEST_DB=postgres run "${item#*-}" "$redis_db" "$suffix" \
                .venv-py312-django42-postgres/bin/python -n 2 tests/unit tests/integration ;;
        sqlite)
            DURABLEBEAT_TEST_DB=sqlite run sqlite "$redis_db" "$suffix" "$PY" -n 2 \
                tests/integration -m "not postgres_only" "${ARGS[@]}" ;;
    esac
}

lane() {  # lane's Redis database base: takes queued runs until none is left
    local redis_db=$1 status=0 item
    while true; do
        item=
        for f in "$QUEUE"/todo/*; do
            [ -e "$f" ] || continue
            if mv "$f" "$QUEUE/taken/" 2>/dev/null; then item=$(basename "$f"); break; fi
        done
        [ -n "$item" ] || return $status
        run_item "$redis_db" "$item" || status=1
    done
}

side() {
    renice -n 10 -p "$BASHPID" >/dev/null 2>&1 || true  # what it starts inherits it
    local status=0
    lint >"$OUT/runs/lint.log" 2>&1 || { status=1; echo "lint failed:"; cat "$OUT/runs/lint.log"; }
    echo "lint: $((SECONDS - start)) s"
    # The cells' venvs (uv: seconds each), MariaDB's first: the MariaDB e2e run uses it
    if cell py312-django6-mariadb 3.12 "~=6.0"; then
        touch "$OUT/runs/mariadb-venv.ready"
    else
        touch "$OUT/runs/mariadb-venv.failed"
        status=1
    fi
    cell py313-django6 3.13 "~=6.0" || status=1
    cell py312-django42-postgres 3.12 "~=4.2.0" || status=1
    echo "the cells' venvs: $((SECONDS - start)) s"
    if [ $status != 0 ]; then
        rm -f "$QUEUE"/todo/*  # a cell without its venv cannot run: said above
        return $status
    fi
    lane 9 || status=1  # Redis databases 9 and 8
    return $status
}
ARGS=("$@")
side >"$OUT/runs/side.out" 2>&1 &
side_pid=$!
trap 'kill "$side_pid" 2>/dev/null' EXIT

status=0
# The PostgreSQL run: unit and integration on two workers, then the e2e tests on four.
DURABLEBEAT_TEST_DB=postgres run postgres 15 "" "$PY" -n 2 tests/unit tests/integration "$@" \
    || status=1
# Beside the PostgreSQL e2e tests: the restart and outage tests on MariaDB with RabbitMQ as
# the broker, once the MariaDB cell's venv is there (its own Redis databases: 11, 10).
mariadb_e2e() {
    while [ ! -e "$OUT/runs/mariadb-venv.ready" ] && [ ! -e "$OUT/runs/mariadb-venv.failed" ]; do
        sleep 1
    done
    [ -e "$OUT/runs/mariadb-venv.ready" ] || return 1
    DURABLEBEAT_TEST_DB=mariadb DURABLEBEAT_TEST_BROKER=amqp run mariadb-rabbitmq-e2e 11 "" \
        .venv-py312-django6-mariadb/bin/python -n 2 --dist loadgroup \
        tests/e2e/test_restarts.py tests/e2e/test_outages.py
}
mariadb_e2e &
mariadb_pid=$!
DURABLEBEAT_TEST_DB=postgres run postgres-e2e 15 "" "$PY" -n 4 --dist loadgroup tests/e2e "$@" \
    || status=1
wait "$mariadb_pid" || status=1
echo "the PostgreSQL and MariaDB e2e runs ended: $((SECONDS - start)) s"
# The main lane joins the queue (Redis databases 13 and 12, free now)
lane 13 || status=1
wait "$side_pid" || status=1
trap - EXIT
echo "=== the side lane (lint, the matrix cells), as it printed"
cat "$OUT/runs/side.out"
echo "whole suite: $((SECONDS - start)) s"
"$PY" scripts/results.py "$OUT/runs" || status=1  # its last line: the suite's counts
exit $status
