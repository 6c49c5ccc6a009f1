"""AGENT.md files: YAML front matter and instructions below.

    ---
    name: coder
    description: Writes and ships changes to the team's repositories.
    loop:
      connections: true
    ---
    Instructions for the model...

The front matter is checked against one JSON Schema (runtime.agents.agent_schema), and every
tool's ``schema`` must itself be a valid JSON Schema; then the checks a schema cannot say (the
slug, unique skill ids, the provider's own fields). Errors name the file, the line and the field,
so that a broken file is fixed in one go.
"""

import re
from dataclasses import dataclass, field
from pathlib import Path

import yaml
from django.db import transaction
from django.utils.text import slugify

from runtime.agents.agent_models import GATE_PROVIDER, Agent, PolicyVersion
from runtime.agents.agent_schema import front_matter_problems
from runtime.agents.limits import limits_error
from runtime.agents.memory_budget import memory_error
from runtime.agents.policy_history import (
    agent_policy_document,
    policy_change_record,
    policy_diff,
    policy_document,
    policy_document_hash,
    policy_origin,
)
from runtime.llm.http_agent import ModelConfigError
from runtime.llm.http_agent import validate_model as http_model_validate
from runtime.llm.openai_spec import ModelSpecError
from runtime.llm.openai_spec import validate_model as openai_model_validate
from runtime.llm.scripted import ScriptError, validate_script
from runtime.policy.checks import policy_rule_problems, policy_tools_problems
from runtime.policy.ladders import LadderError, ladder_parse
from runtime.tools.schema_refs import schema_problem

SLUG_RE = re.compile(r"^[a-z0-9][a-z0-9-]{0,62}$")


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
    # None: the file gives none (the tenant's default expiry applies, else 24 hours).
    interaction_ttl_seconds: int | None = None
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
            for problem in front_matter_problems(data)
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

    gate = data.get("gate", False)
    if gate:
        # An approval gate (runtime.turn.gate): its callers run the tools, it holds their calls.
        for key, why in (
            ("model", "a gate has no model: its callers run their own"),
            ("loop", "a gate has no turn loop of its own"),
            ("memory", "a gate keeps no conversation memory"),
        ):
            if data.get(key):
                fail([key], why)
        for i, tool in enumerate(data.get("tools", []) or []):
            if not tool.get("tool"):
                fail(["tools", i, "tool"], "a gate's tool is named server and tool, each")
    model = (
        {"provider": GATE_PROVIDER}
        if gate
        else data.get("model") or {"provider": "scripted", "script": []}
    )
    if not isinstance(model, dict) or not isinstance(model.get("provider"), str):
        fail(["model"], "must be a mapping with a provider")
    if "gateway" in data:
        # An MCP gateway has no model: its MCP clients make the calls (runtime.llm.gateway_model).
        if data.get("model"):
            fail(["model"], "an MCP gateway (gateway:) has no model")
        if gate:
            fail(["gateway"], "an approval gate (gate: true) is no MCP gateway: give one of them")
        model = {**(data["gateway"] or {}), "provider": "gateway"}
    elif model["provider"] == GATE_PROVIDER and not gate:
        fail(["model", "provider"], "an approval gate is declared with gate: true, and no model")
    if model["provider"] == "gateway":
        pass  # its keys were checked by the schema (runtime.agents.agent_schema)
    elif model["provider"] in ("scripted", GATE_PROVIDER):
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
    ttl = data.get("interactionTtlSeconds")
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


@dataclass
class AgentLoad:
    """What loading a file did to an agent: ``created``, ``updated``, ``unchanged``,
    ``replaced`` (its policy edited since the file last loaded it, overwritten as asked) or
    ``refused`` (edited since, kept; ``diff`` says how the file's policy differs)."""

    agent: Agent
    outcome: str
    diff: str = ""


def agent_load(*, tenant, spec: AgentSpec, actor: str, replace: bool = False) -> AgentLoad:
    """Create the agent from its spec, or update it: its tool policy and ladder only while
    the stored ones are what a file last loaded (the database is the truth once an agent
    exists; a policy edited since, in admin or otherwise, is refused unless ``replace``).
    Every policy change is kept in the agent's history and audited (policy_history)."""
    fields = spec.as_fields()
    loaded = policy_document(tool_policy=spec.tool_policy, ladder=spec.ladder)
    loaded_hash = policy_document_hash(loaded)
    with transaction.atomic():
        agent = Agent.objects.select_for_update().filter(tenant=tenant, slug=spec.slug).first()
        if agent is None:
            agent = Agent.objects.create(
                tenant=tenant, slug=spec.slug, policy_loaded=loaded_hash, **fields
            )
            policy_change_record(
                agent=agent,
                previous=None,
                actor=actor,
                source=PolicyVersion.Source.FILE,
                via="load_agents",
                source_path=spec.source_path,
                source_version=spec.version,
            )
            return AgentLoad(agent, "created")
        stored = agent_policy_document(agent)
        # An agent loaded before the hash was kept (empty) took its files' policies as they
        # came: it is taken as the file's.
        edited = (
            stored != loaded
            and bool(agent.policy_loaded)
            and agent.policy_loaded != policy_document_hash(stored)
        )
        if edited and not replace:
            origin = policy_origin(agent)
            where = origin.where if origin is not None else "edited since it was loaded"
            return AgentLoad(
                agent,
                "refused",
                diff=policy_diff(
                    stored,
                    loaded,
                    old_label=f"stored: {where}",
                    new_label=f"file: {spec.source_path or spec.slug}",
                ),
            )
        changed = [name for name, value in fields.items() if getattr(agent, name) != value]
        if not changed and agent.policy_loaded == loaded_hash:
            return AgentLoad(agent, "unchanged")
        for name in changed:
            setattr(agent, name, fields[name])
        agent.policy_loaded = loaded_hash
        agent.save(update_fields=[*changed, "policy_loaded", "updated_at"])
        policy_change_record(
            agent=agent,
            previous=stored,
            actor=actor,
            source=PolicyVersion.Source.FILE,
            via="load_agents",
            source_path=spec.source_path,
            source_version=spec.version,
        )
    if edited:
        return AgentLoad(agent, "replaced")
    return AgentLoad(agent, "updated" if changed else "unchanged")


def agent_upsert(
    *, tenant, spec: AgentSpec, actor: str = "system:load_agents"
) -> tuple[Agent, str]:
    """agent_load without replacing an edited policy; return the agent and the outcome."""
    done = agent_load(tenant=tenant, spec=spec, actor=actor)
    return done.agent, done.outcome
