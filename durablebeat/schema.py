"""Which of durablebeat's migrations the database lacks (R32).

A process of a new release can start before the deploy's ``migrate`` has run: its models
name columns the database does not have yet. Beat then waits for the migrations, firing
nothing (``beat.session``), and ``check`` and ``status`` say so (``migrations_pending``),
instead of meeting a missing column as an error. Two queries (is ``django_migrations``
there, then its durablebeat rows); the migration files are read from disk once per process.
"""

from __future__ import annotations

import functools

from django.db import connections
from django.db.migrations.loader import MigrationLoader
from django.db.migrations.recorder import MigrationRecorder

from . import db

APP = "durablebeat"


@functools.cache
def _plan() -> tuple[str, ...]:
    """durablebeat's migrations as the files on disk have them, in the order ``migrate``
    applies them: the files do not change under a running process, so they are read once
    (a loader reads every app's migration modules: ~10 ms, on every ``check``)."""
    graph = MigrationLoader(None, ignore_no_migrations=True).graph
    plan: list[str] = []
    for leaf in graph.leaf_nodes(APP):
        for app, name in graph.forwards_plan(leaf):
            if app == APP and name not in plan:
                plan.append(name)
    return tuple(plan)


def pending(alias: str | None = None) -> list[str]:
    """The names of durablebeat's migrations the database ``alias`` (durablebeat's, by
    default) has not applied, in the
    order ``migrate`` applies them; ``[]`` when it is up to date (or ahead: a rollback of
    the code keeps a newer schema, R32). A database error propagates."""
    recorder = MigrationRecorder(connections[alias or db.alias()])
    if not recorder.has_table():
        return list(_plan())
    applied = set(recorder.migration_qs.filter(app=APP).values_list("name", flat=True))
    return [name for name in _plan() if name not in applied]


def words(missing: list[str]) -> str:
    """``the database lacks 2 of durablebeat's migrations (0013_x, 0014_y): run manage.py
    migrate``."""
    return (
        f"the database lacks {len(missing)} of durablebeat's migrations "
        f"({', '.join(missing)}): run manage.py migrate"
    )
