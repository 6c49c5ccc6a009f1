"""AGENT.md files: YAML front matter (as in the interactions/v1 seed) and instructions below.

    ---
    name: coder
    description: Writes and ships changes to the team's repositories.
    loop:
      connections: true
    ---
    Instructions for the model...

Errors name the file, the line and the field, so that a broken file is fixed in one go.
"""

import re
from dataclasses import dataclass, field
from pathlib import Path

import yaml
from django.utils.text import slugify

from runtime.llm.http_agent import ModelConfigError
from runtime.llm.http_agent import validate_model as http_model_validate
from runtime.llm.openai_chat import ModelSpecError
from runtime.llm.openai_chat import validate_model as openai_model_validate
from runtime.llm.scripted import ScriptError, validate_script
from runtime.turn.limits import limits_error

POLICY_ACTIONS = {"allow", "approve", "deny"}
DECIDERS = {"either", "operators"}
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
    instructions: str = ""
    model: dict = field(default_factory=dict)
    tools: list = field(default_factory=list)
    tool_policy: dict = field(default_factory=dict)
    connections_enabled: bool = False
    public: bool = False
    interaction_ttl_seconds: int = 24 * 3600
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


def parse_agent_file(path: Path | str) -> AgentSpec:
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
    try:
        node = yaml.compose(front)
        data = yaml.safe_load(front) or {}
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        raise AgentFileError(
            str(path), (mark.line if mark else 0) + offset, "front matter", str(exc).splitlines()[0]
        ) from None
    if not isinstance(data, dict):
        raise AgentFileError(str(path), offset, "front matter", "must be a mapping of fields")

    def fail(field_path: list, message: str):
        raise AgentFileError(
            str(path), _line_of(node, field_path, offset), ".".join(map(str, field_path)), message
        )

    def text_field(key: str, required: bool = False, default: str = "") -> str:
        value = data.get(key, default)
        if value is None or value == "":
            if required:
                fail([key], "is required")
            return default
        if not isinstance(value, str | int | float):
            fail([key], "must be a string")
        return str(value)

    name = text_field("name", required=True)
    slug = text_field("slug", default=slugify(name))
    if not SLUG_RE.match(slug):
        fail(["slug" if "slug" in data else "name"], f"{slug!r} is not a valid slug (a-z, 0-9, -)")
    description = text_field("description", required=True)

    skills = data.get("skills", []) or []
    if not isinstance(skills, list):
        fail(["skills"], "must be a list")
    clean_skills = []
    for i, skill in enumerate(skills):
        if not isinstance(skill, dict):
            fail(["skills", i], "must be a mapping with id, name, description")
        for key in ("id", "name", "description"):
            if not isinstance(skill.get(key), str) or not skill.get(key):
                fail(["skills", i, key], "is required")
        tags = skill.get("tags", [])
        examples = skill.get("examples", [])
        if not isinstance(tags, list) or not all(isinstance(t, str) for t in tags):
            fail(["skills", i, "tags"], "must be a list of strings")
        if not isinstance(examples, list) or not all(isinstance(t, str) for t in examples):
            fail(["skills", i, "examples"], "must be a list of strings")
        clean_skills.append(
            {
                "id": skill["id"],
                "name": skill["name"],
                "description": skill["description"],
                "tags": tags,
                "examples": examples,
            }
        )
    if len({s["id"] for s in clean_skills}) != len(clean_skills):
        fail(["skills"], "skill ids must be unique")

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
    elif model["provider"] == "openai":
        try:
            openai_model_validate(model)
        except ModelSpecError as exc:
            fail(["model", *exc.path], exc.message)
    else:
        fail(
            ["model", "provider"],
            f"unknown provider {model['provider']!r} (known: scripted, http, openai)",
        )

    tools = data.get("tools", []) or []
    if not isinstance(tools, list):
        fail(["tools"], "must be a list")
    for i, tool in enumerate(tools):
        if not isinstance(tool, dict):
            fail(["tools", i], "must be a mapping with server and tool")
        if not isinstance(tool.get("server"), str) or not tool.get("server"):
            fail(["tools", i, "server"], "is required")
        # {server: NAME} alone offers every tool a tenant's tool server was found to offer.
        if "tool" in tool and (not isinstance(tool["tool"], str) or not tool["tool"]):
            fail(["tools", i, "tool"], "must be a tool name (or leave it out for all of them)")
        if "schema" in tool and not isinstance(tool["schema"], dict):
            fail(["tools", i, "schema"], "must be a JSON schema object")

    policy = data.get("policy", {}) or {}
    if not isinstance(policy, dict):
        fail(["policy"], "must be a mapping of 'server/tool' or 'server' to allow, approve or deny")
    for key, rule in policy.items():
        action = rule.get("action") if isinstance(rule, dict) else rule
        if action not in POLICY_ACTIONS:
            fail(["policy", key], "must be allow, approve or deny")
        if isinstance(rule, dict) and rule.get("deciders", "either") not in DECIDERS:
            fail(["policy", key, "deciders"], "must be either or operators")

    loop = data.get("loop", {}) or {}
    if not isinstance(loop, dict):
        fail(["loop"], "must be a mapping")
    connections = loop.get("connections", False)
    if not isinstance(connections, bool):
        fail(["loop", "connections"], "must be true or false")
    limits = loop.get("limits", {}) or {}
    wrong = limits_error(limits)
    if wrong:
        fail(["loop", "limits", *wrong[0]], wrong[1])
    if "limits" in model:
        fail(["model", "limits"], "limits go under loop.limits")
    if limits:
        # Kept with the model (the agent row has no field of its own for them).
        model = {**model, "limits": limits}
    public = data.get("public", False)
    if not isinstance(public, bool):
        fail(["public"], "must be true or false")
    ttl = data.get("interactionTtlSeconds", 24 * 3600)
    if not isinstance(ttl, int) or ttl <= 0:
        fail(["interactionTtlSeconds"], "must be a positive number of seconds")

    return AgentSpec(
        slug=slug,
        name=name,
        description=description,
        version=text_field("version", default="1.0.0"),
        skills=clean_skills,
        instructions=body,
        model=model,
        tools=tools,
        tool_policy=policy,
        connections_enabled=connections,
        public=public,
        interaction_ttl_seconds=ttl,
        source_path=str(path),
    )
