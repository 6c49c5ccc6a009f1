"""Reads of a tenant's agents."""

from runtime.agents.agent_models import Agent, ToolServer


def agents_for_tenant(*, tenant) -> list[Agent]:
    return list(Agent.objects.filter(tenant=tenant).order_by("slug").only("pk", "slug", "name"))


def discovered_tools(*, tenant) -> dict[str, list]:
    """The tools the last discovery of each of the tenant's active tool servers found, by
    server name (as cached: [{name, description, inputSchema, annotations}])."""
    rows = ToolServer.objects.filter(tenant=tenant, active=True).values_list("name", "tools")
    return {name: tools if isinstance(tools, list) else [] for name, tools in rows}


def gateways_for_tenant(*, tenant) -> list[Agent]:
    """The tenant's MCP gateways (agents with no model, AGENT.md ``gateway``), by name."""
    return [
        agent
        for agent in Agent.objects.filter(tenant=tenant, model__provider="gateway").order_by("name")
        if agent.is_gateway
    ]
