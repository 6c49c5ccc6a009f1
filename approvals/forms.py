"""The decision forms of the operator pages; the services validate again (they are the rule)."""

import json
import math

from django import forms

from runtime.decisions.decision_models import Interaction
from runtime.decisions.standing_rules import DURATION_LABELS, DURATIONS, FOREVER
from runtime.policy.conditions import (
    JSON_KIND,
    MISSING,
    NUMBER_OPS,
    ops_for,
    schema_fields,
    value_at,
)
from runtime.tools.catalog import validate_arguments

REASON_MAX = 1000
# A question's answer, on the page and in each text of a REST answer's value.
ANSWER_MAX = 4000
# The deepest a JSON answer or result may nest: answers are text or small structures.
JSON_MAX_DEPTH = 32
# What an uncertain effect returned, as the operator types it (JSON or text).
RESULT_MAX = 20000

JSON_TEXT_PROBLEMS = {
    "nul": "Text must not contain NUL characters.",
    "surrogate": "Text must not contain lone surrogates (not valid Unicode).",
    "too_long": "Each text is at most {max_length} characters.",
    "too_deep": "At most {max_depth} levels of nesting.",
    "not_finite": "Numbers must be finite (JSON has no Infinity or NaN).",
}


def json_text_problem(value, *, max_length: int, max_depth: int = JSON_MAX_DEPTH) -> str | None:
    """Why a JSON value cannot be stored as it is (a key of JSON_TEXT_PROBLEMS), or None.

    PostgreSQL's jsonb refuses NUL and text that is not valid Unicode (a lone surrogate),
    with a DataError mid-transaction; checking before the write makes them a 400.
    """
    pending = [(value, 0)]
    while pending:
        item, depth = pending.pop()
        if depth > max_depth:
            return "too_deep"
        if isinstance(item, dict):
            pending.extend((key, depth + 1) for key in item)
            pending.extend((inner, depth + 1) for inner in item.values())
        elif isinstance(item, list):
            pending.extend((inner, depth + 1) for inner in item)
        elif isinstance(item, float) and not math.isfinite(item):
            # 1e999 parses as infinity, which jsonb refuses (a DataError, a 500).
            return "not_finite"
        elif isinstance(item, str):
            if len(item) > max_length:
                return "too_long"
            if "\x00" in item:
                return "nul"
            if any("\ud800" <= char <= "\udfff" for char in item):
                return "surrogate"
    return None


def _no_constants(name: str):
    # NaN and Infinity are not JSON (RFC 8259) and jsonb refuses them: such a result is text.
    raise ValueError(f"{name} is not JSON")


class ApprovalForm(forms.Form):
    reason = forms.CharField(
        required=False,
        max_length=REASON_MAX,
        widget=forms.Textarea(attrs={"rows": 2}),
        help_text="Optional. The agent's model sees it with your decision.",
    )


class AnswerForm(forms.Form):
    """A question's answer: one of its choices, a custom answer when allowed, or free text."""

    def __init__(self, *args, interaction: Interaction, **kwargs):
        super().__init__(*args, **kwargs)
        request = interaction.request or {}
        self.choices = [str(c) for c in request.get("choices") or []]
        self.allow_custom = bool(request.get("allowCustom")) or not self.choices
        if self.choices:
            self.fields["choice"] = forms.ChoiceField(
                label="Answer",
                choices=[(c, c) for c in self.choices],
                widget=forms.RadioSelect,
                required=False,
            )
        if self.allow_custom:
            self.fields["custom"] = forms.CharField(
                label="Another answer" if self.choices else "Answer",
                required=False,
                max_length=ANSWER_MAX,
                widget=forms.Textarea(attrs={"rows": 3}),
            )

    def clean(self):
        super().clean()
        data = self.cleaned_data
        custom = (data.get("custom") or "").strip()
        choice = data.get("choice") or ""
        if custom and choice:
            raise forms.ValidationError("Pick a choice or write another answer, not both.")
        value = custom or choice
        if not value:
            raise forms.ValidationError(
                "Pick one of the choices." if not self.allow_custom else "Write an answer."
            )
        data["value"] = value
        return data


class EffectResolveForm(forms.Form):
    """What became of a call whose outcome was lost (effects/v1)."""

    RESOLUTIONS = [
        ("happened", "It happened"),
        ("not_happened", "It did not happen: send it again"),
        ("fail", "Fail the task"),
    ]
    resolution = forms.ChoiceField(choices=RESOLUTIONS)
    result = forms.CharField(
        required=False,
        max_length=RESULT_MAX,
        widget=forms.Textarea(attrs={"rows": 4}),
        help_text="When it happened: what it returned, as JSON or as text. The model sees it.",
    )

    def clean(self):
        super().clean()
        data = self.cleaned_data
        raw = (data.get("result") or "").strip()
        if data.get("resolution") == "happened":
            if not raw:
                self.add_error("result", "Say what the call returned (JSON or text).")
                return data
            try:
                data["result_value"] = json.loads(raw, parse_constant=_no_constants)
            except ValueError:
                data["result_value"] = raw
            except RecursionError:
                data["result_value"] = None
                self.add_error(
                    "result", JSON_TEXT_PROBLEMS["too_deep"].format(max_depth=JSON_MAX_DEPTH)
                )
                return data
            problem = json_text_problem(data["result_value"], max_length=RESULT_MAX)
            if problem:
                self.add_error(
                    "result",
                    JSON_TEXT_PROBLEMS[problem].format(
                        max_length=RESULT_MAX, max_depth=JSON_MAX_DEPTH
                    ),
                )
        else:
            data["result_value"] = None
        return data


# --- edit then approve -----------------------------------------------------------------------

ARGUMENTS_MAX = 100_000
ARG_PREFIX = "arg__"


def _schema_field(name: str, spec: dict, *, required: bool, initial) -> forms.Field:
    """One top-level property of a tool's JSON schema as a form field; anything that is not a
    plain string, number or boolean is edited as JSON text."""
    label = spec.get("title") or name
    help_text = spec.get("description", "")
    kind = spec.get("type")
    if isinstance(spec.get("enum"), list) and all(isinstance(v, str) for v in spec["enum"]):
        choices = [(v, v) for v in spec["enum"]]
        if not required:
            choices = [("", "—"), *choices]
        return forms.ChoiceField(
            label=label, choices=choices, required=required, initial=initial, help_text=help_text
        )
    if kind == "string":
        return forms.CharField(
            label=label,
            required=required,
            initial=initial,
            help_text=help_text,
            strip=False,
            max_length=spec.get("maxLength") or ANSWER_MAX,
        )
    if kind == "integer":
        return forms.IntegerField(
            label=label, required=required, initial=initial, help_text=help_text
        )
    if kind == "number":
        return forms.FloatField(
            label=label, required=required, initial=initial, help_text=help_text
        )
    if kind == "boolean":
        return forms.TypedChoiceField(
            label=label,
            choices=[("", "—"), ("true", "true"), ("false", "false")],
            coerce=lambda v: v == "true",
            empty_value=None,
            required=required,
            initial=None if initial is None else ("true" if initial else "false"),
            help_text=help_text,
        )
    return forms.CharField(
        label=f"{label} (JSON)",
        required=required,
        initial=None if initial is None else json.dumps(initial, indent=2, sort_keys=True),
        help_text=help_text,
        widget=forms.Textarea(attrs={"rows": 3}),
        max_length=ARGUMENTS_MAX,
    )


class ArgumentsForm(forms.Form):
    """A held call's arguments, to edit before approving: one field per top-level property of
    the tool's JSON schema, or the whole object as raw JSON (``source=json``). The result is
    checked against the schema here (a form error, nothing changes) and again by the core."""

    SOURCES = [("form", "the fields above"), ("json", "the raw JSON")]
    source = forms.ChoiceField(
        choices=SOURCES, initial="form", widget=forms.RadioSelect, label="Send the arguments from"
    )
    arguments_json = forms.CharField(
        label="Raw JSON",
        required=False,
        max_length=ARGUMENTS_MAX,
        widget=forms.Textarea(attrs={"rows": 6, "spellcheck": "false"}),
        help_text="The whole arguments object; used when 'the raw JSON' is chosen.",
    )

    def __init__(self, *args, schema: dict | None, current: dict, **kwargs):
        super().__init__(*args, **kwargs)
        self.schema = schema or {}
        self.current = current or {}
        properties = self.schema.get("properties") if isinstance(self.schema, dict) else None
        self.properties = properties if isinstance(properties, dict) else {}
        required = set(self.schema.get("required") or [])
        self.fields["arguments_json"].initial = json.dumps(self.current, indent=2, sort_keys=True)
        if not self.properties:
            self.fields["source"].initial = "json"
        for name, spec in self.properties.items():
            self.fields[f"{ARG_PREFIX}{name}"] = _schema_field(
                name,
                spec if isinstance(spec, dict) else {},
                required=False,  # a missing required field is the schema's error, said once
                initial=self.current.get(name),
            )
        self.required_names = required

    def schema_fields(self):
        return [self[f"{ARG_PREFIX}{name}"] for name in self.properties]

    def _from_fields(self, data: dict) -> dict:
        arguments = dict(self.current)
        for name in self.properties:
            value = data.get(f"{ARG_PREFIX}{name}")
            field = self.fields[f"{ARG_PREFIX}{name}"]
            if value is None or value == "":
                arguments.pop(name, None)
                continue
            if isinstance(field.widget, forms.Textarea):
                try:
                    value = json.loads(value, parse_constant=_no_constants)
                except (ValueError, RecursionError):
                    self.add_error(f"{ARG_PREFIX}{name}", "Not valid JSON.")
                    continue
            arguments[name] = value
        return arguments

    def clean(self):
        super().clean()
        data = self.cleaned_data
        if data.get("source") == "json" or not self.properties:
            raw = (data.get("arguments_json") or "").strip()
            try:
                arguments = json.loads(raw, parse_constant=_no_constants)
            except (ValueError, RecursionError):
                self.add_error("arguments_json", "Not valid JSON.")
                return data
        else:
            arguments = self._from_fields(data)
            if self.errors:
                return data
        if not isinstance(arguments, dict):
            self.add_error("arguments_json", "The arguments are a JSON object.")
            return data
        problem = json_text_problem(arguments, max_length=ARGUMENTS_MAX)
        if problem:
            raise forms.ValidationError(
                JSON_TEXT_PROBLEMS[problem].format(
                    max_length=ARGUMENTS_MAX, max_depth=JSON_MAX_DEPTH
                )
            )
        # The tool's schema is the rule; the core checks it again inside the decision.
        error = validate_arguments(self.schema, arguments)
        if error:
            raise forms.ValidationError(f"These arguments do not fit the tool's schema: {error}")
        data["arguments"] = arguments
        return data


class AllowSimilarForm(forms.Form):
    """ "Approve and allow similar calls": the rule's duration, caller and conditions, with a
    condition row per field of the tool's schema, nested ones by path
    (runtime.policy.conditions.schema_fields), each offered with the value the held call has."""

    OP_LABELS = {
        "equals": "equals",
        "in": "is one of",
        "prefix": "starts with",
        "lt": "is less than",
        "lte": "is at most",
        "gt": "is more than",
        "gte": "is at least",
    }

    def __init__(self, *args, schema: dict | None, arguments: dict, is_admin: bool, **kwargs):
        super().__init__(*args, **kwargs)
        self.schema_fields = schema_fields(schema)
        durations = [(key, DURATION_LABELS[key]) for key in DURATIONS]
        if is_admin:
            durations.append((FOREVER, DURATION_LABELS[FOREVER]))
        self.fields["duration"] = forms.ChoiceField(
            choices=durations, initial="1d", label="For how long"
        )
        self.fields["caller_only"] = forms.BooleanField(
            required=False, initial=True, label="Only for this caller"
        )
        self.rows = []
        for name, kind in self.schema_fields.items():
            ops = [("", "any value"), *((op, self.OP_LABELS[op]) for op in ops_for(kind))]
            current = value_at(arguments, tuple(name.split(".")))
            present = current is not MISSING
            self.fields[f"op_{name}"] = forms.ChoiceField(
                choices=ops,
                required=False,
                initial="equals" if present else "",
                label=f"Condition on {name}",
            )
            self.fields[f"value_{name}"] = forms.CharField(
                required=False,
                max_length=ANSWER_MAX,
                initial=_as_text(current) if present else "",
                label=f"Value of {name}",
                widget=forms.TextInput(attrs={"aria-label": f"Value of {name}"}),
            )
            self.rows.append(
                {
                    "name": name,
                    "kind": kind,
                    "op": self[f"op_{name}"],
                    "value": self[f"value_{name}"],
                }
            )

    def clean(self):
        super().clean()
        data = self.cleaned_data
        conditions = []
        for name, kind in self.schema_fields.items():
            op = data.get(f"op_{name}") or ""
            if not op:
                continue
            raw = (data.get(f"value_{name}") or "").strip()
            try:
                if op == "in" and kind == JSON_KIND:
                    value = _parsed(raw, kind)
                    if not isinstance(value, list) or not value:
                        raise ValueError("give a JSON list of the values")
                elif op == "in":
                    value = [_parsed(part.strip(), kind) for part in raw.split(",") if part.strip()]
                    if not value:
                        raise ValueError("give one or more values, separated by commas")
                else:
                    value = _parsed(raw, kind)
                if op in NUMBER_OPS and kind not in ("integer", "number"):
                    raise ValueError("a number")
            except ValueError as exc:
                self.add_error(f"value_{name}", str(exc))
                continue
            conditions.append({"field": name, "op": op, "value": value})
        data["conditions"] = conditions
        return data


def _as_text(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return value if isinstance(value, str) else json.dumps(value)


def _parsed(raw: str, kind: str):
    """A condition's value typed as the schema says: "3" is 3 for an integer field; a value
    compared whole (a list, an object) is JSON text."""
    if kind == JSON_KIND:
        try:
            return json.loads(raw, parse_constant=_no_constants)
        except (ValueError, RecursionError):
            raise ValueError('JSON, such as [1, 2] or {"a": 1}') from None
    if kind == "string":
        if not raw:
            raise ValueError("give a value")
        return raw
    if kind == "boolean":
        if raw not in ("true", "false"):
            raise ValueError("true or false")
        return raw == "true"
    try:
        number = float(raw)
    except ValueError:
        raise ValueError(f"a number, not {raw!r}") from None
    if kind == "integer":
        if not number.is_integer():
            raise ValueError("a whole number")
        return int(number)
    if number != number or number in (float("inf"), float("-inf")):
        raise ValueError("a finite number")
    return int(number) if number.is_integer() and "." not in raw else number
