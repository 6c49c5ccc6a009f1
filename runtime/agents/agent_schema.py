"""What an AGENT.md front matter may say: one JSON Schema (AGENT_SCHEMA), with the keys of a
tool's policy entry (POLICY_KEYS) that Django admin's policy table shows as its columns, and
its errors in the house's words with their field paths (``front_matter_problems``,
``policy_problems``). runtime.agents.agentfile reads a file against it; the checks a schema
cannot say are runtime.policy.checks' and the file reader's.
"""

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import jsonschema

from runtime.policy.approver_syntax import MAX_REQUIRED, MAX_STAGES
from runtime.policy.checks import WHEN_SCHEMA, policy_rule_problems, policy_tools_problems
from runtime.policy.ladders import ACTIONS as LADDER_ACTIONS
from runtime.policy.ladders import MAX_STEPS, WIDEN_ROLES
from runtime.policy.ladders import ROLES as LADDER_ROLES

POLICY_ACTIONS = {"allow", "approve", "deny"}
# The most rules one conditional entry has.
MAX_RULES = 20
DECIDERS = {"either", "operators", "caller"}

_TEXT = {"type": ["string", "number"], "minLength": 1, "x-message": "must be a string"}
_STRINGS = {"type": "array", "items": {"type": "string"}, "x-message": "must be a list of strings"}
# The front matter. ``x-message`` is what an error on that value says (house wording); other
# keys are allowed, and ``model`` is only "a mapping with a provider": each provider's own
# fields are checked by its code (runtime.agents.agentfile).
AGENT_SCHEMA: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "type": "object",
    "required": ["name", "description"],
    "properties": {
        # Each key's ``description`` is what the AGENT.md reference says of it
        # (docs/reference/agent-file-keys.md is written from this schema).
        "name": {**_TEXT, "description": "The agent's name, shown to callers in its card."},
        "slug": {
            "type": "string",
            "x-message": "must be a string",
            "description": "Its URL name (/a2a/<tenant>/<slug>); made from the name unless given.",
        },
        "description": {**_TEXT, "description": "What it does, in its card."},
        "version": {**_TEXT, "description": "Its version, in its card."},
        "skills": {
            "type": ["array", "null"],
            "x-message": "must be a list",
            "description": "What a caller may ask of it (its card's skills); a message names one "
            "with metadata.skillId.",
            "items": {
                "type": "object",
                "x-message": "must be a mapping with id, name, description",
                "required": ["id", "name", "description"],
                "properties": {
                    "id": {"type": "string", "minLength": 1},
                    "name": {"type": "string", "minLength": 1},
                    "description": {"type": "string", "minLength": 1},
                    "tags": _STRINGS,
                    "examples": _STRINGS,
                },
            },
        },
        "model": {
            "type": ["object", "null"],
            "x-message": "must be a mapping with a provider",
            "properties": {"provider": {"type": "string"}},
            "description": "Who decides its next step: provider scripted (the default), http, "
            "openai or openai-responses, with that provider's keys.",
        },
        "gateway": {
            "type": ["object", "null"],
            "x-message": "must be a mapping (maxWaitSeconds, sampling, toolsPageSize)",
            "additionalProperties": False,
            "properties": {
                "maxWaitSeconds": {
                    "type": "integer",
                    "minimum": 1,
                    "maximum": 86400,
                    "x-message": "must be a whole number of seconds, 1 to 86400",
                },
                "sampling": {"type": "boolean", "x-message": "must be true or false"},
                "toolsPageSize": {
                    "type": "integer",
                    "minimum": 1,
                    "maximum": 1000,
                    "x-message": "must be a whole number, 1 to 1000",
                },
            },
            "description": "Makes it an MCP gateway (/mcp/<tenant>/<slug>/) with no model: "
            "MCP clients call its tools under its policy. maxWaitSeconds: how long a held call's "
            "request waits before it answers that the approval is still open; sampling: true "
            "lets upstream servers' sampling requests reach the client; toolsPageSize: the tools "
            "of one tools/list page (100), the next page named by its nextCursor.",
        },
        "gate": {
            "type": "boolean",
            "x-message": "must be true or false",
            "description": "true: an approval gate. It has no model and no tool servers: a "
            "caller sends the call it wants to make ({tool, arguments, reason} in a data part) "
            "and the policy holds it for people, allows or denies it; the task ends with a "
            "signed receipt. Its policy may have a default entry, `*`, for the tools no other "
            "entry names (without it they are refused).",
        },
        "tools": {
            "type": ["array", "null"],
            "x-message": "must be a list",
            "description": "The tools it may call: {server, tool, schema} (or {server} for every "
            "tool a tenant's tool server offers), with risk: high for a step-up.",
            "items": {
                "type": "object",
                # {server: NAME} alone offers every tool a tenant's tool server was found to
                # offer (runtime.tools.servers).
                "x-message": "must be a mapping with server (and tool)",
                "required": ["server"],
                "properties": {
                    "server": {"type": "string", "minLength": 1},
                    "tool": {"type": "string", "minLength": 1},
                    "description": {"type": "string"},
                    "reason": {"type": "string"},
                    "schema": {"type": "object", "x-message": "must be a JSON schema object"},
                    # The tool's own risk: high asks for a step-up and bars standing rules,
                    # as the policy entry's does (runtime.policy.lookup.trust_of).
                    "risk": {"enum": ["normal", "high"], "x-message": "must be normal or high"},
                },
            },
        },
        # The tool policy: built from POLICY_KEYS below.
        "policy": {},
        "loop": {
            "type": ["object", "null"],
            "x-message": "must be a mapping",
            "properties": {"connections": {"type": "boolean"}},
            "description": "connections: true offers the built-in request_connection tool; "
            "limits: the turn's limits (steps, tool_calls, tokens, bad_replies, "
            "tool_result_bytes).",
        },
        # Conversation memory (runtime.agents.memory_budget): checked further by memory_error.
        "memory": {
            "type": ["object", "null"],
            "x-message": "must be a mapping of turns and tokens",
            "description": "How much of the conversation's earlier turns the model sees: "
            "{turns, tokens}; turns: 0 turns it off.",
        },
        "public": {
            "type": "boolean",
            "description": "true: callers without a token may call it (anonymous, each task its "
            "own).",
        },
        "default_skill": {
            "type": "string",
            "minLength": 1,
            "x-message": "must be a skill's id",
            "description": "The skill a message without metadata.skillId runs, when there are "
            "several.",
        },
        "interactionTtlSeconds": {
            "type": "integer",
            "exclusiveMinimum": 0,
            "x-message": "must be a positive number of seconds",
            "description": "How long an approval or question stays open (unless a ladder's "
            "expire step says). Without it the tenant's default expiry applies, else 24 hours; "
            "86400 keeps exactly 24 hours whatever the tenant's default.",
        },
    },
}


@dataclass(frozen=True)
class PolicyKey:
    """One key of a tool's policy entry (``policy: {server/tool: {action: ..., KEY: ...}}``):
    its JSON Schema, part of AGENT_SCHEMA, and what an entry without it means.

    Django admin's policy table (runtime.admin.policy_table) has a column for each, in this
    order, with a widget made from the schema (an enum is a select, a boolean a checkbox, a
    list of strings a text field); both check a policy with policy_problems. Adding a key is one
    entry here (and the code that acts on it)."""

    name: str
    label: str
    schema: dict
    default: object
    help: str = ""


POLICY_KEYS: tuple[PolicyKey, ...] = (
    PolicyKey(
        "action",
        "decision",
        {"enum": sorted(POLICY_ACTIONS)},
        "approve",
        "allow: runs at once; approve: waits for a person; deny: never runs. "
        "A tool with no entry waits for a person (approve).",
    ),
    PolicyKey(
        "deciders",
        "deciders",
        {"enum": sorted(DECIDERS), "x-message": "must be operators, either or caller"},
        "operators",
        "operators (the default): only the tenant's operators; either: the caller in band "
        "too; caller: the caller alone, in band.",
    ),
    # Who may decide (runtime.policy.approver_syntax); checked further by approvers_problem.
    PolicyKey(
        "approvers",
        "approvers",
        {
            "type": "array",
            "minItems": 1,
            "items": {"type": "string"},
            "x-message": "must be a list of admin, operator, caller or group:<name>",
        },
        None,
        "admin, operator, caller or group:<slug>; none named: admins and operators.",
    ),
    PolicyKey(
        "required",
        "required",
        {
            "type": "integer",
            "minimum": 1,
            "maximum": MAX_REQUIRED,
            "x-message": f"must be a whole number from 1 to {MAX_REQUIRED}",
        },
        1,
        "N: that many different people approve (2: the two-person rule).",
    ),
    # The trust keys: a high-risk tool's approval needs a recent re-authentication; an operator
    # may edit an editable tool's arguments before approving.
    PolicyKey(
        "risk",
        "risk",
        {"enum": ["low", "normal", "high"], "x-message": "must be low, normal or high"},
        "normal",
        "high: the decider re-authenticates first (step-up); low: may be approved by its "
        "expiry (on_expiry: approve) where the tenant allows it.",
    ),
    PolicyKey(
        "editable",
        "editable",
        {"type": "boolean", "x-message": "must be true or false"},
        False,
        "An operator may edit the arguments before approving.",
    ),
    PolicyKey(
        "timeout",
        "timeout",
        {
            "type": ["string", "integer", "number"],
            "x-message": "must be a duration such as 30s or 5m",
        },
        None,
        "The call's own timeout (60s, 5m), instead of its tool server's.",
    ),
    PolicyKey(
        "bulk",
        "bulk",
        {"type": "boolean", "x-message": "must be true or false"},
        True,
        "Off: each held call is decided on its own page, never in bulk.",
    ),
    # What a held call is called on every surface, and what they never show
    # (runtime.decisions.summaries; checked further by title_problem, impact_problem and
    # redact_problem).
    PolicyKey(
        "title",
        "title",
        {
            "type": "string",
            "minLength": 1,
            "x-message": "must be a text such as 'Deploy {build} to {environment}'",
        },
        None,
        "The held call's one-line summary, over its arguments: Deploy {build} to "
        "{environment}. None: its arguments as key=value.",
    ),
    PolicyKey(
        "impact",
        "impact",
        {
            "type": "string",
            "minLength": 1,
            "x-message": "must be a text such as 'Sends {amount|money:currency} to {payee}'",
        },
        None,
        "What approving does, in words, shown under the title: Sends "
        "{amount|money:currency} to {payee}. Filters: number, money, minor, times, duration.",
    ),
    # A rule tried in shadow: enforced nowhere, recorded on each call it matches
    # (runtime.policy.rules, runtime.turn.calls), compared on the agent's admin page.
    PolicyKey(
        "mode",
        "mode",
        {"enum": ["enforce", "shadow"], "x-message": "must be enforce or shadow"},
        "enforce",
        "shadow: the rule holds nothing; what it would have done is recorded on each call.",
    ),
    PolicyKey(
        "redact",
        "redact",
        {
            "type": "array",
            "minItems": 1,
            "items": {"type": "string", "minLength": 1},
            "x-message": "must be a list of argument names",
        },
        None,
        "Arguments shown as ••• everywhere but the decision page (token, or a path: auth.token).",
    ),
)
# A ladder's steps (runtime.policy.ladders): the schema says their shape; ladder_parse then checks
# what it cannot say (the roles, the order of time, expire last) with the same field paths.
# Added to AGENT_SCHEMA here, apart from the literal above, so that a ladder change and a
# policy change touch different lines.
_LADDER_STEPS = {
    "type": "array",
    "minItems": 1,
    "maxItems": MAX_STEPS,
    "x-message": f"must be a list of 1 to {MAX_STEPS} steps such as 'remind after 15m'",
    "items": {
        "if": {"type": "string"},
        "then": {
            "pattern": r"^\s*\S.*\s+(after|before)\s+\S+",
            "x-message": "must be a step such as 'remind after 15m', "
            "'escalate to admins after 1h', 'expire after 24h' or 'warn 30m before expiry'",
        },
        "else": {
            "type": "object",
            "x-message": "must be a step such as 'remind after 15m', or a mapping with "
            "after and action",
            "required": ["action"],
            "additionalProperties": False,
            "properties": {
                "after": {"type": "string", "x-message": "must be a duration such as 15m"},
                "before": {"type": "string", "x-message": "must be a duration such as 30m"},
                "on_expiry": {
                    "type": ["string", "object"],
                    "x-message": "must be deny, escalate, approve or a mapping",
                },
                "action": {"enum": list(LADDER_ACTIONS)},
                "roles": {
                    "type": "array",
                    "items": {"enum": list(LADDER_ROLES)},
                    "x-message": f"must be a list of {', '.join(LADDER_ROLES)}",
                },
                "widen_to": {"enum": list(WIDEN_ROLES)},
            },
        },
    },
}
AGENT_SCHEMA["properties"]["ladder"] = {
    "description": "Reminders, escalation and expiry: a list of steps (the agent's), or "
    "{steps, tools: {server/tool: steps}}.",
    "type": ["array", "object", "null"],
    "x-message": "must be a list of steps, or a mapping with steps and tools",
    "if": {"type": "array"},
    "then": _LADDER_STEPS,
    "else": {
        "additionalProperties": False,
        "x-message": "must be a list of steps, or a mapping with steps and tools",
        "properties": {
            "steps": _LADDER_STEPS,
            "tools": {
                "type": "object",
                "x-message": "must be a mapping of 'server/tool' or 'server' to steps",
                "additionalProperties": _LADDER_STEPS,
            },
        },
    },
}
# A tool's policy entry: a decision, a mapping of POLICY_KEYS (and the key a table column
# cannot show: stages), or a list of rules tried in order (runtime.policy.rules),
# each with its ``when`` conditions (runtime.policy.conditions), its own keys and ladder.
# What the schema cannot say (approvers, stages, the order of the rules, conditions on the
# tool's own fields) runtime.policy.checks.policy_rule_problems checks, with the same field
# paths.
_ENTRY_KEYS = {
    **{key.name: key.schema for key in POLICY_KEYS},
    "stages": {
        "type": "array",
        "minItems": 1,
        "maxItems": MAX_STAGES,
        "items": {"type": "object", "x-message": "must be a mapping of approvers and required"},
        "x-message": f"must be a list of 1 to {MAX_STAGES} stages, each with approvers and required",
    },
    # The deadline of the calls it holds (runtime.policy.ladders.rule_deadline_steps):
    # checked further by runtime.policy.checks.
    "expires": {"type": "string", "x-message": "must be a duration such as 2m or 24h"},
    "warn": {
        "type": ["string", "array"],
        "items": {"type": "string"},
        "maxItems": MAX_STEPS,
        "x-message": "must be a duration such as 30m, or a list of them",
    },
    "on_expiry": {
        "type": ["string", "object"],
        "x-message": "must be deny, escalate, approve or {action: escalate, to, expires}",
    },
}
_RULES = {
    "type": "array",
    "minItems": 1,
    "maxItems": MAX_RULES,
    "x-message": f"must be a list of 1 to {MAX_RULES} rules",
    "items": {
        "type": "object",
        "required": ["action"],
        # A misspelt ``when`` would make a rule hold every call: no unknown keys in a rule.
        "additionalProperties": False,
        "x-message": "must be a rule {when: [...], action: ..., ...}",
        "properties": {**_ENTRY_KEYS, "when": WHEN_SCHEMA, "ladder": _LADDER_STEPS},
    },
}
AGENT_SCHEMA["properties"]["policy"] = {
    "description": "What happens to each tool's calls: server/tool (or server) -> allow, "
    "approve or deny, a mapping of the policy keys, or a list of rules tried in order.",
    "type": ["object", "null"],
    "x-message": "must be a mapping of 'server/tool' or 'server' to allow, approve or deny",
    "additionalProperties": {
        "if": {"type": "string"},
        "then": {"enum": sorted(POLICY_ACTIONS)},
        "else": {
            "if": {"type": "array"},
            "then": _RULES,
            "else": {
                "type": "object",
                "x-message": "must be allow, approve or deny (or {action: ..., deciders: ...}, "
                "or a list of rules)",
                "required": ["action"],
                # As a rule of a list: an unknown key would be silently ignored. ``when`` and
                # ``ladder`` pass here for policy_rule_problems to say where they go instead.
                "additionalProperties": False,
                "properties": {**_ENTRY_KEYS, "when": {}, "ladder": {}},
                "x-fields": list(_ENTRY_KEYS),
            },
        },
        "x-message": "must be allow, approve or deny",
    },
}
_AGENT_VALIDATOR = jsonschema.Draft202012Validator(AGENT_SCHEMA)
_TYPE_WORDS = {
    "string": "a string",
    "number": "a number",
    "integer": "an integer",
    "boolean": "true or false",
    "array": "a list",
    "object": "a mapping",
    "null": "empty",
}


def _schema_problem(error: jsonschema.ValidationError) -> tuple[list, str]:
    """The field path and the message for one schema error, in the house's words."""
    path = list(error.absolute_path)
    # An error a validator yields carries its value and instance (unset only on one made by
    # hand); a schema that is true or false has no keywords.
    value: Any = error.validator_value
    instance: Any = error.instance
    schema = error.schema if isinstance(error.schema, Mapping) else {}
    if error.validator == "required":
        missing = next(k for k in value if k not in instance)
        return [*path, missing], "is required"
    if error.validator == "minLength" and instance == "":
        return path, "is required"
    if error.validator == "additionalProperties" and value is False:
        known = schema.get("properties", {})
        extra = next(k for k in instance if k not in known)
        # ``x-fields``: the fields to name, when some known ones are only refused elsewhere.
        named = schema.get("x-fields", known)
        return [*path, extra], f"is not a field here ({', '.join(named)})"
    if "x-message" in schema:
        return path, schema["x-message"]
    if error.validator == "type":
        expected = value
        words = [_TYPE_WORDS[t] for t in ([expected] if isinstance(expected, str) else expected)]
        return path, f"must be {' or '.join(w for w in words if w != 'empty')}"
    if error.validator == "enum":
        return path, f"must be one of {', '.join(map(str, value))}"
    return path, error.message


def front_matter_problems(data) -> list[tuple[list, str]]:
    """Everything AGENT_SCHEMA finds wrong with a front matter's data: (field path, message)
    pairs, in no particular order; none for data that fits."""
    return [_schema_problem(error) for error in _AGENT_VALIDATOR.iter_errors(data)]


_POLICY_VALIDATOR = jsonschema.Draft202012Validator(AGENT_SCHEMA["properties"]["policy"])


def policy_problems(policy, tools: list | None = None) -> list[tuple[list, str]]:
    """Everything wrong with a tool policy, as AGENT.md's ``policy`` is checked: (path inside
    the policy, message) pairs; none for a policy that loads. ``tools``: the agent's tools,
    when a conditional entry's conditions are to be checked against their schemas. Django
    admin's policy editor checks with this."""
    problems = [_schema_problem(error) for error in _POLICY_VALIDATOR.iter_errors(policy)]
    if problems or not isinstance(policy, dict):
        return problems
    problems = policy_rule_problems(policy)
    if tools is not None and not problems:
        problems = policy_tools_problems(policy, tools)
    return problems
