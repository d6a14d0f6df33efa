"""The admin's schedule form: bad input is refused with the field named (R20).

Validation itself is ``validation.validate_schedule_fields`` (through ``Schedule.clean``), the
same function code sync and ``full_clean`` use; this module only turns what a person types
into values (JSON with the parser's message, durations such as ``90s`` or ``1h``) and puts
each error on the field it names.
"""

from __future__ import annotations

import datetime as dt
import json
from typing import TYPE_CHECKING, Any

from django import forms
from django.core.exceptions import NON_FIELD_ERRORS, ValidationError
from django.forms.fields import InvalidJSONInput
from django.utils.dateparse import parse_duration as django_parse_duration

from .beat import live
from .core import timing
from .models import MESSAGE_FIELDS, POLICY_FIELDS, TIMING_FIELDS, Schedule
from .validation import DEPTH_ERROR, known_task_names, text_error
from .words import parse_duration

#: fields a code-defined schedule takes from ``beat_schedule`` at every boot (codesync)
CODE_OWNED_FIELDS = (
    "name",
    "task",
    *MESSAGE_FIELDS,
    "description",
    *TIMING_FIELDS,
    *POLICY_FIELDS,
)

#: the timing a person may type; a custom schedule's object is code's alone (R25)
EDITABLE_TIMING_FIELDS = tuple(name for name in TIMING_FIELDS if name != "custom_schedule")


class JSONTextField(forms.JSONField):
    """A JSON field whose error says what the parser found, and whose empty is ``[]``/``{}``."""

    def __init__(self, empty: type[list[Any]] | type[dict[str, Any]], help_text: str) -> None:
        self.empty = empty
        # A declared field gets no initial from the model on an add form: the default is here.
        super().__init__(
            required=False,
            initial=empty,
            help_text=help_text,
            widget=forms.Textarea(attrs={"rows": 2, "cols": 60}),
        )

    def bound_data(self, data: Any, initial: Any) -> Any:
        try:
            return super().bound_data(data, initial)
        except RecursionError:  # re-shown as typed, with the error, not a 500
            return InvalidJSONInput(data)

    def prepare_value(self, value: Any) -> Any:
        text = super().prepare_value(value)
        if not isinstance(value, InvalidJSONInput) and text_error(text) is not None:
            # A lone surrogate the validation refused is shown back escaped ("\\ud800"): as
            # typed, it cannot be encoded into the page (a 500 instead of the error).
            return json.dumps(value, cls=self.encoder)
        return text

    def to_python(self, value: Any) -> Any:
        if self.disabled:
            return value
        if value in self.empty_values:
            return self.empty()
        if isinstance(value, list | dict | int | float):
            return value
        try:
            return json.loads(value, cls=self.decoder)
        except json.JSONDecodeError as exc:
            raise ValidationError(
                "Malformed JSON: %(error)s.", code="invalid", params={"error": exc}
            ) from exc
        except RecursionError:  # thousands of nested brackets: a 500 otherwise
            raise ValidationError(DEPTH_ERROR, code="invalid") from None


class FlexibleDurationField(forms.DurationField):
    """A duration as ``90`` (seconds), ``90s``, ``5m``, ``2h``, ``1d`` or ``HH:MM:SS``."""

    default_error_messages = {
        "invalid": "Enter a duration such as 90s, 5m, 2h, 1d or HH:MM:SS.",
    }

    def to_python(self, value: Any) -> dt.timedelta | None:
        if value in self.empty_values:
            return None
        if isinstance(value, dt.timedelta):
            return value
        text = str(value).strip()
        try:
            parsed = django_parse_duration(text)
        except OverflowError:  # "999999999999 days": beyond timedelta itself
            parsed = None
        if parsed is not None and ":" in text:
            return parsed
        try:
            return parse_duration(text)
        except (ValueError, OverflowError):
            if parsed is not None:
                return parsed
            raise ValidationError(self.error_messages["invalid"], code="invalid") from None

    def prepare_value(self, value: Any) -> Any:
        if isinstance(value, dt.timedelta) and value.total_seconds().is_integer():
            return _compact(value)  # reads back as typed: 15m, not 00:15:00
        if (
            isinstance(value, dt.timedelta)
            and dt.timedelta(0) < value < _SECOND
            and not (value % _MILLISECOND)
        ):
            return f"{value // _MILLISECOND}ms"  # an interval under a second (R25): 500ms
        return super().prepare_value(value)


_SECOND = dt.timedelta(seconds=1)
_MILLISECOND = dt.timedelta(milliseconds=1)


def _compact(value: dt.timedelta) -> str:
    """A whole number of seconds as typed in the box: "15m", "2h", "90s"."""
    n, unit = timing.whole_units(value) or (int(value.total_seconds()), "second")
    return f"{n}{unit[0]}"


class TaskNameInput(forms.TextInput):
    """A text box offering the task names registered in the Celery app."""

    template_name = "durablebeat/widgets/task_name.html"

    def get_context(self, name: str, value: Any, attrs: dict[str, Any] | None) -> dict[str, Any]:
        attrs = {**(attrs or {}), "list": f"{name}_tasks", "autocomplete": "off"}
        context = super().get_context(name, value, attrs)
        names = known_task_names() or frozenset()
        context["task_names"] = sorted(n for n in names if not n.startswith("celery."))
        return context


class ShownToTheSecondField(forms.SplitDateTimeField):
    """The admin shows a time to the second, the database keeps microseconds (beat writes
    ``now + grace``). A time shown and sent back as it was is not an edit."""

    def has_changed(self, initial: Any, data: Any) -> bool:
        if isinstance(initial, dt.datetime):
            initial = initial.replace(microsecond=0)
        return bool(super().has_changed(initial, data))


class DefaultBooleanSelect(forms.NullBooleanSelect):
    """Yes / no / empty, where empty is not "unknown" but "the task's own setting"."""

    def __init__(self, attrs: dict[str, Any] | None = None) -> None:
        super().__init__(attrs)
        self.choices = [
            ("unknown", "the task's own setting"),
            ("true", "Yes"),
            ("false", "No"),
        ]


if TYPE_CHECKING:
    _ModelForm = forms.ModelForm[Schedule]
else:  # Django's classes are generic for the type checker only
    _ModelForm = forms.ModelForm


class ScheduleForm(_ModelForm):
    args = JSONTextField(list, 'JSON list, e.g. [1, "two"].')
    kwargs = JSONTextField(dict, 'JSON object, e.g. {"user_id": 7}.')
    headers = JSONTextField(dict, "JSON object of extra message headers.")
    every = FlexibleDurationField(
        required=False,
        help_text="Interval schedules: 90s, 5m, 2h, 1d, HH:MM:SS, or under a second: 0.5s, 200ms.",
    )
    startup_grace = FlexibleDurationField(
        required=False, help_text="Empty: DURABLEBEAT_STARTUP_GRACE (60 s by default)."
    )
    catch_up_window = FlexibleDurationField(
        required=False, help_text="Empty: DURABLEBEAT_CATCH_UP_WINDOW (55 min by default)."
    )
    jitter = FlexibleDurationField(
        required=False,
        help_text="Send each slot up to this much after it, the same delay at every restart, "
        "never at or after the next slot: 30s, 5m. Empty: DURABLEBEAT_JITTER (none by default).",
    )
    retention = FlexibleDurationField(
        required=False,
        help_text="How long this schedule's finished runs are kept, at least a day: 7d, 365d. "
        "Empty: DURABLEBEAT_RETENTION (30 days by default).",
    )

    class Meta:
        model = Schedule
        fields = (
            "name",
            "task",
            "description",
            "enabled",
            "paused_note",
            *EDITABLE_TIMING_FIELDS,
            "next_fire_at",
            *MESSAGE_FIELDS,
            *POLICY_FIELDS,
        )
        widgets = {
            "task": TaskNameInput(attrs={"size": 60}),
            "description": forms.Textarea(attrs={"rows": 2, "cols": 60}),
            "ignore_result": DefaultBooleanSelect(),
        }
        field_classes = {"terminate": forms.BooleanField}  # a checkbox: empty is no (R34)

    def clean_args(self) -> Any:
        return _without_code_markers(self.cleaned_data.get("args"))

    def clean_kwargs(self) -> Any:
        return _without_code_markers(self.cleaned_data.get("kwargs"))

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean() or {}
        for name, field in self.fields.items():
            if isinstance(field, ShownToTheSecondField) and name not in self.changed_data:
                # Keep what is stored, to the microsecond: the page's truncated copy would
                # move a next fire and read as an edit of it.
                cleaned[name] = getattr(self.instance, name)
        return cleaned

    def _update_errors(self, errors: ValidationError) -> None:
        """Model validation names model fields; a field not on this form (read-only, e.g.
        a code-defined schedule's timing) keeps its name in a form-level message."""
        if hasattr(errors, "error_dict"):
            remapped: dict[str, list[ValidationError]] = {}
            for field, messages in errors.error_dict.items():
                if field in self.errors:
                    continue  # the form field already said what is wrong with it
                if field == NON_FIELD_ERRORS or field in self.fields:
                    remapped.setdefault(field, []).extend(messages)
                else:
                    remapped.setdefault(NON_FIELD_ERRORS, []).extend(
                        ValidationError(f"{field}: {'; '.join(m.messages)}") for m in messages
                    )
            errors = ValidationError(remapped)
        super()._update_errors(errors)  # type: ignore[misc]  # private, stable since 1.x


def _without_code_markers(value: Any) -> Any:
    """R25: the markers of values only code holds are the code sync's to write; typed in a
    schedule made here they would be sent as the task's arguments, so they are refused."""
    if live.holds_code_values(value):
        raise ValidationError(
            f"{live.COMPUTED} and {live.PYTHON} objects stand for values only a beat_schedule "
            "entry holds (computed at send time, or not JSON); give the value itself",
            code="code_value",
        )
    return value
