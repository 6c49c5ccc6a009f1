"""Fixtures the tests of tool servers and tools (runtime/tools/) share; the servers
themselves are tests/mcp_servers.py's, and ``loopback_allowed`` is tests/runtime/conftest.py's."""

import pytest

from tests.mcp_servers import McpStub


@pytest.fixture
def mcp_stub():
    """A stateless MCP server on a local port that records its calls (McpStub)."""
    stub = McpStub()
    yield stub
    stub.stop()
