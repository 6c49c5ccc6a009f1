"""The cells of Django admin's policy editor: one widget per key of
``runtime.agents.agent_schema.POLICY_KEYS``, made from the key's JSON Schema (an enum is a
select, a boolean a checkbox, a list of strings a text field of words), what a posted cell
stores and what a stored value shows. The table's rows (runtime.admin.policy_table) and a
conditional entry's rules (runtime.admin.policy_rules) are both made of these cells, so a
key added to POLICY_KEYS is a column of the table and a field of every rule at once."""

import re
from typing import Any

from runtime.agents.agent_schema import POLICY_KEYS, PolicyKey

UNSET = object()


def widget_kind(key: PolicyKey) -> str:
    schema = key.schema
    if "enum" in schema:
        return "select"
    if schema.get("type") == "boolean":
        return "checkbox"
    if schema.get("type") == "array":
        return "list"
    return "text"


def cell_value(key: PolicyKey, raw):
    """A posted cell as the value the policy stores (UNSET: the key is left out)."""
    kind = widget_kind(key)
    if kind == "checkbox":
        return raw in ("on", "true", "1", True)
    raw = (raw or "").strip()
    if not raw:
        return UNSET
    if kind == "select":
        return next((v for v in key.schema["enum"] if str(v) == raw), raw)
    if kind == "list":
        return [word for word in re.split(r"[,\s]+", raw) if word]
    types = key.schema.get("type")
    types = types if isinstance(types, list) else [types]
    if "integer" in types and re.fullmatch(r"-?\d{1,9}", raw):
        return int(raw)  # a number as written (timeout: 30, required: 2), not its text
    if "number" in types and re.fullmatch(r"-?\d{1,9}\.\d{1,9}", raw):
        return float(raw)
    return raw


def cell_shown(key: PolicyKey, entry):
    """The cell's value for a policy entry (a string or a mapping), as the widget shows it."""
    if isinstance(entry, str):
        entry = {"action": entry}
    value = (entry or {}).get(key.name, key.default) if entry is not None else key.default
    kind = widget_kind(key)
    if kind == "checkbox":
        return value is True
    if kind == "list":
        return ", ".join(map(str, value)) if isinstance(value, list) else ""
    if key.name == "action" and entry is None:
        return ""  # no entry: the tool waits for a person, as if approve
    return "" if value is None else str(value)


def cells(
    prefix: str, values: dict, *, subject: str, posted: bool = False, errors=None
) -> list[dict]:
    """The widgets of one row (or rule): ``{prefix}{key}`` each, with ``values`` as shown
    (``posted``: as a form sent them back) and the errors found at each; ``subject``
    names what they are of ("deploy/deploy_build", "rule 2 for deploy/deploy_build")."""
    errors = errors or {}
    found = []
    for key in POLICY_KEYS:
        kind = widget_kind(key)
        value = values.get(key.name, "")
        if kind == "checkbox" and posted:
            value = value in ("on", "true", "1", True)
        name = f"{prefix}{key.name}"
        cell: dict[str, Any] = {
            "name": name,
            "key": key.name,
            "label": key.label,
            "aria": f"{key.label} for {subject}",
            "help": key.help,
            "kind": kind,
            "value": value,
            "errors": errors.get(name, []),
        }
        if kind == "select":
            options = [{"value": str(v), "label": str(v)} for v in key.schema["enum"]]
            if key.name == "action":
                options.insert(0, {"value": "", "label": "(none: approve)"})
            else:
                for option in options:
                    if option["value"] == str(key.default):
                        option["label"] += " (default)"
            cell["options"] = options
            if value == "" and key.name != "action":
                cell["value"] = str(key.default)
        found.append(cell)
    return found
