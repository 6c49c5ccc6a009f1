"""The MCP gateway with the official ``mcp`` Python client over Streamable HTTP, against a live
server on the test database: the demo's gateway (the deployer's policy) and gateways made
here in front of a real MCP server."""

import json

import httpx
import pytest
from mcp.types import CallToolResult

from runtime.agents.agent_models import Agent, DemoRecord
from runtime.decisions.decision_models import Interaction, Receipt
from runtime.gateway.gateway_models import GatewayCall
from runtime.kernel.task_models import AuditEvent
from tenants.models import Tenant
from tests.core import decide
from tests.mcp_gateway.conftest import InThread, make_gateway, mcp_session
from tests.mcp_servers import wait_for

pytestmark = pytest.mark.django_db(transaction=True)

DEPLOY = "deploy__deploy_build"


def gateway_url(stack, tenant="demo", gateway="gateway") -> str:
    return f"{stack.url}/mcp/{tenant}/{gateway}/"


def open_approval(**call) -> Interaction:
    return wait_for(
        lambda: Interaction.objects.filter(
            state=Interaction.State.OPEN, task__agent__slug=call.get("gateway", "gateway")
        ).first(),
        "the held call's approval",
    )


def rest_answer(stack, demo, interaction: Interaction, **answer) -> httpx.Response:
    return httpx.post(
        f"{stack.url}/api/v1/interactions/{interaction.public_id}/answer",
        json=answer,
        headers={"Authorization": f"Bearer {demo['operator_token']}"},
        timeout=30,
    )


def held_call(stack, demo, arguments, *, progress: list | None = None):
    """Call deploy_build through the demo gateway in a thread of its own; the call's result."""

    async def work(session):
        async def on_progress(value, total, message):
            if progress is not None:
                progress.append(message)

        return await session.call_tool(DEPLOY, arguments, progress_callback=on_progress)

    return InThread(lambda: mcp_session(gateway_url(stack), demo["token"], work))


def test_the_demo_gateway_lists_its_held_tool_saying_a_person_approves(stack, demo):
    async def work(session):
        return await session.list_tools()

    listed = InThread(lambda: mcp_session(gateway_url(stack), demo["token"], work)).join()
    tools = {tool.name: tool for tool in listed.tools}
    assert set(tools) == {DEPLOY}
    assert "A person approves each call of this tool" in tools[DEPLOY].description
    assert tools[DEPLOY].inputSchema["required"] == ["build", "environment"]


def test_a_held_call_waits_for_an_operator_over_rest_and_returns_with_its_receipt(
    stack, demo
):
    progress: list = []
    client = held_call(
        stack, demo, {"build": "2026.12.04-1", "environment": "staging"}, progress=progress
    )
    interaction = open_approval()
    assert interaction.prompt == "Approve deploy / deploy_build?"
    assert interaction.summary == "Deploy 2026.12.04-1 to staging"
    # Who is asked, as a progress notification while the request waits.
    wait_for(
        lambda: "Waiting for approval by admins, operators." in progress,
        "the progress notification",
    )
    assert rest_answer(stack, demo, interaction, approved=True).status_code == 200
    result: CallToolResult = client.join()
    assert result.isError is False
    sent = result.structuredContent
    assert sent["build"] == "2026.12.04-1" and sent["environment"] == "staging"
    record = DemoRecord.objects.get(kind="deployment")
    assert record.data == {"build": "2026.12.04-1", "environment": "staging"}
    receipt = Receipt.objects.get(interaction_public_id=interaction.public_id)
    assert result.meta["countersign/receipt"]["id"] == receipt.public_id
    assert receipt.decision == "approved" and receipt.decider == demo["operator_subject"]
    # The call was held as a hosted agent's is: its audit row names the gateway and the
    # client, the subject is the token's.
    row = AuditEvent.objects.get(action="gateway_call")
    assert row.actor == demo["subject"]
    assert row.detail["gateway"] == "gateway" and row.detail["client"]["name"] == "mcp"
