"""Fixtures the tests of the turn path (runtime/turn/) share. None yet: they use
tests/conftest.py's and tests/runtime/conftest.py's (``loopback_allowed``, ``stateful_mcp``);
a fixture two of them need goes here."""
