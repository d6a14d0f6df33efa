#!/usr/bin/env bash
# The whole test suite, as CI runs it: lint; unit, integration and e2e (real celery beat and
# worker processes, the admin in headless Chromium) on PostgreSQL and Redis; then the
# integration suite again on SQLite. Exits non-zero when any test fails or none ran.
set -uo pipefail
cd "$(dirname "$0")/.."
scripts/bootstrap.sh || exit 1
scripts/services.sh || exit 1
scripts/system-tools.sh || exit 1
PY=.venv/bin/python
mkdir -p test-output

status=0
run() {
    "$PY" -m pytest "$@"
    rc=$?
    # 5 = no tests collected: an empty run is a failure, never a pass.
    if [ $rc -ne 0 ]; then status=$rc; fi
}
"$PY" -m ruff check . || status=1
DURABLEBEAT_TEST_DB=postgres run tests "$@"
DURABLEBEAT_TEST_DB=sqlite run tests/integration -m "not postgres_only" "$@"
exit $status
