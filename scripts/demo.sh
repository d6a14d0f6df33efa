#!/usr/bin/env bash
# The demo: a worker with embedded durablebeat on SQLite and kombu's filesystem broker
# (nothing to install). Prints every fire as it happens; Ctrl-C stops it.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/bootstrap.sh
export DJANGO_SETTINGS_MODULE=project.settings
# DEBUG is off by default in project/settings.py; the demo, on one's own machine, turns it on.
export DJANGO_DEBUG=1
.venv/bin/python manage.py migrate --no-input -v 0
echo "durablebeat demo: admin at 'DJANGO_DEBUG=1 .venv/bin/python manage.py runserver'"
echo "(DJANGO_DEBUG=1 serves its styles; create a user with createsuperuser)."
echo "Fires are printed as 'fire schedule=... slot=... reason=...'. Ctrl-C stops."
# -B runs beat inside the worker process; --pool solo keeps SQLite to one writer process.
# (For a worker, -S is --statedb, a shelve file: the scheduler is --scheduler.)
exec .venv/bin/celery -A project worker -B --pool solo --loglevel INFO \
    --scheduler durablebeat.schedulers:DurableScheduler
