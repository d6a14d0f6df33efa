#!/usr/bin/env bash
# The system tools some tests need, from Debian: chromium and chromium-driver for the admin
# browser test (tests/e2e/test_admin_browser.py, with Selenium from PyPI in ./.venv), and
# docker-compose to validate docker/compose.yaml without a Docker engine
# (tests/unit/test_docker.py). Idempotent; never downloads a browser build of its own
# (Selenium is pointed at /usr/bin/chromedriver, so its manager stays idle).
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PY:-.venv/bin/python}"
missing=()
command -v chromium >/dev/null 2>&1 || missing+=(chromium fonts-dejavu-core)
command -v chromedriver >/dev/null 2>&1 || missing+=(chromium-driver)
command -v docker-compose >/dev/null 2>&1 || missing+=(docker-compose)
if [ ${#missing[@]} -gt 0 ]; then
    echo "installing from Debian: ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
if ! "$PY" -c "import selenium" >/dev/null 2>&1; then
    "$PY" -m pip install --quiet "selenium>=4.20"
fi
chromium --version 2>/dev/null
chromedriver --version
docker-compose version --short
