"""Django admin's policy editor: an agent's tool policy and ladders as a table, with the JSON
one click away.

The table has a row per tool (the policy's entries, then the agent's tools that have none)
and a column per key of ``runtime.agents.agent_schema.POLICY_KEYS``, plus the tool's ladder;
each cell's widget comes from the key's JSON Schema. A conditional entry (a list of rules, each
with its ``when``: runtime.policy.rules) has no cells: its row lists its rules and says to
edit them in the JSON view; a save from the table keeps them as they were. What it submits is checked as AGENT.md's
``policy`` and ``ladder`` are (``policy_problems``, ``ladder_parse``), so the table and the
file cannot disagree about what a valid policy is. The JSON view edits the same document,
``{"policy": ..., "ladder": ...}``, as AGENT.md's front matter spells those two keys.
"""

import json
import re
from typing import Any

from django import forms
from django.core.exceptions import ValidationError

from runtime.agents.agent_schema import POLICY_KEYS, PolicyKey, policy_problems
from runtime.policy.conditions import conditions_text
from runtime.policy.ladders import LadderError, ladder_parse

LADDER_COLUMN = "ladder"
NEW_ROWS = 2
_KEY_RE = re.compile(r"^[^/\s]{1,100}(/[^/\s]{1,100})?$")
_UNSET = object()


def step_sentence(step: dict) -> str:
    """A stored ladder step (runtime.policy.ladders.steps_stored) as the sentence that parses back
    to it: "escalate to operators and admins after 1h, widen to admins"."""
    after = step.get("after", "")
    action = step.get("action")
    if action in ("remind", "expire"):
        return f"{action} after {after}"
    roles = " and ".join(f"{role}s" for role in step.get("roles") or ["admin"])
    text = f"escalate to {roles} after {after}"
    if step.get("widen_to"):
        text += f", widen to {step['widen_to']}s"
    return text


def steps_text(steps) -> str:
    return "; ".join(step_sentence(s) for s in steps or [] if isinstance(s, dict))


def widget_kind(key: PolicyKey) -> str:
    schema = key.schema
    if "enum" in schema:
        return "select"
    if schema.get("type") == "boolean":
        return "checkbox"
    if schema.get("type") == "array":
        return "list"
    return "text"


def _cell_value(key: PolicyKey, raw):
    """A posted cell as the value the policy stores (_UNSET: the key is left out)."""
    kind = widget_kind(key)
    if kind == "checkbox":
        return raw in ("on", "true", "1", True)
    raw = (raw or "").strip()
    if not raw:
        return _UNSET
    if kind == "select":
        return next((v for v in key.schema["enum"] if str(v) == raw), raw)
    if kind == "list":
        return [word for word in re.split(r"[,\s]+", raw) if word]
    if key.schema.get("type") == "integer" and re.fullmatch(r"-?\d{1,9}", raw):
        return int(raw)
    return raw


def _cell_shown(key: PolicyKey, entry):
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


def tool_keys(tools) -> list[str]:
    """The policy keys of an agent's tools: server/tool, or server for {server: NAME}."""
    keys = []
    for tool in tools or []:
        if isinstance(tool, dict) and isinstance(tool.get("server"), str):
            key = f"{tool['server']}/{tool['tool']}" if tool.get("tool") else tool["server"]
            if key not in keys:
                keys.append(key)
    return keys


def _rules_posted(text: str) -> list | None:
    """A conditional entry's rules as the row carried them (None: the row has none)."""
    try:
        rules = json.loads(text) if text else None
    except ValueError:
        return None
    return rules if isinstance(rules, list) else None


def rules_shown(rules: list) -> list[str]:
    """A conditional entry's rules as its row lists them: "when environment = production:
    approve, required 2 (Deploy to production)", "otherwise: allow"."""
    shown = []
    for rule in rules:
        if not isinstance(rule, dict):
            continue
        when = rule.get("when")
        head = f"when {conditions_text(when)}" if isinstance(when, list) else "otherwise"
        keys = [str(rule.get("action", "approve"))]
        keys += [
            f"{key} {_short(value)}"
            for key, value in rule.items()
            if key not in ("when", "action", "title")
        ]
        title = f" ({rule['title']})" if isinstance(rule.get("title"), str) else ""
        shown.append(f"{head}: {', '.join(keys)}{title}")
    return shown


def _short(value) -> str:
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return ", ".join(value)
    return value if isinstance(value, str) else json.dumps(value, sort_keys=True)


def document_json(document: dict) -> str:
    return json.dumps(document, indent=2, sort_keys=True, ensure_ascii=True)


class PolicyTableWidget(forms.Widget):
    template_name = "runtime/admin/policy_table.html"

    def __init__(self, attrs=None):
        super().__init__(attrs)
        self.offered: list[str] = []  # the agent's tools (AgentForm sets them)

    def value_from_datadict(self, data, files, name):
        if f"{name}-total" not in data and f"{name}-json" not in data:
            return None
        try:
            total = min(int(data.get(f"{name}-total", "0")), 500)
        except ValueError:
            total = 0
        rows = []
        for index in range(max(total, 0)):
            prefix = f"{name}-{index}-"
            row = {
                "tool": data.get(f"{prefix}tool", ""),
                "known": data.get(f"{prefix}known", "") == "1",
                "extra": data.get(f"{prefix}extra", ""),
                "rules": data.get(f"{prefix}rules", ""),
            }
            for key in POLICY_KEYS:
                row[key.name] = data.get(f"{prefix}{key.name}", "")
            row[LADDER_COLUMN] = data.get(f"{prefix}{LADDER_COLUMN}", "")
            rows.append(row)
        return {
            "rows": rows,
            "steps": data.get(f"{name}-steps", ""),
            "json": data.get(f"{name}-json", ""),
            "json_initial": data.get(f"{name}-json-initial", ""),
        }

    def value_omitted_from_data(self, data, files, name):
        return f"{name}-total" not in data and f"{name}-json" not in data

    def get_context(self, name, value, attrs):
        context = super().get_context(name, value, attrs)
        if isinstance(value, dict) and "rows" in value:  # posted back with an error
            rows = [
                {
                    "tool": row["tool"],
                    "known": row["known"],
                    "extra": row["extra"],
                    "rules": row["rules"],
                    "rules_shown": rules_shown(_rules_posted(row["rules"]) or []),
                    "cells": self._cells(name, index, row, posted=True),
                }
                for index, row in enumerate(value["rows"])
            ]
            steps, json_text, json_initial = value["steps"], value["json"], value["json_initial"]
        else:
            document = value if isinstance(value, dict) else {"policy": {}, "ladder": {}}
            rows = self._rows(name, document)
            steps = steps_text((document.get("ladder") or {}).get("steps"))
            json_text = json_initial = document_json(document)
        context["table"] = {
            "columns": [
                {"name": key.name, "label": key.label, "help": key.help} for key in POLICY_KEYS
            ]
            + [
                {
                    "name": LADDER_COLUMN,
                    "label": "ladder",
                    "help": "Reminders and escalation for this tool's approvals, e.g. "
                    "remind after 5m; escalate to admins after 1h",
                }
            ],
            "rows": rows,
            "total": len(rows),
            "key_count": len(POLICY_KEYS),
            "conditional": any(row["rules"] for row in rows),
            "steps": steps,
            "json": json_text,
            "json_initial": json_initial,
        }
        return context

    def _rows(self, name: str, document: dict) -> list[dict]:
        policy = document.get("policy") or {}
        ladders = (document.get("ladder") or {}).get("tools") or {}
        keys = list(policy)
        keys += [k for k in self.offered if k not in keys]
        keys += [k for k in ladders if k not in keys]
        rows: list[dict] = []
        for key in keys + [""] * NEW_ROWS:
            entry = policy.get(key) if key else None
            known = {k.name for k in POLICY_KEYS}
            extra = (
                {k: v for k, v in entry.items() if k not in known}
                if isinstance(entry, dict)
                else {}
            )
            conditional = isinstance(entry, list)
            shown = {k.name: _cell_shown(k, None if conditional else entry) for k in POLICY_KEYS}
            shown[LADDER_COLUMN] = steps_text(ladders.get(key)) if key else ""
            index = len(rows)
            rows.append(
                {
                    "tool": key,
                    "known": bool(key),
                    "extra": json.dumps(extra) if extra else "",
                    "rules": json.dumps(entry, sort_keys=True) if conditional else "",
                    "rules_shown": rules_shown(entry) if isinstance(entry, list) else [],
                    "cells": self._cells(name, index, shown),
                }
            )
        return rows

    def _cells(self, name: str, index: int, values: dict, posted: bool = False) -> list[dict]:
        cells = []
        for key in POLICY_KEYS:
            kind = widget_kind(key)
            value = values.get(key.name, "")
            if kind == "checkbox" and posted:
                value = value in ("on", "true", "1", True)
            cell: dict[str, Any] = {
                "name": f"{name}-{index}-{key.name}",
                "key": key.name,
                "label": key.label,
                "kind": kind,
            }
            cell["value"] = value
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
            cells.append(cell)
        cells.append(
            {
                "name": f"{name}-{index}-{LADDER_COLUMN}",
                "key": LADDER_COLUMN,
                "label": LADDER_COLUMN,
                "kind": "text",
                "value": values.get(LADDER_COLUMN, ""),
            }
        )
        return cells


class PolicyTableField(forms.Field):
    """An agent's ``{"policy": tool_policy, "ladder": ladder}``, from the table or the JSON."""

    widget = PolicyTableWidget

    def __init__(self, **kwargs):
        kwargs.setdefault("required", False)
        super().__init__(**kwargs)

    def has_changed(self, initial, data):
        # What Django admin's history says ("Changed Tool policy and ladders"): only when the
        # policy or the ladders are not what they were.
        if data is None:
            return False
        try:
            return self.clean(data) != self._checked_quietly(initial or {})
        except ValidationError:
            return True

    def clean(self, value):
        if value is None:
            raise ValidationError("The policy table was not sent; reload the page.")
        if isinstance(value, dict) and "rows" not in value:
            return self._checked(value)
        initial = self._initial_document(value["json_initial"])
        if not isinstance(initial, dict):
            # Not the page's form (or not all of it): never read a missing table as "no
            # policy at all".
            raise ValidationError("The policy table was not sent whole; reload the page.")
        table, errors = self._from_table(value)
        json_changed = self._json_changed(value["json"], value["json_initial"])
        if json_changed:
            if table is not None and table != self._checked_quietly(initial):
                raise ValidationError(
                    "You changed both the table and the JSON: keep the changes of one (reload "
                    "the page to start again)."
                )
            document = self._from_json(value["json"])
        else:
            if table is None:  # the table's errors say why
                raise ValidationError(errors)
            document = table
        return self._checked(document)

    def _checked_quietly(self, document: dict):
        try:
            return self._checked(document)
        except ValidationError:
            return document

    @staticmethod
    def _initial_document(text: str):
        try:
            return json.loads(text)
        except (ValueError, TypeError):
            return None

    @staticmethod
    def _json_changed(text: str, initial: str) -> bool:
        if text.strip() == initial.strip():
            return False
        try:
            return json.loads(text) != json.loads(initial)
        except (ValueError, TypeError):
            return True

    @staticmethod
    def _from_json(text: str) -> dict:
        try:
            document = json.loads(text)
        except ValueError as exc:
            raise ValidationError(f"JSON: {exc}") from None
        if not isinstance(document, dict) or not set(document) <= {"policy", "ladder"}:
            raise ValidationError('JSON: an object {"policy": {...}, "ladder": {...}}.')
        return {"policy": document.get("policy") or {}, "ladder": document.get("ladder") or {}}

    def _from_table(self, value) -> tuple[dict | None, list[str]]:
        errors: list[str] = []
        policy: dict = {}
        ladders: dict = {}
        for row in value["rows"]:
            key = (row["tool"] or "").strip()
            action = _cell_value(POLICY_KEYS[0], row["action"])
            ladder_text = (row[LADDER_COLUMN] or "").strip()
            if not key:
                if action is not _UNSET or ladder_text:
                    errors.append("A new row needs a tool: server/tool, or server for all.")
                continue
            if not _KEY_RE.match(key):
                errors.append(f"{key!r}: a tool is server/tool, or server for all its tools.")
                continue
            if key in policy or key in ladders:
                errors.append(f"{key}: this tool has two rows; keep one.")
                continue
            rules = _rules_posted(row["rules"])
            if rules is not None:
                # A conditional entry is edited in the JSON view: kept as it was.
                policy[key] = rules
                if ladder_text:
                    ladders[key] = [s.strip() for s in ladder_text.split(";") if s.strip()]
                continue
            entry = {}
            for policy_key in POLICY_KEYS[1:]:
                cell = _cell_value(policy_key, row[policy_key.name])
                if cell is not _UNSET and cell != policy_key.default:
                    entry[policy_key.name] = cell
            if action is _UNSET:
                if entry:
                    errors.append(f"{key}: choose a decision for its other settings to apply.")
            else:
                # Keys the table has no column for (written in the JSON) are kept as they were.
                try:
                    extra = json.loads(row["extra"]) if row["extra"] else {}
                except ValueError:
                    extra = {}
                if isinstance(extra, dict):
                    entry.update({k: v for k, v in extra.items() if k not in entry})
                policy[key] = {"action": action, **entry} if entry else action
            if ladder_text:
                ladders[key] = [step.strip() for step in ladder_text.split(";") if step.strip()]
        ladder: dict = {}
        steps = [s.strip() for s in (value["steps"] or "").split(";") if s.strip()]
        if steps:
            ladder["steps"] = steps
        if ladders:
            ladder["tools"] = ladders
        try:
            ladder = ladder_parse(ladder) if ladder else {}
        except LadderError as exc:
            errors.append(f"ladder: {exc}")
        if errors:
            return None, errors
        return {"policy": policy, "ladder": ladder}, []

    def _checked(self, document: dict) -> dict:
        policy = document.get("policy") or {}
        problems = policy_problems(policy)
        if problems:
            raise ValidationError(
                [f"{'.'.join(map(str, path)) or 'policy'}: {message}" for path, message in problems]
            )
        try:
            ladder = ladder_parse(document.get("ladder") or None) or {}
        except LadderError as exc:
            raise ValidationError(f"ladder: {exc}") from None
        return {"policy": policy, "ladder": ladder}
