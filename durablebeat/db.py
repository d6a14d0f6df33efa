"""The database durablebeat's tables live in.

Django's ``DATABASE_ROUTERS`` may send durablebeat's models to a database of
their own (``migrate --database scheduler``), as django-celery-results'
managers honour. Every transaction, raw query, LISTEN and clock reading of
durablebeat goes through these three functions, so that they all land on the
database the router names for writing its models (R31). Reads go there too:
beat never decides on a row read from a replica.
"""

from __future__ import annotations

from django.apps import apps
from django.db import connections, router, transaction
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.transaction import Atomic


def alias() -> str:
    """The alias of the database the router writes durablebeat's models to."""
    return router.db_for_write(apps.get_model("durablebeat", "Schedule"))


def connection() -> BaseDatabaseWrapper:
    """The connection to durablebeat's database."""
    return connections[alias()]


def atomic(savepoint: bool = True, durable: bool = False) -> Atomic:
    """``transaction.atomic`` on durablebeat's database."""
    return transaction.atomic(using=alias(), savepoint=savepoint, durable=durable)
