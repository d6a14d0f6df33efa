#!/usr/bin/env bash
# The demo: a worker with embedded durablebeat on SQLite and kombu's filesystem broker.
# Installs only what it runs (the package, Celery, Django, django-celery-results,
# dj-database-url: the "demo" extra; no database driver, no development tools) into
# .venv-demo, once: a start with pyproject.toml unchanged runs no pip. Prints every fire as
# it happens; Ctrl-C stops it.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=.venv-demo
if [ ! -x "$VENV/bin/python" ]; then
    "${PYTHON:-python3}" -m venv "$VENV"
fi
wanted=$(sha256sum pyproject.toml | cut -d' ' -f1)
if [ "$(cat "$VENV/.installed" 2>/dev/null)" != "$wanted" ]; then
    echo "installing the demo's packages into $VENV (once)"
    "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check -e ".[demo]"
    echo "$wanted" >"$VENV/.installed"
fi
export DJANGO_SETTINGS_MODULE=project.settings
# DEBUG is off by default in project/settings.py; the demo, on one's own machine, turns it on.
export DJANGO_DEBUG=1
"$VENV/bin/python" manage.py migrate --no-input -v 0
echo "durablebeat demo: admin at 'DJANGO_DEBUG=1 $VENV/bin/python manage.py runserver'"
echo "(DJANGO_DEBUG=1 serves its styles; create a user with createsuperuser)."
echo "Fires are printed as 'fire schedule=... slot=... reason=...'. Ctrl-C stops."
# -B runs beat inside the worker process; --pool solo keeps SQLite to one writer process.
# (For a worker, -S is --statedb, a shelve file: the scheduler is --scheduler.)
exec "$VENV/bin/celery" -A project worker -B --pool solo --loglevel INFO \
    --scheduler durablebeat.schedulers:DurableScheduler
