"""Tool servers: the call protocol, the catalog of an agent's tools, the demo servers and
tenants' MCP and HTTP servers (discovery, sessions)."""
