"""A live Countersign for the MCP gateway's tests (tests/live.py): uvicorn and a worker of its
own, allowed to reach MCP servers on loopback (the suite's stack is not), and MCP clients."""

import asyncio
import threading
from pathlib import Path

import httpx
import pytest

from runtime.agents.agentfile import agent_upsert, parse_agent_file
from tests.live import LiveStack

QUEUE = "mcp-gateway-live"
METRICS_TOKEN = "mcp-gateway-metrics"


@pytest.fixture(scope="session")
def _gateway_stack(django_db_setup, django_db_blocker, tmp_path_factory):
    with django_db_blocker.unblock():
        stack = LiveStack(
            tmp_path_factory.mktemp("mcp-gateway"),
            extra_env={
                "CELERY_QUEUE": QUEUE,
                "PUSH_ALLOW_PRIVATE_HOSTS": "true",
                "METRICS_TOKEN": METRICS_TOKEN,
            },
        ).start()
    yield stack
    stack.stop()


@pytest.fixture
def stack(transactional_db, _gateway_stack, settings):
    settings.CELERY_TASK_DEFAULT_QUEUE = QUEUE
    settings.PUSH_ALLOW_PRIVATE_HOSTS = True
    yield _gateway_stack
    _gateway_stack.quiesce()


def make_gateway(tmp_path: Path, tenant, text: str):
    """A gateway of ``tenant`` from an AGENT.md's text."""
    path = tmp_path / "AGENT.md"
    path.write_text(text)
    agent, _ = agent_upsert(tenant=tenant, spec=parse_agent_file(path))
    return agent


class InThread:
    """An MCP client's work run on an event loop of its own thread, while the test decides."""

    def __init__(self, work):
        self.result = None
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, args=(work,), daemon=True)
        self.thread.start()

    def _run(self, work):
        try:
            self.result = asyncio.run(work())
        except BaseException as exc:
            self.error = exc

    def join(self, timeout: float = 60):
        self.thread.join(timeout)
        assert not self.thread.is_alive(), "the MCP client did not finish"
        if self.error is not None:
            raise self.error
        return self.result


async def mcp_session(url: str, token: str | None, work, **client):
    """Open an MCP session with the gateway at ``url`` and run ``work(session)``."""
    from mcp import ClientSession
    from mcp.client.streamable_http import streamable_http_client

    headers = {"Authorization": f"Bearer {token}"} if token else {}
    async with (
        httpx.AsyncClient(headers=headers, timeout=httpx.Timeout(30, read=None)) as http,
        streamable_http_client(url, http_client=http) as (read, write, *_),
        ClientSession(read, write, **client) as session,
    ):
        await session.initialize()
        return await work(session)
