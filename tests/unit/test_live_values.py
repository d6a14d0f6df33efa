"""R25, parsing: what a code entry's args/kwargs become on the row and in the beat's memory,
which serializer may carry them, and countdown read as Celery reads it. No database."""

from __future__ import annotations

import datetime as dt
import decimal
import math
import uuid
from typing import Any

import pytest
from celery.beat import BeatLazyFunc
from hypothesis import given, settings
from hypothesis import strategies as st

from durablebeat.beat import live
from durablebeat.beat.codesync import BadEntry, parse_entry
from durablebeat.beat.live import COMPUTED, PYTHON, SHOWN, LiveValues
from durablebeat.validation import MessageCheck


def stamp(prefix: str = "") -> str:
    return f"{prefix}now"


def boom() -> None:
    raise AssertionError("a send-time value was computed at boot")


def entry(**fields: Any) -> dict[str, Any]:
    return {"task": "t", "schedule": 60, **fields}


def parse(serializer: str = "json", **fields: Any) -> Any:
    return parse_entry(
        "job", entry(**fields), "UTC", check_task=False, serializer_of=lambda task: serializer
    )


# --- the row's form and the memory's values ---------------------------------------------


def test_json_values_stay_on_the_row_and_nothing_is_kept_in_memory():
    args, kwargs, values = live.split((1, "two", [3.5, None]), {"k": {"a": True}})
    assert (args, kwargs, values) == ([1, "two", [3.5, None]], {"k": {"a": True}}, None)


def test_a_beat_lazy_func_is_shown_as_computed_at_send_time():
    lazy = BeatLazyFunc(
        stamp,
        "x-",
    )
    args, kwargs, values = live.split([lazy], {"at": BeatLazyFunc(stamp, prefix="y-")})
    assert args == [{COMPUTED: f"{__name__}.stamp('x-')"}]
    assert kwargs == {"at": {COMPUTED: f"{__name__}.stamp(prefix='y-')"}}
    assert values is not None and values.args == (lazy,)


@pytest.mark.parametrize(
    ("value", "shown"),
    [
        (dt.timedelta(seconds=90), "datetime.timedelta(seconds=90)"),
        (decimal.Decimal("1.10"), "Decimal('1.10')"),
        ({1, 2}, "{1, 2}"),
        ({1: "one"}, "{1: 'one'}"),
        (math.nan, "nan"),
        ("a\x00b", "'a\\x00b'"),
        ({PYTHON: "not mine"}, "{'__python__': 'not mine'}"),  # a look-alike is marked too
    ],
)
def test_a_value_json_cannot_hold_is_shown_as_its_repr_and_kept_in_memory(value, shown):
    args, _, values = live.split(["plain", [value]], {})
    assert args == ["plain", [{PYTHON: shown}]]
    assert values is not None and values.args == ("plain", [value])


def test_a_long_repr_is_cut_for_the_row_only():
    big = decimal.Decimal("1" * 2000)
    [shown], _, values = live.split([big], {})
    assert len(shown[PYTHON]) == SHOWN and shown[PYTHON].endswith("…")
    assert values is not None and values.args == (big,)


def test_a_value_nested_past_the_rows_depth_is_shown_whole():
    deep: list[Any] = []
    for _ in range(100):
        deep = [deep]
    [shown], _, values = live.split([deep], {})
    assert live.holds_code_values(shown) and values is not None


def test_only_top_level_lazy_values_are_called_at_each_send_as_celery_does():
    nested = BeatLazyFunc(stamp)
    values = LiveValues((BeatLazyFunc(stamp), [nested]), {"k": BeatLazyFunc(stamp, "z")})
    args, kwargs = values.evaluate()
    assert args == ["now", [nested]] and kwargs == {"k": "znow"}


def test_holds_code_values_finds_a_marker_at_any_depth():
    assert live.holds_code_values([1, {"a": [{COMPUTED: "f()"}]}])
    assert not live.holds_code_values([1, {"a": [{COMPUTED: "f()", "b": 2}]}])


# --- the serializer ---------------------------------------------------------------------


def test_json_refuses_a_timedelta_naming_entry_and_argument():
    with pytest.raises(BadEntry) as refused:
        parse(kwargs={"every": dt.timedelta(seconds=5)})
    assert str(refused.value).startswith("beat_schedule['job']: kwargs['every']: ")
    assert "'json' serializer" in str(refused.value)


def test_pickle_carries_it_and_the_entrys_own_serializer_counts_first():
    code = parse("pickle", args=[dt.timedelta(seconds=5)])
    assert code.args == [{PYTHON: "datetime.timedelta(seconds=5)"}]
    assert code.live is not None and code.live.args == (dt.timedelta(seconds=5),)
    own = parse("json", args=[dt.timedelta(seconds=5)], options={"serializer": "pickle"})
    assert own.live is not None and own.serializer == "pickle"
    with pytest.raises(BadEntry, match=r"args\[0\]"):
        parse("pickle", args=[dt.timedelta(seconds=5)], options={"serializer": "json"})


def test_kombus_json_carries_datetime_decimal_and_uuid_as_celery_sends_them():
    when = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
    code = parse(args=[when, decimal.Decimal("2.5"), uuid.UUID(int=1)])
    assert code.live is not None


def test_a_send_time_value_is_not_computed_at_boot():
    code = parse(args=[BeatLazyFunc(boom)])
    assert code.args == [{COMPUTED: f"{__name__}.boom()"}]


def test_a_system_check_does_not_check_the_serializer():
    code = parse_entry("job", entry(args=[dt.timedelta(1)]), "UTC", check_task=False)
    assert code.live is not None


# --- countdown --------------------------------------------------------------------------


@pytest.mark.parametrize(("given", "stored"), [(90, 90.0), (0.5, 0.5), (0, 0.0)])
def test_countdown_is_stored_as_seconds(given, stored):
    assert parse(options={"countdown": given}).countdown == stored


@pytest.mark.parametrize("given", [-1, math.inf, 400 * 86400, "10", True])
def test_countdown_out_of_range_or_type_is_refused_naming_it(given):
    with pytest.raises(BadEntry, match="countdown"):
        parse(options={"countdown": given})


def test_a_tuple_inside_an_argument_is_a_list_on_the_row_and_a_tuple_in_memory():
    """Pickle delivers it as a tuple under Celery's beat; the row can only show a list."""
    args, kwargs, values = live.split([(1, 2)], {"pair": {"p": ("a", "b")}})
    assert (args, kwargs) == ([[1, 2]], {"pair": {"p": ["a", "b"]}})
    assert values is not None and values.evaluate() == ([(1, 2)], {"pair": {"p": ("a", "b")}})
    assert live.split((1, 2), {})[2] is None  # the args themselves: a list or tuple alike


# --- the flat values a bulk add skips the walks for (R33) ---------------------------------

_SCALARS = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats()  # NaN and the infinities among them: JSON has neither
    | st.text(max_size=4)  # a lone surrogate or a NUL among them: no database stores either
)
_KEYS = st.text(max_size=4) | st.sampled_from([PYTHON, COMPUTED]) | st.integers()
_VALUES = st.recursive(
    _SCALARS,
    lambda inner: (
        st.lists(inner, max_size=2) | st.tuples(inner) | st.dictionaries(_KEYS, inner, max_size=2)
    ),
    max_leaves=4,
)


@settings(max_examples=300)
@given(
    args=st.none() | st.lists(_SCALARS, max_size=3) | st.lists(_VALUES, max_size=3),
    kwargs=st.none()
    | st.dictionaries(_KEYS, _SCALARS, max_size=3)
    | st.dictionaries(_KEYS, _VALUES, max_size=3),
)
def test_flat_values_are_what_split_and_the_full_check_keep_as_given(args, kwargs):
    """``live.flat`` lets ``ShapeCache`` skip ``split`` and the check's walks: whatever it
    calls flat, ``split`` keeps as given with nothing in memory, and the check without its
    walks finds what the full check finds and encodes the same text."""
    stored = (list(args or []), dict(kwargs or {}))
    if live.flat(args, kwargs):
        assert live.split(args or [], kwargs or {}) == (*stored, None)
        message = MessageCheck({})
        assert message.check(*stored, flat=True) == message.check(*stored)
    else:
        assert not (
            all(_plain(v) for v in args or [])
            and all(type(k) is str and _plain(k) and _plain(v) for k, v in (kwargs or {}).items())
            and not (kwargs and len(kwargs) == 1 and next(iter(kwargs)) in (PYTHON, COMPUTED))
            and type(args or []) is list
        )


def _plain(value: Any) -> bool:
    """A JSON scalar a database keeps, written out the long way."""
    if isinstance(value, float):
        return math.isfinite(value)
    if isinstance(value, str):
        return "\x00" not in value and not any(0xD800 <= ord(c) <= 0xDFFF for c in value)
    return value is None or isinstance(value, bool | int)


@pytest.mark.parametrize(
    ("args", "kwargs"),
    [
        ([(1, 2)], None),  # a tuple: kept in memory as one (pickle)
        ((1, 2), None),  # the args themselves a tuple
        ([[1]], None),  # a list inside: walked
        (None, {"n": math.nan}),
        (None, {"s": "a\x00b"}),
        (None, {"s": "\ud800"}),
        (None, {1: "one"}),  # JSON would make the key "1"
        (None, {PYTHON: "x"}),  # reads as a marker
        (None, {"when": dt.date(2026, 1, 1)}),
        ([decimal.Decimal(1)], None),
    ],
)
def test_anything_but_json_scalars_under_text_keys_is_not_flat(args, kwargs):
    assert not live.flat(args, kwargs)


def test_a_digests_values_are_flat():
    assert live.flat(None, {"customer_id": 42, "zone": "Europe/Berlin", "vip": True, "x": None})
    assert live.flat([1, 2.5, "é"], {})
