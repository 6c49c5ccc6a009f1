"""Fixtures the core's tests share across its folders (each folder's own are in its
conftest.py; the world, agents and tenants are tests/conftest.py's)."""

import pytest

from tests.mcp_servers import StatefulMcp


@pytest.fixture
def loopback_allowed(settings):
    """The test's servers listen on 127.0.0.1, which the outbound guard refuses unless told
    (production refuses loopback by default). Asked for by ``usefixtures``."""
    settings.PUSH_ALLOW_PRIVATE_HOSTS = True


@pytest.fixture
def stateful_mcp():
    """The stateful MCP server of tests/mcp_servers.py, on a local port (tools' sessions, a
    turn's elicitation)."""
    server = StatefulMcp()
    yield server
    server.stop()
