"""Tools, the tool policy, and the tool servers behind one interface.

A tool is ``<server> / <tool>`` with a JSON schema for its arguments. The demo servers are
local and offline but behave like real ones: they validate, they can fail, and what they do
is recorded. Tenants' MCP and HTTP servers (runtime.agents.toolservers) implement the same protocol,
``ToolServer``.
"""

import functools
import json
import time
from dataclasses import dataclass
from typing import Any, Protocol

import jsonschema

from runtime.agents.agent_models import Agent, DemoRecord
from runtime.agents.agent_models import ToolServer as ServerRow
from runtime.agents.approver_syntax import MAX_REQUIRED, MAX_STAGES
from runtime.agents.ladders import duration_seconds
from runtime.agents.policies import PolicyRule, Stage, policy_rule_for
from runtime.agents.schema_refs import Unresolvable, local_validator
from runtime.kernel.store import demo_record_insert

BUILTIN_SERVER = "countersign"
REQUEST_CONNECTION = "request_connection"
REQUEST_CONNECTION_SCHEMA = {
    "type": "object",
    "properties": {"app": {"type": "string", "minLength": 1}, "reason": {"type": "string"}},
    "required": ["app"],
}


class ToolError(Exception):
    """The tool ran and failed; the model sees the message."""


class ToolOutcomeLost(ToolError):
    """The call was sent and no answer came in time: it may have run. The turn loop marks
    its effect uncertain (effects/v1) for an operator to resolve, as after a crash."""


@dataclass(frozen=True)
class CallContext:
    tenant: Any
    effect_id: str
    subject: str
    # Seconds the call may take (the policy's ``timeout``); None: the server's own.
    timeout: float | None = None
    # The run's MCP sessions (runtime.agents.mcp_sessions.ToolSessions): one per tool server
    # for the whole run of the turn. None: a call in a session of its own.
    sessions: Any = None


class ToolAsks:
    """A call still open whose server asks a person something before it answers (MCP's
    elicitation, runtime.agents.mcp_sessions): what ``ToolServer.call`` returns then.
    ``answer`` gives the person's answer (MCP's ElicitResult: ``{action: accept | decline |
    cancel, content?}``) to the server and waits for what comes next: the call's result (or
    ToolError, ToolOutcomeLost), or another question."""

    message: str
    mode: str  # form (a schema to fill in) | url (a page to open)
    schema: dict
    url: str

    def answer(self, result: dict) -> "dict | ToolAsks":
        raise NotImplementedError


class ToolServer(Protocol):
    """What the turn loop sends a call to: a demo server here, or a tenant's MCP or HTTP
    server (runtime.agents.toolservers); ``server_for`` there picks one."""

    def call(self, tool: str, arguments: dict, ctx: CallContext) -> "dict | ToolAsks": ...


@dataclass(frozen=True)
class Policy:
    """What the tool policy says of one call: the rule that holds it (runtime.agents.policies)
    read into what the turn and the decision flow act on."""

    action: str  # allow | approve | deny
    # Who decides a held call: the tenant's operators unless the policy entry says
    # ``deciders: either`` (the caller in band, or an operator) or ``caller``. The caller
    # never sees a call's arguments (interactions/v1's ``detail`` never carries them), so a
    # gateway in front of another company's agents holds its calls for its own people.
    deciders: str = "operators"  # either | operators (``caller`` is approvers: [caller])
    bulk: bool = True  # False: an operator decides each held call on its own page
    # Who may decide (runtime.decisions.approvers): roles, group:<slug>, caller; () is the
    # default. With stages: the first stage's.
    approvers: tuple[str, ...] = ()
    # How many distinct people approve, in all (the sum of the stages' numbers).
    required: int = 1
    # Seconds the call may take (``timeout: 60s``), instead of its tool server's timeout.
    timeout: float | None = None
    # The approval's stages, decided in order: one (``approvers``, ``required``) unless the
    # rule says ``stages``.
    stages: tuple[Stage, ...] = ()
    # The entry and rule that hold the call (None: a Policy made by hand).
    rule: PolicyRule | None = None


# A tool call's own timeout (the policy's ``timeout``): at most this long.
MAX_TOOL_TIMEOUT_SECONDS = 3600


def timeout_seconds(value) -> float:
    """A policy's ``timeout`` (``60s``, ``5m``, or a number of seconds) in seconds; ValueError
    saying what is wrong."""
    if isinstance(value, bool):
        raise ValueError("must be a duration such as 30s or 5m")
    if isinstance(value, int | float):
        seconds = float(value)
    else:
        seconds = float(duration_seconds(value))
    if not 0 < seconds <= MAX_TOOL_TIMEOUT_SECONDS:
        raise ValueError(f"must be more than 0 and at most {MAX_TOOL_TIMEOUT_SECONDS}s")
    return seconds


def tenant_server(agent: Agent, server: str) -> ServerRow | None:
    """The agent's tenant's active tool server of that name (None for a demo server's name)."""
    if server in SERVERS or server == BUILTIN_SERVER:
        return None
    return ServerRow.objects.filter(tenant_id=agent.tenant_id, name=server, active=True).first()


def discovered_spec(declared: dict, server: str, found: dict) -> dict:
    """A tool as offered: what AGENT.md declares wins, discovery fills in the rest."""
    return {
        **declared,
        "server": server,
        "tool": found["name"],
        "description": declared.get("description") or found.get("description", ""),
        "schema": declared.get("schema") or found.get("inputSchema") or {"type": "object"},
    }


def tool_spec(agent: Agent, server: str, tool: str) -> dict | None:
    """The spec of a tool the agent may call, or None. AGENT.md names a tool as
    ``{server, tool}`` or all of a tenant server's tools as ``{server}``; a tenant server's
    tool counts only while its last discovery found it, and takes its schema from there
    unless AGENT.md gives one."""
    declared = [
        spec
        for spec in agent.tools or []
        if spec.get("server") == server and spec.get("tool") in (tool, None)
    ]
    if not declared:
        return None
    exact = next((spec for spec in declared if spec.get("tool") == tool), declared[0])
    if server in SERVERS:
        return exact if exact.get("tool") == tool else None
    row = tenant_server(agent, server)
    found = row.tool_named(tool) if row is not None else None
    return discovered_spec(exact, server, found) if found is not None else None


def tool_unavailable(agent: Agent, server: str, tool: str) -> str | None:
    """Why a tenant server's tool cannot be called now (the server is gone, or its last
    discovery did not find the tool), for the model; None for the demo servers."""
    if server in SERVERS:
        return None
    row = tenant_server(agent, server)
    if row is None:
        return f"there is no tool server {server} for this tenant"
    if row.tool_named(tool) is None:
        return f"the tool server {server} does not offer {tool} (as of its last discovery)"
    return None


def policy_for(agent: Agent, server: str, tool: str, arguments: Any) -> Policy:
    """What the policy says of this call: the rule of the most specific entry that holds
    for its arguments (runtime.agents.policies.policy_rule_for); undeclared means approve, so
    that nothing risky runs without a person unless the policy says so."""
    return policy_of(policy_rule_for(agent, server, tool, arguments))


def _required(value) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        return 1
    return min(value, MAX_REQUIRED)


def policy_of(match: PolicyRule) -> Policy:
    """The Policy of one rule (as policy_rule_for found it)."""
    rule = match.rule
    approvers = tuple(str(a) for a in rule.get("approvers") or ())
    deciders = rule.get("deciders", "operators")
    if deciders == "caller" and not approvers:
        # The caller alone decides, in band: the approvers are the caller.
        approvers = ("caller",)
    if approvers:
        # Named approvers say whether the caller may answer in band: only with ``caller``.
        deciders = "either" if "caller" in approvers else "operators"
    written = rule.get("stages")
    if isinstance(written, list) and written:
        stages = tuple(Stage.of(stage) for stage in written[:MAX_STAGES])
        stages = tuple(Stage(s.approvers, min(s.required, MAX_REQUIRED), s.title) for s in stages)
        approvers = stages[0].approvers
    else:
        stages = (Stage(approvers, _required(rule.get("required", 1))),)
    required = sum(stage.required for stage in stages)
    if required > 1 or len(stages) > 1:
        deciders = "operators"  # people decide; a caller's answer is not one of them
    try:
        timeout = timeout_seconds(rule["timeout"]) if "timeout" in rule else None
    except ValueError:
        timeout = None  # refused when the agent was loaded; an edit by hand is ignored
    return Policy(
        action=match.action,
        deciders=deciders,
        bulk=rule.get("bulk", True) is not False,
        approvers=approvers,
        required=required,
        timeout=timeout,
        stages=stages,
        rule=match,
    )


def policy_rule(agent: Agent, server: str, tool: str) -> str | dict:
    """The policy's entry for the tool as written: ``server/tool``, then ``server``, else
    ``approve`` (a conditional entry is its list of rules: policy_rule_for picks the one
    that holds a call)."""
    rules = agent.tool_policy or {}
    return rules.get(f"{server}/{tool}", rules.get(server, "approve"))


def validate_arguments(schema: dict | None, arguments: Any) -> str | None:
    """Return an error text for the model, or None when the arguments fit the schema."""
    if not isinstance(arguments, dict):
        return "arguments must be an object"
    if not schema:
        return None
    try:
        canonical = json.dumps(schema, sort_keys=True)
        # A tool server's schema is its own: only those of a sensible size are kept.
        validator = (
            _validator(canonical)
            if len(canonical) <= SCHEMA_CACHE_MAX_CHARS
            else _validator.__wrapped__(canonical)
        )
    except jsonschema.SchemaError as exc:
        return f"the tool's schema is invalid: {exc.message}"
    except (TypeError, ValueError):
        return "the tool's schema is invalid: it is not JSON"
    # What jsonschema.validate raises: the error that best explains the misfit.
    try:
        error = jsonschema.exceptions.best_match(validator.iter_errors(arguments))
    except Unresolvable as exc:
        # A reference outside the schema (refused where schemas are taken in; one cached
        # before that): never fetched (runtime.agents.schema_refs), so the call cannot be
        # checked, and is not made.
        return f"the tool's schema cannot be used: its reference {exc.ref!r} does not resolve (only references inside the schema are followed)"
    except RecursionError:
        return "the tool's schema cannot be used: its references loop"
    if error is not None:
        where = "/".join(str(p) for p in error.absolute_path) or "arguments"
        return f"invalid arguments at {where}: {error.message}"
    return None


SCHEMA_CACHE_MAX_CHARS = 64 * 1024


@functools.lru_cache(maxsize=1024)
def _validator(schema_json: str):
    """A validator of the schema (given as canonical JSON), the schema checked once against
    its meta-schema: ``jsonschema.validate`` checked it on every call, about a tenth of the
    CPU of a turn that calls a tool (py-spy, bench/turn_cost.py). A schema that does not
    check raises SchemaError, and is not kept. Its references resolve inside it or not at
    all: nothing is ever fetched (runtime.agents.schema_refs)."""
    return local_validator(json.loads(schema_json))


def demo_record(*, effect_id: str, tenant, server: str, kind: str, data: dict) -> int:
    """The id of the demo servers' record of the call ``effect_id``, made unless it is there
    (a call sent again finds the first one, as a real server's idempotency key would).

    One statement, INSERT ... ON CONFLICT DO NOTHING (both backends), and a read only when
    the record was there: the get_or_create it replaces was a read, then a transaction of its
    own around the insert, on every deployment (a resumed deployer turn's wait on the tool,
    bench/decisions.py)."""
    record = DemoRecord(tenant=tenant, server=server, kind=kind, effect_id=effect_id, data=data)
    inserted = demo_record_insert(record)
    if inserted is not None:
        return inserted
    return DemoRecord.objects.filter(effect_id=effect_id).values_list("pk", flat=True).get()


class DeployServer:
    """``deploy / deploy_build``: records a deployment of a build to an environment."""

    def call(self, tool: str, arguments: dict, ctx: CallContext) -> dict:
        if tool != "deploy_build":
            raise ToolError(f"deploy has no tool {tool!r}")
        # A real deployment takes a while; the demo can be told how long (reliability tests
        # kill a worker in the middle of one).
        duration = float(arguments.get("durationSeconds", 0) or 0)
        if duration > 0:
            time.sleep(min(duration, 60))
        record = demo_record(
            effect_id=ctx.effect_id,
            tenant=ctx.tenant,
            server="deploy",
            kind="deployment",
            data=dict(arguments),
        )
        return {
            "deploymentId": f"dep-{record}",
            "build": arguments.get("build"),
            "environment": arguments.get("environment"),
        }


class GithubServer:
    """``github / create_pull_request``: needs the tenant's github connection."""

    def call(self, tool: str, arguments: dict, ctx: CallContext) -> dict:
        if tool != "create_pull_request":
            raise ToolError(f"github has no tool {tool!r}")
        from connections.selectors import connection_secret_for

        if not connection_secret_for(tenant=ctx.tenant, app_slug="github"):
            raise ToolError(
                "github is not connected for this tenant; ask for the connection first."
            )
        number = demo_record(
            effect_id=ctx.effect_id,
            tenant=ctx.tenant,
            server="github",
            kind="pull_request",
            data=dict(arguments),
        )
        return {
            "number": number,
            "url": f"https://github.example/{arguments.get('repo', 'repo')}/pull/{number}",
        }


SERVERS: dict[str, ToolServer] = {"deploy": DeployServer(), "github": GithubServer()}


def tools_offered(agent: Agent) -> list[dict]:
    """The tools a model may call for this agent, each ``{server, tool, description, schema}``.

    The tools its AGENT.md declares: of the demo servers as declared; of the tenant's tool
    servers those their last discovery found (``{server: NAME}`` is all of them), with the
    discovered description and schema unless AGENT.md gives its own. Providers that show
    tools to a model (runtime.agents.llm) read this.
    """
    offered: list[dict] = []
    seen: set[tuple[str, str]] = set()
    rows: dict[str, ServerRow | None] = {}
    for spec in agent.tools or []:
        server, tool = spec.get("server"), spec.get("tool")
        if not server:
            continue
        if server in SERVERS:
            if tool and (server, tool) not in seen:
                seen.add((server, tool))
                offered.append(dict(spec))
            continue
        if server not in rows:
            rows[server] = tenant_server(agent, server)
        row = rows[server]
        if row is None:
            continue
        found = [row.tool_named(tool)] if tool else list(row.tools or [])
        for item in found:
            if item is not None and (server, item["name"]) not in seen:
                seen.add((server, item["name"]))
                offered.append(discovered_spec(spec, server, item))
    return offered
