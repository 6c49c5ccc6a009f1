"""A question that is a form: a tool server's elicitation (MCP) asks a person
to fill in a JSON schema, MCP's restricted subset of it: a flat object whose properties are
strings (with ``minLength``, ``maxLength``, ``format`` email, uri, date or date-time), numbers
and integers (``minimum``, ``maximum``), booleans, single choices (``enum``, with the legacy
``enumNames``, or ``oneOf`` of ``{const, title}``) and multiple choices (an ``array`` of such
``items``, ``minItems``, ``maxItems``), each with a ``title``, a ``description`` and a
``default``, and a ``required`` list.

``form_clean`` keeps what a server sent of that subset (the question's detail and request
carry it); ``form_fields`` reads it as fields (the question page renders them);
``form_answer_read`` reads an answer into MCP's ElicitResult (``{action, content}``), the
one check every channel's answer goes through (runtime.decisions.answers). Pure: no writes.
"""

import re
from dataclasses import dataclass
from datetime import date, datetime
from typing import Any
from urllib.parse import urlsplit

from runtime.kernel.errors import InvalidParams

PROPERTIES_MAX = 50
CHOICES_MAX = 100
TITLE_MAX = 200
DESCRIPTION_MAX = 1000
TEXT_MAX = 4000
ACTIONS = ("accept", "decline", "cancel")
FORMATS = ("email", "uri", "date", "date-time")
EMAIL = re.compile(r"^[^@\s]+@[^@\s]+\.[^@\s]+$")
# How a form is answered, in the words every refusal ends with.
HOW = 'an object of the form\'s fields, or {"action": "decline"}'


class FormError(ValueError):
    """The schema is outside MCP's subset; the message says where."""


@dataclass(frozen=True)
class FormField:
    name: str
    kind: str  # string | number | integer | boolean | choice | choices
    title: str
    description: str = ""
    required: bool = False
    default: Any = None
    format: str = ""
    choices: tuple[tuple[str, str], ...] = ()  # (value, label)
    minimum: float | None = None
    maximum: float | None = None
    min_length: int | None = None
    max_length: int | None = None
    min_items: int | None = None
    max_items: int | None = None


def _text(value: Any, limit: int) -> str:
    # PostgreSQL's JSON keeps no NUL: a server's text loses them rather than fail the turn.
    return value.replace("\x00", "").strip()[:limit] if isinstance(value, str) else ""


def _plain(value: Any) -> bool:
    """A string PostgreSQL's JSON can keep (no NUL)."""
    return isinstance(value, str) and "\x00" not in value


def _number(value: Any) -> float | int | None:
    return value if isinstance(value, int | float) and not isinstance(value, bool) else None


def _count(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def _choices(spec: dict, where: str) -> list[dict] | None:
    """A property's (or array items') choices as ``[{const, title}]``, or None."""
    titled = spec.get("oneOf") if "oneOf" in spec else spec.get("anyOf")
    if titled is not None:
        if not isinstance(titled, list) or not titled:
            raise FormError(f"{where}: oneOf/anyOf must list the choices")
        out = []
        for item in titled:
            if not isinstance(item, dict) or not _plain(item.get("const")):
                raise FormError(f"{where}: each choice needs a string const")
            out.append({"const": item["const"], "title": _text(item.get("title"), TITLE_MAX)})
    elif "enum" in spec:
        values, names = spec["enum"], spec.get("enumNames")
        if not isinstance(values, list) or not values or not all(_plain(v) for v in values):
            raise FormError(f"{where}: enum must list strings")
        names = names if isinstance(names, list) and len(names) == len(values) else []
        out = [
            {"const": v, "title": _text(names[i], TITLE_MAX) if names else ""}
            for i, v in enumerate(values)
        ]
    else:
        return None
    if len(out) > CHOICES_MAX:
        raise FormError(f"{where}: more than {CHOICES_MAX} choices")
    return out


def _property_clean(name: str, spec: Any) -> dict:
    where = f"properties.{name}"
    if not isinstance(spec, dict):
        raise FormError(f"{where}: must be an object")
    kind = spec.get("type")
    kept: dict[str, Any] = {"type": kind}
    for key, limit in (("title", TITLE_MAX), ("description", DESCRIPTION_MAX)):
        if _text(spec.get(key), limit):
            kept[key] = _text(spec.get(key), limit)
    if kind == "string":
        choices = _choices(spec, where)
        if choices is not None:
            kept["oneOf"] = choices
        else:
            for key in ("minLength", "maxLength"):
                if _count(spec.get(key)) is not None:
                    kept[key] = spec[key]
            if spec.get("format") in FORMATS:
                kept["format"] = spec["format"]
        if _plain(spec.get("default")):
            kept["default"] = spec["default"][:TEXT_MAX]
    elif kind in ("number", "integer"):
        for key in ("minimum", "maximum"):
            if _number(spec.get(key)) is not None:
                kept[key] = spec[key]
        if _number(spec.get("default")) is not None:
            kept["default"] = spec["default"]
    elif kind == "boolean":
        if isinstance(spec.get("default"), bool):
            kept["default"] = spec["default"]
    elif kind == "array":
        items = spec.get("items")
        choices = _choices(items, f"{where}.items") if isinstance(items, dict) else None
        if choices is None:
            raise FormError(f"{where}: an array is a multiple choice: items need enum or anyOf")
        kept["items"] = {"anyOf": choices}
        for key in ("minItems", "maxItems"):
            if _count(spec.get(key)) is not None:
                kept[key] = spec[key]
        default = spec.get("default")
        if isinstance(default, list) and all(_plain(v) for v in default):
            kept["default"] = default
    else:
        raise FormError(f"{where}: type must be string, number, integer, boolean or array")
    return kept


def form_clean(schema: Any) -> dict:
    """The server's requested schema as kept: MCP's subset of it (FormError otherwise)."""
    if not isinstance(schema, dict) or schema.get("type", "object") != "object":
        raise FormError("the schema must be an object schema")
    properties = schema.get("properties") or {}
    if not isinstance(properties, dict):
        raise FormError("properties must be an object")
    if len(properties) > PROPERTIES_MAX:
        raise FormError(f"more than {PROPERTIES_MAX} fields")
    if not all(_plain(name) and name for name in properties):
        raise FormError("a field's name must be text")
    kept = {name[:100]: _property_clean(name, spec) for name, spec in properties.items()}
    required = schema.get("required") or []
    if not isinstance(required, list):
        raise FormError("required must list field names")
    return {
        "type": "object",
        "properties": kept,
        "required": [n for n in required if isinstance(n, str) and n in kept],
    }


def form_fields(form: dict) -> list[FormField]:
    """A kept form (form_clean) as its fields, in the server's order."""
    required = set(form.get("required") or ())
    fields = []
    for name, spec in (form.get("properties") or {}).items():
        kind = spec.get("type", "string")
        choices = spec.get("oneOf") or (spec.get("items") or {}).get("anyOf") or []
        if kind == "array":
            kind = "choices"
        elif choices:
            kind = "choice"
        fields.append(
            FormField(
                name=name,
                kind=kind,
                title=spec.get("title") or name,
                description=spec.get("description", ""),
                required=name in required,
                default=spec.get("default"),
                format=spec.get("format", ""),
                choices=tuple((c["const"], c.get("title") or c["const"]) for c in choices),
                minimum=spec.get("minimum"),
                maximum=spec.get("maximum"),
                min_length=spec.get("minLength"),
                max_length=spec.get("maxLength"),
                min_items=spec.get("minItems"),
                max_items=spec.get("maxItems"),
            )
        )
    return fields


def field_value_check(field: FormField, value: Any) -> Any:
    """``value`` for ``field`` as it goes to the server; FormError says what is wrong."""
    if field.kind in ("number", "integer"):
        number = _number(value)
        if number is None:
            raise FormError(f"must be a {'whole ' if field.kind == 'integer' else ''}number")
        if field.kind == "integer":
            if isinstance(number, float) and not number.is_integer():
                raise FormError("must be a whole number")
            number = int(number)
        if field.minimum is not None and number < field.minimum:
            raise FormError(f"must be at least {field.minimum:g}")
        if field.maximum is not None and number > field.maximum:
            raise FormError(f"must be at most {field.maximum:g}")
        return number
    if field.kind == "boolean":
        if not isinstance(value, bool):
            raise FormError("must be true or false")
        return value
    allowed = [c for c, _ in field.choices]
    if field.kind == "choices":
        if not isinstance(value, list) or not all(_plain(v) for v in value):
            raise FormError("must be a list of choices")
        wrong = [v for v in value if v not in allowed]
        if wrong:
            raise FormError(f"{wrong[0]!r} is not one of {allowed}")
        value = list(dict.fromkeys(value))
        if field.min_items is not None and len(value) < field.min_items:
            raise FormError(f"choose at least {field.min_items}")
        if field.max_items is not None and len(value) > field.max_items:
            raise FormError(f"choose at most {field.max_items}")
        return value
    if not _plain(value):
        raise FormError("must be text")
    if field.kind == "choice":
        if value not in allowed:
            raise FormError(f"must be one of {allowed}")
        return value
    if len(value) > min(field.max_length or TEXT_MAX, TEXT_MAX):
        raise FormError(f"must be at most {min(field.max_length or TEXT_MAX, TEXT_MAX)} characters")
    if field.min_length is not None and len(value) < field.min_length:
        raise FormError(f"must be at least {field.min_length} characters")
    _format_check(field.format, value)
    return value


def _format_check(fmt: str, value: str) -> None:
    if fmt == "email" and not EMAIL.match(value):
        raise FormError("must be an e-mail address")
    if fmt == "uri":
        parts = urlsplit(value)
        if not parts.scheme or not (parts.netloc or parts.path):
            raise FormError("must be a URI (with its scheme, such as https:)")
    try:
        if fmt == "date":
            date.fromisoformat(value)
        elif fmt == "date-time":
            datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        raise FormError(f"must be a {fmt} (ISO 8601)") from None


def _text_read(field: FormField, raw: Any) -> Any:
    """A bare value for a form of one field (a caller's plain-text reply): text read as the
    field's type."""
    if not isinstance(raw, str):
        return raw
    text = raw.strip()
    if field.kind == "boolean" and text.lower() in ("true", "yes", "false", "no"):
        return text.lower() in ("true", "yes")
    if field.kind in ("number", "integer"):
        try:
            return int(text) if re.fullmatch(r"[+-]?\d+", text) else float(text)
        except ValueError:
            return raw
    if field.kind == "choice":
        by_label = {label.lower(): value for value, label in field.choices}
        return text if text in dict(field.choices) else by_label.get(text.lower(), text)
    return text


def form_answer_read(form: dict, value: Any, *, interaction_id: str = "") -> dict:
    """An answer to a form question as MCP's ElicitResult: ``{"action": "accept", "content":
    {...}}`` (the fields given, each checked), ``{"action": "decline"}`` or ``{"action":
    "cancel"}``. Read from MCP's own shape (``{action, content}``), ``false`` (decline),
    ``true`` (accept, for a form nothing in which is required), an object of the fields, or,
    for a form of one field, its bare value (a plain-text reply). InvalidParams otherwise."""
    fields = form_fields(form)

    def refused(where: str, why: str) -> InvalidParams:
        return InvalidParams(where, why, interactionId=interaction_id)

    if isinstance(value, dict) and set(value) <= {"action", "content"} and "action" in value:
        action = value["action"]
        if action not in ACTIONS:
            raise refused("value.action", f"must be one of {list(ACTIONS)}")
        if action != "accept":
            return {"action": action}
        content = value.get("content") or {}
        if not isinstance(content, dict):
            raise refused("value.content", f"must be {HOW}")
    elif value is False:
        return {"action": "decline"}
    elif value is True:
        content = {}
    elif isinstance(value, dict):
        content = value
    elif len(fields) == 1 and value is not None and value != "":
        content = {fields[0].name: _text_read(fields[0], value)}
    else:
        raise refused("value", f"must be {HOW}")
    by_name = {f.name: f for f in fields}
    unknown = [name for name in content if name not in by_name]
    if unknown:
        raise refused(f"value.{unknown[0]}", f"is not a field of the form ({', '.join(by_name)})")
    checked = {}
    for field in fields:
        given = content.get(field.name)
        if given is None or given == "" or given == []:
            if field.required:
                raise refused(f"value.{field.name}", "is required")
            continue
        try:
            checked[field.name] = field_value_check(field, given)
        except FormError as exc:
            raise refused(f"value.{field.name}", str(exc)) from None
    return {"action": "accept", "content": checked}
