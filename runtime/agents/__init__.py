"""Agents and what they use: AGENT.md, tools and tool servers, the tool policy's syntax,
credentials, ladders, limits, model providers (llm/) and the demo agents (the *.md files
beside this package). Above the kernel, below decisions and the turn."""
