"""Fixtures the tests of the core's Django admin (runtime/admin/) share. None yet: they use
tests/conftest.py's and tests/admin_pages.py's helpers; a fixture two of them need goes
here."""
