"""Test-only: a process started with this directory first on ``PYTHONPATH`` and
``E2E_CLOCK_OFFSET=<seconds>`` runs with its wall clock that far off (R26 e2e tests).

``time_machine`` moves ``time.time`` and ``datetime.now`` (and every call built on them) but
not ``time.monotonic``, so timed waits (``Event.wait``, the worker's liveness thread, kombu)
keep working, unlike under libfaketime. A forked pool process inherits the patch.
"""

import datetime as dt
import os

_OFFSET = os.environ.get("E2E_CLOCK_OFFSET")
if _OFFSET:
    import time_machine

    _travel = time_machine.travel(
        dt.datetime.now(dt.UTC) + dt.timedelta(seconds=float(_OFFSET)), tick=True
    )
    _travel.start()
