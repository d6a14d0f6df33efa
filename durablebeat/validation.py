"""Bad input is refused where it enters, with the field named (R20, R21).

One function serves the model's ``full_clean``, the admin form, the code sync and the
importer, so the entry points can never disagree about what is valid. The ranges are the
named constants below: docs/configuration.md's "Ranges" table and ``conf`` cite them.

Why these bounds. Every instant a schedule holds is kept within ``MIN_INSTANT`` ..
``MAX_INSTANT`` (years 2000..2200), and every duration at most ``MAX_EVERY`` (100 years):
the furthest date arithmetic beat does is an instant plus one interval (the next slot on an
interval grid), plus a day of zone offset, i.e. before year 2301, while ``datetime.max`` is
year 9999 and ``timedelta`` holds 2.7 million years. So no sum, difference or multiple beat
computes from accepted values can overflow, with thousands of years to spare, and no
accepted value is near a limit a database stores (an interval in microseconds fits a
64-bit integer up to 292,000 years).
"""

from __future__ import annotations

import datetime as dt
import difflib
import fnmatch
import functools
import importlib.util
import json
import math
import re
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from .conf import (
    MAX_CATCH_UP_WINDOW,
    MAX_JITTER,
    MAX_RETENTION,
    MAX_STARTUP_GRACE,
    MIN_RETENTION,
    InvalidSetting,
    settings,
)
from .core import solar, timing
from .core.pause import MAX_PAUSE_AFTER_FAILURES
from .enums import Kind, Overlap, Source
from .words import limit_words

if TYPE_CHECKING:
    from .models import Schedule


def known_task_names() -> frozenset[str] | None:
    """Task names registered in the current Celery app, or None when that cannot be known."""
    registry = _registry()
    return None if registry is None else frozenset(registry.keys())


def _registry() -> Any:
    """The current Celery app's task registry, its task modules imported; None for the
    default app: nobody configured Celery in this process, so there is no registry to check
    against, and refusing every name would be wrong."""
    from celery import current_app

    app = current_app._get_current_object()
    if app.main is None and not app.conf.get("include") and not app.conf.get("imports"):
        return None
    _import_task_modules(app)
    return app.tasks


_importing = False


@functools.cache
def _import_task_modules(app: Any) -> None:
    # Celery's autodiscovery runs lazily (in worker/beat start-up); a web process has to ask.
    # Importing runs Django's system checks (celery's Django fix-up), which may validate
    # schedules again: that inner call must not import a second time.
    global _importing
    if _importing or getattr(app.loader, "worker_initialized", False):
        return  # a worker or beat imported them at its start (the loader's init_worker)
    _importing = True
    try:
        app.loader.import_default_modules()
    finally:
        _importing = False


def task_name_error(name: str) -> str | None:
    """R29: why a write may not name ``name``: the writing process's Celery app has not
    registered it and ``DURABLEBEAT_EXTERNAL_TASKS`` does not name it (typo protection);
    the closest registered name is given when there is one. None: it may."""
    registry = _registry()
    if registry is None or name in registry or is_external_task(name):
        return None
    return (
        f"no task named {name!r} is registered in the Celery app{typo_hint(name, registry)}; "
        "a task served by another codebase goes into DURABLEBEAT_EXTERNAL_TASKS"
    )


def is_external_task(name: str) -> bool:
    """``name`` is matched by ``DURABLEBEAT_EXTERNAL_TASKS`` (a name or an ``fnmatch``
    pattern). An invalid setting matches nothing (``durablebeat.E002`` says why)."""
    try:
        patterns = settings.EXTERNAL_TASKS
    except InvalidSetting:
        return False
    return any(fnmatch.fnmatchcase(name, pattern) for pattern in patterns)


#: how alike two task names must be (``difflib``'s ratio) to call one a likely typo of the other
TYPO_CUTOFF = 0.8


def closest_task(name: str, registered: Any) -> str | None:
    """The registered task name ``name`` is most likely a typo of, or None. Celery's own
    tasks (``celery.*``) are no one's typo."""
    names = [n for n in registered if isinstance(n, str) and not n.startswith("celery.")]
    close = difflib.get_close_matches(name, names, n=1, cutoff=TYPO_CUTOFF)
    return close[0] if close else None


def typo_hint(name: str, registered: Any) -> str:
    """``": a likely typo: did you mean 'x.y'?"`` when a registered name is close, else ""."""
    close = closest_task(name, registered)
    return f": a likely typo: did you mean {close!r}?" if close else ""


#: the JSON fields of a schedule's message and the shape each must have
JSON_SHAPES: dict[str, tuple[type, str]] = {
    "args": (list, "list"),
    "kwargs": (dict, "object"),
    "headers": (dict, "object"),
}

# --- the ranges (R21); docs/configuration.md's "Ranges" table lists these -------------

#: an interval schedule's ``every``: a millisecond at least. Celery's beat runs any positive
#: interval (``schedule=0.5`` fires twice a second, R25); the floor keeps an interval a
#: timer can keep (a denormal float of seconds is no schedule) ...
MIN_EVERY = dt.timedelta(milliseconds=1)
#: ... and at most 100 years, so an instant plus one interval stays far inside ``datetime``
MAX_EVERY = dt.timedelta(days=36525)
#: every instant a schedule holds (``clocked_at``, ``next_fire_at``): from 2000 to 2200,
#: UTC, far from ``datetime.min``/``max`` whatever beat adds to it (see the module doc)
MIN_INSTANT = dt.datetime(2000, 1, 1, tzinfo=dt.UTC)
MAX_INSTANT = dt.datetime(2200, 1, 1, tzinfo=dt.UTC)
#: ``expire_seconds``: finite, more than 0, at most a year (Celery adds it to the send
#: time; 10**12 s overflows the broker client's date arithmetic)
MAX_EXPIRE_SECONDS = 366 * 86400.0
#: AMQP's priority range (RabbitMQ, and Redis's emulation, read 0..255)
MIN_PRIORITY, MAX_PRIORITY = 0, 255
#: args/kwargs/headers nested deeper than this are refused (Python's JSON recursion fails
#: near 1,000 levels, well before any size cap)
MAX_JSON_DEPTH = 32
#: one wording whichever refuses the depth (the form's parser or the walk below): where the
#: parser's recursion gives out depends on the Python (3.13 parses 5,000 levels, 3.11 not)
DEPTH_ERROR = f"is nested deeper than {MAX_JSON_DEPTH} levels"
#: ``time_limit`` and ``soft_time_limit``: finite, more than 0, at most a year (the worker
#: arms a timer with it, and the orphan reclaim adds it to a run's start, R15)
MAX_TIME_LIMIT = 366 * 86400.0
#: the least a time limit or an expiry may be: a millisecond. Smaller is no limit a timer or
#: a broker can keep (1e-320 s is a denormal float that every fire would carry as "expired")
MIN_SECONDS = 0.001
#: the exchange types AMQP defines; Celery compares the option with "direct" to choose the
#: default exchange, and kombu declares a missing exchange with it
EXCHANGE_TYPES = ("direct", "topic", "fanout", "headers")
#: the headers Celery's message protocol sets on every task message (``as_task_v2``): Celery
#: merges extra headers over its own, so one of these would run another task (``task``),
#: delay it (``eta``), expire it, break the run's tracking (``id``, ``root_id``...) or its
#: time limits. ``durablebeat_*`` are durablebeat's own (the run's key in the ledger).
RESERVED_HEADERS = frozenset(
    {
        "lang",
        "task",
        "id",
        "shadow",
        "eta",
        "expires",
        "group",
        "group_index",
        "retries",
        "timelimit",
        "root_id",
        "parent_id",
        "argsrepr",
        "kwargsrepr",
        "origin",
        "ignore_result",
        "replaced_task_nesting",
        "stamped_headers",
        "stamps",
        "chord",
    }
)
RESERVED_HEADER_PREFIX = "durablebeat_"
#: AMQP's delivery modes (``kombu.entity.DELIVERY_MODES``): 1 transient, 2 persistent
DELIVERY_MODES = (1, 2)
#: the message options whose value is a name, stored as it is
TEXT_OPTIONS = (
    "queue",
    "exchange",
    "exchange_type",
    "routing_key",
    "serializer",
    "compression",
    "shadow",
)
#: fields that are one printable line: a newline in a name would forge log lines
LINE_FIELDS = ("name", "task", *TEXT_OPTIONS)
#: every text field of a schedule a person or code writes: none may hold what the database
#: refuses (NUL, a lone surrogate)
TEXT_FIELDS = (
    *LINE_FIELDS,
    "description",
    "minute",
    "hour",
    "day_of_week",
    "day_of_month",
    "month_of_year",
    "timezone",
)


#: what no database text can hold: NUL, and the UTF-16 surrogates (never valid alone)
_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")


def shape_error(name: str, value: Any) -> str | None:
    """Not the shape ``JSON_SHAPES`` asks of message field ``name``? The form, the engine
    and the importer (which prefixes the field's name) say it in these words."""
    expected, what = JSON_SHAPES[name]
    if not isinstance(value, expected):
        return f"must be a JSON {what}, got {type(value).__name__}"
    return None


def check_message_shapes(schedule: Schedule) -> None:
    """Raise ``timing.InvalidSchedule`` naming the first message field of the wrong shape.

    Cheap enough for every fire: a row written around the form (SQL, a fixture, an old
    version) must be set aside as bad, not break the batch it is in (R20)."""
    for name in JSON_SHAPES:
        if (msg := shape_error(name, getattr(schedule, name))) is not None:
            raise timing.InvalidSchedule(name, msg)


def json_depth_error(value: Any) -> str | None:
    """Too deep to serialise safely? Walked without recursion, so any depth is answered."""
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, list | tuple | dict):
            if depth > MAX_JSON_DEPTH:
                return DEPTH_ERROR
            children = item.values() if isinstance(item, dict) else item
            stack.extend((child, depth + 1) for child in children)
    return None


def storable(text: str) -> str:
    """Text any database takes: an exception's message may hold a NUL (PostgreSQL refuses
    it) or a lone surrogate (no encoding takes it); both are written escaped."""
    text = text.replace("\x00", "\\x00")
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


def text_error(value: Any) -> str | None:
    """A NUL or a lone surrogate: PostgreSQL stores neither (in text or in JSON), and a
    surrogate is not Unicode at all, so the row would fail at its save, not here (R20)."""
    if not isinstance(value, str) or (found := _UNSTORABLE.search(value)) is None:
        return None
    if found.group() == "\x00":
        return "must not contain a NUL character (\\x00): the database cannot store it"
    return (
        f"must not contain a lone surrogate ({found.group()!a}): it is not Unicode text, "
        "the database cannot store it"
    )


def json_text_error(value: Any) -> str | None:
    """A key that is not a string (JSON would turn ``{1: 2}`` into ``{"1": 2}``: the task
    would get other kwargs than given), or a key or string the database cannot store?
    Walked without recursion, like ``json_depth_error``."""
    stack: list[tuple[Any, str]] = [(value, "")]
    while stack:
        item, where = stack.pop()
        if isinstance(item, dict):
            for key, child in item.items():
                if not isinstance(key, str):
                    return f"keys must be strings, got {key!r:.40} ({type(key).__name__})"
                if (msg := text_error(key)) is not None:
                    return f"the key {key!a:.60} {msg}"
                stack.append((child, f"{where}[{key!a:.40}]"))
        elif isinstance(item, list | tuple):
            stack.extend((child, f"{where}[{i}]") for i, child in enumerate(item))
        elif (msg := text_error(item)) is not None:
            return f"the string at {where or 'the top'} {msg}"
    return None


def headers_error(headers: Any) -> str | None:
    """A header Celery or durablebeat sets itself, which a user value would replace."""
    if not isinstance(headers, dict):
        return None
    reserved = sorted(
        key
        for key in headers
        if isinstance(key, str)
        and (key in RESERVED_HEADERS or key.startswith(RESERVED_HEADER_PREFIX))
    )
    if not reserved:
        return None
    return (
        f"{', '.join(map(repr, reserved))} reserved: Celery sets these protocol headers on "
        "every message and merges extra headers over them (another task would run, an eta "
        "would delay it, the run could not be tracked); durablebeat_* are durablebeat's own. "
        "Pass the value as an option or a kwarg instead"
    )


#: ``json.dumps(value, allow_nan=False)``: one encoder made once (``dumps`` makes one per
#: call whenever an option differs from its defaults, a tenth of a bulk add's check, R33)
_to_json = json.JSONEncoder(allow_nan=False).encode
#: an empty ``args`` or ``kwargs`` as JSON (most entries have one or the other)
_EMPTY = {"args": "[]", "kwargs": "{}"}


def _json_text(name: str, value: Any) -> tuple[str | None, str]:
    """(error, the JSON text) of one JSON field of the message ("" with an error)."""
    if (msg := shape_error(name, value)) is not None:
        return msg, ""
    if (msg := json_depth_error(value)) is not None:
        return msg, ""
    if (msg := json_text_error(value)) is not None:
        return msg, ""
    try:
        return None, _to_json(value)
    except (TypeError, ValueError) as exc:  # ValueError: NaN or infinity (not JSON)
        return f"must be JSON-serialisable: {exc}", ""


def message_errors(args: Any, kwargs: Any, headers: Any) -> dict[str, str]:
    """{field: message} of a message's JSON fields (``JSON_SHAPES``): each one's shape and
    values, the reserved headers, and the three together under the size cap."""
    return MessageCheck(headers).errors(args, kwargs)


class MessageCheck:
    """``message_errors`` of messages that share their headers (the entries of one shape,
    ``codesync.ShapeCache``): the headers and the size cap are read once."""

    def __init__(self, headers: Any) -> None:
        error, text = _json_text("headers", headers)
        self.headers_size = len(text.encode())
        self.headers_error = error if error is not None else headers_error(headers)
        self.cap: int | None = None
        self.cap_error = ""
        try:
            self.cap = settings.MAX_MESSAGE_BYTES
        except InvalidSetting as exc:  # refused with the reason, not a 500 at the save (R21)
            self.cap_error = f"the message size cannot be checked: {exc}"

    def errors(self, args: Any, kwargs: Any) -> dict[str, str]:
        return self.check(args, kwargs)[0]

    def check(
        self, args: Any, kwargs: Any, *, flat: bool = False
    ) -> tuple[dict[str, str], tuple[str, str]]:
        """``errors``, and the JSON text of args and kwargs as checked: a writer that
        stores them as JSON need not encode them again (``api.add_schedules``, R33).
        ``flat``: the caller found them JSON scalars under text keys (``live.flat``), whose
        shape, depth and text need no walk: they are encoded and measured only."""
        errors: dict[str, str] = {}
        sizes: dict[str, int] = {}
        texts: dict[str, str] = {}
        for name, value in (("args", args), ("kwargs", kwargs)):
            if flat:
                msg, texts[name] = None, _to_json(value) if value else _EMPTY[name]
            else:
                msg, texts[name] = _json_text(name, value)
            sizes[name] = len(texts[name].encode())
            if msg is not None:
                errors[name] = msg
        sizes["headers"] = self.headers_size
        if self.headers_error is not None:
            errors["headers"] = self.headers_error
        encoded = (texts["args"], texts["kwargs"])
        if self.cap is None:
            return errors or {"args": self.cap_error}, encoded
        if not errors and sum(sizes.values()) > self.cap:
            largest = max(sizes, key=lambda n: sizes[n])
            errors[largest] = (
                f"args, kwargs and headers serialise to {sum(sizes.values())} bytes together, "
                f"over DURABLEBEAT_MAX_MESSAGE_BYTES ({self.cap})"
            )
        return errors, encoded


def line_error(value: Any) -> str | None:
    if isinstance(value, str) and not value.isprintable():
        return "must be one printable line (no newline, tab or other control character)"
    return None


def instant_error(value: Any) -> str | None:
    if not isinstance(value, dt.datetime) or value.utcoffset() is None:
        return None  # not an instant: the field's own check (or Clocked's) refuses it
    if not MIN_INSTANT <= value < MAX_INSTANT:
        return (
            f"must be from {MIN_INSTANT:%Y-%m-%d} to before {MAX_INSTANT:%Y-%m-%d} (UTC), "
            f"got {value.isoformat()}"
        )
    return None


def duration_error(
    value: Any, low: dt.timedelta, high: dt.timedelta, *, low_open: bool = False
) -> str | None:
    """Outside ``low..high`` (``low`` excluded when ``low_open``)? Non-durations are the
    field's own ``to_python``'s to refuse."""
    if not isinstance(value, dt.timedelta):
        return None
    if value < low or (low_open and value == low):
        return (
            f"must be more than {limit_words(low)}"
            if low_open
            else f"must be at least {limit_words(low)}"
        )
    if value > high:
        return f"must be at most {limit_words(high)}"
    return None


def seconds_error(value: Any, high: float) -> str | None:
    """Not a finite number of seconds more than 0 and at most ``high``?"""
    if isinstance(value, bool):
        return "must be a number of seconds, not a bool"
    if not isinstance(value, int | float):
        return None  # the model field's own check names a string or other type
    if not math.isfinite(value):
        return f"must be a finite number of seconds, got {value!r}"
    if not MIN_SECONDS <= value <= high:
        return (
            f"must be more than 0 and at most {high:g} seconds "
            f"(at least {MIN_SECONDS:g}), got {value!r}"
        )
    return None


def expire_error(value: Any) -> str | None:
    return seconds_error(value, MAX_EXPIRE_SECONDS)


def countdown_error(value: Any) -> str | None:
    """A delay from 0 (none, as Celery reads it) to a year (Celery adds it to the send time
    for the message's ETA)."""
    if isinstance(value, int | float) and not isinstance(value, bool) and value == 0:
        return None
    return seconds_error(value, MAX_EXPIRE_SECONDS)


def soft_limit_error(soft: Any, hard: Any) -> str | None:
    """The soft limit warns the body before the hard one kills it: never after it."""
    if (msg := seconds_error(soft, MAX_TIME_LIMIT)) is not None:
        return msg
    if (
        isinstance(soft, int | float)
        and isinstance(hard, int | float)
        and seconds_error(hard, MAX_TIME_LIMIT) is None
        and soft > hard
    ):
        return f"must be at most time_limit ({hard:g} s), got {soft:g}"
    return None


def serializer_error(name: Any) -> str | None:
    """A name kombu cannot serialise with fails every fire at publish: refused at entry."""
    from kombu.serialization import registry

    if not isinstance(name, str) or not name or name in registry.name_to_type:
        return None
    known = ", ".join(sorted(registry.name_to_type))
    return f"no serializer named {name!r} is registered in kombu (known: {known})"


def compression_error(name: Any) -> str | None:
    from kombu import compression

    if not isinstance(name, str) or not name:
        return None
    try:
        get_encoder: Callable[[str], Any] = compression.get_encoder  # kombu is untyped
        get_encoder(name)
    except KeyError:
        # kombu lists its aliases (gzip, bzip2...) nowhere public; the content types it
        # encodes are what a name resolves to.
        encoders: Callable[[], list[str]] = compression.encoders
        known = ", ".join(sorted({*getattr(compression, "_aliases", {}), *encoders()}))
        return f"no compression named {name!r} is registered in kombu (known: {known})"
    return None


def exchange_type_error(value: Any) -> str | None:
    if isinstance(value, str) and value and value not in EXCHANGE_TYPES:
        return (
            f"must be one of {', '.join(EXCHANGE_TYPES)} (or empty: the queue's), got {value!r:.60}"
        )
    return None


def delivery_mode_error(value: Any) -> str | None:
    if isinstance(value, bool):
        return "must be 1 (transient) or 2 (persistent), not a bool"
    if isinstance(value, int) and value not in DELIVERY_MODES:
        return f"must be 1 (transient) or 2 (persistent), got {value}"
    return None  # the model field's own check names a non-integer


def priority_error(value: Any) -> str | None:
    if isinstance(value, bool):
        return "must be an integer, not a bool"
    if isinstance(value, int) and not MIN_PRIORITY <= value <= MAX_PRIORITY:
        return f"must be from {MIN_PRIORITY} to {MAX_PRIORITY}, got {value}"
    return None


def _range_errors(schedule: Schedule) -> dict[str, str]:
    checks = {
        "every": duration_error(schedule.every, MIN_EVERY, MAX_EVERY),
        "clocked_at": instant_error(schedule.clocked_at),
        "next_fire_at": instant_error(schedule.next_fire_at),
        "startup_grace": duration_error(schedule.startup_grace, dt.timedelta(0), MAX_STARTUP_GRACE),
        "jitter": duration_error(schedule.jitter, dt.timedelta(0), MAX_JITTER),  # R35
        "catch_up_window": duration_error(
            schedule.catch_up_window, dt.timedelta(0), MAX_CATCH_UP_WINDOW, low_open=True
        ),
        # R32: the setting's range (a slot up to a day late still fires, so its run is kept)
        "retention": duration_error(schedule.retention, MIN_RETENTION, MAX_RETENTION),
        "expire_seconds": expire_error(schedule.expire_seconds),
        "countdown": countdown_error(schedule.countdown),
        "priority": priority_error(schedule.priority),
        "time_limit": seconds_error(schedule.time_limit, MAX_TIME_LIMIT),
        "soft_time_limit": soft_limit_error(schedule.soft_time_limit, schedule.time_limit),
        "serializer": serializer_error(schedule.serializer),
        "compression": compression_error(schedule.compression),
        "delivery_mode": delivery_mode_error(schedule.delivery_mode),
        "exchange_type": exchange_type_error(schedule.exchange_type),
    }
    for name in LINE_FIELDS:  # a field's own check above speaks first
        checks[name] = checks.get(name) or line_error(getattr(schedule, name))
    for name in TEXT_FIELDS:  # description too: it may span lines, but hold no NUL
        checks[name] = checks.get(name) or text_error(getattr(schedule, name))
    return {name: msg for name, msg in checks.items() if msg is not None}


#: R34: the most runs in flight ``max_in_flight`` may allow
MAX_IN_FLIGHT = 10_000


def _overlap_errors(schedule: Schedule) -> dict[str, str]:
    """R34: a bound on the runs in flight is ``allow``'s, terminating is ``replace``'s; said
    where they are set with another overlap rather than ignored."""
    errors: dict[str, str] = {}
    bound, overlap = schedule.max_in_flight, schedule.overlap
    if bound is not None:
        if isinstance(bound, bool) or not isinstance(bound, int):
            errors["max_in_flight"] = f"must be a whole number, got {bound!r:.60}"
        elif not 1 <= bound <= MAX_IN_FLIGHT:
            errors["max_in_flight"] = f"must be from 1 to {MAX_IN_FLIGHT}, got {bound}"
        elif overlap != Overlap.ALLOW:
            errors["max_in_flight"] = (
                f"bounds overlap 'allow' only (this schedule's overlap is {overlap!r:.30}): "
                "'skip' and 'buffer_one' hold one run in flight, 'replace' one"
            )
    if schedule.terminate and overlap != Overlap.REPLACE:
        errors["terminate"] = (
            f"terminates the run a slot replaces, with overlap 'replace' only (this "
            f"schedule's overlap is {overlap!r:.30})"
        )
    if schedule.jitter and schedule.kind == Kind.CUSTOM:
        errors["jitter"] = (
            "a custom schedule object decides its own instants (is_due): no jitter (R35)"
        )
    return errors


#: R36: the longest a pause's note may be, in characters
MAX_PAUSED_NOTE = 2000


def _pause_errors(schedule: Schedule) -> dict[str, str]:
    """R36: the bound is a whole number of runs (0: never pause, whatever the setting says);
    a note is text of a bounded length."""
    errors: dict[str, str] = {}
    bound = schedule.pause_after_failures
    if bound is not None:
        if isinstance(bound, bool) or not isinstance(bound, int):
            errors["pause_after_failures"] = f"must be a whole number, got {bound!r:.60}"
        elif not 0 <= bound <= MAX_PAUSE_AFTER_FAILURES:
            errors["pause_after_failures"] = (
                f"must be from 1 to {MAX_PAUSE_AFTER_FAILURES} runs (0: never), got {bound}"
            )
    if (problem := paused_note_error(schedule.paused_note)) is not None:
        errors["paused_note"] = problem
    return errors


def paused_note_error(note: Any) -> str | None:
    """R36: what is wrong with a pause's note (None: nothing; no note is none)."""
    if note is None:
        return None
    if not isinstance(note, str):
        return f"must be text, got {note!r:.60}"
    if len(note) > MAX_PAUSED_NOTE:
        return f"must be at most {MAX_PAUSED_NOTE} characters, got {len(note)}"
    return text_error(note)


def _kind_errors(schedule: Schedule) -> dict[str, str]:
    """R25: a solar schedule needs ephem installed; a custom one exists only in code."""
    if schedule.kind == Kind.SOLAR and importlib.util.find_spec("ephem") is None:
        return {"solar_event": f"solar schedules need ephem: {solar.EXTRA}"}
    if schedule.kind == Kind.CUSTOM and schedule.source != Source.CODE:
        return {"kind": "a custom schedule is an object in code: define it in beat_schedule"}
    return {}


def validate_schedule_fields(
    schedule: Schedule, *, check_task: bool | None = None
) -> dict[str, str]:
    """Every problem with a schedule row, as {model field: message}. Empty means valid.

    ``check_task``: whether an unregistered task name is a problem (R29). By default it is
    for every row but a ``beat_schedule`` one (``source`` code, new or stored: the code
    sync's own save, an admin edit of it), whose task is code's and is sent by name as
    Celery's beat sends it; a person cannot set ``source``. ``parse_entry`` says it
    explicitly: beat's parse of ``beat_schedule`` does not check, the API's does.

    Safe on any values (``full_clean`` calls it even when a field's own check failed)."""
    errors: dict[str, str] = {}
    try:
        schedule.to_spec()
    except timing.InvalidSchedule as exc:
        errors[schedule.model_field_for(exc.field)] = exc.message
    message = message_errors(schedule.args, schedule.kwargs, schedule.headers)
    for name, msg in (message | _range_errors(schedule)).items():
        errors.setdefault(name, msg)
    for name, msg in (_kind_errors(schedule) | _overlap_errors(schedule)).items():
        errors.setdefault(name, msg)
    for name, msg in _pause_errors(schedule).items():
        errors.setdefault(name, msg)
    task = schedule.task
    if check_task is None:
        check_task = schedule.source != Source.CODE
    if check_task and task and isinstance(task, str) and "task" not in errors:
        unknown = task_name_error(task)
        if unknown is not None:
            errors["task"] = unknown
    return errors


def describe_errors(errors: dict[str, str]) -> str:
    return "; ".join(f"{field}: {msg}" for field, msg in sorted(errors.items()))
