"""The rules of a conditional entry in Django admin's policy editor (runtime.admin.policy_table),
as rows people read: each rule a block of the policy keys' cells (runtime.admin.policy_cells)
with its stages, deadline and ladder, and its ``when`` as rows of field / operator / value, the
fields offered from the tool's input schema (runtime.policy.conditions.schema_fields).

A rule is read from its rows (``rule_from_raw``) and shown in them (``rule_raw``): the two are
inverse for every rule AGENT.md accepts, and a rule whose rows say what it said before
(``canonical``: the same keys once defaults are left out) is kept exactly as written, so that
opening and saving the page changes no policy version. What the rules say is checked where
AGENT.md's are (``policy_problems``), and each problem's path, the file's line, becomes the
form field it names (``problem_place``)."""

import json
import re

from runtime.admin.policy_cells import UNSET, cell_shown, cell_value, widget_kind
from runtime.agents.agent_schema import POLICY_KEYS
from runtime.policy.conditions import JSON_KIND, OP_WORDS, OPS
from runtime.policy.ladders import LadderError, expiry_outcome, steps_parse, steps_stored

KEYS = {key.name: key for key in POLICY_KEYS}
# The keys of a rule that are no cell of the table: each has its own fields in a rule's block.
DEADLINE_OUTCOMES = ("deny", "escalate", "approve")
# Spare rows a page has for a submit without script: a rule per tool, a condition per rule
# (two for a new rule), a stage per rule.
SPARE_RULES = 1
SPARE_CONDITIONS = 1
SPARE_STAGES = 1
MAX_FORM_RULES = 40
MAX_FORM_ROWS = 40


def _json(value) -> str:
    return json.dumps(value, sort_keys=True, ensure_ascii=False)


# --- a condition's value -----------------------------------------------------------------


def _scalar_shown(value, kind: str) -> str:
    if kind == "string" and isinstance(value, str):
        return value
    if isinstance(value, str):
        try:
            json.loads(value)
        except ValueError:
            return value  # a word that is no JSON reads back as itself
        return _json(value)  # "2" as a text, not the number 2
    return _json(value)


def value_shown(value, kind: str, op: str) -> str:
    """A condition's value as its text field shows it: a text as itself, a number as written,
    ``in``'s values joined by commas (as a JSON list when one of them holds a comma)."""
    if op == "in" and isinstance(value, list):
        parts = [_scalar_shown(v, kind) for v in value]
        if any("," in part or not part.strip() for part in parts):
            return _json(value)
        return ", ".join(parts)
    return _scalar_shown(value, kind)


def _scalar_read(text: str, kind: str):
    if kind == "string":
        return text
    if kind in ("integer", "number"):
        if re.fullmatch(r"-?\d{1,15}", text):
            return int(text)
        try:
            return float(text)
        except ValueError:
            return text  # the checks say it must be a number
    if kind == "boolean" and text.lower() in ("true", "false"):
        return text.lower() == "true"
    try:
        return json.loads(text)
    except ValueError:
        return text


def value_read(text: str, kind: str, op: str):
    """A condition's value field as the value the policy stores (value_shown's inverse)."""
    text = text.strip()
    if op == "in":
        if text.startswith("["):
            try:
                found = json.loads(text)
            except ValueError:
                found = None
            if isinstance(found, list):
                return found
        return [_scalar_read(part.strip(), kind) for part in text.split(",") if part.strip()]
    if op == "prefix":
        return text
    return _scalar_read(text, kind)


# --- a rule's other keys -------------------------------------------------------------------


def step_text(step) -> str:
    """A ladder step as written (a sentence, or a mapping) as the sentence that parses to it."""
    if isinstance(step, str):
        return step
    if not isinstance(step, dict):
        return str(step)
    action = step.get("action")
    if action == "warn":
        return f"warn {step.get('before', '')} before expiry"
    if action in ("remind", "expire"):
        text = f"{action} after {step.get('after', '')}"
        outcome = step.get("on_expiry")
        if isinstance(outcome, dict) and set(outcome) == {"action"}:
            outcome = outcome["action"]
        return f"{text}, then {outcome}" if isinstance(outcome, str) else text
    roles = " and ".join(f"{role}s" for role in step.get("roles") or ["admin"])
    text = f"escalate to {roles} after {step.get('after', '')}"
    if step.get("widen_to"):
        text += f", widen to {step['widen_to']}s"
    return text


def _words(text: str) -> list[str]:
    return [word for word in re.split(r"[,\s]+", text or "") if word]


def _steps(text: str) -> list[str]:
    return [step.strip() for step in (text or "").split(";") if step.strip()]


def canonical(rule):
    """What a rule (or entry) says, with its keys' defaults left out and its ladder, warnings,
    outcome and stages each in one spelling: two rules of one canonical form act the same."""
    if isinstance(rule, str):
        rule = {"action": rule}
    if not isinstance(rule, dict):
        return rule
    found = {}
    for name, value in rule.items():
        key = KEYS.get(name)
        if key is not None and type(value) is type(key.default) and value == key.default:
            continue
        if name == "stages" and isinstance(value, list):
            value = [
                {
                    "approvers": s.get("approvers"),
                    "required": s.get("required", 1),
                    "title": s.get("title", ""),
                }
                if isinstance(s, dict)
                else s
                for s in value
            ]
        elif name == "ladder":
            try:
                value = steps_stored(steps_parse(value))
            except LadderError:
                pass
        elif name == "warn" and isinstance(value, str):
            value = [value]
        elif name == "on_expiry":
            try:
                value = expiry_outcome(value)
            except ValueError:
                pass
        found[name] = value
    return found


# --- a rule as its rows, and back ------------------------------------------------------------


def blank_rule(conditions: int = 2) -> dict:
    """The rows of a new rule: no decision, the keys' defaults, empty conditions."""
    raw = rule_raw({}, {})
    raw["action"] = ""
    raw["conditions"] = [{"field": "", "op": "equals", "value": ""}] * conditions
    raw["stages"] = [{"title": "", "approvers": "", "required": ""}] * SPARE_STAGES
    return raw


def rule_raw(rule: dict, kinds: dict[str, str]) -> dict:
    """A rule as its rows show it (texts), ``orig`` the rule as written."""
    raw: dict = {"orig": _json(rule) if rule else "", "delete": False}
    for key in POLICY_KEYS:
        raw[key.name] = cell_shown(key, rule)
    raw["conditions"] = [
        {
            "field": str(c.get("field", "")),
            "op": str(c.get("op", "equals")),
            "value": value_shown(
                c.get("value"), kinds.get(str(c.get("field")), JSON_KIND), str(c.get("op"))
            ),
        }
        for c in rule.get("when") or []
        if isinstance(c, dict)
    ] + [{"field": "", "op": "equals", "value": ""}] * SPARE_CONDITIONS
    raw["stages"] = [
        {
            "title": str(s.get("title", "")),
            "approvers": ", ".join(map(str, s.get("approvers") or [])),
            "required": str(s.get("required", "")),
        }
        for s in rule.get("stages") or []
        if isinstance(s, dict)
    ] + [{"title": "", "approvers": "", "required": ""}] * SPARE_STAGES
    raw["expires"] = str(rule.get("expires", ""))
    warn = rule.get("warn")
    raw["warn"] = ", ".join(map(str, warn)) if isinstance(warn, list) else str(warn or "")
    outcome = rule.get("on_expiry")
    if isinstance(outcome, dict):
        to = outcome.get("to")
        raw["on_expiry"] = str(outcome.get("action", ""))
        raw["on_expiry_to"] = ", ".join(map(str, to)) if isinstance(to, list) else str(to or "")
        raw["on_expiry_expires"] = str(outcome.get("expires", ""))
    else:
        raw["on_expiry"] = str(outcome or "")
        raw["on_expiry_to"] = raw["on_expiry_expires"] = ""
    ladder = rule.get("ladder")
    raw["ladder"] = "; ".join(step_text(s) for s in ladder) if isinstance(ladder, list) else ""
    return raw


def rules_read(data, prefix: str) -> list[dict]:
    """The rules' rows a form posted under ``{prefix}r{n}-`` (raw texts, as rule_raw makes)."""
    try:
        total = min(int(data.get(f"{prefix}rules-total", "0")), MAX_FORM_RULES)
    except ValueError:
        total = 0
    found = []
    for index in range(max(total, 0)):
        p = f"{prefix}r{index}-"
        raw: dict = {
            "orig": data.get(f"{p}orig", ""),
            "delete": bool(data.get(f"{p}delete")),
            "posted": True,
        }
        for key in POLICY_KEYS:
            raw[key.name] = data.get(f"{p}{key.name}", "")
        for name in ("expires", "warn", "on_expiry", "on_expiry_to", "on_expiry_expires"):
            raw[name] = data.get(f"{p}{name}", "")
        raw["ladder"] = data.get(f"{p}ladder", "")
        raw["conditions"] = [
            {
                "field": data.get(f"{p}c{n}-field", ""),
                "op": data.get(f"{p}c{n}-op", "equals"),
                "value": data.get(f"{p}c{n}-value", ""),
            }
            for n in range(_count(data, f"{p}conditions-total"))
        ]
        raw["stages"] = [
            {
                "title": data.get(f"{p}s{n}-title", ""),
                "approvers": data.get(f"{p}s{n}-approvers", ""),
                "required": data.get(f"{p}s{n}-required", ""),
            }
            for n in range(_count(data, f"{p}stages-total"))
        ]
        found.append(raw)
    return found


def _count(data, name: str) -> int:
    try:
        return max(0, min(int(data.get(name, "0")), MAX_FORM_ROWS))
    except ValueError:
        return 0


def _stages(raw: dict) -> list[dict] | None:
    stages = []
    for stage in raw["stages"]:
        title, approvers = stage["title"].strip(), _words(stage["approvers"])
        required = stage["required"].strip()
        if not (title or approvers or required):
            continue
        written: dict = {}
        if title:
            written["title"] = title
        if approvers:
            written["approvers"] = approvers
        if required:
            written["required"] = int(required) if re.fullmatch(r"\d{1,9}", required) else required
        stages.append(written)
    return stages or None


def _on_expiry(raw: dict):
    action = raw["on_expiry"].strip()
    to, expires = _words(raw["on_expiry_to"]), raw["on_expiry_expires"].strip()
    if not (action or to or expires):
        return UNSET
    if not (to or expires):
        return action
    outcome: dict = {"action": action}
    if to:
        outcome["to"] = to
    if expires:
        outcome["expires"] = expires
    return outcome


def rule_from_raw(raw: dict, kinds: dict[str, str]) -> tuple[dict | None, list[int], str]:
    """A rule read from its rows: (the rule, or None for rows left empty or removed; the
    index of each of its conditions among the condition rows; a problem of the rows, or "").
    A rule whose rows say what ``orig`` said is ``orig`` itself."""
    if raw["delete"]:
        return None, [], ""
    when, places = [], []
    for index, condition in enumerate(raw["conditions"]):
        field = condition["field"].strip()
        if not field:
            continue
        op = condition["op"] if condition["op"] in OPS else condition["op"].strip()
        kind = kinds.get(field, JSON_KIND)
        when.append({"field": field, "op": op, "value": value_read(condition["value"], kind, op)})
        places.append(index)
    rule: dict = {}
    action = cell_value(KEYS["action"], raw["action"])
    for key in POLICY_KEYS[1:]:
        value = cell_value(key, raw[key.name])
        if value is not UNSET and not (type(value) is type(key.default) and value == key.default):
            rule[key.name] = value
    stages = _stages(raw)
    if stages:
        rule["stages"] = stages
    for name in ("expires",):
        if raw[name].strip():
            rule[name] = raw[name].strip()
    warn = [w.strip() for w in raw["warn"].split(",") if w.strip()]
    if warn:
        rule["warn"] = warn[0] if len(warn) == 1 else warn
    outcome = _on_expiry(raw)
    if outcome is not UNSET:
        rule["on_expiry"] = outcome
    if _steps(raw["ladder"]):
        rule["ladder"] = _steps(raw["ladder"])
    if action is UNSET:
        # Only the defaults of the selects and boxes, and no condition: a spare rule.
        written = [k for k in rule if k not in KEYS or widget_kind(KEYS[k]) in ("text", "list")]
        if not when and not written:
            return None, [], ""
        return None, places, "choose a decision for this rule"
    rule = {**({"when": when} if when else {}), "action": action, **rule}
    try:
        orig = json.loads(raw["orig"]) if raw["orig"] else None
    except ValueError:
        orig = None
    if isinstance(orig, dict) and canonical(orig) == canonical(rule):
        return orig, places, ""
    return rule, places, ""


def rule_problem_name(prefix: str, path: list, places: list[int]) -> str:
    """The form field of a problem found at ``path`` inside a rule whose rows are named
    ``{prefix}...`` (``places``: its conditions' row indexes)."""
    if not path:
        return f"{prefix}rule"
    head = path[0]
    if head == "when":
        if len(path) > 1 and isinstance(path[1], int) and path[1] < len(places):
            return f"{prefix}c{places[path[1]]}"
        return f"{prefix}when"
    if head == "stages" and len(path) > 1 and isinstance(path[1], int):
        return f"{prefix}s{path[1]}"
    return f"{prefix}{head}"


def condition_ops() -> list[dict]:
    return [
        {"value": op, "label": f"{OP_WORDS[op]} ({op})" if OP_WORDS[op] != op else op} for op in OPS
    ]


def rule_context(
    prefix: str, raw: dict, fields: dict[str, str], errors: dict, subject: str
) -> dict:
    """What the rule's block of the page shows (runtime/admin/policy_rule.html)."""
    from runtime.admin.policy_cells import cells

    values = {key.name: raw[key.name] for key in POLICY_KEYS}
    posted = raw.get("posted", False)
    conditions = []
    for index, condition in enumerate(raw["conditions"]):
        name = f"{prefix}c{index}"
        offered = list(fields)
        if condition["field"] and condition["field"] not in offered:
            offered.append(condition["field"])
        conditions.append(
            {
                "name": name,
                "field": condition["field"],
                "op": condition["op"],
                "value": condition["value"],
                "fields": offered,
                "errors": errors.get(name, []),
            }
        )
    stages = [
        {**stage, "name": f"{prefix}s{index}", "errors": errors.get(f"{prefix}s{index}", [])}
        for index, stage in enumerate(raw["stages"])
    ]
    return {
        "prefix": prefix,
        "orig": raw["orig"],
        "delete": raw["delete"],
        "cells": cells(prefix, values, subject=subject, posted=posted, errors=errors),
        "conditions": conditions,
        "conditions_total": len(conditions),
        "stages": stages,
        "stages_total": len(stages),
        "expires": raw["expires"],
        "warn": raw["warn"],
        "on_expiry": raw["on_expiry"],
        "on_expiry_to": raw["on_expiry_to"],
        "on_expiry_expires": raw["on_expiry_expires"],
        "outcomes": DEADLINE_OUTCOMES,
        "ladder": raw["ladder"],
        "errors": {
            name: errors.get(f"{prefix}{name}", [])
            for name in ("rule", "when", "stages", "expires", "warn", "on_expiry", "ladder")
        },
        "free_fields": not fields,
    }
