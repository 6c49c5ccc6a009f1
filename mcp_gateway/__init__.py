"""The MCP gateway's edge: a gateway (an agent with no model, runtime.gateway) served to MCP
clients over Streamable HTTP at /mcp/<tenant>/<gateway>/ with the official ``mcp`` package's
server, bearer tokens as the A2A endpoint takes them."""
