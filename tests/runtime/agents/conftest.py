"""Fixtures the tests of agents and AGENT.md (runtime/agents/) share. None yet: they use
tests/conftest.py's (the world, its agents, ``make_agent``) and tests/core.py's
``load_agents``; a fixture two of them need goes here."""
