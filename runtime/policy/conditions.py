"""The condition language over a tool call's arguments: one implementation for the tool
policy's conditional entries (``when``, runtime.policy.rules) and for standing rules
(runtime.decisions.standing_rules). docs/how-to/policy.md "Conditions" documents it.

A condition is ``{"field", "op", "value"}``:

- ``field`` is a path into the arguments: names joined by dots (``target.region``); a name of
  digits indexes a list (``files.0.path``). A name holding a dot cannot be reached.
- ``op``: ``equals`` (the same JSON value: objects and lists are compared whole, so an object
  with one more key is another value; ``true`` is not ``1``; ``1`` is ``1.0``), ``in`` (equals
  one of a list of values), ``prefix`` (a text that starts with the value), ``lt``, ``lte``,
  ``gt``, ``gte`` (a number compared with the value; a text or ``true`` is never a number).

A call whose arguments lack the field never satisfies a condition on it. A list of conditions
holds when every one holds; the empty list always holds.
"""

import json
from typing import Any

OPS = ("equals", "in", "prefix", "lt", "lte", "gt", "gte")
NUMBER_OPS = ("lt", "lte", "gt", "gte")
OP_WORDS = {
    "equals": "=",
    "in": "in",
    "prefix": "starts with",
    "lt": "<",
    "lte": "<=",
    "gt": ">",
    "gte": ">=",
}
MAX_CONDITIONS = 20
MAX_IN_VALUES = 50
MAX_PATH_DEPTH = 8
MAX_FIELD_CHARS = 200
# A condition's value, as JSON, at most this long (a rule's, a policy's).
MAX_VALUE_CHARS = 1000
# The most fields a schema is read for (a standing rule's form has a row for each).
MAX_FIELDS = 100
SCALAR_KINDS = ("string", "integer", "number", "boolean")
# A value compared whole: a list, an object whose schema lists no properties, anything untyped.
JSON_KIND = "json"
MISSING = object()


def field_path(field: Any) -> tuple[str, ...] | None:
    """``"target.region"`` as ``("target", "region")``; None for what is no path."""
    if not isinstance(field, str) or not field or len(field) > MAX_FIELD_CHARS:
        return None
    parts = tuple(field.split("."))
    if len(parts) > MAX_PATH_DEPTH or any(not part for part in parts):
        return None
    return parts


def value_at(arguments: Any, path: tuple[str, ...]) -> Any:
    """The value at ``path`` inside ``arguments``, or MISSING."""
    value = arguments
    for part in path:
        if isinstance(value, dict):
            if part not in value:
                return MISSING
            value = value[part]
        elif isinstance(value, list) and part.isdigit() and int(part) < len(value):
            value = value[int(part)]
        else:
            return MISSING
    return value


def _number(value) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def json_equal(a, b) -> bool:
    """JSON equality: objects and lists whole, ``true`` is not ``1``, ``1`` is ``1.0``."""
    if isinstance(a, bool) or isinstance(b, bool):
        return a is b
    if _number(a) and _number(b):
        return a == b
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(json_equal(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(json_equal(x, y) for x, y in zip(a, b, strict=True))
    if type(a) is not type(b):
        return False
    return a == b


def condition_holds(condition: dict, arguments: Any) -> bool:
    path = field_path(condition.get("field"))
    if path is None:
        return False
    actual = value_at(arguments, path)
    if actual is MISSING:
        return False
    op, value = condition.get("op"), condition.get("value")
    if op == "equals":
        return json_equal(actual, value)
    if op == "in":
        return isinstance(value, list) and any(json_equal(actual, v) for v in value)
    if op == "prefix":
        return isinstance(actual, str) and isinstance(value, str) and actual.startswith(value)
    if op in NUMBER_OPS:
        if not (_number(actual) and _number(value)):
            return False
        if op == "lt":
            return actual < value
        if op == "lte":
            return actual <= value
        if op == "gt":
            return actual > value
        return actual >= value
    return False  # an op nobody checked never holds


def conditions_hold(conditions, arguments: Any) -> bool:
    """Every condition holds for ``arguments`` (none: they hold)."""
    return all(condition_holds(c, arguments) for c in conditions or ())


def jsonb_storable(value) -> bool:
    """PostgreSQL's jsonb refuses NUL and lone surrogates (a DataError mid-transaction)."""
    if isinstance(value, str):
        return "\x00" not in value and not any("\ud800" <= char <= "\udfff" for char in value)
    if isinstance(value, list):
        return all(jsonb_storable(v) for v in value)
    if isinstance(value, dict):
        return all(jsonb_storable(k) and jsonb_storable(v) for k, v in value.items())
    return True


def value_problem(value) -> str | None:
    """Why ``value`` cannot be a condition's value, or None."""
    try:
        text = json.dumps(value, allow_nan=False)
    except (TypeError, ValueError):
        return "must be a JSON value"
    if len(text) > MAX_VALUE_CHARS:
        return f"at most {MAX_VALUE_CHARS} characters of JSON"
    if not jsonb_storable(value):
        return "must not hold NUL or lone surrogate characters"
    return None


def condition_problem(condition) -> tuple[list, str] | None:
    """(path inside the condition, message) for a condition that is not one, whatever the
    tool: its shape, its field's path, an op it knows and a value that op can take."""
    if not isinstance(condition, dict) or set(condition) != {"field", "op", "value"}:
        return [], "must be a mapping of field, op and value"
    if field_path(condition["field"]) is None:
        return ["field"], (
            "must be a field's path, names joined by dots (such as target.region), "
            f"at most {MAX_PATH_DEPTH} deep"
        )
    op, value = condition["op"], condition["value"]
    if op not in OPS:
        return ["op"], f"must be one of {', '.join(OPS)}"
    problem = value_problem(value)
    if problem:
        return ["value"], problem
    if op == "prefix" and (not isinstance(value, str) or not value):
        return ["value"], "prefix takes a non-empty text"
    if op == "in" and (not isinstance(value, list) or not 1 <= len(value) <= MAX_IN_VALUES):
        return ["value"], f"in takes a list of 1 to {MAX_IN_VALUES} values"
    if op in NUMBER_OPS and not _number(value):
        return ["value"], f"{op} takes a number"
    return None


def conditions_shape_problem(conditions) -> tuple[list, str] | None:
    """(path, message) for the first problem of a list of conditions, whatever the tool."""
    if not isinstance(conditions, list) or not conditions:
        return [], f"must be a list of 1 to {MAX_CONDITIONS} conditions"
    if len(conditions) > MAX_CONDITIONS:
        return [], f"at most {MAX_CONDITIONS} conditions"
    for index, condition in enumerate(conditions):
        problem = condition_problem(condition)
        if problem:
            return [index, *problem[0]], problem[1]
    return None


def _kind(spec) -> str:
    """A field's kind as its schema says: a scalar type, ``object`` (with properties), or json."""
    if not isinstance(spec, dict):
        return JSON_KIND
    kind = spec.get("type")
    if isinstance(kind, list):
        kind = next((k for k in kind if k in SCALAR_KINDS), None)
    if kind in SCALAR_KINDS:
        return kind
    if kind == "object" and isinstance(spec.get("properties"), dict):
        return "object"
    if kind is None and isinstance(spec.get("enum"), list) and spec["enum"]:
        return "string" if all(isinstance(v, str) for v in spec["enum"]) else JSON_KIND
    return JSON_KIND


def schema_fields(schema: dict | None) -> dict[str, str]:
    """The fields a condition can name for a tool of this schema: {path: kind}. A field whose
    schema lists properties is reached field by field (``target.region``); any other value
    (a list, a free-form object, an untyped value) is one field of kind json, compared whole."""
    found: dict[str, str] = {}

    def walk(spec, prefix: str, depth: int) -> None:
        properties = spec.get("properties") if isinstance(spec, dict) else None
        if not isinstance(properties, dict):
            return
        for name, inner in properties.items():
            name = str(name)
            if len(found) >= MAX_FIELDS or not name or "." in name:
                continue  # a name with a dot is no path (docs/how-to/policy.md "Conditions")
            path = f"{prefix}{name}"
            kind = _kind(inner)
            if kind == "object" and depth + 1 < MAX_PATH_DEPTH:
                walk(inner, f"{path}.", depth + 1)
            else:
                found[path] = JSON_KIND if kind == "object" else kind
        return

    walk(schema, "", 0)
    return found


def undeclared_fields(arguments: Any, schema: dict | None, *, _depth: int = 0) -> list[str]:
    """The fields of ``arguments`` that the schema does not declare, as paths: where a schema
    lists ``properties``, every other key is undeclared (nested objects too); where it lists
    none, the value is free-form and nothing in it is. A standing rule never allows a call
    with an undeclared field (runtime.decisions.standing_rules)."""
    properties = schema.get("properties") if isinstance(schema, dict) else None
    if not isinstance(properties, dict) or not isinstance(arguments, dict):
        return []
    found = []
    for key, value in arguments.items():
        if key not in properties:
            found.append(str(key))
        elif isinstance(value, dict):
            if _depth + 1 >= MAX_PATH_DEPTH:
                found.append(str(key))  # deeper than a condition reaches: refused, not free
                continue
            inner = undeclared_fields(value, properties[key], _depth=_depth + 1)
            found.extend(f"{key}.{path}" for path in inner)
    return found


def typed(value, kind: str) -> bool:
    """The value is one a field of this kind can hold (json: any JSON value)."""
    if kind == "string":
        return isinstance(value, str)
    if kind == "boolean":
        return isinstance(value, bool)
    if kind == "integer":
        return isinstance(value, int) and not isinstance(value, bool)
    if kind == "number":
        return _number(value)
    return True


def ops_for(kind: str) -> tuple[str, ...]:
    """The ops a condition may use on a field of this kind."""
    if kind == "string":
        return ("equals", "in", "prefix")
    if kind in ("integer", "number"):
        return ("equals", "in", *NUMBER_OPS)
    return ("equals", "in")


def condition_field_problem(condition, fields: dict[str, str]) -> tuple[list, str] | None:
    """(path, message) for a condition whose field the tool's schema (its ``schema_fields``)
    does not have, or whose op or value that field cannot take: it would never hold. A path
    inside a value compared whole (kind json) is not checked: nothing says what it holds."""
    if not isinstance(condition, dict):
        return None
    name, op, value = condition.get("field"), condition.get("op"), condition.get("value")
    if not isinstance(name, str):
        return None
    kind = fields.get(name)
    if kind is None:
        inside = any(
            name.startswith(f"{path}.") for path, found in fields.items() if found == JSON_KIND
        )
        if inside:
            return None
        known = ", ".join(list(fields)[:12])
        return ["field"], f"{name!r} is not a field of the tool's arguments ({known})"
    if op not in ops_for(kind):
        return ["op"], f"a {kind} field takes {', '.join(ops_for(kind))}"
    values = value if op == "in" and isinstance(value, list) else [value]
    if not all(typed(v, kind) for v in values):
        return ["value"], f"{name} is a {kind}: the value must be one"
    return None


def conditions_problem(conditions, schema: dict | None) -> str | None:
    """Why ``conditions`` cannot be a standing rule's for a tool of this schema, or None: each
    condition's shape, a field the schema declares (one condition per field), an op for its
    kind and a value of its type."""
    if not isinstance(conditions, list):
        return "conditions must be a list"
    if len(conditions) > MAX_CONDITIONS:
        return f"at most {MAX_CONDITIONS} conditions"
    fields = schema_fields(schema)
    seen = set()
    for condition in conditions:
        if not isinstance(condition, dict) or set(condition) != {"field", "op", "value"}:
            return "each condition is {field, op, value}"
        name, op, value = condition["field"], condition["op"], condition["value"]
        if name not in fields:
            return f"{name!r} is not a field of the tool's arguments"
        if name in seen:
            return f"{name}: one condition per field"
        seen.add(name)
        problem = condition_problem(condition)
        if problem:
            return f"{name}: {'.'.join(map(str, problem[0])) or 'condition'} {problem[1]}"
        kind = fields[name]
        if op not in ops_for(kind):
            return f"{name}: op must be one of {', '.join(ops_for(kind))}"
        values = value if op == "in" else [value]
        if not all(typed(v, kind) for v in values):
            return f"{name}: every value must be a {kind}"
    return None


def _shown(value) -> str:
    if isinstance(value, str):
        return value
    return json.dumps(value, sort_keys=True)


def conditions_text(conditions) -> str:
    """The conditions as pages show them: ``environment = production; replicas > 3``."""
    parts = []
    for c in conditions or ():
        op = c.get("op")
        if op == "in":
            parts.append(f"{c['field']} in {', '.join(map(_shown, c['value']))}")
        else:
            parts.append(f"{c['field']} {OP_WORDS.get(op, op)} {_shown(c['value'])}")
    return "; ".join(parts) or "any arguments"
