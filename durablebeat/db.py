"""The database durablebeat's tables live in.

Django's ``DATABASE_ROUTERS`` may send durablebeat's models to a database of
their own (``migrate --database scheduler``), as django-celery-results'
managers honour. Every transaction, raw query, LISTEN and clock reading of
durablebeat goes through these three functions, so that they all land on the
database the router names for writing its models (R31). Reads go there too:
beat never decides on a row read from a replica. A long read of schedules goes a page at
a time (``by_name_pages``, R33).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from django.apps import apps
from django.db import connections, router, transaction
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.models import QuerySet
from django.db.transaction import Atomic

if TYPE_CHECKING:
    from .models import Schedule

#: schedules a long read (``status --all``, ``api.list_schedules``) takes per query (R33)
PAGE = 2000


def alias() -> str:
    """The alias of the database the router writes durablebeat's models to."""
    return router.db_for_write(apps.get_model("durablebeat", "Schedule"))


def connection() -> BaseDatabaseWrapper:
    """The connection to durablebeat's database."""
    return connections[alias()]


def atomic(savepoint: bool = True, durable: bool = False) -> Atomic:
    """``transaction.atomic`` on durablebeat's database."""
    return transaction.atomic(using=alias(), savepoint=savepoint, durable=durable)


def by_name_pages(rows: QuerySet[Schedule], limit: int | None = None) -> Iterator[Schedule]:
    """``rows`` by name, ``PAGE`` rows a query, each page the names after the last one read
    (keyset paging on the unique name, through its index), at most ``limit`` of them (R33).

    Not ``.iterator()``: MySQL/MariaDB's driver and PostgreSQL with
    ``DISABLE_SERVER_SIDE_CURSORS`` (PgBouncer's setting) hold a cursor's whole result in
    memory; a page is a query of its own, so a million schedules cost one page's memory
    on every backend. Nothing is read before the first row is asked for.
    """
    last: str | None = None
    left = limit
    while left is None or left > 0:
        size = PAGE if left is None else min(PAGE, left)
        page = rows.order_by("name")
        if last is not None:
            page = page.filter(name__gt=last)
        got = list(page[:size])
        yield from got
        if len(got) < size:
            return
        last = got[-1].name
        if left is not None:
            left -= len(got)
