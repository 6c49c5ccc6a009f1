"""AGENT.md files: YAML front matter and instructions below.

    ---
    name: coder
    description: Writes and ships changes to the team's repositories.
    loop:
      connections: true
    ---
    Instructions for the model...

The front matter is checked against one JSON Schema (AGENT_SCHEMA), and every tool's
``schema`` must itself be a valid JSON Schema; then the checks a schema cannot say (the slug,
unique skill ids, the provider's own fields). Errors name the file, the line and the field,
so that a broken file is fixed in one go.
"""

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jsonschema
import yaml
from django.utils.text import slugify

from runtime.agents.agent_models import Agent
from runtime.agents.limits import limits_error
from runtime.agents.memory_budget import memory_error
from runtime.llm.http_agent import ModelConfigError
from runtime.llm.http_agent import validate_model as http_model_validate
from runtime.llm.openai_spec import ModelSpecError
from runtime.llm.openai_spec import validate_model as openai_model_validate
from runtime.llm.scripted import ScriptError, validate_script
from runtime.policy.approver_syntax import MAX_REQUIRED, MAX_STAGES
from runtime.policy.checks import WHEN_SCHEMA, policy_rule_problems, policy_tools_problems
from runtime.policy.ladders import ACTIONS as LADDER_ACTIONS
from runtime.policy.ladders import MAX_STEPS, WIDEN_ROLES, LadderError, ladder_parse
from runtime.policy.ladders import ROLES as LADDER_ROLES
from runtime.tools.schema_refs import schema_problem

POLICY_ACTIONS = {"allow", "approve", "deny"}
# The most rules one conditional entry has.
MAX_RULES = 20
DECIDERS = {"either", "operators", "caller"}
SLUG_RE = re.compile(r"^[a-z0-9][a-z0-9-]{0,62}$")

_TEXT = {"type": ["string", "number"], "minLength": 1, "x-message": "must be a string"}
_STRINGS = {"type": "array", "items": {"type": "string"}, "x-message": "must be a list of strings"}
# The front matter. ``x-message`` is what an error on that value says (house wording); other
# keys are allowed, and ``model`` is only "a mapping with a provider": each provider's own
# fields are checked by its code below.
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
                    # as the policy entry's does (runtime.policy.trust.tool_trust).
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
        # Conversation memory (runtime.agents.memory_budget): checked further below.
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
            "expire step says).",
        },
    },
}


@dataclass(frozen=True)
class PolicyKey:
    """One key of a tool's policy entry (``policy: {server/tool: {action: ..., KEY: ...}}``):
    its JSON Schema, part of AGENT_SCHEMA, and what an entry without it means.

    Django admin's policy table (runtime.admin) has a column for each, in this order, with
    a widget made from the schema (an enum is a select, a boolean a checkbox, a list of
    strings a text field); both check a policy with policy_problems. Adding a key is one
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
        {"enum": ["normal", "high"], "x-message": "must be normal or high"},
        "normal",
        "high: the decider re-authenticates first (step-up).",
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
    # (runtime.decisions.summaries; checked further by title_problem and redact_problem).
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
            "pattern": r"^\s*\S.*\s+after\s+\S+",
            "x-message": "must be a step such as 'remind after 15m', "
            "'escalate to admins after 1h' or 'expire after 24h'",
        },
        "else": {
            "type": "object",
            "x-message": "must be a step such as 'remind after 15m', or a mapping with "
            "after and action",
            "required": ["after", "action"],
            "additionalProperties": False,
            "properties": {
                "after": {"type": "string", "x-message": "must be a duration such as 15m"},
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
# tool's own fields) policy_rule_problems checks below, with the same field paths.
_ENTRY_KEYS = {
    **{key.name: key.schema for key in POLICY_KEYS},
    "stages": {
        "type": "array",
        "minItems": 1,
        "maxItems": MAX_STAGES,
        "items": {"type": "object", "x-message": "must be a mapping of approvers and required"},
        "x-message": f"must be a list of 1 to {MAX_STAGES} stages, each with approvers and required",
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


class AgentFileError(Exception):
    def __init__(self, path: str, line: int, field: str, message: str):
        self.path, self.line, self.field, self.message = path, line, field, message
        super().__init__(f"{path}:{line}: {field}: {message}")


@dataclass
class AgentSpec:
    slug: str
    name: str
    description: str
    version: str = "1.0.0"
    skills: list = field(default_factory=list)
    default_skill: str = ""
    instructions: str = ""
    model: dict = field(default_factory=dict)
    tools: list = field(default_factory=list)
    tool_policy: dict = field(default_factory=dict)
    connections_enabled: bool = False
    public: bool = False
    interaction_ttl_seconds: int = 24 * 3600
    ladder: dict = field(default_factory=dict)
    source_path: str = ""

    def as_fields(self) -> dict:
        return {k: v for k, v in self.__dict__.items() if k != "slug"}


def _line_of(node: yaml.Node | None, path: list, offset: int) -> int:
    """The 1-based file line of the value at ``path`` inside the front matter's YAML node."""
    best = node
    for key in path:
        if isinstance(best, yaml.MappingNode):
            match = next((v for k, v in best.value if k.value == key), None)
        elif isinstance(best, yaml.SequenceNode) and isinstance(key, int) and key < len(best.value):
            match = best.value[key]
        else:
            match = None
        if match is None:
            break
        best = match
    return (best.start_mark.line if best is not None else 0) + offset


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


_FAST_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
ALIAS_REFUSED = (
    "YAML anchors and aliases (&name, *name) are not allowed: write the value out where it is used"
)


class AliasFound(Exception):
    def __init__(self, line: int):
        self.line = line


def _front_load(front: str, loader_class):
    """The front matter's data, refusing any alias (AliasFound, with the anchor's line): an
    alias is one node shared by several places, and what is made of the data (the JSON kept
    in the database, the schema checks) writes it out at each, so 542 bytes of nested aliases
    became 5.2 MB. The nodes are walked once each, before anything is built."""
    loader = loader_class(front)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        seen: set[int] = set()
        stack = [node]
        while stack:
            current = stack.pop()
            if id(current) in seen:
                raise AliasFound(current.start_mark.line)
            seen.add(id(current))
            if isinstance(current, yaml.MappingNode):
                for key, value in current.value:
                    stack.extend((key, value))
            elif isinstance(current, yaml.SequenceNode):
                stack.extend(current.value)
        return loader.construct_document(node)
    finally:
        loader.dispose()


def parse_agent_file(path: Path | str, *, discovered: dict[str, list] | None = None) -> AgentSpec:
    """The agent an AGENT.md file defines, or AgentFileError naming the file, line and field
    of its first problem. ``discovered``: the tools the tenant's tool servers' last discovery
    found (agent_selectors.discovered_tools), when the file is loaded into a tenant: a policy
    condition on a discovered tool is checked against its schema as on a declared one."""
    path = Path(path)
    text = path.read_text(encoding="utf-8")
    lines = text.splitlines()
    if not lines or lines[0].strip() != "---":
        raise AgentFileError(str(path), 1, "front matter", "the file must start with a '---' line")
    try:
        end = next(i for i in range(1, len(lines)) if lines[i].strip() == "---")
    except StopIteration:
        raise AgentFileError(
            str(path), len(lines), "front matter", "no closing '---' line"
        ) from None
    front = "\n".join(lines[1:end])
    body = "\n".join(lines[end + 1 :]).strip()
    offset = 2  # the YAML starts on the file's second line
    nodes: list[yaml.Node | None] = []

    def composed() -> yaml.Node | None:
        # The YAML's nodes say on which line a problem is: composed when there is one.
        if not nodes:
            nodes.append(yaml.compose(front))
        return nodes[0]

    try:
        # libyaml's parser with PyYAML's own safe constructor: the same data, several times
        # faster than the pure-Python parser (which a test's setup ran for every agent file).
        data = _front_load(front, _FAST_LOADER) or {}
    except yaml.YAMLError:
        data = None  # told below by the pure-Python parser, as it always was
    except AliasFound as found:
        raise AgentFileError(
            str(path), found.line + offset, "front matter", ALIAS_REFUSED
        ) from None
    if data is None:
        try:
            composed()
            data = _front_load(front, yaml.SafeLoader) or {}
        except AliasFound as found:
            raise AgentFileError(
                str(path), found.line + offset, "front matter", ALIAS_REFUSED
            ) from None
        except yaml.YAMLError as exc:
            mark = getattr(exc, "problem_mark", None)
            raise AgentFileError(
                str(path),
                (mark.line if mark else 0) + offset,
                "front matter",
                str(exc).splitlines()[0],
            ) from None
    if not isinstance(data, dict):
        raise AgentFileError(str(path), offset, "front matter", "must be a mapping of fields")

    def fail(field_path: list, message: str):
        raise AgentFileError(
            str(path),
            _line_of(composed(), field_path, offset),
            ".".join(map(str, field_path)),
            message,
        )

    # The first problem in the file's order: the one a reader meets first.
    problems = sorted(
        (
            (_line_of(composed(), problem[0], offset), problem)
            for problem in map(_schema_problem, _AGENT_VALIDATOR.iter_errors(data))
        ),
        key=lambda problem: problem[0],
    )
    if problems:
        line, (field_path, message) = problems[0]
        raise AgentFileError(str(path), line, ".".join(map(str, field_path)), message)

    def text_field(key: str, required: bool = False, default: str = "") -> str:
        value = data.get(key, default)
        if value is None or value == "":
            if required:
                fail([key], "is required")
            return default
        return str(value)

    name = text_field("name", required=True)
    slug = text_field("slug", default=slugify(name))
    if not SLUG_RE.match(slug):
        fail(["slug" if "slug" in data else "name"], f"{slug!r} is not a valid slug (a-z, 0-9, -)")
    description = text_field("description", required=True)

    clean_skills = [
        {
            "id": skill["id"],
            "name": skill["name"],
            "description": skill["description"],
            "tags": skill.get("tags", []),
            "examples": skill.get("examples", []),
        }
        for skill in data.get("skills", []) or []
    ]
    if len({s["id"] for s in clean_skills}) != len(clean_skills):
        fail(["skills"], "skill ids must be unique")
    default_skill = data.get("default_skill", "")
    if default_skill and default_skill not in {s["id"] for s in clean_skills}:
        fail(
            ["default_skill"],
            f"{default_skill!r} is not one of the skills ({', '.join(s['id'] for s in clean_skills)})",
        )

    model = data.get("model") or {"provider": "scripted", "script": []}
    if not isinstance(model, dict) or not isinstance(model.get("provider"), str):
        fail(["model"], "must be a mapping with a provider")
    if model["provider"] == "scripted":
        try:
            validate_script(model.get("script", []))
        except ScriptError as exc:
            fail(["model", "script", *exc.path], exc.message)
    elif model["provider"] == "http":
        try:
            http_model_validate(model)
        except ModelConfigError as exc:
            fail(["model", exc.field], exc.message)
    elif model["provider"] in ("openai", "openai-responses"):
        try:
            openai_model_validate(model)
        except ModelSpecError as exc:
            fail(["model", *exc.path], exc.message)
    else:
        fail(
            ["model", "provider"],
            f"unknown provider {model['provider']!r} "
            "(known: scripted, http, openai, openai-responses)",
        )

    tools = data.get("tools", []) or []
    for i, tool in enumerate(tools):
        # A tool's arguments are checked against its schema when the model calls it; a schema
        # that is no JSON Schema (say {type: 12}), or that refers outside itself (a $ref that
        # would be fetched), is this file's error, not a failed call.
        if "schema" in tool:
            problem = schema_problem(tool["schema"])
            if problem is not None:
                fail(["tools", i, "schema", *problem[0]], problem[1])

    policy = data.get("policy", {}) or {}
    for field_path, message in (
        policy_rule_problems(policy) or policy_tools_problems(policy, tools, discovered)
    )[:1]:
        fail(["policy", *field_path], message)
    loop = data.get("loop", {}) or {}
    connections = loop.get("connections", False)
    limits = loop.get("limits", {}) or {}
    wrong = limits_error(limits)
    if wrong:
        fail(["loop", "limits", *wrong[0]], wrong[1])
    if "limits" in model:
        fail(["model", "limits"], "limits go under loop.limits")
    if limits:
        # Kept with the model (the agent row has no field of its own for them).
        model = {**model, "limits": limits}
    memory = data.get("memory") or {}
    wrong = memory_error(memory)
    if wrong:
        fail(["memory", *wrong[0]], wrong[1])
    if "memory" in model:
        fail(["model", "memory"], "memory goes at the top level of the front matter")
    if memory:
        model = {**model, "memory": memory}  # kept with the model, as loop.limits
    public = data.get("public", False)
    ttl = data.get("interactionTtlSeconds", 24 * 3600)
    ladder = _ladder(data, tools, fail)

    return AgentSpec(
        slug=slug,
        name=name,
        description=description,
        version=text_field("version", default="1.0.0"),
        skills=clean_skills,
        default_skill=default_skill,
        instructions=body,
        model=model,
        tools=tools,
        tool_policy=policy,
        connections_enabled=connections,
        public=public,
        interaction_ttl_seconds=ttl,
        ladder=ladder,
        source_path=str(path),
    )


def _ladder(data: dict, tools: list, fail) -> dict:
    """The ``ladder``, parsed (runtime.policy.ladders) and checked against the agent's own tools."""
    value = data.get("ladder")
    # The short form (a list) is the agent's steps; its errors name ladder.N, as written.
    prefix = ["ladder"] if isinstance(value, list) else ["ladder", "steps"]
    try:
        ladder = ladder_parse(value)
    except LadderError as exc:
        path = exc.path[1:] if isinstance(value, list) and exc.path[:1] == ["steps"] else exc.path
        fail(["ladder", *path], exc.message)
    steps = ladder.get("steps") or []
    if steps and steps[-1]["action"] == "expire" and "interactionTtlSeconds" in data:
        # Two expiries for the same items: say which one is meant.
        fail([*prefix, len(steps) - 1], "give the expiry once: here or interactionTtlSeconds")
    problem = ladder_tools_problem(ladder, tools)
    if problem:
        fail(["ladder", "tools", problem[0]], problem[1])
    return ladder


def ladder_tools_problem(ladder: dict, tools: list) -> tuple[str, str] | None:
    """(key, message) for the first ``ladder.tools`` key that names no tool of the agent's
    ``tools``, or None (AGENT.md and Django admin's policy table say the same)."""
    offered: dict[str, set | None] = {}
    for tool in tools or []:
        if not isinstance(tool, dict) or not isinstance(tool.get("server"), str):
            continue
        names = offered.setdefault(tool["server"], set())
        if names is not None:
            offered[tool["server"]] = None if "tool" not in tool else names | {tool["tool"]}
    for key in (ladder or {}).get("tools", {}):
        server, _, name = key.partition("/")
        if server not in offered:
            return key, f"this agent has no tool server {server!r}"
        names = offered[server]
        if name and names is not None and name not in names:
            return key, f"this agent has no tool {key!r}"
    return None


def agent_upsert(*, tenant, spec: AgentSpec) -> tuple[Agent, str]:
    """Create or update an agent from its spec; return it and 'created', 'updated' or 'unchanged'."""
    fields = spec.as_fields()
    agent = Agent.objects.filter(tenant=tenant, slug=spec.slug).first()
    if agent is None:
        return Agent.objects.create(tenant=tenant, slug=spec.slug, **fields), "created"
    changed = [name for name, value in fields.items() if getattr(agent, name) != value]
    if not changed:
        return agent, "unchanged"
    for name in changed:
        setattr(agent, name, fields[name])
    agent.save(update_fields=[*changed, "updated_at"])
    return agent, "updated"
