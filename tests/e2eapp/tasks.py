"""Tasks the e2e tests schedule. Each records its own execution (see models.Execution)."""

import json
import os
import time

from celery import shared_task
from celery.exceptions import SoftTimeLimitExceeded

from .models import Execution


def _record(task, note: str = "") -> Execution:  # type: ignore[no-untyped-def]
    headers = task.request.headers or {}

    def header(name: str) -> str:
        return str(headers.get(name) or getattr(task.request, name, None) or "")

    return Execution.objects.create(
        schedule=header("durablebeat_schedule"),
        slot=header("durablebeat_slot"),
        task_id=task.request.id or "",
        reason=note or header("durablebeat_reason"),
        pid=os.getpid(),
    )


@shared_task(bind=True)
def record(self) -> str:  # type: ignore[no-untyped-def]
    _record(self)
    return "recorded"


@shared_task(bind=True)
def record_note(self, note: str) -> str:  # type: ignore[no-untyped-def]
    """Records ``note``: a callback linked to a fire says it ran (R25)."""
    _record(self, note[:32])
    return "recorded"


@shared_task(bind=True)
def record_beat_mark(self) -> str:  # type: ignore[no-untyped-def]
    """Records the ``celery_beat_task`` header the message arrived with (R30)."""
    mark = getattr(self.request, "celery_beat_task", None)
    if mark is None:
        mark = (self.request.headers or {}).get("celery_beat_task")
    _record(self, f"celery_beat_task={mark}")
    return "recorded"


@shared_task(bind=True)
def record_values(self, every, stamp) -> str:  # type: ignore[no-untyped-def]
    """Records what its arguments arrived as (R25): a pickled timedelta and a value the beat
    computed at send time."""
    _record(self, f"{type(every).__name__}={every.total_seconds():g} stamp={stamp}"[:32])
    return "recorded"


@shared_task(bind=True)
def sleep_then_record(self, seconds: float) -> str:  # type: ignore[no-untyped-def]
    time.sleep(seconds)
    _record(self)
    return "slept"


@shared_task(bind=True, soft_time_limit=1, time_limit=60)
def outlive_soft_limit(self, seconds: float) -> str:  # type: ignore[no-untyped-def]
    """Catches SoftTimeLimitExceeded, goes on, returns normally: succeeded (R12)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            time.sleep(0.1)
        except SoftTimeLimitExceeded:
            continue
    _record(self)
    return "finished after soft limit"


@shared_task(bind=True)
def outlive_schedule_soft_limit(self, seconds: float) -> str:  # type: ignore[no-untyped-def]
    """``outlive_soft_limit`` without limits of its own: the schedule's options set them."""
    deadline = time.monotonic() + seconds
    soft_limit_seen = False
    while time.monotonic() < deadline:
        try:
            time.sleep(0.1)
        except SoftTimeLimitExceeded:
            soft_limit_seen = True
    _record(self, note="soft limit seen" if soft_limit_seen else "")
    return "finished"


@shared_task(bind=True, soft_time_limit=1, time_limit=60)
def escape_soft_limit(self, seconds: float) -> str:  # type: ignore[no-untyped-def]
    """Lets SoftTimeLimitExceeded escape: failed (R12)."""
    time.sleep(seconds)
    return "unreachable"


@shared_task(bind=True, time_limit=2)
def outlive_hard_limit(self, seconds: float) -> str:  # type: ignore[no-untyped-def]
    """Killed by its hard time limit: no worker signal, FAILURE in the result backend."""
    time.sleep(seconds)
    return "unreachable"


@shared_task(bind=True)
def fail(self) -> None:  # type: ignore[no-untyped-def]
    _record(self)
    raise RuntimeError("failing on purpose")


@shared_task(bind=True)
def note(self) -> str:  # type: ignore[no-untyped-def]
    """Records its execution in a file (``E2E_NOTES``), not the database: the tests that cut
    the database count what really ran with a witness the cut does not reach."""
    headers = self.request.headers or {}

    def header(name: str) -> str:
        return str(headers.get(name) or getattr(self.request, name, None) or "")

    line = json.dumps(
        {
            "schedule": header("durablebeat_schedule"),
            "slot": header("durablebeat_slot"),
            "task_id": self.request.id or "",
        }
    )
    with open(os.environ["E2E_NOTES"], "a", encoding="utf-8") as f:
        f.write(line + "\n")  # one short append: whole lines even from several processes
    return "noted"


def _stamp_by_database(execution: Execution) -> None:
    """``at`` by the database server's clock (its ``now()`` in an autocommit statement),
    whatever this worker's own clock says: the tests' witness on one clock (R26)."""
    from django.db.models.functions import Now

    Execution.objects.filter(pk=execution.pk).update(at=Now())


@shared_task(bind=True)
def record_on_db_clock(self) -> str:  # type: ignore[no-untyped-def]
    _stamp_by_database(_record(self))
    return "recorded"


@shared_task(bind=True)
def sleep_on_db_clock(self, seconds: float) -> str:  # type: ignore[no-untyped-def]
    """Records its start and its end (notes "start", "end"), both on the database's clock:
    two executions of one schedule overlap when one starts before the other ends."""
    _stamp_by_database(_record(self, note="start"))
    time.sleep(seconds)
    _stamp_by_database(_record(self, note="end"))
    return "slept"


@shared_task(bind=True)
def sleep_marked(self, seconds: float) -> str:  # type: ignore[no-untyped-def]
    """Records its start and, if its body is not terminated or killed, its end: the tests'
    own evidence of which bodies ran when (R34: a replaced one never ends)."""
    _record(self, "start")
    time.sleep(seconds)
    _record(self, "end")
    return "slept"
