"""Beat boots in the ledger (R17): registered, kept alive by a heartbeat, stopped; which
are alive; and the incidents a boot records."""

from __future__ import annotations

import datetime as dt
import functools
import logging
import uuid

from django.db.models import Q

from .. import __version__, conf, db, wakeup
from ..core import clock
from ..models import (
    Boot,
    Incident,
    Schedule,
)
from ..words import duration_words

logger = logging.getLogger("durablebeat")


def alive_q(now: dt.datetime, via: str = "") -> Q:
    """R17: a boot is alive while it has not said it stopped and its heartbeat is fresher
    than ``HEARTBEAT_STALE_AFTER``. ``via`` reaches the boot over a relation (``"boot__"``)."""
    fresh = now - conf.settings.HEARTBEAT_STALE_AFTER
    return Q(**{f"{via}stopped_at__isnull": True, f"{via}heartbeat_at__gte": fresh})


def is_alive(boot: Boot, now: dt.datetime) -> bool:
    """``alive_q`` for one boot already read (the admin's "alive" column)."""
    fresh = now - conf.settings.HEARTBEAT_STALE_AFTER
    return boot.stopped_at is None and boot.heartbeat_at >= fresh


def dead_q(now: dt.datetime, via: str = "boot__") -> Q:
    """``alive_q`` negated, for a row reaching its boot over ``via``: no boot, a stopped
    one, or a silent one."""
    stale_before = now - conf.settings.HEARTBEAT_STALE_AFTER
    return (
        Q(**{f"{via.removesuffix('__')}__isnull": True})
        | Q(**{f"{via}stopped_at__isnull": False})
        | Q(**{f"{via}heartbeat_at__lt": stale_before})
    )


def register_boot(
    boot_id: uuid.UUID,
    hostname: str,
    pid: int,
    now: dt.datetime,
    clock_offset: float | None = None,
) -> None:
    """``clock_offset``: this host's measured offset to the database's clock (R26)."""
    # An update, else an insert (not update_or_create's create_defaults: Django 5.0+ only;
    # Django 4.2 is supported). A boot id is this process's own: no other writer races it.
    fields = {
        "hostname": hostname,
        "pid": pid,
        "heartbeat_at": now,
        "version": __version__,
        "clock_offset_seconds": clock_offset,
    }
    if not Boot.objects.filter(pk=boot_id).update(**fields):
        Boot.objects.create(pk=boot_id, started_at=now, **fields)


def heartbeat(boot_id: uuid.UUID, now: dt.datetime, clock_offset: float | None = None) -> int:
    """The boot's heartbeat, with its offset when one was measured (R17, R26); 1 when the
    boot's row was there. One UPDATE by primary key in SQL written once per process: the
    ORM compiles its query again on each call, and an idle beat does little else (R28)."""
    values: dict[str, object] = {"heartbeat_at": now}
    if clock_offset is not None:
        values["clock_offset_seconds"] = clock_offset
    connection = db.connection()
    params = [_FIELDS[name].get_db_prep_save(v, connection) for name, v in values.items()]
    params.append(_FIELDS["id"].get_db_prep_save(boot_id, connection))
    with connection.cursor() as cur:
        cur.execute(_update_sql(connection.vendor, tuple(values)), params)
        return int(cur.rowcount)


_FIELDS = {f.name: f for f in Boot._meta.concrete_fields}


@functools.cache
def _update_sql(vendor: str, names: tuple[str, ...]) -> str:
    """``UPDATE boot SET <names> WHERE id``, quoted for this database (``vendor`` keys it)."""
    quote = db.connection().ops.quote_name
    columns = ", ".join(f"{quote(str(_FIELDS[n].column))} = %s" for n in names)
    where = quote(str(_FIELDS["id"].column))
    return f"UPDATE {quote(Boot._meta.db_table)} SET {columns} WHERE {where} = %s"


def stop_boot(boot_id: uuid.UUID, now: dt.datetime) -> None:
    Boot.objects.filter(pk=boot_id).update(heartbeat_at=now, stopped_at=now)


def incident(
    kind: str, detail: str, now: dt.datetime, boot_id: uuid.UUID | None, count: int = 1
) -> None:
    Incident.objects.create(kind=kind, detail=detail, count=count, at=now, boot_id=boot_id)


#: the most a reason holds in the ledger (``Run.detail``, ``MissedSlots.reason``)
WHY_MAX = 280
#: why a slot was found late when no beat was alive at it
NO_BEAT = "no beat could fire it (none running, or the database unreachable)"


def why_late(
    slot: dt.datetime,
    now: dt.datetime,
    one_off: int | None = None,
    stored_next: dt.datetime | None = None,
) -> str:
    """R31: why a slot is found only at ``now``. A one-off (``one_off``: its schedule's id)
    written after its own instant was never due while a beat could fire it: said so, when
    it was made after it, or last written after it with its next fire already past
    (``stored_next``: the next fire its row held when beat found it; None, none yet). Else
    a beat that was running at the slot (it started before it and was heard from after it)
    found it late, by how much; else none was running, or none could reach the database."""
    if one_off is not None:
        written = _written_after(one_off, slot, stored_next)
        if written:
            return written[:WHY_MAX]
    ran = (
        Boot.objects.filter(started_at__lte=slot, heartbeat_at__gte=slot)
        .filter(Q(stopped_at__isnull=True) | Q(stopped_at__gte=slot))
        .order_by("started_at")
        .first()
    )
    if ran is None:
        return NO_BEAT
    why = (
        f"beat {ran.hostname}:{ran.pid} was running at the slot, found "
        f"{duration_words(now - slot)} late: it woke late (no wake-up came, it was busy or "
        "the database did not answer) or stopped first"
    )
    return why[-WHY_MAX:]  # the ledger keeps 300 characters: a long host name loses its start


def _written_after(schedule_id: int, slot: dt.datetime, stored_next: dt.datetime | None) -> str:
    """Why a one-off's ``slot`` came late when it was written after it (issue 39: a one-off
    for an instant already past, written from code, read "no beat could fire it" while a
    beat was running); "" when it was not."""
    stored = Schedule.objects.filter(pk=schedule_id).values_list("created_at", "updated_at")
    created, updated = stored.first() or (None, None)
    if created is not None and created > slot:
        return (
            f"the one-off was made {duration_words(created - slot)} after its instant "
            f"(at {created.isoformat(timespec='seconds')}): it did not exist when its instant came"
        )
    # Its writer stored a next fire already past (R33: the writer computes it), or left
    # none for beat: the write came after the instant, so no beat could have fired it then.
    first_sight = stored_next is None or (updated is not None and stored_next <= updated)
    if first_sight and updated is not None and updated > slot:
        return (
            f"the one-off was written {duration_words(updated - slot)} after its instant "
            f"(at {updated.isoformat(timespec='seconds')}; its timing changed, or it was "
            "resumed) and beat found it at its next look"
        )
    return ""


def listen_deaf_alive() -> bool:
    """R31: a live boot found its LISTEN deaf: the savers publish on the broker (``wakeup``).
    By the live boots (a few rows, by the heartbeat's index), then their incidents."""
    return Boot.objects.filter(alive_q(clock.now()), incident__kind=wakeup.LISTEN_DEAF).exists()
