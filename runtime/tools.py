"""Tools, the tool policy, and the tool servers behind one interface.

A tool is ``<server> / <tool>`` with a JSON schema for its arguments. The demo servers are
local and offline but behave like real ones: they validate, they can fail, and what they do
is recorded. HTTP and MCP servers will implement the same ``ToolServer`` protocol.
"""

import time
from dataclasses import dataclass
from typing import Any, Protocol

import jsonschema

from runtime.models import Agent, DemoRecord

BUILTIN_SERVER = "countersign"
REQUEST_CONNECTION = "request_connection"
REQUEST_CONNECTION_SCHEMA = {
    "type": "object",
    "properties": {"app": {"type": "string", "minLength": 1}, "reason": {"type": "string"}},
    "required": ["app"],
}


class ToolError(Exception):
    """The tool ran and failed; the model sees the message."""


@dataclass(frozen=True)
class CallContext:
    tenant: Any
    effect_id: str
    subject: str


class ToolServer(Protocol):
    def call(self, tool: str, arguments: dict, ctx: CallContext) -> dict: ...


@dataclass(frozen=True)
class Policy:
    action: str  # allow | approve | deny
    deciders: str = "either"  # either | operators


def tool_spec(agent: Agent, server: str, tool: str) -> dict | None:
    for spec in agent.tools or []:
        if spec.get("server") == server and spec.get("tool") == tool:
            return spec
    return None


def policy_for(agent: Agent, server: str, tool: str) -> Policy:
    """The most specific rule wins: ``server/tool``, then ``server``; undeclared means approve,
    so that nothing risky runs without a person unless the policy says so."""
    rules = agent.tool_policy or {}
    rule = rules.get(f"{server}/{tool}", rules.get(server, "approve"))
    if isinstance(rule, dict):
        return Policy(action=rule.get("action", "approve"), deciders=rule.get("deciders", "either"))
    return Policy(action=rule)


def validate_arguments(schema: dict | None, arguments: Any) -> str | None:
    """Return an error text for the model, or None when the arguments fit the schema."""
    if not isinstance(arguments, dict):
        return "arguments must be an object"
    if not schema:
        return None
    try:
        jsonschema.validate(arguments, schema)
    except jsonschema.ValidationError as exc:
        where = "/".join(str(p) for p in exc.absolute_path) or "arguments"
        return f"invalid arguments at {where}: {exc.message}"
    except jsonschema.SchemaError as exc:
        return f"the tool's schema is invalid: {exc.message}"
    return None


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
        record, _ = DemoRecord.objects.get_or_create(
            effect_id=ctx.effect_id,
            defaults={
                "tenant": ctx.tenant,
                "server": "deploy",
                "kind": "deployment",
                "data": dict(arguments),
            },
        )
        return {
            "deploymentId": f"dep-{record.pk}",
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
        record, _ = DemoRecord.objects.get_or_create(
            effect_id=ctx.effect_id,
            defaults={
                "tenant": ctx.tenant,
                "server": "github",
                "kind": "pull_request",
                "data": dict(arguments),
            },
        )
        number = record.pk
        return {
            "number": number,
            "url": f"https://github.example/{arguments.get('repo', 'repo')}/pull/{number}",
        }


SERVERS: dict[str, ToolServer] = {"deploy": DeployServer(), "github": GithubServer()}


def server_for(name: str) -> ToolServer | None:
    return SERVERS.get(name)


def tools_offered(agent: Agent) -> list[dict]:
    """The tools a model may call for this agent, each ``{server, tool, description, schema}``.

    Today these are the tools its AGENT.md declares; tool servers (MCP, HTTP) add the tools
    they were found to offer. Providers that show tools to a model (runtime.llm) read this.
    """
    return [dict(spec) for spec in agent.tools or [] if spec.get("server") and spec.get("tool")]
