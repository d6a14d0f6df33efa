"""The entries Celery's own beat adds to ``beat_schedule`` (R25), added here the same way.

Celery's ``Scheduler.install_default_entries`` installs ``celery.backend_cleanup`` (daily at
04:00, in the app's zone, its message expiring after 12 hours) when results expire
(``result_expires`` set, 1 day by default) and the result backend does not expire them
itself (``django-db`` does not; Redis does). It is off the way Celery's is: with
``result_expires = None`` (or 0), or with an entry of that name in ``beat_schedule``, which
replaces it. Here it becomes a code schedule like any other: a row, shown in the admin and
by ``status``, with the durable guarantees.
"""

from __future__ import annotations

from typing import Any

from celery.schedules import crontab

BACKEND_CLEANUP = "celery.backend_cleanup"


def beat_schedule(app: Any) -> dict[str, Any]:
    """``app``'s ``beat_schedule`` with the entries Celery's beat would add to it."""
    entries = dict(app.conf.beat_schedule or {})
    if BACKEND_CLEANUP not in entries and needs_backend_cleanup(app):
        entries[BACKEND_CLEANUP] = {
            "task": BACKEND_CLEANUP,
            "schedule": crontab("0", "4", "*"),
            "options": {"expires": 12 * 3600},
        }
    return entries


def needs_backend_cleanup(app: Any) -> bool:
    """Celery's condition, read as Celery reads it."""
    return bool(app.conf.result_expires) and not app.backend.supports_autoexpire
