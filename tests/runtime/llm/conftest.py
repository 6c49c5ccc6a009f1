"""Fixtures the tests of the model providers (runtime/llm/) share. None yet: each provider's
tests set up their own server (tests/llm_stub.py, tests/agent_server.py) with the settings
they test; a fixture two of them need goes here."""
