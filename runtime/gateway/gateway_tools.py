"""The tools a gateway offers its MCP clients (the agent's tools, runtime.tools.catalog, less
those its policy always denies) and what its policy says of one call."""

import re
from dataclasses import dataclass
from typing import Any

from runtime.agents.agent_models import Agent
from runtime.policy.lookup import policy_for
from runtime.policy.rules import policy_rule_for
from runtime.tools.catalog import tenant_server, tool_spec, tools_offered, validate_arguments
from runtime.tools.servers import McpToolServer, server_for

# MCP clients that name a tool after its server keep names short and plain (many accept only
# [A-Za-z0-9_-], 64 characters): ``<server>__<tool>``, anything else made "_".
NAME_UNSAFE = re.compile(r"[^A-Za-z0-9_-]")
NAME_MAX = 64
SEPARATOR = "__"
HELD_NOTE = "A person approves each call of this tool before it runs; the call waits for them."


def tool_name(server: str, tool: str) -> str:
    return NAME_UNSAFE.sub("_", f"{server}{SEPARATOR}{tool}")[:NAME_MAX]


@dataclass(frozen=True)
class GatewayTool:
    """One tool as the gateway lists it."""

    name: str
    server: str
    tool: str
    description: str
    schema: dict
    annotations: dict
    held: bool
    # What the policy says of every call of the tool, whatever its arguments (a check with
    # nothing to look up: runtime.gateway.gateway_tools.call_check_known), or None when that
    # depends on them (a conditional entry) and each call is checked (gateway_call_check).
    known: "CallCheck | None" = None

    def listed(self) -> dict:
        """The tool as ``tools/list`` gives it (MCP's Tool)."""
        description = self.description.strip()
        if self.held:
            description = f"{description}\n\n{HELD_NOTE}" if description else HELD_NOTE
        listed = {"name": self.name, "description": description, "inputSchema": self.schema}
        if self.annotations:
            listed["annotations"] = self.annotations
        return listed


def _actions(agent: Agent, server: str, tool: str) -> set[str]:
    """Every action the policy may take on a call of the tool, whatever its arguments."""
    policy = agent.tool_policy or {}
    for key in (f"{server}/{tool}", server):
        written = policy.get(key)
        if isinstance(written, str):
            return {written}
        if isinstance(written, dict):
            return {str(written.get("action", "approve"))}
        if isinstance(written, list) and written:
            actions = {str(rule.get("action", "approve")) for rule in written}
            if written[-1].get("when"):
                # A call none of whose rules holds falls through to what comes after: the
                # listing says what is strictest of that, a person's approval.
                actions.add("approve")
            return actions
    return {str(policy_rule_for(agent, server, tool, {}).rule.get("action", "approve"))}


def gateway_tools(agent: Agent) -> list[GatewayTool]:
    """The tools the gateway lists: each tool the agent may call that its policy does not
    always deny, with the upstream server's annotations, held tools saying a person approves."""
    tools = []
    rows: dict = {}
    for spec in tools_offered(agent):
        server, tool = spec["server"], spec["tool"]
        actions = _actions(agent, server, tool)
        if actions == {"deny"}:
            continue
        if server not in rows:
            rows[server] = tenant_server(agent, server)
        found = rows[server].tool_named(tool) if rows[server] is not None else None
        known = None
        if not _conditional(agent, server, tool):
            policy = policy_for(agent, server, tool, {})
            kind = "mcp" if rows[server] is not None and rows[server].kind == "mcp" else "local"
            known = CallCheck(policy.action, kind=kind, timeout=policy.timeout, row=rows[server])
        tools.append(
            GatewayTool(
                name=tool_name(server, tool),
                server=server,
                tool=tool,
                description=str(spec.get("description") or ""),
                schema=spec.get("schema") or {"type": "object"},
                annotations=dict((found or {}).get("annotations") or {}),
                held="approve" in actions,
                known=known,
            )
        )
    return tools


def _conditional(agent: Agent, server: str, tool: str) -> bool:
    """Whether what the policy says of a call of the tool depends on its arguments."""
    policy = agent.tool_policy or {}
    return any(isinstance(policy.get(key), list) for key in (f"{server}/{tool}", server))


def call_check_known(tool: GatewayTool, arguments: dict) -> "CallCheck | None":
    """The check of a call of a tool whose policy does not depend on the arguments, made with
    what the tool table holds (its schema, its server): no query. None: check it in full."""
    known = tool.known
    if known is None or known.action != "allow":
        return None
    error = validate_arguments(tool.schema, arguments)
    if error:
        return CallCheck("refuse", error)
    return known


@dataclass(frozen=True)
class CallCheck:
    """What the gateway does with a call: ``allow`` (send it upstream now), ``approve`` (hold
    it for a person), ``refuse`` (with ``error``: denied, invalid, unknown)."""

    action: str
    error: str = ""
    kind: str = ""  # allow: "mcp" (a tenant's MCP server), else "local" (demo or HTTP server)
    timeout: float | None = None
    row: Any = None  # "mcp": the tool server's row


def gateway_call_check(*, agent: Agent, server: str, tool: str, arguments: dict) -> CallCheck:
    """Check one call as a hosted agent's is checked (runtime.turn.calls.call_error): a tool it
    offers, arguments that fit its schema; then what the policy says."""
    spec = tool_spec(agent, server, tool)
    found = server_for(agent.tenant, server) if spec is not None else None
    if spec is None or found is None:
        return CallCheck("refuse", f"unknown tool {server} / {tool}")
    error = validate_arguments(spec.get("schema"), arguments)
    if error:
        return CallCheck("refuse", error)
    policy = policy_for(agent, server, tool, arguments)
    if policy.action == "deny":
        return CallCheck("refuse", "denied by the tool policy: this call is never run")
    if isinstance(found, McpToolServer):
        return CallCheck(policy.action, kind="mcp", timeout=policy.timeout, row=found.row)
    return CallCheck(policy.action, kind="local", timeout=policy.timeout)


def gateway_mcp_servers(agent: Agent) -> list:
    """The tenant MCP servers among the gateway's tools (in the order AGENT.md names them),
    whose resources, prompts and completions it passes through."""
    rows, seen = [], set()
    for spec in agent.tools or []:
        server = spec.get("server")
        if not server or server in seen:
            continue
        seen.add(server)
        found = server_for(agent.tenant, server)
        if isinstance(found, McpToolServer):
            rows.append(found.row)
    return rows
