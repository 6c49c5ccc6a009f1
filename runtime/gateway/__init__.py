"""The MCP gateway's core: an agent with no model whose tools an MCP client calls. A held call
becomes a turn of that agent with one call in it, held, decided and sent exactly as a hosted
agent's (runtime.turn); what an MCP client needs besides (joining a call sent again, its
outcome as a tool result) is here."""
