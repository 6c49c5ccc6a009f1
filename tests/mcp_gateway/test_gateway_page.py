"""The gateways page (what to paste into an MCP client) and a gateway's AGENT.md."""

import pytest
from django.test import Client

from runtime.agents.agentfile import AgentFileError, parse_agent_file
from runtime.llm.actions import CallTool, Fail, Reply, TurnView
from runtime.llm.gateway_model import GatewayModel
from tenants.models import User

pytestmark = pytest.mark.django_db


def logged_in(email: str) -> Client:
    client = Client()
    client.force_login(User.objects.get(email=email))
    return client


def test_the_page_gives_the_demo_gateways_url_and_configuration(demo):
    page = logged_in("operator@demo.test").get("/gateways/")
    assert page.status_code == 200
    text = page.content.decode()
    assert "http://testserver/mcp/demo/gateway/" in text
    assert "Authorization: Bearer &lt;token&gt;" in text
    assert "&quot;mcpServers&quot;" in text and "deploy__deploy_build" in text


def test_another_tenants_member_sees_none_of_its_gateways(demo):
    text = logged_in("operator@other.test").get("/gateways/").content.decode()
    assert "/mcp/demo/" not in text and "No gateways yet" in text


def test_a_gateway_has_no_model(tmp_path):
    path = tmp_path / "AGENT.md"
    path.write_text(
        "---\nname: g\ndescription: d\ngateway: {maxWaitSeconds: 5}\n"
        "model: {provider: scripted, script: []}\n---\n"
    )
    with pytest.raises(AgentFileError, match="has no model"):
        parse_agent_file(path)
    path.write_text("---\nname: g\ndescription: d\ngateway: {maxWaitSeconds: 0}\n---\n")
    with pytest.raises(AgentFileError, match="gateway.maxWaitSeconds"):
        parse_agent_file(path)
    path.write_text("---\nname: g\ndescription: d\ngateway: {maxWaitSeconds: 5}\n---\n")
    assert parse_agent_file(path).model == {"provider": "gateway", "maxWaitSeconds": 5}


def test_the_gateway_model_makes_the_call_its_message_carries_then_ends():
    model = GatewayModel({})
    call = {"server": "deploy", "tool": "deploy_build", "arguments": {"build": "1"}}
    first = model.next_action(TurnView(text="", message_id="m", data=[{"mcpCall": call}]))
    assert first == CallTool(server="deploy", tool="deploy_build", arguments={"build": "1"})
    done = TurnView(
        text="",
        message_id="m",
        data=[{"mcpCall": call}],
        transcript=[
            {"type": "action", "step": 1},
            {"type": "tool_result", "step": 1, "ok": False, "reason": "expired"},
        ],
    )
    assert model.next_action(done) == Reply(text="The call was not sent: expired.")
    # A message that carries no call (anyone but the gateway) is refused.
    stray = model.next_action(TurnView(text="deploy it", message_id="m"))
    assert isinstance(stray, Fail) and stray.reject
