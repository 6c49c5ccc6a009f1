"""Fixtures the tests of the kernel (runtime/kernel/: rows, state, wake-ups, push) share.
None yet: they use tests/conftest.py's (the world, its agents) and tests/runtime/conftest.py's;
a fixture two of them need goes here."""
