#!/usr/bin/env bash
# What the admin browser test needs (tests/e2e/test_admin_browser.py): Debian's chromium and
# chromium-driver, and Selenium from PyPI in ./.venv. Idempotent; never downloads a browser
# build of its own (Selenium is pointed at /usr/bin/chromedriver, so its manager stays idle).
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PY:-.venv/bin/python}"
if ! command -v chromium >/dev/null 2>&1 || ! command -v chromedriver >/dev/null 2>&1; then
    echo "installing chromium and chromium-driver from Debian"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends chromium chromium-driver fonts-dejavu-core >/dev/null
fi
if ! "$PY" -c "import selenium" >/dev/null 2>&1; then
    "$PY" -m pip install --quiet "selenium>=4.20"
fi
chromium --version
chromedriver --version
