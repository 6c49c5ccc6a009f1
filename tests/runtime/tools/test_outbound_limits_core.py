"""The total deadline and byte cap of outbound reads where the turn
waits on a server: a tool server (HTTP and MCP: calls and tool lists), a hosted model, an
agent over HTTP. Against loopback servers that trickle and that flood: a trickled answer is a
timeout (the call uncertain, the model call retried then failed), a flood stops at its cap
with a clear error and is not retried."""

import base64
import secrets

import pytest

from runtime.agents.agent_models import ToolServer
from runtime.agents.agentfile import AgentSpec, agent_upsert
from runtime.decisions.decision_models import Effect
from runtime.kernel.task_models import TaskState
from runtime.llm.http_agent import PARTNER_MESSAGE
from runtime.tools.servers import DiscoveryError, tool_server_refresh
from tests.core import REPORT_RESULT, run, send, start, status_text
from tests.hostile import gzip_bomb, huge, trickling
from tests.mcp_servers import mcp_tool_server

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("loopback_allowed")]

MIB = 1024 * 1024


def http_tool_server(tenant, url: str, timeout: int = 30) -> ToolServer:
    server = ToolServer(
        tenant=tenant,
        name="calc",
        kind="http",
        url=url,
        timeout_seconds=timeout,
        tools=[{"name": "get", "description": "", "inputSchema": {"type": "object"}}],
    )
    server.signing_secret_new()
    server.save()
    return server


def calling_agent(make_agent, tool: str = "get", **args):
    make_agent(
        "caller",
        [{"call": {"server": "calc", "tool": tool, "args": args}}, *REPORT_RESULT],
        tools=[{"server": "calc"}],
        tool_policy={"calc": "allow"},
    )


# --- tool servers ------------------------------------------------------------------------------


def test_an_http_tool_that_trickles_its_answer_is_uncertain_at_its_timeout(agents, make_agent):
    with trickling(total=2000, every=0.05) as server:
        http_tool_server(agents.a.tenant, server.url, timeout=1)
        calling_agent(make_agent)
        task = start(agents.a, "caller", "go")
        assert server.left_early.wait(10)
    # Sent, and no whole answer in time: it may have acted.
    assert task.state == TaskState.WORKING
    effect = Effect.objects.get()
    assert effect.state == Effect.State.UNCERTAIN
    assert effect.outcome == {
        "error": "calc did not answer the call of get within 1s; it may have acted"
    }


@pytest.mark.parametrize("declared", [True, False])
def test_an_http_tool_that_floods_its_answer_fails_at_the_cap(
    agents, make_agent, settings, declared
):
    settings.TOOL_RESULT_MAX_BYTES = MIB
    with huge(200 * MIB, declared=declared) as server:
        http_tool_server(agents.a.tenant, server.url)
        calling_agent(make_agent)
        task = start(agents.a, "caller", "go")
        assert server.left_early.wait(10)
    error = f"calc answered the call of get with more than {MIB} bytes (not read)"
    assert (task.state, status_text(task)) == (TaskState.COMPLETED, f"error: {error}")
    effect = Effect.objects.get()
    assert (effect.state, effect.outcome) == (Effect.State.FAILED, {"error": error})
    assert server.sent < 20 * MIB


def test_a_compressed_flood_of_a_tool_fails_at_the_cap_of_what_it_inflates_to(
    agents, make_agent, settings
):
    settings.TOOL_RESULT_MAX_BYTES = MIB
    bomb, _ = gzip_bomb(50 * MIB)
    with bomb as server:
        http_tool_server(agents.a.tenant, server.url)
        calling_agent(make_agent)
        task = start(agents.a, "caller", "go")
    assert (
        status_text(task)
        == f"error: calc answered the call of get with more than {MIB} bytes (not read)"
    )


def test_an_http_tool_list_over_its_cap_fails_the_refresh_and_keeps_the_cache(agents, settings):
    settings.TOOL_LIST_MAX_BYTES = MIB
    with huge(300 * MIB, declared=False) as server:
        row = http_tool_server(agents.a.tenant, server.url)
        with pytest.raises(DiscoveryError, match=f"answered list_tools with more than {MIB} bytes"):
            tool_server_refresh(server=row)
    row.refresh_from_db()
    assert [t["name"] for t in row.tools] == ["get"]
    assert "more than" in row.refresh_error


@pytest.fixture
def flooding_mcp(mcp_stub):
    @mcp_stub.mcp.tool(description="Answers far too much.")
    def flood(size: int) -> str:
        return "x" * size

    return mcp_stub


def test_an_mcp_result_over_its_cap_is_a_tool_error_at_once(
    agents, make_agent, settings, flooding_mcp
):
    row = mcp_tool_server(agents.a.tenant, flooding_mcp.url, timeout_seconds=60)
    tool_server_refresh(server=row)
    settings.TOOL_RESULT_MAX_BYTES = MIB
    calling_agent(make_agent, "flood", size=3 * MIB)
    task = start(agents.a, "caller", "go")
    # Failed at the cap, not left to the 60 s timeout (which would make it uncertain).
    error = f"calc answered the call of flood with more than {MIB} bytes (not read)"
    assert (task.state, status_text(task)) == (TaskState.COMPLETED, f"error: {error}")
    assert Effect.objects.get().state == Effect.State.FAILED


def test_an_mcp_tool_list_over_its_cap_fails_the_refresh(agents, settings, flooding_mcp):
    @flooding_mcp.mcp.tool(description="d" * (2 * MIB))
    def wordy() -> str:
        return ""

    settings.TOOL_LIST_MAX_BYTES = MIB
    row = mcp_tool_server(agents.a.tenant, flooding_mcp.url, timeout_seconds=60)
    with pytest.raises(DiscoveryError, match=f"answered tools/list with more than {MIB} bytes"):
        tool_server_refresh(server=row)


# --- models --------------------------------------------------------------------------------------


@pytest.fixture
def hosted_agent(agents, settings, monkeypatch):
    """An openai agent whose model server is the installer's OPENAI_BASE_URL, given later."""
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-" + "k" * 30)
    settings.MODEL_RETRY_BASE_SECONDS = 0.01
    spec = AgentSpec(
        slug="assistant",
        name="assistant",
        description="An agent on a hosted model.",
        skills=[{"id": "main", "name": "Main", "description": "d", "tags": [], "examples": []}],
        instructions="Be brief.",
        model={"provider": "openai", "model": "gpt-4o-mini"},
    )
    return agent_upsert(tenant=agents.a.tenant, spec=spec)[0]


def test_a_model_that_trickles_its_reply_times_out_each_attempt(agents, hosted_agent, settings):
    settings.MODEL_TIMEOUT_SECONDS = 1
    settings.MODEL_MAX_ATTEMPTS = 2
    with trickling(total=2000, every=0.05) as server:
        settings.OPENAI_BASE_URL = f"http://127.0.0.1:{server.port}/v1"
        task = run(send(agents.a, "assistant", "hello"))
    assert task.state == TaskState.FAILED
    assert status_text(task) == (
        "The model provider did not answer after 2 attempts (last: no answer within 1s)."
    )
    assert server.requests == 2


def test_a_model_reply_over_its_cap_fails_the_turn_at_once(agents, hosted_agent, settings):
    settings.MODEL_REPLY_MAX_BYTES = MIB
    settings.MODEL_MAX_ATTEMPTS = 3
    with huge(50 * MIB, declared=False) as server:
        settings.OPENAI_BASE_URL = f"http://127.0.0.1:{server.port}/v1"
        task = run(send(agents.a, "assistant", "hello"))
        assert server.left_early.wait(10)
    assert task.state == TaskState.FAILED
    assert status_text(task) == (
        f"The model's reply is larger than {MIB} bytes (MODEL_REPLY_MAX_BYTES)."
    )
    assert server.requests == 1  # the same request would get the same reply: not retried


# --- an agent over HTTP ----------------------------------------------------------------------------


@pytest.fixture
def http_agent(agents, settings, monkeypatch):
    def make(url: str, timeout: float = 30):
        name = "HOSTILE_AGENT_SECRET"
        settings.CREDENTIAL_ENV_NAMES = [*settings.CREDENTIAL_ENV_NAMES, name]
        monkeypatch.setenv(name, "whsec_" + base64.b64encode(secrets.token_bytes(32)).decode())
        monkeypatch.setattr("runtime.llm.http_agent.RETRY_BASE_SECONDS", 0.01)
        spec = AgentSpec(
            slug="byo",
            name="byo",
            description="An agent behind a URL.",
            skills=[{"id": "main", "name": "Main", "description": "d", "tags": [], "examples": []}],
            model={"provider": "http", "url": url, "secret": name, "timeout": timeout},
        )
        return agent_upsert(tenant=agents.a.tenant, spec=spec)[0]

    return make


def last_error(task) -> str:
    last = task.transcript[-1]
    assert last["type"] == "action" and last["action"]["kind"] == "fail"
    return last["action"]["error"]


def test_an_http_agent_that_trickles_is_cut_off_at_its_timeout(agents, http_agent):
    with trickling(total=2000, every=0.05) as server:
        http_agent(server.url, timeout=1)
        task = run(send(agents.a, "byo", "hello"))
    assert (task.state, status_text(task)) == (TaskState.FAILED, PARTNER_MESSAGE)
    assert last_error(task) == "no usable answer after 3 attempts: timed out after 1s"
    assert server.requests == 3


def test_an_http_agent_reply_over_its_cap_fails_at_once(agents, http_agent, settings):
    settings.AGENT_REPLY_MAX_BYTES = 100_000
    with huge(50 * MIB, declared=False) as server:
        http_agent(server.url)
        task = run(send(agents.a, "byo", "hello"))
    assert (task.state, status_text(task)) == (TaskState.FAILED, PARTNER_MESSAGE)
    assert last_error(task) == "the reply is larger than 100000 bytes"
    assert server.requests == 1
