"""The MCP gateway with the official ``mcp`` Python client over Streamable HTTP, against a live
server on the test database: the demo's gateway (the deployer's policy) and gateways made
here in front of a real MCP server."""

import httpx
import pytest
from django.test import Client
from mcp.types import CallToolResult

from runtime.agents.agent_models import DemoRecord
from runtime.decisions.decision_models import Interaction, Receipt
from runtime.gateway.gateway_models import GatewayCall
from runtime.kernel.task_models import AuditEvent
from tenants.models import Tenant, User
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


def test_a_held_call_waits_for_an_operator_over_rest_and_returns_with_its_receipt(stack, demo):
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
    # The receipt's signature (a compact JWS), as the receipt keeps it.
    assert receipt.jws and result.meta["countersign/receipt"]["jws"] == receipt.jws
    assert receipt.decision == "approved" and receipt.decider == demo["operator_subject"]
    # The call was held as a hosted agent's is: its audit row names the gateway and the
    # client, the subject is the token's.
    row = AuditEvent.objects.get(action="gateway_call")
    assert row.actor == demo["subject"]
    assert row.detail["gateway"] == "gateway" and row.detail["client"]["name"] == "mcp"


def test_a_denied_call_is_an_error_result_with_the_reason_and_nothing_runs(stack, demo):
    client = held_call(stack, demo, {"build": "2026.12.04-2", "environment": "staging"})
    interaction = open_approval()
    # An operator's pages show the held call as a hosted agent's.
    page = Client()
    page.force_login(User.objects.get(email="operator@demo.test"))
    shown = page.get(f"/inbox/{interaction.public_id}/")
    assert shown.status_code == 200 and "2026.12.04-2" in shown.content.decode()
    assert page.get(f"/tasks/{interaction.task.public_id}/").status_code == 200
    answered = rest_answer(stack, demo, interaction, approved=False, reason="the freeze is on")
    assert answered.status_code == 200
    result = client.join()
    assert result.isError is True
    text = result.content[0].text
    assert text.startswith(f"A person denied this call by {demo['operator_subject']}")
    assert "the freeze is on" in text and "not run" in text
    assert result.meta["countersign/receipt"]["decision"] == "denied"
    assert not DemoRecord.objects.exists()


def test_an_expired_approval_is_an_error_result_saying_so(stack, demo):
    from django.utils import timezone

    from runtime.decisions.interaction_state import interactions_expire

    client = held_call(stack, demo, {"build": "2026.12.04-3", "environment": "staging"})
    interaction = open_approval()
    Interaction.objects.filter(pk=interaction.pk).update(expires_at=timezone.now())
    assert interactions_expire() == 1
    result = client.join()
    assert result.isError is True
    assert "expired" in result.content[0].text and "not run" in result.content[0].text
    assert result.meta["countersign/receipt"]["decision"] == "expired"
    assert not DemoRecord.objects.exists()


def test_a_production_deploy_needs_two_people_and_the_client_hears_the_count(stack, demo):
    progress: list = []
    client = held_call(
        stack, demo, {"build": "2026.12.04-4", "environment": "production"}, progress=progress
    )
    interaction = open_approval()
    assert interaction.approvals_required == 2
    decide(interaction, by="user:operator@demo.test", approved=True)
    wait_for(
        lambda: "Waiting for approval by admins, operators: 1 of 2 approvals." in progress,
        "the count of approvals",
    )
    assert not DemoRecord.objects.exists()
    # The same person again counts once; another person completes it.
    decide(interaction, by="user:admin@demo.test", approved=True)
    result = client.join()
    assert result.isError is False
    assert result.structuredContent["environment"] == "production"
    assert DemoRecord.objects.get(kind="deployment").data["build"] == "2026.12.04-4"


EDITABLE = """---
name: editable
description: A gateway whose deployments an operator may edit before approving.
gateway: {}
tools:
  - server: deploy
    tool: deploy_build
    schema:
      type: object
      properties:
        build: {type: string, minLength: 1}
        environment: {type: string, enum: [staging, production]}
      required: [build, environment]
      additionalProperties: false
policy:
  deploy/deploy_build: {action: approve, editable: true}
---
"""


def test_an_approval_with_edited_arguments_sends_the_edited_call(stack, demo, tmp_path):
    make_gateway(tmp_path, Tenant.objects.get(slug="demo"), EDITABLE)

    async def work(session):
        return await session.call_tool(DEPLOY, {"build": "old-1", "environment": "production"})

    client = InThread(
        lambda: mcp_session(gateway_url(stack, gateway="editable"), demo["token"], work)
    )
    interaction = open_approval(gateway="editable")
    edited = {"build": "old-1", "environment": "staging"}
    answer = rest_answer(stack, demo, interaction, approved=True, arguments=edited)
    assert answer.status_code == 200, answer.text
    result = client.join()
    assert result.isError is False
    assert result.structuredContent["environment"] == "staging"
    assert DemoRecord.objects.get(kind="deployment").data == edited
    assert result.meta["countersign/receipt"]["edited"] is True


def test_a_cancelled_call_leaves_its_approval_open_and_the_same_call_joins_it(stack, demo):
    from datetime import timedelta

    from mcp.shared.exceptions import McpError

    arguments = {"build": "2026.12.04-5", "environment": "staging"}

    async def impatient(session):
        # The client gives up after a second: it sends notifications/cancelled.
        with pytest.raises(McpError):
            await session.call_tool(DEPLOY, arguments, read_timeout_seconds=timedelta(seconds=1))
        return "gave up"

    assert InThread(lambda: mcp_session(gateway_url(stack), demo["token"], impatient)).join()
    interaction = open_approval()
    # Later, in a new session: the same call joins the open approval.
    client = held_call(stack, demo, arguments)
    wait_for(
        lambda: (
            GatewayCall.objects.filter(task=interaction.task).count() == 1
            and Interaction.objects.count() == 1
        ),
        "the joined call",
    )
    assert rest_answer(stack, demo, interaction, approved=True).status_code == 200
    result = client.join()
    assert result.isError is False
    assert Interaction.objects.count() == 1 and DemoRecord.objects.count() == 1
    # Its outcome was handed out: the same call now opens a new approval.
    assert GatewayCall.objects.get().delivered_at is not None


INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-06-18",
        "capabilities": {},
        "clientInfo": {"name": "probe", "version": "1"},
    },
}
ACCEPT = {"Accept": "application/json, text/event-stream"}


def test_no_token_or_another_tenants_token_gets_401_and_sees_nothing(stack, demo):
    from tenants.tokens import api_token_create

    url = gateway_url(stack)
    refused = httpx.post(url, json=INITIALIZE, headers=ACCEPT, timeout=10)
    assert refused.status_code == 401
    assert refused.headers["www-authenticate"].startswith("Bearer")
    _, theirs = api_token_create(
        tenant=Tenant.objects.get(slug="other"), subject="partner:other", name="other's"
    )
    for token in (theirs, "cs_nothing_like_a_token", demo["operator_token"]):
        answer = httpx.post(
            url, json=INITIALIZE, headers={**ACCEPT, "Authorization": f"Bearer {token}"}, timeout=10
        )
        assert answer.status_code == 401, token
        assert "gateway" not in answer.text.lower().replace("this gateway's", "")
    # A gateway that does not exist answers the demo's token the same.
    missing = httpx.post(
        gateway_url(stack, gateway="nope"),
        json=INITIALIZE,
        headers={**ACCEPT, "Authorization": f"Bearer {demo['token']}"},
        timeout=10,
    )
    assert missing.status_code == 401
    # And the demo's token opens a session.
    opened = httpx.post(
        url,
        json=INITIALIZE,
        headers={**ACCEPT, "Authorization": f"Bearer {demo['token']}"},
        timeout=10,
    )
    assert opened.status_code == 200 and opened.headers["mcp-session-id"]
    # The previous protocol revision is served as asked (the mcp client asks the current one).
    assert '"protocolVersion":"2025-06-18"' in opened.text


def test_a_gateway_is_no_a2a_agent(stack, demo):
    answer = httpx.post(
        f"{stack.url}/a2a/demo/gateway",
        json={"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": {"id": "x"}},
        headers={"Authorization": f"Bearer {demo['token']}", "A2A-Version": "1.0"},
        timeout=10,
    )
    assert answer.status_code == 404


def test_a_maximum_wait_answers_still_waiting_and_calling_again_picks_up_the_decision(
    stack, demo, tmp_path
):
    make_gateway(
        tmp_path,
        Tenant.objects.get(slug="demo"),
        EDITABLE.replace("name: editable", "name: brief").replace(
            "gateway: {}", "gateway: {maxWaitSeconds: 1}"
        ),
    )
    arguments = {"build": "2026.12.04-6", "environment": "staging"}
    url = gateway_url(stack, gateway="brief")

    async def work(session):
        return await session.call_tool(DEPLOY, arguments)

    first = InThread(lambda: mcp_session(url, demo["token"], work)).join()
    assert first.isError is True
    assert first.content[0].text.startswith("Still waiting for approval; call again to continue")
    interaction = open_approval(gateway="brief")
    assert first.meta["countersign/approval"]["interactionId"] == interaction.public_id
    assert rest_answer(stack, demo, interaction, approved=True).status_code == 200
    wait_for(lambda: DemoRecord.objects.exists(), "the approved call to be sent")
    again = InThread(lambda: mcp_session(url, demo["token"], work)).join()
    assert again.isError is False and again.structuredContent["build"] == "2026.12.04-6"
    assert Interaction.objects.count() == 1 and DemoRecord.objects.count() == 1


def test_bad_calls_are_error_results_and_open_nothing(stack, demo):
    async def work(session):
        return [
            await session.call_tool(DEPLOY, {"build": "a\x00b", "environment": "staging"}),
            await session.call_tool(DEPLOY, {"build": "1", "environment": "moon"}),
            await session.call_tool("deploy__nothing", {}),
        ]

    nul, invalid, unknown = InThread(
        lambda: mcp_session(gateway_url(stack), demo["token"], work)
    ).join()
    assert nul.isError and "NUL" in nul.content[0].text
    assert invalid.isError and invalid.content[0].text.startswith(
        "invalid arguments at environment"
    )
    assert unknown.isError and unknown.content[0].text == "unknown tool deploy__nothing"
    assert not GatewayCall.objects.exists() and not Interaction.objects.exists()


def test_a_client_that_declares_url_elicitation_is_told_where_the_approval_is(stack, demo):
    from mcp.types import ElicitResult

    shown: list = []

    async def elicited(context, params):
        shown.append(params)
        return ElicitResult(action="accept")

    async def work(session):
        return await session.call_tool(DEPLOY, {"build": "2026.12.04-7", "environment": "staging"})

    client = InThread(
        lambda: mcp_session(gateway_url(stack), demo["token"], work, elicitation_callback=elicited)
    )
    interaction = open_approval()
    wait_for(lambda: shown, "the approval's URL")
    assert shown[0].mode == "url"
    assert shown[0].url == f"{stack.url}/inbox/{interaction.public_id}/"
    assert shown[0].elicitationId == interaction.public_id
    assert rest_answer(stack, demo, interaction, approved=True).status_code == 200
    assert client.join().isError is False
