"""What a previous release of durablebeat does against today's schema (R32), run by
``test_expand_contract.py`` in a subprocess: ``python previous_release.py <tree>``, where
``<tree>`` is that release checked out (``git worktree``) and ``DATABASE_URL`` the test
database, migrated to the newest migration.

Only what every release since 2026-12-04 has, called as its own beat, admin and worker call
it: its models insert a schedule (the admin's save), its engine boots, syncs a code entry and
claims and records runs (beat's ``tick``), its worker writes its liveness row and a run's
start and finish. Prints one JSON object: the package it imported and what it fired.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import sys
import uuid
from typing import Any

TASK = "tests.e2eapp.tasks.record"


def main(tree: str) -> dict[str, Any]:
    sys.path.insert(0, tree)
    os.environ["DJANGO_SETTINGS_MODULE"] = "tests.settings"
    import django

    django.setup()
    import durablebeat
    from durablebeat.beat.codesync import parse_beat_schedule
    from durablebeat.beat.engine import Engine
    from durablebeat.models import Schedule
    from durablebeat.worker import completion
    from durablebeat.worker.tracking import write_worker_heartbeat

    now = dt.datetime.now(dt.UTC).replace(microsecond=0)
    # the admin's save: a schedule due now
    Schedule.objects.create(
        name="old-admin",
        task=TASK,
        kind="interval",
        every=dt.timedelta(hours=1),
        next_fire_at=now - dt.timedelta(seconds=1),
        overlap="allow",
    )
    claims: list[Any] = []
    entries = parse_beat_schedule(
        {"old-code": {"task": TASK, "schedule": dt.timedelta(seconds=30)}}, "UTC"
    )
    engine = Engine(code_entries=entries, publish=claims.append, boot_id=uuid.uuid4())
    engine.tick(now)  # boots, syncs old-code (a new row), fires old-admin
    # old-code's first slot: its startup grace after the boot (R2)
    later = Schedule.objects.get(name="old-code").next_fire_at
    engine.tick(later)
    engine.close(later)
    write_worker_heartbeat("old-worker@host", 4242, later)
    for claim in claims:
        completion.start(completion.Started(claim.task_id, later, "old-worker@host", 4242, None))
        completion.finish(completion.Finished(claim.task_id, later, succeeded=True))
    return {
        "package": durablebeat.__file__,
        "fired": sorted(c.schedule for c in claims),
        "task_ids": [c.task_id for c in claims],
    }


if __name__ == "__main__":
    print(json.dumps(main(sys.argv[1])))
