#!/usr/bin/env bash
# The whole test suite, as CI runs it: unit, integration and e2e on PostgreSQL and Redis,
# then the integration suite again on SQLite. Exits non-zero when any test fails.
set -uo pipefail
cd "$(dirname "$0")/.."
scripts/bootstrap.sh || exit 1
scripts/services.sh || exit 1
PY=.venv/bin/python
mkdir -p test-output

status=0
run() {
    "$PY" -m pytest "$@"
    rc=$?
    # 5 = no tests collected: an empty run is a failure, never a pass.
    if [ $rc -ne 0 ]; then status=$rc; fi
}
"$PY" -m ruff check durablebeat project tests benchmarks || status=1
DURABLEBEAT_TEST_DB=postgres run tests "$@"
DURABLEBEAT_TEST_DB=sqlite run tests/integration -m "not postgres_only" "$@"
exit $status
