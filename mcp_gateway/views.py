"""The gateways page: each MCP gateway of the member's tenant with what to paste into an MCP
client (its URL and the Authorization header), and the tools it offers."""

import json

from django.shortcuts import render
from django.views.decorators.http import require_GET

from runtime.agents.agent_selectors import gateways_for_tenant
from runtime.gateway.gateway_tools import gateway_tools
from tenants.access import member_required

TOKEN_PLACEHOLDER = "<a partner token of this tenant>"


def client_config(name: str, url: str) -> str:
    """The ``mcpServers`` entry most MCP clients read (Streamable HTTP with a header)."""
    entry = {
        "type": "http",
        "url": url,
        "headers": {"Authorization": f"Bearer {TOKEN_PLACEHOLDER}"},
    }
    return json.dumps({"mcpServers": {name: entry}}, indent=2)


@require_GET
@member_required
def gateways(request):
    tenant = request.membership.tenant
    rows = []
    for gateway in gateways_for_tenant(tenant=tenant):
        url = request.build_absolute_uri(f"/mcp/{tenant.slug}/{gateway.slug}/")
        rows.append(
            {
                "gateway": gateway,
                "url": url,
                "config": client_config(f"countersign-{gateway.slug}", url),
                "tools": gateway_tools(gateway),
            }
        )
    return render(request, "mcp_gateway/gateways.html", {"nav": "gateways", "rows": rows})
