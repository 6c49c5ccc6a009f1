"""The reference MCP server ``everything`` (tests/runtime/tools/test_mcp_everything.py) behind a
gateway: its tools listed with the held one saying so, allowed calls sent straight to it on one
upstream session per client session, a held call approved and sent, and its resources,
prompts and completions passed through."""

import httpx
import pytest
from mcp.types import PromptReference

from runtime.decisions.decision_models import Interaction
from tenants.models import Tenant
from tests.mcp_gateway.conftest import METRICS_TOKEN, InThread, make_gateway, mcp_session
from tests.mcp_servers import mcp_tool_server, wait_for
from tests.runtime.tools.test_mcp_everything import Everything

pytestmark = pytest.mark.django_db(transaction=True)

EXPLORER = """---
name: explorer
description: The everything server, its sums held for a person.
gateway: {}
tools:
  - server: everything
policy:
  everything: allow
  everything/get-sum: approve
  everything/trigger-long-running-operation: deny
---
"""


@pytest.fixture
def everything():
    server = Everything()
    yield server
    server.stop()


@pytest.fixture
def explorer(stack, demo, everything, tmp_path):
    tenant = Tenant.objects.get(slug="demo")
    mcp_tool_server(tenant, everything.url, "everything", discover=True)
    make_gateway(tmp_path, tenant, EXPLORER)
    return f"{stack.url}/mcp/demo/explorer/"


def test_allowed_calls_go_straight_upstream_on_one_session(explorer, demo, everything, stack):
    opened = everything.count("Session initialized with ID")

    async def work(session):
        listed = await session.list_tools()
        first = await session.call_tool("everything__echo", {"message": "hi"})
        second = await session.call_tool("everything__echo", {"message": "again"})
        return listed, first, second

    listed, first, second = InThread(lambda: mcp_session(explorer, demo["token"], work)).join()
    tools = {tool.name: tool for tool in listed.tools}
    assert "everything__echo" in tools and "everything__get-sum" in tools
    # The policy's "deny" hides a tool; the held one says a person approves it.
    assert "everything__trigger-long-running-operation" not in tools
    assert "A person approves" in tools["everything__get-sum"].description
    assert "A person approves" not in tools["everything__echo"].description
    assert first.isError is False and first.content[0].text == "Echo: hi"
    assert second.content[0].text == "Echo: again"
    # Both calls on one upstream session, opened for this client session.
    assert everything.count("Session initialized with ID") - opened == 1
    assert not Interaction.objects.exists()
    # Counted by outcome.
    metrics = httpx.get(
        f"{stack.url}/metrics", headers={"Authorization": f"Bearer {METRICS_TOKEN}"}, timeout=10
    ).text
    line = 'countersign_mcp_gateway_calls_total{gateway="explorer",outcome="allowed"}'
    counted = [row for row in metrics.splitlines() if row.startswith(line)]
    assert counted and float(counted[0].split()[-1]) >= 2


def test_a_held_call_to_the_real_server_is_sent_once_approved(explorer, demo, stack):
    from tests.core import decide

    async def work(session):
        return await session.call_tool("everything__get-sum", {"a": 2, "b": 3})

    client = InThread(lambda: mcp_session(explorer, demo["token"], work))
    interaction = wait_for(
        lambda: Interaction.objects.filter(state=Interaction.State.OPEN).first(), "the approval"
    )
    decide(interaction, by="user:operator@demo.test", approved=True)
    result = client.join()
    assert result.isError is False
    assert "5" in result.content[0].text
    assert result.meta["countersign/receipt"]["decision"] == "approved"


def test_resources_prompts_and_completions_pass_through(explorer, demo):
    async def work(session):
        resources = await session.list_resources()
        read = await session.read_resource(resources.resources[0].uri)
        prompts = await session.list_prompts()
        prompt = await session.get_prompt("everything__simple-prompt")
        completed = await session.complete(
            PromptReference(type="ref/prompt", name="everything__completable-prompt"),
            {"name": "department", "value": "En"},
        )
        return resources, read, prompts, prompt, completed

    resources, read, prompts, prompt, completed = InThread(
        lambda: mcp_session(explorer, demo["token"], work)
    ).join()
    assert resources.resources and read.contents
    names = {p.name for p in prompts.prompts}
    assert {"everything__simple-prompt", "everything__completable-prompt"} <= names
    assert prompt.messages[0].content.text == "This is a simple prompt without arguments."
    assert completed.completion.values == ["Engineering"]


PAGED = EXPLORER.replace("gateway: {}", "gateway: {toolsPageSize: 4}").replace(
    "name: explorer", "name: paged"
)


def test_tools_list_pages_by_cursor(stack, demo, everything, tmp_path):
    tenant = Tenant.objects.get(slug="demo")
    mcp_tool_server(tenant, everything.url, "everything", discover=True)
    make_gateway(tmp_path, tenant, PAGED)
    url = f"{stack.url}/mcp/demo/paged/"

    async def work(session):
        pages, cursor = [], None
        while True:
            page = await session.list_tools(cursor=cursor)
            pages.append([tool.name for tool in page.tools])
            cursor = page.nextCursor
            if cursor is None:
                break
        try:
            await session.list_tools(cursor="not-a-cursor")
        except Exception as exc:  # McpError: INVALID_PARAMS
            refused = str(exc)
        return pages, refused

    pages, refused = InThread(lambda: mcp_session(url, demo["token"], work)).join()
    names = [name for page in pages for name in page]
    assert len(pages) >= 3 and all(len(page) == 4 for page in pages[:-1])
    assert len(names) == len(set(names)) and "everything__get-sum" in names
    assert "everything__trigger-long-running-operation" not in names
    assert "unknown cursor" in refused
