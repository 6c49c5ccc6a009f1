"""Agent cards at /a2a/<tenant>/<agent>/.well-known/agent-card.json (A2A §4.4, §8)."""

import pytest
from a2a import types as a2a
from google.protobuf import json_format

from runtime import extensions as ext
from runtime.models import Agent
from tests.a2a_client import assert_error

pytestmark = pytest.mark.django_db

CARD = "/a2a/acme/{}/.well-known/agent-card.json"


def get_card(client, slug, token=None, tenant="acme", **headers):
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    return client.get(f"/a2a/{tenant}/{slug}/.well-known/agent-card.json", headers=headers)


def test_the_card_describes_the_agent_and_parses_as_an_agent_card(agents, client):
    response = get_card(client, "deployer", agents.a.token)
    assert response.status_code == 200
    assert response["Content-Type"] == "application/json"
    card = response.json()
    json_format.ParseDict(card, a2a.AgentCard())
    agent = Agent.objects.get(tenant=agents.a.tenant, slug="deployer")
    assert card["name"] == agent.name
    assert card["description"] == agent.description
    assert card["version"] == agent.version
    assert card["provider"]["organization"] == agents.a.tenant.name
    (interface,) = card["supportedInterfaces"]
    assert interface == {
        "url": "http://testserver/a2a/acme/deployer",
        "protocolBinding": "JSONRPC",
        "protocolVersion": "1.0",
    }
    capabilities = card["capabilities"]
    assert capabilities["streaming"] is True
    assert capabilities["pushNotifications"] is True
    assert capabilities["extendedAgentCard"] is False
    assert [e["uri"] for e in capabilities["extensions"]] == ext.IMPLEMENTED
    assert all(e["required"] is False for e in capabilities["extensions"])
    assert all(e["description"] for e in capabilities["extensions"])
    bearer = card["securitySchemes"]["bearer"]["httpAuthSecurityScheme"]
    assert bearer["scheme"] == "Bearer"
    assert card["securityRequirements"] == [{"schemes": {"bearer": {"list": []}}}]
    assert [s["id"] for s in card["skills"]] == [s["id"] for s in agent.skills] == ["deploy"]
    assert card["skills"][0]["examples"] == agent.skills[0]["examples"]


def test_the_endpoint_url_follows_public_base_url(agents, client, settings):
    settings.PUBLIC_BASE_URL = "https://gw.example.com"
    card = get_card(client, "support", agents.a.token).json()
    assert card["supportedInterfaces"][0]["url"] == "https://gw.example.com/a2a/acme/support"


def test_the_card_is_cacheable_and_revalidates_with_its_etag(agents, client):
    first = get_card(client, "support", agents.a.token)
    assert "max-age=" in first["Cache-Control"]
    assert first["Cache-Control"].startswith("private")
    assert first["ETag"].startswith('"')
    assert first["Last-Modified"].endswith("GMT")
    again = get_card(client, "support", agents.a.token, **{"If-None-Match": first["ETag"]})
    assert again.status_code == 304
    assert again["ETag"] == first["ETag"]
    stale = get_card(client, "support", agents.a.token, **{"If-None-Match": '"old"'})
    assert stale.status_code == 200


def test_the_etag_changes_when_the_agent_does(agents, client):
    before = get_card(client, "support", agents.a.token)["ETag"]
    Agent.objects.filter(tenant=agents.a.tenant, slug="support").update(description="Changed.")
    assert get_card(client, "support", agents.a.token)["ETag"] != before


def test_a_private_agents_card_needs_a_token(agents, client):
    response = get_card(client, "support")
    assert_error(response, -32000, "UNAUTHENTICATED", status=401)
    assert response["WWW-Authenticate"].startswith("Bearer")
    bad = get_card(client, "support", "cs_AAAAAAAAAAAA_" + "A" * 43)
    assert_error(bad, -32000, "UNAUTHENTICATED", status=401)


def test_a_public_agents_card_is_served_to_anyone(agents, client):
    response = get_card(client, "tck")
    assert response.status_code == 200
    assert response["Cache-Control"].startswith("public")
    card = response.json()
    json_format.ParseDict(card, a2a.AgentCard())
    assert "securityRequirements" not in card


def test_another_tenants_card_looks_like_a_missing_agent(agents, client):
    missing = get_card(client, "no-such-agent", agents.a.token)
    crossed = get_card(client, "support", agents.a.token, tenant="globex")
    assert_error(missing, -32000, "AGENT_NOT_FOUND", status=404)
    assert (crossed.status_code, crossed.json()) == (missing.status_code, missing.json())


def test_the_card_only_answers_get(agents, client):
    response = client.post(
        CARD.format("support"), headers={"Authorization": f"Bearer {agents.a.token}"}
    )
    assert response.status_code == 405
