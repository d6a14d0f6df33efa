#!/usr/bin/env bash
# Make ./.venv with everything the demo and the tests need (idempotent, from scratch).
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-python3}"
# mysqlclient (the MariaDB/MySQL driver of the dev extra) has no Linux wheel: it builds
# against the MariaDB client headers, found through pkg-config.
if ! pkg-config --exists libmariadb 2>/dev/null && ! pkg-config --exists mysqlclient 2>/dev/null
then
    echo "installing from Debian: libmariadb-dev pkg-config gcc"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends libmariadb-dev pkg-config gcc >/dev/null
fi
# PgBouncer, the pooler scripts/services.sh puts in front of PostgreSQL for the tests (R31)
if ! command -v pgbouncer >/dev/null 2>&1 && [ ! -x /usr/sbin/pgbouncer ]; then
    echo "installing from Debian: pgbouncer"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends pgbouncer >/dev/null
fi
if [ ! -x .venv/bin/python ]; then
    "$PYTHON" -m venv .venv
fi
.venv/bin/python -m pip install --quiet --upgrade pip
.venv/bin/python -m pip install --quiet -e ".[dev]"
