"""Beat boots in the ledger (R17): registered, kept alive by a heartbeat, stopped; and the
incidents a boot records."""

from __future__ import annotations

import datetime as dt
import logging
import uuid

from .. import __version__
from ..models import (
    Boot,
    Incident,
)

logger = logging.getLogger("durablebeat")


def register_boot(boot_id: uuid.UUID, hostname: str, pid: int, now: dt.datetime) -> None:
    # An update, else an insert (not update_or_create's create_defaults: Django 5.0+ only;
    # Django 4.2 is supported). A boot id is this process's own: no other writer races it.
    fields = {"hostname": hostname, "pid": pid, "heartbeat_at": now, "version": __version__}
    if not Boot.objects.filter(pk=boot_id).update(**fields):
        Boot.objects.create(pk=boot_id, started_at=now, **fields)


def heartbeat(boot_id: uuid.UUID, now: dt.datetime) -> int:
    return Boot.objects.filter(pk=boot_id).update(heartbeat_at=now)


def stop_boot(boot_id: uuid.UUID, now: dt.datetime) -> None:
    Boot.objects.filter(pk=boot_id).update(heartbeat_at=now, stopped_at=now)


def incident(
    kind: str, detail: str, now: dt.datetime, boot_id: uuid.UUID | None, count: int = 1
) -> None:
    Incident.objects.create(kind=kind, detail=detail, count=count, at=now, boot_id=boot_id)
