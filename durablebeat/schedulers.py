"""``celery -A proj beat -S durablebeat.schedulers:DurableScheduler``.

A thin adapter: Celery's beat service calls ``tick()`` in a loop and sleeps for what it
returns; all decisions are in ``engine.Engine``. The adapter does the sleeping itself, on a
LISTEN connection on PostgreSQL or a queue of its own on the broker elsewhere
(``notify.Wakeups``), so that a schedule changed in the admin wakes it at once; when
neither answers, Celery sleeps as usual.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import logging
import sys
import time
from collections.abc import Callable
from typing import Any

from celery.beat import Scheduler

from . import conf, dbclock, wakeup
from .beat import defaults, notify, publishing
from .beat.codesync import BadEntry, celery_timezone, parse_beat_schedule
from .beat.dberrors import DatabaseUnusable
from .beat.dispatch import PUBLISH_GROUP
from .beat.engine import MIN_SLEEP, Engine
from .beat.live import serializer_of
from .beat.messages import Claim
from .core import clock

logger = logging.getLogger("durablebeat")
#: Celery's beat logs each wake on its own logger; durablebeat's wakes are logged there alike
celery_beat_logger = logging.getLogger("celery.beat")
#: Celery's default ``beat_schedule_filename``: a beat started without ``-s``
CELERY_SCHEDULE_FILE = "celerybeat-schedule"

#: seconds before a planned wake that the adapter wakes: the tick runs as of the planned
#: instant and has its first batch read and claimed when the instant comes; the claim
#: commits, and anything is published, only once the instant is there (``_hold``). A
#: burst's first message then waits for a commit and one send, not for the due query and
#: the claim.
LEAD = 0.05


class DurableScheduler(Scheduler):  # type: ignore[misc]
    """A Celery beat scheduler whose next fire lives in the database (§1)."""

    def __init__(self, app: Any, *args: Any, lazy: bool = False, **kwargs: Any) -> None:
        # Celery builds a lazy instance just to print its banner, so nothing here touches
        # the database or the broker: the first tick boots.
        self._engine: Engine | None = None
        self._listener = notify.Wakeups(app)
        self._closed = False
        #: inside the engine's tick or the listener's wait: a SIGTERM handler must not write
        #: on the connection a query of the tick is using (it waits for itself for ever),
        #: nor close the connection the wait reads from (the driver's own clean-up then
        #: fails, and its error replaces the handler's SystemExit: beat never stopped)
        self._ticking = False
        #: the planned instant of the next tick, when the last wait ended ``LEAD`` before it
        self._ahead: dt.datetime | None = None
        #: this tick runs ahead of the real clock: no message goes out before this instant
        self._not_before: dt.datetime | None = None
        #: puts back the app's configuration as it was before ``setup_schedule`` kept the
        #: settings Celery reads per message (``publishing.keep_per_message_conf``)
        self._unkeep_conf: Callable[[], None] | None = None
        #: what ``-s`` and ``--max-interval`` (or their settings) asked for: said at boot (R30)
        self._schedule_file = kwargs.pop("schedule_filename", None)
        self._asked_max_interval = kwargs.get("max_interval") or app.conf.beat_max_loop_interval
        super().__init__(app, *args, lazy=True, **kwargs)
        self.max_interval: float = min(float(self.max_interval), conf.settings.MAX_INTERVAL)

    def setup_schedule(self) -> None:
        """Parse code-defined entries; a bad one stops the boot with its name (R20)."""
        if self._engine is not None:
            return
        import django

        django.setup()
        from django.conf import settings as django_settings
        from django.core.exceptions import ImproperlyConfigured

        if not django_settings.USE_TZ:  # R26: every instant beat stores is an aware UTC one
            raise ImproperlyConfigured(
                "durablebeat needs USE_TZ = True in the Django settings (durablebeat.E001)"
            )
        self._say_unused_options()
        if "sentry_sdk" in sys.modules:  # R30: Sentry's integration, where Sentry is loaded
            from . import sentry

            sentry.connect(self.app)
        wakeup.mute()  # this beat's own writes wake no beat
        # R26: Celery turns a message's ``expires`` (seconds) into an instant with the app's
        # ``now()``, this host's clock: a beat behind the database's would send messages
        # already expired where the clock is right. In the beat process, the app's now is
        # the one clock (undone at close).
        self.app.now = self._app_now
        if self._unkeep_conf is None:
            self._unkeep_conf = publishing.keep_per_message_conf(self.app)  # R28
        entries = parse_beat_schedule(
            defaults.beat_schedule(self.app),
            celery_timezone(self.app),
            # R29, R25: a task this beat has not registered is sent by name, as Celery's
            # beat sends it (the engine says so once per entry), never a refused boot
            check_task=False,
            serializer_of=serializer_of(self.app),
        )
        self._engine = Engine(
            code_entries=entries,
            publish=self._send,
            publish_batch=self._batch,
            revoke=self._revoke,
            broker_errors=publishing.broker_errors(self.connection),
            sync_clock=dbclock.sync,  # R26: measured at boot and with each heartbeat
            hold=self._hold,  # a tick run ahead commits its claims at its instant
        )
        self._listener.boot_id = self._engine.boot_id  # R31: a deaf LISTEN is this boot's

    def _say_unused_options(self) -> None:
        """R30: Celery beat's options that do not do here what Celery says, said at boot."""
        asked = self._asked_max_interval
        if asked and float(asked) > self.max_interval:
            logger.warning(
                "--max-interval %g s (beat_max_loop_interval) is more than "
                "DURABLEBEAT_MAX_INTERVAL: beat sleeps at most %g s. It sleeps until the next "
                "slot and a change wakes it; set DURABLEBEAT_MAX_INTERVAL to poll less often",
                float(asked),
                self.max_interval,
                extra={"event": "option_capped", "option": "max_interval"},
            )
        if self._schedule_file and self._schedule_file != CELERY_SCHEDULE_FILE:
            logger.warning(
                "-s %s (beat_schedule_filename) is not used: durablebeat keeps its schedules "
                "and their fires in the database, and reads or writes no schedule file",
                self._schedule_file,
                extra={"event": "option_unused", "option": "schedule_filename"},
            )

    def _app_now(self) -> Any:
        return clock.now().astimezone(self.app.timezone)

    @property
    def engine(self) -> Engine:
        if self._engine is None:
            self.setup_schedule()
        assert self._engine is not None
        return self._engine

    def tick(self, *args: Any, **kwargs: Any) -> float:
        self._ticking = True
        try:
            return self._tick()
        finally:
            self._ticking = False

    def _tick(self) -> float:
        ahead = self._ahead
        try:
            # Asked before the tick, so that the tick may sleep longer when a change wakes it;
            # asks nobody (a listener's connect never holds the tick's due slots).
            engine = self._engine
            woken_on_change = engine is not None and engine.db_ok and self._listener.listening()
            dbclock.watch_jumps()  # R26: this host's clock stepped: measure again now
            now, self._ahead, offset = clock.now(), None, clock.offset()
            if ahead is not None and now < ahead <= now + dt.timedelta(seconds=2 * LEAD):
                now = self._not_before = ahead  # woken LEAD early: run as of the instant
            interval = self.engine.tick(now, woken_on_change)
            # R26: a tick that measured the clock again moved its now by what that changed
            now += clock.offset() - offset
        except BadEntry:
            raise  # a code entry refused where it meets the table (a takeover): fail loudly
        except DatabaseUnusable:
            raise  # a database error that recurs, or a backend beat cannot use (R23)
        except Exception:
            if self._engine is None:
                raise  # a bad beat_schedule: fail the boot loudly
            # Beat must never exit because of one bad tick (R5): log and look again soon.
            logger.exception("beat tick failed", extra={"event": "tick_failed"})
            return max(MIN_SLEEP, float(self.max_interval))  # never a busy loop (R21)
        finally:
            self._not_before = None
        if interval > 0 and self.engine.db_ok and self._listener.available():
            # The wake the tick planned, counted from the instant it ran as of (which may be
            # ahead of the clock: the wait is what is left of it on the clock now)
            planned = now + dt.timedelta(seconds=interval)
            left = (planned - clock.now()).total_seconds()
            lead = LEAD if left > 2 * LEAD else 0.0
            debug = celery_beat_logger.isEnabledFor(logging.DEBUG)
            if debug:  # R30: -l DEBUG says each wake, as Celery's beat does
                celery_beat_logger.debug(
                    "beat: Waking up in %.2f seconds (at %s), or on a change.",
                    max(left, 0.0),
                    planned.isoformat(timespec="milliseconds"),
                )
            woken = self._listener.wait(left - lead)  # R6: a change wakes it
            if debug and woken:
                celery_beat_logger.debug("beat: woken by a change.")
            if not woken and lead:
                self._ahead = planned
            return 0.0
        return interval

    def _hold(self) -> None:
        """A tick run ahead of the clock waits here, once, for its instant: before its
        claims commit (the engine calls it), or before its first send where nothing was
        claimed (a slot fired from memory while the database is down). Nothing goes out
        early (R26)."""
        not_before, self._not_before = self._not_before, None
        if not_before is not None:
            wait = (not_before - clock.now()).total_seconds()
            if wait > 0:
                time.sleep(min(wait, 2 * LEAD))

    def _send(self, claim: Claim) -> None:
        self._hold()
        publishing.send(self.app, claim, producer=self.producer)

    def _revoke(self, task_ids: list[str], terminate: bool) -> None:
        """R34: Celery's revoke, broadcast to the workers (terminate: the body is killed
        with the worker's default signal), on this beat's broker connection."""
        self.app.control.revoke(task_ids, terminate=terminate, connection=self.connection)

    def _batch(self) -> contextlib.AbstractContextManager[Any]:
        """kombu's publish batch (one Redis pipeline per batch), where the transport has it;
        elsewhere each message goes out on its own."""
        producer = self.producer
        if getattr(producer, "batch", None) is None or not producer.supports_batch_publish:
            return contextlib.nullcontext()
        # Room for every command of a batch (a queue with an expiry adds some per message):
        # the batch is sent once, at the end of the block, never part-way.
        batch: contextlib.AbstractContextManager[Any] = producer.batch(max_size=10 * PUBLISH_GROUP)
        return batch

    def _ensure_connected(self) -> Any:
        """One try, not ``broker_connection_max_retries`` (100, with back-off: beat held
        for most of an hour by a broker that is down at its first publish). The claim is
        kept and retried by the engine while the slot is worth sending (R5, ``beat.retries``)."""
        return self.connection.ensure_connection(max_retries=0)

    def sync(self) -> None:
        """Nothing to write: every change is written when it happens."""

    def close(self) -> None:
        if self._closed or self._ticking:
            # Called from Celery's SIGTERM handler part-way through a tick: the SystemExit it
            # raises next unwinds the tick, and beat's own ``finally`` closes again.
            return
        self._closed = True
        if self.app.__dict__.get("now") == self._app_now:
            del self.app.now  # the app's own now again (set at setup)
        self._listener.close()
        if self._engine is not None:
            self._engine.close(clock.now())
        super().close()
        if self._unkeep_conf is not None:
            self._unkeep_conf()  # last: nothing here may keep the boot's stop unwritten
        wakeup.mute(False)  # set at setup: this process's saves wake beats again

    @property
    def info(self) -> str:
        return f"durablebeat (database-backed, max interval {self.max_interval:g}s)"

    @property
    def schedule(self) -> dict[str, Any]:
        return {}
