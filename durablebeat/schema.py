"""Which of durablebeat's migrations the database lacks (R32).

A process of a new release can start before the deploy's ``migrate`` has run: its models
name columns the database does not have yet. Beat then waits for the migrations, firing
nothing (``beat.session``), and ``check`` and ``status`` say so (``migrations_pending``),
instead of meeting a missing column as an error. One query (``django_migrations``); the
migration files are read from disk once per process.
"""

from __future__ import annotations

from django.db import connections
from django.db.migrations.loader import MigrationLoader

from . import db

APP = "durablebeat"


def pending(alias: str | None = None) -> list[str]:
    """The names of durablebeat's migrations the database ``alias`` (durablebeat's, by
    default) has not applied, in the
    order ``migrate`` applies them; ``[]`` when it is up to date (or ahead: a rollback of
    the code keeps a newer schema, R32). A database error propagates."""
    loader = MigrationLoader(connections[alias or db.alias()], ignore_no_migrations=True)
    applied = loader.applied_migrations
    missing: list[str] = []
    for leaf in loader.graph.leaf_nodes(APP):
        for app, name in loader.graph.forwards_plan(leaf):
            if app == APP and (app, name) not in applied and name not in missing:
                missing.append(name)
    return missing


def words(missing: list[str]) -> str:
    """``the database lacks 2 of durablebeat's migrations (0013_x, 0014_y): run manage.py
    migrate``."""
    return (
        f"the database lacks {len(missing)} of durablebeat's migrations "
        f"({', '.join(missing)}): run manage.py migrate"
    )
