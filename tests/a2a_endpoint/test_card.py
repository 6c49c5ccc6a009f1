"""Agent cards at /a2a/<tenant>/<agent>/.well-known/agent-card.json (A2A §4.4, §8)."""

import pytest
from a2a import types as a2a
from google.protobuf import json_format

from runtime.agents.agent_models import Agent
from runtime.kernel import extensions as ext
from tests.a2a_client import assert_error

pytestmark = pytest.mark.django_db

CARD = "/a2a/acme/{}/.well-known/agent-card.json"


def get_card(client, slug, token=None, tenant="acme", **headers):
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    return client.get(f"/a2a/{tenant}/{slug}/.well-known/agent-card.json", headers=headers)


def test_the_card_describes_the_agent_and_parses_as_an_agent_card(agents, client):
    response = get_card(client, "deployer", agents.a.token, **{"A2A-Version": "1.0"})
    assert response.status_code == 200
    assert response["Content-Type"] == "application/json"
    card = response.json()
    # A 1.0 card, strictly: the 0.3 fields are served only to callers read as 0.x (below),
    # as the 1.0 schema allows no other properties (the conformance kit checks it).
    json_format.ParseDict(card, a2a.AgentCard())
    assert not {"url", "preferredTransport", "protocolVersion", "security"} & set(card)
    assert set(card["securitySchemes"]["bearer"]) == {"httpAuthSecurityScheme"}
    agent = Agent.objects.get(tenant=agents.a.tenant, slug="deployer")
    assert card["name"] == agent.name
    assert card["description"] == agent.description
    assert card["version"] == agent.version
    assert card["provider"]["organization"] == agents.a.tenant.name
    # 1.0 first (preferred), JSON-RPC then HTTP+JSON (a2a_endpoint.rest); the same URL
    # serves the 0.3 dialect (a2a_endpoint.dialect03).
    assert card["supportedInterfaces"] == [
        {
            "url": "http://testserver/a2a/acme/deployer",
            "protocolBinding": binding,
            "protocolVersion": version,
        }
        for binding, version in (("JSONRPC", "1.0"), ("HTTP+JSON", "1.0"), ("JSONRPC", "0.3"))
    ]
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
    card = get_card(client, "support", agents.a.token, **{"A2A-Version": "1.0"}).json()
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
    json_format.ParseDict(card, a2a.AgentCard(), ignore_unknown_fields=True)
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


@pytest.mark.parametrize(
    "how", ["A2A-Version: 0.3", "A2A-Version: 0.2.5", "agent.json", "no version, a token"]
)
def test_a_0_3_client_reads_the_card_with_its_0_3_interface(agents, client, how):
    from a2a.client.card_resolver import parse_agent_card
    from a2a.compat.v0_3 import types as v03

    if how == "agent.json":  # 0.2.5's path
        response = client.get(
            "/a2a/acme/deployer/.well-known/agent.json",
            headers={"Authorization": f"Bearer {agents.a.token}"},
        )
    elif how == "no version, a token":
        # What the a2a-sdk 0.3's default ClientFactory.connect(url) sends (A2A §3.6.2: no
        # version is 0.3); tests/interop/test_sdk03.py runs that client itself.
        response = get_card(client, "deployer", agents.a.token)
    else:
        version = how.split(": ")[1]
        response = get_card(client, "deployer", agents.a.token, **{"A2A-Version": version})
    assert response["Vary"] == "A2A-Version, Authorization"
    card = response.json()
    legacy = v03.AgentCard.model_validate(card)
    url = "http://testserver/a2a/acme/deployer"
    assert (legacy.url, legacy.preferred_transport, legacy.protocol_version) == (
        url,
        "JSONRPC",
        "0.3.0",
    )
    assert [(i.url, i.transport) for i in legacy.additional_interfaces] == [(url, "JSONRPC")]
    assert legacy.security == [{"bearer": []}]
    assert legacy.security_schemes["bearer"].root.scheme.lower() == "bearer"
    assert legacy.supports_authenticated_extended_card is False
    assert [s.id for s in legacy.skills] == ["deploy"]
    # The a2a-sdk 1.x reader maps the legacy fields and keeps the 1.0 interface first.
    modern = parse_agent_card(card)
    assert [
        (i.protocol_binding, i.protocol_version, i.url) for i in modern.supported_interfaces
    ] == [("JSONRPC", "1.0", url), ("HTTP+JSON", "1.0", url), ("JSONRPC", "0.3", url)]
    assert modern.security_schemes["bearer"].http_auth_security_scheme.scheme == "Bearer"
    assert len(modern.security_requirements) == 1


def test_an_anonymous_request_without_a_version_gets_the_strict_1_0_card(agents, client):
    # The conformance kit's request: no version, no credentials; its schema allows no field
    # beyond 1.0's. With a token (a partner's 0.3 client) the same URL adds the 0.3 fields.
    anonymous = get_card(client, "tck")
    card = anonymous.json()
    json_format.ParseDict(card, a2a.AgentCard())
    assert not {"url", "preferredTransport", "protocolVersion", "security"} & set(card)
    with_token = get_card(client, "tck", agents.a.token).json()
    assert with_token["url"] == "http://testserver/a2a/acme/tck"
    assert anonymous["ETag"] != get_card(client, "tck", agents.a.token)["ETag"]


def test_a_public_card_has_no_0_3_security_list(agents, client):
    Agent.objects.filter(tenant=agents.a.tenant, slug="support").update(public=True)
    card = get_card(client, "support", **{"A2A-Version": "0.3"}).json()
    assert card["url"] == "http://testserver/a2a/acme/support"
    assert "security" not in card and "securityRequirements" not in card
