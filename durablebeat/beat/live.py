"""Arguments only a code entry can hold (R25): ``BeatLazyFunc`` values, which Celery's beat
evaluates at each send, and values JSON cannot carry (a ``timedelta`` with the pickle
serializer, a ``Decimal``...).

The beat keeps such an entry's real ``args``/``kwargs`` in memory (``LiveValues``) and
every publish of its schedule uses them (``dispatch.Dispatcher``). The row stores a readable JSON
form instead, for the admin and the history: each value it cannot hold becomes a one-key
object that says what it is, ``{"__computed_at_send__": "proj.stamps.now()"}`` or
``{"__python__": "datetime.timedelta(seconds=60)"}``. A row whose message holds these
markers is published only with its code entry's values, never with the markers.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from celery.beat import BeatLazyFunc

#: the key of a value the beat computes at each send (a top-level ``BeatLazyFunc``)
COMPUTED = "__computed_at_send__"
#: the key of a value only the beat's code holds, shown as its ``repr``
PYTHON = "__python__"
MARKERS = frozenset({COMPUTED, PYTHON})
#: deeper than this, a value is shown whole as its ``repr`` (the row's JSON depth limit)
_DEPTH = 30
#: the longest ``repr`` a row shows of one value
SHOWN = 500


@dataclass(frozen=True, eq=False)
class LiveValues:
    """One code entry's real ``args`` and ``kwargs``, as its ``beat_schedule`` gives them, and
    its ``link``/``link_error`` signatures, passed on every publish as Celery's beat does."""

    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    callbacks: dict[str, Any] = field(default_factory=dict)

    def evaluate(self) -> tuple[list[Any], dict[str, Any]]:
        """The values of one send, as Celery's beat makes them (``_evaluate_entry_args``):
        a top-level ``BeatLazyFunc`` is called, anything else is sent as it is. One that
        raises raises ``SendTimeValueError``: its slot fails (R21), whatever it raised."""
        try:
            args = [v() if isinstance(v, BeatLazyFunc) else v for v in self.args]
            kwargs = {k: v() if isinstance(v, BeatLazyFunc) else v for k, v in self.kwargs.items()}
        except Exception as exc:
            raise SendTimeValueError(f"a value computed at send time raised: {exc!r}") from exc
        return args, kwargs

    def sample(self) -> tuple[list[Any], dict[str, Any]]:
        """The values with each send-time one left out: what a boot can check the
        serializer against without calling anything."""
        args = [None if isinstance(v, BeatLazyFunc) else v for v in self.args]
        kwargs = {k: None if isinstance(v, BeatLazyFunc) else v for k, v in self.kwargs.items()}
        return args, kwargs


def split(
    args: Sequence[Any], kwargs: Mapping[str, Any], callbacks: Mapping[str, Any] | None = None
) -> tuple[list[Any], dict[str, Any], LiveValues | None]:
    """(the row's ``args``, the row's ``kwargs``, the values to keep in memory or None when
    the row holds them all and there are no ``callbacks``)."""
    stored_args = [_top(v) for v in args]
    stored_kwargs = {k: _top(v) for k, v in kwargs.items()}
    live = None
    # A tuple inside an argument is shown as a list (JSON has no other) but kept in memory:
    # pickle delivers it as a tuple under Celery's beat, so it does here too.
    kept = any(holds_code_values(v) for v in (stored_args, stored_kwargs))
    if kept or callbacks or _holds_tuple([*args, *kwargs.values()]):
        live = LiveValues(tuple(args), dict(kwargs), dict(callbacks or {}))
    return stored_args, stored_kwargs, live


def flat(args: Any, kwargs: Any) -> bool:
    """Are ``args`` (a list or None) and ``kwargs`` (a dict or None) made of JSON's scalars
    only, under text keys a database keeps (a digest's ``{"customer_id": 42}``)? ``split``
    then keeps them as they are with nothing in memory, and JSON encodes them as they are:
    a writer of many entries need not walk them again (``codesync.ShapeCache``, R33)."""
    if args is not None and (type(args) is not list or not all(map(_flat_scalar, args))):
        return False
    if kwargs is None:
        return True
    if type(kwargs) is not dict or (len(kwargs) == 1 and next(iter(kwargs)) in MARKERS):
        return False
    return all(type(k) is str and _storable_text(k) and _flat_scalar(v) for k, v in kwargs.items())


def _flat_scalar(value: Any) -> bool:
    kind = type(value)
    if kind is str:
        return _storable_text(value)
    if kind is float:
        return math.isfinite(value)
    return value is None or kind is int or kind is bool


def holds_code_values(value: Any) -> bool:
    """Does a stored ``args``/``kwargs`` hold a marker (a value only code has)?"""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            if len(item) == 1 and next(iter(item)) in MARKERS:
                return True
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return False


def _holds_tuple(values: list[Any]) -> bool:
    stack = list(values)
    while stack:
        item = stack.pop()
        if isinstance(item, tuple):
            return True
        if isinstance(item, list):
            stack.extend(item)
        elif isinstance(item, dict):
            stack.extend(item.values())
    return False


def describe_lazy(value: BeatLazyFunc) -> str:
    """``module.function(arg, key=value)``: what the beat calls at each send."""
    func = value._func
    name = f"{getattr(func, '__module__', '?')}.{getattr(func, '__qualname__', repr(func))}"
    params = value._func_params
    shown = [repr(a) for a in params.get("args", ())]
    shown += [f"{k}={v!r}" for k, v in params.get("kwargs", {}).items()]
    return f"{name}({', '.join(shown)})"


def _top(value: Any) -> Any:
    if isinstance(value, BeatLazyFunc):
        return {COMPUTED: describe_lazy(value)}
    return _stored(value, 1)


def _stored(value: Any, depth: int) -> Any:
    """``value`` as JSON keeps it, or as a marker with its ``repr``."""
    if value is None or isinstance(value, bool | int):
        return value
    if isinstance(value, float) and math.isfinite(value):
        return value
    if isinstance(value, str) and _storable_text(value):
        return value
    if depth <= _DEPTH:
        if isinstance(value, list | tuple):
            return [_stored(v, depth + 1) for v in value]
        if isinstance(value, dict) and _plain_object(value):
            return {k: _stored(v, depth + 1) for k, v in value.items()}
    return {PYTHON: _shown(value)}


def _shown(value: Any) -> str:
    """``repr(value)``, cut to ``SHOWN`` characters: the row shows the value, the beat's
    memory holds it, so a large one is never refused for the row's size."""
    text = repr(value)
    return text if len(text) <= SHOWN else text[: SHOWN - 1] + "…"


def _plain_object(value: dict[Any, Any]) -> bool:
    """A dict JSON keeps as it is: text keys, and not one that reads as a marker."""
    if len(value) == 1 and next(iter(value)) in MARKERS:
        return False
    return all(isinstance(k, str) and _storable_text(k) for k in value)


def _storable_text(text: str) -> bool:
    """Text a database keeps as it is: no NUL, no lone surrogate."""
    if "\x00" in text:
        return False
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def serializer_of(app: Any) -> Callable[[str], str]:
    """The serializer Celery's ``send_task`` uses for a task: the registered task's own
    (``serializer=`` on the task, else ``task_serializer`` as it was bound), else the app's."""

    def of(task: str) -> str:
        registered = app.tasks.get(task)
        own = getattr(registered, "serializer", None)
        return str(own or app.conf.task_serializer or "json")

    return of


def serializer_error(live: LiveValues, serializer: str) -> str | None:
    """Why ``serializer`` cannot carry these values (each send-time one is checked when it
    is sent), naming the first value it refuses; None when it carries them all."""
    from kombu import serialization

    dumps: Any = serialization.dumps  # untyped in kombu
    args, kwargs = live.sample()
    values = [(f"args[{i}]", v) for i, v in enumerate(args)]
    values += [(f"kwargs[{k!r}]", v) for k, v in kwargs.items()]
    for where, value in values:
        try:
            dumps(value, serializer=serializer)
        except Exception as exc:
            return (
                f"{where}: {value!r:.80} cannot be sent with the {serializer!r} serializer "
                f"({type(exc).__name__}: {exc}); a serializer that carries it (pickle) must "
                "be the task_serializer or the entry's options['serializer']"
            )
    return None


class SendTimeValueError(Exception):
    """A value computed at send time raised: the slot fails with it (R21), however the
    exception it wraps would read to the broker's error list."""
