"""The tools an agent may call: ``<server> / <tool>`` with a JSON schema for its
arguments, declared in AGENT.md or found by a tenant server's discovery, and the check of a
call's arguments against that schema."""

import functools
import json
from typing import Any

import jsonschema

from runtime.agents.agent_models import Agent
from runtime.agents.agent_models import ToolServer as ServerRow
from runtime.tools.demo_servers import SERVERS
from runtime.tools.schema_refs import Unresolvable, local_validator

BUILTIN_SERVER = "countersign"


REQUEST_CONNECTION = "request_connection"


REQUEST_CONNECTION_SCHEMA = {
    "type": "object",
    "properties": {"app": {"type": "string", "minLength": 1}, "reason": {"type": "string"}},
    "required": ["app"],
}


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
    if agent.is_gate:
        # A gate's tools are whatever its callers run: AGENT.md may give one a schema (its
        # arguments are checked, and an operator's edit), else any object of arguments.
        given = next((spec for spec in declared if spec.get("tool") == tool), None)
        return {"schema": {"type": "object"}, **(given or {}), "server": server, "tool": tool}
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
    discovery did not find the tool), for the model; None for the demo servers and a gate's
    tools."""
    if server in SERVERS or agent.is_gate:
        return None
    row = tenant_server(agent, server)
    if row is None:
        return f"there is no tool server {server} for this tenant"
    if row.tool_named(tool) is None:
        return f"the tool server {server} does not offer {tool} (as of its last discovery)"
    return None


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
        # before that): never fetched (runtime.tools.schema_refs), so the call cannot be
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
    all: nothing is ever fetched (runtime.tools.schema_refs)."""
    return local_validator(json.loads(schema_json))


def tools_offered(agent: Agent) -> list[dict]:
    """The tools a model may call for this agent, each ``{server, tool, description, schema}``.

    The tools its AGENT.md declares: of the demo servers as declared; of the tenant's tool
    servers those their last discovery found (``{server: NAME}`` is all of them), with the
    discovered description and schema unless AGENT.md gives its own. Providers that show
    tools to a model (runtime.llm) read this.
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


# The annotations of a discovered tool that are kept (MCP's ToolAnnotations;
# docs/reference/tool-servers.md), and what each kind of tool is by them.
HINTS = ("readOnlyHint", "destructiveHint", "idempotentHint", "openWorldHint")
