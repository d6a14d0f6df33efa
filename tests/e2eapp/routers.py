"""Database routers for issue 30 item 5: durablebeat in a database of its own, and reads sent
to a replica. The tests turn them on (``override_settings`` in-process; ``E2E_SCHEDULER_URL``
for the processes an e2e test starts, tests/settings.py)."""

from __future__ import annotations

from typing import Any

#: the alias durablebeat's models are routed to
SCHEDULER = "scheduler"
#: the alias ReplicaRouter sends every read to
REPLICA = "replica"


class SchedulerRouter:
    """durablebeat's models, reads and writes, on ``scheduler``; everything else where it
    was (``default``), as a project gives its scheduler a database of its own."""

    def _route(self, model: Any, **hints: Any) -> str | None:
        return SCHEDULER if model._meta.app_label == "durablebeat" else None

    db_for_read = _route
    db_for_write = _route

    def allow_relation(self, obj1: Any, obj2: Any, **hints: Any) -> bool | None:
        return None

    def allow_migrate(self, db: str, app_label: str, **hints: Any) -> bool | None:
        if app_label == "durablebeat":
            return db == SCHEDULER
        return None


class ReplicaRouter:
    """durablebeat's reads from ``replica``, every write to ``default``: a read-replica
    router (the admin's users and sessions stay on ``default``, where the test logs in). A
    replica lags; durablebeat must never decide on what it reads there."""

    def db_for_read(self, model: Any, **hints: Any) -> str | None:
        return REPLICA if model._meta.app_label == "durablebeat" else None

    def db_for_write(self, model: Any, **hints: Any) -> str:
        return "default"

    def allow_relation(self, obj1: Any, obj2: Any, **hints: Any) -> bool:
        return True
