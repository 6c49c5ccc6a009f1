"""Fixtures the tests of the tool policy (runtime/policy/) share. None yet: they use
tests/conftest.py's (the world, its agents, ``make_agent``); a fixture two of them
need goes here."""
