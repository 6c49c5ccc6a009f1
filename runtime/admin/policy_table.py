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

from django import forms
from django.core.exceptions import ValidationError

from runtime.admin.policy_cells import UNSET, cell_shown, cell_value, cells
from runtime.admin.policy_rules import (
    KEYS,
    SPARE_RULES,
    blank_rule,
    canonical,
    condition_ops,
    rule_context,
    rule_from_raw,
    rule_problem_name,
    rule_raw,
    rules_read,
)
from runtime.agents.agent_schema import POLICY_KEYS, policy_problems
from runtime.policy.conditions import conditions_text
from runtime.policy.ladders import LadderError, ladder_parse

LADDER_COLUMN = "ladder"
NEW_ROWS = 2
_KEY_RE = re.compile(r"^[^/\s]{1,100}(/[^/\s]{1,100})?$")


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


def tool_keys(tools) -> list[str]:
    """The policy keys of an agent's tools: server/tool, or server for {server: NAME}."""
    keys = []
    for tool in tools or []:
        if isinstance(tool, dict) and isinstance(tool.get("server"), str):
            key = f"{tool['server']}/{tool['tool']}" if tool.get("tool") else tool["server"]
            if key not in keys:
                keys.append(key)
    return keys


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

    class Media:
        css = {"all": ["policy-editor.css"]}
        js = ["policy-editor.js"]

    def __init__(self, attrs=None):
        super().__init__(attrs)
        self.offered: list[str] = []  # the agent's tools (AgentForm sets them)
        # The fields a condition may name, by policy key: {path: kind} of the tool's input
        # schema, declared or discovered (AgentForm sets them).
        self.fields: dict[str, dict[str, str]] = {}
        # Where the preview posts the draft (AgentForm sets it for a saved agent).
        self.preview_url = ""
        self.preview_tools: list[str] = []
        # The problems found, by the form field they are next to (PolicyTableField.clean).
        self.problems: dict[str, list[str]] = {}
        self.name = "policy"

    def value_from_datadict(self, data, files, name):
        self.name = name
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
                "orig": data.get(f"{prefix}orig", ""),
                "rules": rules_read(data, prefix),
                # "0": the row showed no cells of its own (its entry was rules).
                "cells": data.get(f"{prefix}cells", ""),
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
                self._row(name, index, row, row["rules"], posted=True)
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
            "width": len(POLICY_KEYS) + 2,
            "conditional": any(row["conditional"] for row in rows),
            "ops": condition_ops(),
            "steps": steps,
            "json": json_text,
            "json_initial": json_initial,
            "errors": self.problems.get("", []),
            "preview_url": self.preview_url,
            "preview_tools": self.preview_tools,
        }
        return context

    def _row(self, name: str, index: int, shown: dict, rules: list[dict], posted: bool) -> dict:
        """One tool's row: its cells, and its rules' blocks (spare ones for a new rule)."""
        prefix = f"{name}-{index}-"
        fields = self.fields.get(shown["tool"], {})
        blocks = [
            rule_context(
                f"{prefix}r{number}-",
                raw,
                fields,
                self.problems,
                f"rule {number + 1} for {shown['tool'] or 'the new tool'}",
            )
            for number, raw in enumerate(rules)
        ]
        count = sum(
            1
            for r in rules
            if not r.get("delete") and (r.get("orig") or (r.get("action") or "").strip())
        )
        conditional = count > 0
        return {
            "tool": shown["tool"],
            "known": shown["known"],
            "extra": shown["extra"],
            "orig": shown.get("orig", ""),
            "prefix": prefix,
            "conditional": conditional,
            "rule_count": count,
            "rules": blocks,
            "rules_total": len(blocks),
            "rules_shown": [],
            "fields": list(fields),
            "errors": self.problems.get(f"{prefix}tool", []),
            "cells": cells(
                prefix,
                shown,
                subject=shown["tool"] or "the new tool",
                posted=posted,
                errors=self.problems,
            )
            + [self._ladder_cell(prefix, shown)],
        }

    def _ladder_cell(self, prefix: str, shown: dict) -> dict:
        name = f"{prefix}{LADDER_COLUMN}"
        return {
            "name": name,
            "key": LADDER_COLUMN,
            "label": LADDER_COLUMN,
            "aria": f"ladder for {shown['tool'] or 'the new tool'}",
            "kind": "text",
            "value": shown.get(LADDER_COLUMN, ""),
            "errors": self.problems.get(name, []),
        }

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
            shown = {k.name: cell_shown(k, None if conditional else entry) for k in POLICY_KEYS}
            shown[LADDER_COLUMN] = steps_text(ladders.get(key)) if key else ""
            shown |= {
                "tool": key,
                "known": bool(key),
                "extra": json.dumps(extra) if extra else "",
                "orig": json.dumps(entry, sort_keys=True) if entry is not None else "",
            }
            fields = self.fields.get(key, {})
            if conditional:
                rules = [rule_raw(r, fields) for r in entry or [] if isinstance(r, dict)]
            else:
                rules = []
            rules += [blank_rule() for _ in range(SPARE_RULES)]
            rows.append(self._row(name, len(rows), shown, rules, posted=False))
        return rows


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
        self.widget.problems = {}
        self._places: dict[str, tuple[int, list | None]] = {}
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
            self._places = {}  # the JSON's problems are the JSON's, not the rows'
            self.widget.problems = {}
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

    def locate(self, problems: list[tuple[list, str]]) -> None:
        """Show each problem (a path inside the policy, as AGENT.md's are named) next to the
        field and row it names: the file's line becomes the page's field."""
        for path, message in problems:
            self._note(self._place_of(path), message)

    def _note(self, name: str, message: str) -> None:
        self.widget.problems.setdefault(name, []).append(message)

    def _place_of(self, path: list) -> str:
        places = getattr(self, "_places", {})
        if not path or path[0] not in places:
            return ""
        index, rules = places[path[0]]
        prefix = f"{self.widget.name}-{index}-"
        rest = list(path[1:])
        if rules is not None:
            if rest and isinstance(rest[0], int) and rest[0] < len(rules):
                number, conditions = rules[rest[0]]
                return rule_problem_name(f"{prefix}r{number}-", rest[1:], conditions)
            return f"{prefix}tool"
        if rest and rest[0] in KEYS:
            return f"{prefix}{rest[0]}"
        return f"{prefix}tool"

    def _checked_quietly(self, document: dict):
        saved = self.widget.problems, getattr(self, "_places", {})
        try:
            return self._checked(document)
        except ValidationError:
            return document
        finally:
            self.widget.problems, self._places = saved

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
        name = self.widget.name
        for index, row in enumerate(value["rows"]):
            prefix = f"{name}-{index}-"
            key = (row["tool"] or "").strip()
            action = cell_value(POLICY_KEYS[0], row["action"])
            ladder_text = (row[LADDER_COLUMN] or "").strip()

            def fail(message: str, where: str = "tool", prefix=prefix) -> None:
                errors.append(message)
                self._note(f"{prefix}{where}", message.partition(": ")[2] or message)

            if not key:
                if action is not UNSET or ladder_text:
                    fail("A new row needs a tool: server/tool, or server for all.")
                continue
            if not _KEY_RE.match(key):
                fail(f"{key!r}: a tool is server/tool, or server for all its tools.")
                continue
            if key in policy or key in ladders:
                fail(f"{key}: this tool has two rows; keep one.")
                continue
            rules, places = self._rules(key, prefix, row, fail)
            if ladder_text:
                ladders[key] = [step.strip() for step in ladder_text.split(";") if step.strip()]
            if rules:
                self._places[key] = (index, places)
                if action is not UNSET:
                    fail(
                        f"{key}: give the tool either a decision in its row or rules with "
                        "conditions (set its decision to none to use the rules).",
                        "action",
                    )
                policy[key] = rules
                continue
            self._places[key] = (index, None)
            entry = {}
            for policy_key in POLICY_KEYS[1:] if row.get("cells") != "0" else ():
                cell = cell_value(policy_key, row[policy_key.name])
                if cell is not UNSET and cell != policy_key.default:
                    entry[policy_key.name] = cell
            if action is UNSET:
                if entry:
                    fail(f"{key}: choose a decision for its other settings to apply.", "action")
            else:
                # Keys the table has no column for (written in the JSON) are kept as they were.
                try:
                    extra = json.loads(row["extra"]) if row["extra"] else {}
                except ValueError:
                    extra = {}
                if isinstance(extra, dict):
                    entry.update({k: v for k, v in extra.items() if k not in entry})
                written = {"action": action, **entry} if entry else action
                policy[key] = _as_written(written, row.get("orig", ""))
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
            self._note(self._ladder_place(exc.path), exc.message)
        if errors:
            return None, errors
        return {"policy": policy, "ladder": ladder}, []

    def _rules(self, key: str, prefix: str, row: dict, fail) -> tuple[list[dict], list]:
        """The row's rules with conditions, read from their blocks: (rules, and for each the
        number of its block and its conditions' rows)."""
        rules: list[dict] = []
        places: list = []
        fields = self.widget.fields.get(key, {})
        for number, raw in enumerate(row["rules"]):
            rule, conditions, problem = rule_from_raw(raw, fields)
            if problem:
                fail(f"{key}, rule {number + 1}: {problem}", f"r{number}-action")
            if rule is not None:
                rules.append(rule)
                places.append((number, conditions))
        # A rule without conditions is the default: tried last, after every rule with
        # conditions (a rule added below it is meant before it; in the middle it would make
        # the rules after it unreachable, which AGENT.md refuses).
        order = sorted(range(len(rules)), key=lambda i: "when" not in rules[i])
        return [rules[i] for i in order], [places[i] for i in order]

    def _ladder_place(self, path: list) -> str:
        if len(path) >= 2 and path[0] == "tools" and path[1] in self._places:
            return f"{self.widget.name}-{self._places[path[1]][0]}-{LADDER_COLUMN}"
        if path and path[0] == "steps":
            return "steps"
        return ""

    def _checked(self, document: dict) -> dict:
        policy = document.get("policy") or {}
        problems = policy_problems(policy)
        if problems:
            self.locate(problems)
            raise ValidationError(
                [f"{'.'.join(map(str, path)) or 'policy'}: {message}" for path, message in problems]
            )
        try:
            ladder = ladder_parse(document.get("ladder") or None) or {}
        except LadderError as exc:
            raise ValidationError(f"ladder: {exc}") from None
        return {"policy": policy, "ladder": ladder}


def _as_written(entry, orig: str):
    """A row's entry as it was written when it says the same (no new policy version for a
    page saved as it was shown)."""
    try:
        before = json.loads(orig) if orig else None
    except ValueError:
        return entry
    if (
        before is not None
        and not isinstance(before, list)
        and canonical(before) == canonical(entry)
    ):
        return before
    return entry
