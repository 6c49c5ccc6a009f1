"""Reads of a tenant's agents."""

from runtime.agents.agent_models import Agent, ToolServer


def agents_for_tenant(*, tenant) -> list[Agent]:
    return list(Agent.objects.filter(tenant=tenant).order_by("slug").only("pk", "slug", "name"))


def discovered_tools(*, tenant) -> dict[str, list]:
    """The tools the last discovery of each of the tenant's active tool servers found, by
    server name (as cached: [{name, description, inputSchema, annotations}])."""
    rows = ToolServer.objects.filter(tenant=tenant, active=True).values_list("name", "tools")
    return {name: tools if isinstance(tools, list) else [] for name, tools in rows}
