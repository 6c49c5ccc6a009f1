"""Standing rules made from decisions: what may become a rule and what a rule matches
(README "Standing rules"). Reads and checks only; the writes are in runtime.services.rules.

A condition is ``{"field", "op", "value"}`` on a top-level field of the call's arguments:
``equals`` (the same JSON value), ``in`` (one of a list) or ``prefix`` (a string that starts
with the value). A call matches a rule when every condition holds; a field the call lacks
never matches.
"""

from datetime import timedelta

from runtime.tools import policy_rule

OPS = ("equals", "in", "prefix")
# How long a rule lasts; "forever" is an admin's choice only.
DURATIONS = {
    "1h": timedelta(hours=1),
    "8h": timedelta(hours=8),
    "1d": timedelta(days=1),
    "7d": timedelta(days=7),
    "30d": timedelta(days=30),
}
DURATION_LABELS = {
    "1h": "1 hour",
    "8h": "8 hours",
    "1d": "1 day",
    "7d": "7 days",
    "30d": "30 days",
    "forever": "until revoked (admins only)",
}
FOREVER = "forever"
MAX_CONDITIONS = 20
SCALAR_TYPES = ("string", "integer", "number", "boolean")


def rule_refusal(agent, server: str, tool: str) -> str | None:
    """Why calls of this tool may not be allowed by a standing rule (its policy now), or None."""
    rule = policy_rule(agent, server, tool)
    action = rule.get("action", "approve") if isinstance(rule, dict) else rule
    if action != "approve":
        return f"the policy for {server}/{tool} is {action}, not approve"
    # ``risk: high`` may be said in the policy entry or on the tool itself (AGENT.md tools).
    declared_high = any(
        spec.get("risk") == "high"
        for spec in agent.tools or []
        if spec.get("server") == server and spec.get("tool") in (tool, None)
    )
    if declared_high or (isinstance(rule, dict) and rule.get("risk") == "high"):
        return f"{server}/{tool} is risk: high: each call needs its own decision"
    if isinstance(rule, dict):
        if rule.get("required") == 2:
            return f"{server}/{tool} needs two people's approval (required: 2)"
    return None


def schema_fields(schema: dict | None) -> dict[str, str]:
    """The top-level fields a condition can name: {name: JSON type} of the scalar ones."""
    properties = (schema or {}).get("properties") or {}
    fields = {}
    for name, spec in properties.items():
        kind = spec.get("type") if isinstance(spec, dict) else None
        if isinstance(kind, list):
            kind = next((k for k in kind if k in SCALAR_TYPES), None)
        if kind in SCALAR_TYPES:
            fields[str(name)] = kind
        elif isinstance(spec, dict) and "enum" in spec and kind is None:
            fields[str(name)] = "string"
    return fields


def _storable(text: str) -> bool:
    # PostgreSQL's jsonb refuses NUL and lone surrogates (a DataError mid-transaction).
    return (
        len(text) <= 1000
        and "\x00" not in text
        and not any("\ud800" <= char <= "\udfff" for char in text)
    )


def _typed(value, kind: str) -> bool:
    if kind == "string":
        return isinstance(value, str) and _storable(value)
    if kind == "boolean":
        return isinstance(value, bool)
    if kind == "integer":
        return isinstance(value, int) and not isinstance(value, bool)
    return isinstance(value, int | float) and not isinstance(value, bool)


def conditions_problem(conditions, schema: dict | None) -> str | None:
    """Why ``conditions`` cannot be a rule's for a tool of this schema, or None."""
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
            return f"{name!r} is not a top-level field of the tool's arguments"
        if name in seen:
            return f"{name}: one condition per field"
        seen.add(name)
        if op not in OPS:
            return f"{name}: op must be one of {', '.join(OPS)}"
        kind = fields[name]
        if op == "prefix":
            if kind != "string" or not isinstance(value, str) or not value or not _storable(value):
                return f"{name}: prefix takes a non-empty text, on a text field"
        elif op == "in":
            if not isinstance(value, list) or not value or len(value) > 50:
                return f"{name}: in takes a list of 1 to 50 values"
            if not all(_typed(v, kind) for v in value):
                return f"{name}: every value must be a {kind}"
        elif not _typed(value, kind):
            return f"{name}: the value must be a {kind}"
    return None


def condition_holds(condition: dict, arguments: dict) -> bool:
    name = condition["field"]
    if name not in arguments:
        return False
    actual, op, value = arguments[name], condition["op"], condition["value"]
    if op == "prefix":
        return isinstance(actual, str) and actual.startswith(value)
    if op == "in":
        return any(_same(actual, v) for v in value)
    return _same(actual, value)


def _same(actual, expected) -> bool:
    # JSON equality: true is not 1, 1 is 1.0.
    if isinstance(actual, bool) or isinstance(expected, bool):
        return actual is expected
    return actual == expected


def conditions_hold(conditions: list, arguments: dict) -> bool:
    return all(condition_holds(c, arguments) for c in conditions or ())


def conditions_text(conditions: list) -> str:
    """The conditions as the rules page shows them."""
    parts = []
    for c in conditions or ():
        if c["op"] == "in":
            parts.append(f"{c['field']} in {', '.join(map(str, c['value']))}")
        elif c["op"] == "prefix":
            parts.append(f"{c['field']} starts with {c['value']}")
        else:
            parts.append(f"{c['field']} = {c['value']}")
    return "; ".join(parts) or "any arguments"
