"""What durablebeat stores. Models store; the logic lives in ``core`` and ``beat``
and works on the small values these rows turn into."""

from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import Collection, Iterable
from typing import Any, TypeVar

from django.core.exceptions import ValidationError
from django.db import models
from django.db.models import Q
from django.db.models.sql import Query

from . import conf, db, wakeup
from .core import clock, solar, timing
from .core.jitter import slot_of
from .enums import IN_FLIGHT_STATES, UNTRACKED, Failure, Kind, Overlap, Reason, RunState, Source
from .first_fire import FirstFires
from .validation import validate_schedule_fields

#: A schedule's fields by what they are about: the one place that names them together (the
#: due query, the form, the admin and the code sync read these).
#: what the published message carries besides the task name
MESSAGE_FIELDS = (
    "args",
    "kwargs",
    "queue",
    "exchange",
    "exchange_type",
    "routing_key",
    "priority",
    "expire_seconds",
    "countdown",
    "headers",
    "serializer",
    "compression",
    "delivery_mode",
    "ignore_result",
    "shadow",
    "time_limit",
    "soft_time_limit",
)
#: the message fields that are Celery ``apply_async`` options: {option: model field}. A
#: ``beat_schedule`` entry's ``options`` name them so, and every fire passes them to
#: ``send_task`` so (R24); an empty field passes nothing (the task's or app's default).
MESSAGE_OPTIONS = {
    "queue": "queue",
    "exchange": "exchange",
    "exchange_type": "exchange_type",
    "routing_key": "routing_key",
    "priority": "priority",
    "expires": "expire_seconds",
    "countdown": "countdown",
    "serializer": "serializer",
    "compression": "compression",
    "delivery_mode": "delivery_mode",
    "ignore_result": "ignore_result",
    "shadow": "shadow",
    "time_limit": "time_limit",
    "soft_time_limit": "soft_time_limit",
}
#: the per-schedule time limits (the admin shows them outside the collapsed message options)
LIMIT_FIELDS = ("time_limit", "soft_time_limit")
#: when it fires: a change here means "a different schedule", beat recomputes the next fire (R6)
TIMING_FIELDS = (
    "kind",
    "every",
    "minute",
    "hour",
    "day_of_week",
    "day_of_month",
    "month_of_year",
    "timezone",
    "clocked_at",
    "relative",
    "solar_event",
    "latitude",
    "longitude",
    "custom_schedule",
)
TIMING_FIELDS_SET = frozenset(TIMING_FIELDS)
#: what beat does at a restart, a missed slot or a fire while one runs (R2, R8, R14, R34),
#: how late after its slot it sends one (R35), and how long the ledger keeps its runs (R32)
POLICY_FIELDS = (
    "startup_grace",
    "catch_up",
    "catch_up_window",
    "overlap",
    "max_in_flight",
    "terminate",
    "jitter",
    "pause_after_failures",
    "retention",
)

#: timing's field names that differ from the model's
_SPEC_FIELD_TO_MODEL = {"at": "clocked_at", "schedule": "kind"}


class ClockDateTimeField(models.DateTimeField):  # type: ignore[type-arg]
    """A ``DateTimeField`` whose ``auto_now`` and ``auto_now_add`` read the one clock
    (``clock.now()``, the database's, R26), not this host's (``timezone.now()``)."""

    def pre_save(self, model_instance: models.Model, add: bool) -> Any:
        if self.auto_now or (self.auto_now_add and add):
            value = clock.now()
            setattr(model_instance, self.attname, value)
            return value
        return super().pre_save(model_instance, add)


#: what beat writes about a row, never checked as the editor's input
BEAT_OWNED = frozenset({"error", "stuck_reason", "next_fire_reason", "last_outcome"})
#: R36: what a pause records and a resume clears (the edit rules write them)
PAUSE_FIELDS = ("paused_at", "paused_note", "paused_on_failure", "failures_in_a_row")
#: what the edit rules may write besides what the editor wrote
EDIT_RULE_FIELDS = ("next_fire_at", "next_fire_reason", "next_slot", "enabled_at", *PAUSE_FIELDS)

#: the columns whose change wakes beat, as migration 0002's trigger has them on PostgreSQL:
#: a new or reset next fire, enabling or disabling, a row error set or cleared. A worker
#: writing a run's outcome (``last_completed_at``...) wakes nobody.
WAKE_FIELDS = frozenset({"next_fire_at", "enabled", "error"})


#: what an edit is judged by (``edit_rules``): a row remembers these as it was read, so that
#: a save knows what changed, whoever edits it (R29)
WATCHED_FIELDS = (*TIMING_FIELDS, "enabled", "enabled_at", "next_fire_at")


def edit_rules(row: Schedule, changed: set[str], is_new: bool, now: dt.datetime) -> list[str]:
    """What an edit does to the next fire, on every path (the admin, ``save()``,
    ``bulk_update()``, the API); returns notes for a person (R2, R6, R29).

    A timing change makes it a new schedule: its next fire is cleared here and computed
    afresh (interval: now + startup grace; crontab: its next slot), by the writer as the
    edit commits (``first_fire.FirstFires``, R33) or else by beat, so no slot of the old
    timing fires after the edit, unless the editor set the next fire themselves. Enabling
    a schedule whose stored next fire passed while it was disabled does the same, so those
    slots are not reported as missed by a beat that was running all along.
    """
    notes: list[str] = []
    if is_new:
        return notes
    if "enabled" in changed and row.enabled and "enabled_at" not in changed:
        row.enabled_at = now  # check's no_success counts its periods from here
    if "enabled" in changed and row.enabled:
        # R36: a resume clears the pause, its note and the count of failures in a row
        row.paused_at = row.paused_note = row.paused_on_failure = row.failures_in_a_row = None
    if "enabled" in changed and not row.enabled:
        row.buffered_slot = None  # R34: a paused schedule keeps no slot for later
        row.paused_at = row.paused_at or now  # R36: since when (its note, if any, is kept)
    if "next_fire_at" in changed:
        if row.__dict__.get("_first_fire") != row.next_fire_at:  # not ``FirstFires``'s
            row.next_fire_reason = Reason.SCHEDULED
            row.next_slot = None  # the editor's own next fire is its slot (R35)
        return notes
    if changed & TIMING_FIELDS_SET:
        row.next_fire_at = None
        row.next_slot = None
        row.next_fire_reason = Reason.SCHEDULED
        notes.append("Timing changed: beat computes the next fire afresh.")
    elif "enabled" in changed and row.enabled and row.next_fire_at and row.next_fire_at < now:
        row.next_fire_at = None
        row.next_slot = None
        row.next_fire_reason = Reason.SCHEDULED
        notes.append("Enabled: its old next fire had passed, beat computes a new one.")
    return notes


def beat_alive(now: dt.datetime) -> bool:
    """A beat is alive at ``now``: not stopped, its heartbeat fresher than
    ``HEARTBEAT_STALE_AFTER`` (R17). A writer's question (``FirstFires``): may a new
    interval's startup grace start at the write (R2, R33)?"""
    fresh = now - conf.settings.HEARTBEAT_STALE_AFTER
    return Boot.objects.filter(stopped_at__isnull=True, heartbeat_at__gte=fresh).exists()


def refuse_invalid(rows: Iterable[Schedule]) -> None:
    """R20, R21, R29: every ORM write of a schedule is checked as ``full_clean`` checks it;
    ``ValidationError`` names the field (and the schedule, when several are written)."""
    errors: dict[str, list[str]] = {}
    rows = list(rows)
    many = len(rows) > 1
    for row in rows:
        problems = validate_schedule_fields(row)
        try:
            row.clean_fields(exclude={*problems, *BEAT_OWNED})
        except ValidationError as exc:
            problems |= {f: " ".join(m) for f, m in exc.message_dict.items()}
        for name, message in problems.items():
            errors.setdefault(name, []).append(
                f"schedule {row.name!r}: {message}" if many else message
            )
    if errors:
        raise ValidationError({name: _first(messages) for name, messages in errors.items()})


def _first(messages: list[str], shown: int = 5) -> list[str]:
    """A field's messages, the first few of a bulk write's and how many more."""
    more = len(messages) - shown
    return messages[:shown] + ([f"and {more} more schedules"] if more > 0 else [])


class PartialIndex(models.Index):
    """An index with a ``WHERE`` where the database has partial indexes (PostgreSQL,
    SQLite), and the same index on the whole column elsewhere (MariaDB/MySQL), as Django
    builds a conditional ``Index`` there. The condition is not Django's ``condition``, so
    ``manage.py check`` on MariaDB is clean of durablebeat's models (Django's
    ``models.W037`` warns that it would be ignored: the due query reads through the plain
    index, tests/integration/test_mysql_index.py)."""

    def __init__(
        self,
        *,
        where: Q,
        vendors: tuple[str, ...] | None = None,
        only_on: tuple[str, ...] | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.where = where
        #: the databases that get the ``WHERE`` (None: every one that has partial indexes)
        self.vendors = vendors
        #: the databases that get the index at all (None: every one); elsewhere it is in
        #: Django's state only, and the migration that adds it builds nothing there
        self.only_on = only_on

    def built_on(self, vendor: str) -> bool:
        return self.only_on is None or vendor in self.only_on

    def _get_condition_sql(self, model: Any, schema_editor: Any) -> str | None:
        connection = schema_editor.connection
        if not connection.features.supports_partial_indexes:
            return None
        if self.vendors is not None and connection.vendor not in self.vendors:
            return None
        query = Query(model=model, alias_cols=False)
        sql, params = query.build_where(self.where).as_sql(
            query.get_compiler(connection=schema_editor.connection), schema_editor.connection
        )
        return str(sql % tuple(schema_editor.quote_value(p) for p in params))

    def deconstruct(self) -> Any:
        path, expressions, kwargs = super().deconstruct()
        if self.vendors is not None:
            kwargs["vendors"] = self.vendors
        if self.only_on is not None:
            kwargs["only_on"] = self.only_on
        return path, expressions, {**kwargs, "where": self.where}


def _where(condition: Q, value: Any, field: str) -> models.Case:
    """``value`` in the rows that meet ``condition``, the field's own value in the others."""
    return models.Case(models.When(condition, then=models.Value(value)), default=models.F(field))


_M = TypeVar("_M", bound=models.Model)


class DurableManager(models.Manager[_M]):
    """Every query starts on durablebeat's database (``db.alias()``, the router's write
    alias), reads too: beat never decides on a row read from a replica (R31, issue 30).
    An explicit ``.using()`` or ``db_manager()`` still wins. Each model names it its base
    manager too (``Meta.base_manager_name``), the one Django reads a related row through
    (``run.schedule``, ``run.boot``), so with a read-replica router those are read there as
    well, not from a stale copy."""

    def get_queryset(self) -> models.QuerySet[_M]:
        return super().get_queryset().using(self._db or db.alias())


class ScheduleQuerySet(models.QuerySet["Schedule"]):
    """Bulk writes follow the rules a save follows (R6, R29): they wake beat, a timing
    change recomputes the next fire, and what can be checked is checked."""

    def update(self, **kwargs: Any) -> int:
        """``edit_rules`` in SQL: what each row was decides, as a save's changed fields."""
        if kwargs.get("enabled") is True:
            # A row enabled again: check's no_success counts its periods from now, and a
            # next fire that passed while it was disabled is computed afresh, its slots
            # meanwhile neither fired late nor reported missed (R2).
            now, was_off = clock.now(), Q(enabled=False)
            kwargs.setdefault("enabled_at", _where(was_off, now, "enabled_at"))
            for name in PAUSE_FIELDS:  # R36: a resume clears the pause, its note, the count
                kwargs.setdefault(name, _where(was_off, None, name))
            passed = was_off & Q(next_fire_at__lt=now)
            if not (TIMING_FIELDS_SET | {"next_fire_at"}) & kwargs.keys():
                # the reason first: MySQL's SET reads the columns it already set
                kwargs.setdefault(
                    "next_fire_reason", _where(passed, Reason.SCHEDULED, "next_fire_reason")
                )
                kwargs["next_fire_at"] = _where(passed, None, "next_fire_at")
        if kwargs.get("enabled") is False:
            kwargs.setdefault("buffered_slot", None)  # R34: a paused schedule keeps no slot
            # R36: since when, for the rows this pauses (a paused row keeps its own)
            kwargs.setdefault("paused_at", _where(Q(enabled=True), clock.now(), "paused_at"))
        if "next_fire_at" in kwargs:
            kwargs.setdefault("next_fire_reason", Reason.SCHEDULED)
            kwargs.setdefault("next_slot", None)  # the next fire written is its slot (R35)
        elif TIMING_FIELDS_SET & kwargs.keys():
            # R29: the rows' old next fire belongs to the old timing. The new values
            # themselves are not checked here (no row in hand): beat sets a bad one aside
            # with its reason (R21).
            kwargs |= {"next_fire_at": None, "next_fire_reason": Reason.SCHEDULED}
            kwargs["next_slot"] = None
        if "enabled" in kwargs:  # set last: MySQL's SET reads the columns it already set
            kwargs["enabled"] = kwargs.pop("enabled")
        n = super().update(**kwargs)
        if n and WAKE_FIELDS & kwargs.keys():
            wakeup.schedules_changed()
        return n

    def bulk_create(
        self, objs: Any, *args: Any, _checked: bool = False, **kwargs: Any
    ) -> list[Schedule]:
        """``_checked``: the caller has checked every row as this would (``durablebeat.api``)."""
        objs = list(objs)
        for obj in objs:
            obj.error = ""
        if not _checked:
            refuse_invalid(objs)
        now = clock.now()
        fires = FirstFires(now, lambda: beat_alive(now))  # R33: known when the write commits
        for obj in objs:
            fires.fill(obj)
        created = super().bulk_create(objs, *args, **kwargs)
        if created:
            wakeup.schedules_changed()
        return created

    def bulk_update(self, objs: Any, fields: Any, *args: Any, **kwargs: Any) -> int:
        objs, fields = list(objs), list(fields)
        if TIMING_FIELDS_SET & set(fields) or "enabled" in fields:
            now = clock.now()
            for obj in objs:
                edit_rules(obj, obj.changed_fields(), False, now)
            fields += [f for f in EDIT_RULE_FIELDS if f not in fields]
            fires = FirstFires(now, lambda: beat_alive(now))  # R33: the first fire, at the write
            for obj in objs:
                fires.fill(obj)
        refuse_invalid(objs)
        n = super().bulk_update(objs, fields, *args, **kwargs)
        for obj in objs:
            obj.remember_stored()
        return n


class Schedule(models.Model):
    """A named periodic task. ``next_fire_at`` is the only answer to "when next" (R1)."""

    name = models.CharField(max_length=200, unique=True)
    task = models.CharField(max_length=200, help_text="Registered Celery task name.")
    args = models.JSONField(default=list, blank=True, help_text="JSON list.")
    kwargs = models.JSONField(default=dict, blank=True, help_text="JSON object.")
    queue = models.CharField(max_length=200, blank=True)
    routing_key = models.CharField(max_length=200, blank=True)
    priority = models.PositiveSmallIntegerField(null=True, blank=True)
    expire_seconds = models.FloatField(
        null=True, blank=True, help_text="Message expires this many seconds after it is sent."
    )
    countdown = models.FloatField(
        null=True,
        blank=True,
        help_text="Each message is delayed by this many seconds after it is sent (Celery's "
        "countdown: the task runs at send time plus this); the run's slot stays the scheduled "
        "instant.",
    )
    headers = models.JSONField(default=dict, blank=True, help_text="Extra message headers.")
    exchange = models.CharField(max_length=200, blank=True, help_text="Empty: the queue's.")
    exchange_type = models.CharField(
        max_length=32, blank=True, help_text="direct, topic, fanout, headers. Empty: the queue's."
    )
    serializer = models.CharField(
        max_length=64,
        blank=True,
        help_text="A serializer kombu knows: json, msgpack, pickle, yaml. Empty: the app's.",
    )
    compression = models.CharField(
        max_length=64,
        blank=True,
        help_text="A compression kombu knows: gzip, bzip2, lzma... Empty: none (the app's).",
    )
    delivery_mode = models.PositiveSmallIntegerField(
        null=True,
        blank=True,
        choices=[(1, "transient"), (2, "persistent")],
        help_text="Empty: the queue's (persistent by default).",
    )
    ignore_result = models.BooleanField(
        null=True,
        blank=True,
        help_text="Store no result. Empty: the task's own setting. Without a stored result, "
        "a run whose worker died is lost rather than reconciled (R13).",
    )
    shadow = models.CharField(
        max_length=200, blank=True, help_text="The task's name in worker logs and events."
    )
    time_limit = models.FloatField(
        null=True,
        blank=True,
        help_text="Hard time limit in seconds: the worker kills the run past it, and beat "
        "reclaims a run still going this long (plus its margin) after its start. "
        "Empty: the task's or app's.",
    )
    soft_time_limit = models.FloatField(
        null=True,
        blank=True,
        help_text="Soft time limit in seconds (at most the hard one): the body gets "
        "SoftTimeLimitExceeded. Empty: the task's or app's.",
    )
    description = models.TextField(blank=True)

    kind = models.CharField(max_length=16, choices=Kind.choices, default=Kind.INTERVAL)
    every = models.DurationField(null=True, blank=True, help_text="Interval schedules.")
    minute = models.CharField(max_length=240, default="*")
    hour = models.CharField(max_length=96, default="*")
    day_of_week = models.CharField(max_length=64, default="*")
    day_of_month = models.CharField(max_length=124, default="*")
    month_of_year = models.CharField(max_length=64, default="*")
    timezone = models.CharField(max_length=64, default="UTC", help_text="IANA time zone.")
    clocked_at = models.DateTimeField(null=True, blank=True, help_text="One-off schedules.")
    relative = models.BooleanField(
        default=False,
        help_text="Interval schedules: round each fire down to the interval's clock unit in "
        "the time zone, as Celery's relative=True (1 hour: on the hour).",
    )
    solar_event = models.CharField(
        max_length=32,
        blank=True,
        choices=[(event, event.replace("_", " ")) for event in solar.EVENTS],
        help_text="Solar schedules: the sun event.",
    )
    latitude = models.FloatField(
        null=True, blank=True, help_text="Solar schedules: degrees, north positive (-90 to 90)."
    )
    longitude = models.FloatField(
        null=True, blank=True, help_text="Solar schedules: degrees, east positive (-180 to 180)."
    )
    custom_schedule = models.CharField(
        max_length=300,
        blank=True,
        editable=False,
        help_text="Custom schedules: the schedule object in code (class and repr).",
    )

    enabled = models.BooleanField(default=True)
    enabled_at = models.DateTimeField(
        null=True,
        blank=True,
        editable=False,
        help_text="When it was last enabled again; check's no_success counts from here.",
    )
    source = models.CharField(max_length=16, choices=Source.choices, default=Source.DATABASE)
    removed_from_code_at = models.DateTimeField(null=True, blank=True, editable=False)
    deleted_at = models.DateTimeField(
        null=True,
        blank=True,
        editable=False,
        help_text="Deleted with its history kept (durablebeat.api.delete_schedule): it never "
        "fires again; its runs stay in the ledger.",
    )

    startup_grace = models.DurationField(
        null=True, blank=True, help_text="Empty: DURABLEBEAT_STARTUP_GRACE."
    )
    catch_up = models.BooleanField(
        default=False, help_text="Delivery schedule: fire once at boot for a slot just missed."
    )
    catch_up_window = models.DurationField(
        null=True, blank=True, help_text="Empty: DURABLEBEAT_CATCH_UP_WINDOW."
    )
    overlap = models.CharField(
        max_length=16,
        choices=Overlap.choices,
        default=Overlap.SKIP,
        help_text="A slot that comes while a run is in flight: skipped, sent anyway (up to "
        "max in flight), kept and sent when that run ends (one at most), or sent in place "
        "of that run (R14, R34).",
    )
    #: R34: nullable, as every column added since 0001 (the previous release inserts)
    max_in_flight = models.PositiveIntegerField(
        null=True,
        blank=True,
        help_text="With overlap 'allow': at most this many runs in flight, a slot beyond "
        "it is skipped. Empty: no bound.",
    )
    #: empty (NULL, what the previous release inserts) is no
    terminate = models.BooleanField(
        null=True,
        blank=True,
        help_text="With overlap 'replace': terminate the running task (Celery's revoke "
        "with terminate), not only revoke it.",
    )
    #: R35: empty (NULL) is DURABLEBEAT_JITTER
    jitter = models.DurationField(
        null=True,
        blank=True,
        help_text="Send each slot up to this much after it (the same delay at every beat "
        "and restart, never at or after the next slot): spreads schedules that share a "
        "slot. Empty: DURABLEBEAT_JITTER.",
    )
    #: R34, ``overlap=buffer_one``: the slot kept while a run is in flight, sent when it
    #: ends (its run is written then); None: none kept
    buffered_slot = models.DateTimeField(null=True, blank=True, editable=False)
    #: R36: nullable without a default, as every column added since 0001 (the previous
    #: release inserts; SQLite adds the column without rebuilding the table)
    pause_after_failures = models.PositiveIntegerField(
        null=True,
        blank=True,
        help_text="Pause this schedule after this many of its runs in a row failed or were "
        "lost (R36). Empty: DURABLEBEAT_PAUSE_AFTER_FAILURES (off by default); 0: never.",
    )
    #: R36: the count of runs in a row that failed or were lost (None: none counted), moved
    #: by whoever writes a run's final state (``pausing``); a resume clears it
    failures_in_a_row = models.PositiveIntegerField(null=True, blank=True, editable=False)
    #: R36: when it was paused (any pause; None while enabled)
    paused_at = models.DateTimeField(null=True, blank=True, editable=False)
    #: R36: who paused it and why, shown wherever the pause is; cleared by a resume
    paused_note = models.TextField(  # noqa: DJ001  (nullable: added without a rewrite)
        null=True,
        blank=True,
        help_text="Why it is paused and who paused it, shown wherever the pause is "
        "(status, check, the API). Cleared when it is enabled again.",
    )
    #: R36: the pause is its own, after failures in a row (``check``'s paused_on_failure);
    #: None or False: a person's pause, or not paused
    paused_on_failure = models.BooleanField(null=True, blank=True, editable=False)
    #: R32: nullable, so that the previous release, which does not name it, still inserts
    retention = models.DurationField(
        null=True,
        blank=True,
        help_text="How long the ledger keeps this schedule's finished runs and missed-slot "
        "records (at least a day). Empty: DURABLEBEAT_RETENTION.",
    )

    next_fire_at = models.DateTimeField(
        null=True, blank=True, help_text="Empty: beat computes it (first slot or startup grace)."
    )
    next_fire_reason = models.CharField(
        max_length=16, choices=Reason.choices, default=Reason.SCHEDULED, editable=False
    )
    #: R35: the slot ``next_fire_at`` sends when the schedule's jitter moved it later (the
    #: run's slot, R4); None: ``next_fire_at`` is the slot
    next_slot = models.DateTimeField(null=True, blank=True, editable=False)
    last_fired_at = models.DateTimeField(null=True, blank=True, editable=False)
    last_completed_at = models.DateTimeField(null=True, blank=True, editable=False)
    last_failed_at = models.DateTimeField(null=True, blank=True, editable=False)
    last_outcome = models.CharField(
        max_length=16, choices=RunState.choices, blank=True, editable=False
    )
    stuck_since = models.DateTimeField(null=True, blank=True, editable=False)
    stuck_reason = models.CharField(max_length=300, blank=True, editable=False)
    error = models.TextField(
        blank=True, editable=False, help_text="Why beat could not use this row (R20)."
    )

    created_at = ClockDateTimeField(auto_now_add=True)
    updated_at = ClockDateTimeField(auto_now=True)

    objects = DurableManager.from_queryset(ScheduleQuerySet)()

    class Meta:
        base_manager_name = "objects"  # related rows too (DurableManager)
        ordering = ["name"]
        indexes = [
            # The due query: WHERE enabled AND next_fire_at <= %s ORDER BY next_fire_at.
            PartialIndex(
                fields=["next_fire_at"], where=Q(enabled=True), name="durablebeat_due_idx"
            ),
            # The boot-time code sync reads code-defined rows only, not every schedule (R6).
            PartialIndex(
                fields=["source"], where=Q(source=Source.CODE), name="durablebeat_code_idx"
            ),
            # check's stuck finding and the admin's stuck filter read the few stuck rows,
            # not every schedule (R33; a whole column on MariaDB/MySQL, see PartialIndex)
            PartialIndex(
                fields=["stuck_since"],
                where=Q(stuck_since__isnull=False),
                name="durablebeat_stuck_idx",
            ),
            # the few rows paused or set aside (R21, R33): check's bad_row finding, status's
            # set-aside part, the admin's bad-row and disabled filters. PostgreSQL only, as
            # durablebeat_run_inflight_idx: SQLite's planner ignores it (Django binds the ''
            # as a parameter). Built on PostgreSQL only: a plain index on ``enabled`` in its
            # place was what MariaDB's planner took for the due query, which then locked
            # every enabled row, so a second beat's SKIP LOCKED found none (R4; its
            # tests/integration/test_vendors.py test). Elsewhere these read the table.
            PartialIndex(
                fields=["enabled"],
                where=Q(enabled=False) | ~Q(error=""),
                vendors=("postgresql",),
                only_on=("postgresql",),
                name="durablebeat_paused_or_bad_idx",
            ),
            # status's failing part and the admin's outcome filter: the rows of one last
            # outcome, not every schedule (R33); changed only when a row's outcome changes
            models.Index(fields=["last_outcome"], name="durablebeat_outcome_idx"),
            # The fill (R33): the rows without a next fire by primary key, each slice read
            # from the last one's key on. The due index holds them under NULL in no key
            # order, so each slice walked every row before it (at a million, 30 rows/s).
            # PostgreSQL only: SQLite's and InnoDB's index entries end with the key, so there
            # the due index already reads them from a key on, in key order.
            PartialIndex(
                fields=["id"],
                where=Q(enabled=True, next_fire_at__isnull=True),
                only_on=("postgresql",),
                name="durablebeat_unfilled_idx",
            ),
        ]

    def __str__(self) -> str:
        return self.name

    def save(self, *args: Any, **kwargs: Any) -> None:
        """Every save is an edit checked as the admin checks one (R20, R21, R29): an invalid
        value raises ``ValidationError`` naming the field, a timing change recomputes the
        next fire, and beat validates the row afresh. A row without a next fire gets its
        first one here, as it commits (R33)."""
        self.error = ""
        is_new = self.pk is None  # a row built by hand with a pk is an edit of that row
        update_fields = kwargs.get("update_fields")
        now = clock.now()
        before = tuple(getattr(self, name) for name in EDIT_RULE_FIELDS)
        if not is_new:
            edit_rules(self, self.changed_fields(), False, now)
        refuse_invalid([self])
        FirstFires(now, lambda: beat_alive(now)).fill(self)  # R33: known when it commits
        after = tuple(getattr(self, name) for name in EDIT_RULE_FIELDS)
        if update_fields is not None and before != after:
            kwargs["update_fields"] = update_fields = {*update_fields, *EDIT_RULE_FIELDS}
        super().save(*args, **kwargs)
        self.remember_stored()
        if update_fields is None or WAKE_FIELDS & set(update_fields):
            wakeup.schedules_changed()

    def jittered_slot(self) -> dt.datetime | None:
        """R35: the slot the next fire sends when its jitter moved it later, else None."""
        if self.next_slot is None or self.next_fire_at is None:
            return None
        try:
            slot = slot_of(self.to_spec(), self.next_fire_at, self.next_slot)
        except Exception:  # a bad row (R21): its error says why, not this
            return None
        return slot if slot != self.next_fire_at else None

    @classmethod
    def from_db(
        cls, db: str | None, field_names: Collection[str], values: Collection[Any], **kwargs: Any
    ) -> Schedule:
        row: Schedule = super().from_db(db, field_names, values, **kwargs)
        row.remember_stored()
        return row

    def remember_stored(self) -> None:
        """Remember the watched values as stored now: the next save compares with them."""
        loaded = self.__dict__
        self._stored = {name: loaded[name] for name in WATCHED_FIELDS if name in loaded}

    def changed_fields(self) -> set[str]:
        """The watched fields this instance changed since it was read (a row built by hand
        with a primary key is compared with the database's copy)."""
        stored: dict[str, Any] | None = self.__dict__.get("_stored")
        if stored is None or len(stored) < len(WATCHED_FIELDS):
            values = Schedule.objects.filter(pk=self.pk).values(*WATCHED_FIELDS).first()
            if values is None:
                return set()
            stored = {**values, **(stored or {})}
        return {name for name in WATCHED_FIELDS if getattr(self, name) != stored[name]}

    def timing_key(self) -> tuple[Any, ...]:
        """The timing fields' values: rows with the same key fire at the same slots."""
        return tuple(getattr(self, f) for f in TIMING_FIELDS)

    def to_spec(self) -> timing.Spec:
        """The timing value of this row; raises ``timing.InvalidSchedule`` naming the field."""
        if self.kind == Kind.INTERVAL:
            if self.every is None:
                raise timing.InvalidSchedule("every", "an interval schedule needs an interval")
            if self.relative:
                return timing.Interval(self.every, relative=True, timezone=self.timezone)
            return timing.Interval(self.every)
        if self.kind == Kind.CRONTAB:
            return timing.Crontab.from_fields(self, self.timezone)
        if self.kind == Kind.CLOCKED:
            if self.clocked_at is None:
                raise timing.InvalidSchedule("at", "a one-off schedule needs a time")
            return timing.Clocked(self.clocked_at)
        if self.kind == Kind.SOLAR:
            for name in ("latitude", "longitude"):
                if getattr(self, name) is None:
                    raise timing.InvalidSchedule(name, f"a solar schedule needs a {name}")
            return timing.Solar(self.solar_event, self.latitude, self.longitude)  # type: ignore[arg-type]
        if self.kind == Kind.CUSTOM:
            # the object itself lives in code: beat finds it by the schedule's name (R25)
            return timing.Custom(self.custom_schedule)
        raise timing.InvalidSchedule("schedule", f"unknown kind {self.kind!r}")

    def set_spec(self, spec: timing.Spec) -> None:
        """Write a timing value into this row's fields (the inverse of ``to_spec``)."""
        self.every = self.clocked_at = None
        self.minute = self.hour = self.day_of_week = self.day_of_month = "*"
        self.month_of_year = "*"
        self.relative, self.solar_event, self.custom_schedule = False, "", ""
        self.latitude = self.longitude = None
        if isinstance(spec, timing.Interval):
            self.kind, self.every = Kind.INTERVAL, spec.every
            if spec.relative:
                self.relative, self.timezone = True, spec.timezone
        elif isinstance(spec, timing.Solar):
            self.kind, self.solar_event = Kind.SOLAR, spec.event
            self.latitude, self.longitude = spec.latitude, spec.longitude
        elif isinstance(spec, timing.Custom):
            self.kind, self.custom_schedule = Kind.CUSTOM, spec.label
        elif isinstance(spec, timing.Crontab):
            self.kind = Kind.CRONTAB
            self.minute, self.hour = spec.minute, spec.hour
            self.day_of_week, self.day_of_month = spec.day_of_week, spec.day_of_month
            self.month_of_year, self.timezone = spec.month_of_year, spec.timezone
        else:
            self.kind, self.clocked_at = Kind.CLOCKED, spec.at

    def clean(self) -> None:
        errors = validate_schedule_fields(self)
        if errors:
            raise ValidationError(errors)

    @staticmethod
    def model_field_for(spec_field: str) -> str:
        return _SPEC_FIELD_TO_MODEL.get(spec_field, spec_field)


class Boot(models.Model):
    """One start of a beat process. Every run knows its boot (R17, R18)."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    hostname = models.CharField(max_length=255)
    pid = models.PositiveIntegerField()
    started_at = models.DateTimeField()
    heartbeat_at = models.DateTimeField()
    stopped_at = models.DateTimeField(null=True, blank=True)
    version = models.CharField(max_length=32, blank=True)
    #: R26: the database's clock minus this host's, in seconds, as last measured
    clock_offset_seconds = models.FloatField(null=True, blank=True)

    objects = DurableManager["Boot"]()

    class Meta:
        base_manager_name = "objects"  # related rows too (DurableManager)
        ordering = ["-started_at"]
        indexes = [models.Index(fields=["heartbeat_at"], name="durablebeat_boot_hb_idx")]

    def __str__(self) -> str:
        return f"{self.hostname}:{self.pid} @ {self.started_at:%Y-%m-%d %H:%M:%S}"


class Run(models.Model):
    """The ledger row of one fire, or of one slot that was skipped or missed (R3, R11)."""

    #: no index of its own: ``durablebeat_one_run_per_slot`` starts with it (see Meta)
    schedule = models.ForeignKey(
        Schedule, on_delete=models.CASCADE, related_name="runs", db_index=False
    )
    slot = models.DateTimeField()
    boot = models.ForeignKey(Boot, null=True, blank=True, on_delete=models.SET_NULL)
    reason = models.CharField(max_length=16, choices=Reason.choices, default=Reason.SCHEDULED)
    state = models.CharField(max_length=16, choices=RunState.choices, default=RunState.CLAIMED)
    task_id = models.CharField(max_length=255, null=True, blank=True, unique=True)
    claimed_at = models.DateTimeField()
    published_at = models.DateTimeField(null=True, blank=True)
    publish_attempts = models.PositiveIntegerField(default=0)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    worker = models.CharField(max_length=255, blank=True)
    worker_pid = models.PositiveIntegerField(null=True, blank=True)
    hard_time_limit = models.FloatField(null=True, blank=True)
    soft_time_limit_exceeded = models.BooleanField(default=False)
    detail = models.CharField(max_length=300, blank=True, help_text="Skip or miss reason.")
    error = models.TextField(blank=True)
    #: why a failed run failed, by value (``check`` filters on it, R21); its detail says it
    #: in words for the admin. Nullable: Django keeps no database default, and a beat or
    #: worker of the previous release, still running while a deploy rolls, inserts runs
    #: without this column (NULL there, "" from this release: neither is a failure).
    failure = models.CharField(  # noqa: DJ001
        max_length=16, choices=Failure.choices, blank=True, null=True, default="", editable=False
    )

    objects = DurableManager["Run"]()

    class Meta:
        base_manager_name = "objects"  # related rows too (DurableManager)
        # Every index here is named by a query that reads through it; a query of the ledger
        # reads a bounded range of one, so it costs the same with a year of runs as with
        # none (issue 31; benchmarks/deep_ledger.py). Each index costs every claim and
        # every confirmation, so none is here without its query (0016 dropped two).
        # - primary key: the confirming UPDATE ... WHERE id = ANY (beat/batch_claim.py)
        # - task_id (unique, from the field): a worker's start and completion by task id
        #   (worker/completion.py), the result backend's reconciliation (R13)
        # - boot_id (from the field): a boot's fires (report, a boot's page), and
        #   ON DELETE SET NULL when an old boot row is removed
        ordering = ["-slot"]
        constraints = [
            # R4: one fire per slot, whatever runs at once. Also every read of one
            # schedule's runs (the timeline's lanes, a schedule's history, the overlap
            # look, the cascade when a schedule is deleted): it starts with schedule_id
            models.UniqueConstraint(
                fields=["schedule", "slot"], name="durablebeat_one_run_per_slot"
            )
        ]
        indexes = [
            # in-flight and recent runs by state: check's lost, unresolved and no-news
            # findings, the in-doubt look at boot (R9), orphan reclaim (R15)
            models.Index(fields=["state", "claimed_at"], name="durablebeat_run_state_idx"),
            # overlap=skip's "a run in flight?" (R14): only the runs in flight, a few
            # whatever the history (the whole table was a leaf per schedule written by
            # every claim and every confirmation). PostgreSQL only: SQLite's planner uses
            # a partial index only for a WHERE spelled as its own, and Django binds the
            # states as parameters; the whole columns there and on MariaDB/MySQL
            PartialIndex(
                fields=["schedule", "state"],
                where=Q(state__in=IN_FLIGHT_STATES),
                vendors=("postgresql",),
                name="durablebeat_run_inflight_idx",
            ),
            # R18: the report and the timeline's fires per deploy count a window's runs
            models.Index(fields=["claimed_at"], name="durablebeat_run_claimed_idx"),
            # the admin's runs list: newest first (ordering), its date drill-down's edges
            models.Index(fields=["slot"], name="durablebeat_run_slot_idx"),
            # check's untracked_worker and unpublishable findings: the few runs flagged so,
            # by when they ended (a whole column on MariaDB/MySQL, see PartialIndex)
            PartialIndex(
                fields=["finished_at"],
                where=Q(detail=UNTRACKED) | Q(failure=Failure.UNPUBLISHABLE),
                name="durablebeat_run_flagged_idx",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.schedule_id} @ {self.slot.isoformat()} ({self.state})"


class MissedSlots(models.Model):
    """Crontab slots that passed while no beat ran: a count per schedule and boot (R8)."""

    schedule = models.ForeignKey(Schedule, on_delete=models.CASCADE, related_name="missed")
    boot = models.ForeignKey(Boot, null=True, blank=True, on_delete=models.SET_NULL)
    count = models.PositiveIntegerField()
    first_slot = models.DateTimeField()
    last_slot = models.DateTimeField()
    reason = models.CharField(max_length=300)
    recorded_at = models.DateTimeField()

    objects = DurableManager["MissedSlots"]()

    class Meta:
        base_manager_name = "objects"  # related rows too (DurableManager)
        verbose_name_plural = "missed slots"
        ordering = ["-recorded_at"]

    def __str__(self) -> str:
        return f"{self.count} missed slots of {self.schedule_id}"


class WorkerHeartbeat(models.Model):
    """Liveness of one worker process, written by the worker side (R15)."""

    worker = models.CharField(max_length=255)
    pid = models.PositiveIntegerField()
    seen_at = models.DateTimeField()
    #: R26: the database's clock minus this host's, in seconds, as last measured
    clock_offset_seconds = models.FloatField(null=True, blank=True)
    #: the queues the worker consumes, one name a line, as of its last liveness write;
    #: ``check``'s ``unconsumed_queue`` reads it. NULL: not recorded (a worker of a release
    #: before 0020, R32), which says nothing about its queues
    queues = models.TextField(null=True, blank=True)  # noqa: DJ001

    objects = DurableManager["WorkerHeartbeat"]()

    class Meta:
        base_manager_name = "objects"  # related rows too (DurableManager)
        constraints = [
            models.UniqueConstraint(fields=["worker", "pid"], name="durablebeat_one_heartbeat")
        ]

    def __str__(self) -> str:
        return f"{self.worker}:{self.pid}"


class Incident(models.Model):
    """Something an operator should know happened: a reclaim, a duplicate, a lost publish."""

    kind = models.CharField(max_length=32)
    count = models.PositiveIntegerField(default=1)
    detail = models.TextField(blank=True)
    boot = models.ForeignKey(Boot, null=True, blank=True, on_delete=models.SET_NULL)
    at = models.DateTimeField()

    objects = DurableManager["Incident"]()

    class Meta:
        base_manager_name = "objects"  # related rows too (DurableManager)
        ordering = ["-at"]

    def __str__(self) -> str:
        return f"{self.kind} x{self.count} @ {self.at:%Y-%m-%d %H:%M:%S}"


class Marker(models.Model):
    """Small shared timestamps, e.g. when orphan reclaim last ran (R15 throttle)."""

    key = models.CharField(max_length=64, primary_key=True)
    at = models.DateTimeField()

    objects = DurableManager["Marker"]()

    class Meta:
        base_manager_name = "objects"  # related rows too (DurableManager)

    def __str__(self) -> str:
        return self.key
