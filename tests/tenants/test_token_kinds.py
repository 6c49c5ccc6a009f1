"""Partner tokens reach the A2A endpoint only, operator tokens the REST
channel only, and each is refused clearly where it does not belong."""

import json
from http import HTTPStatus

import pytest

from runtime.agents.demo import seed_demo_agents
from runtime.kernel.task_models import Task
from tenants.models import ApiToken
from tenants.tokens import TokenError, api_token_create, authenticate_bearer

# The A2A view is async: the test client runs it on another connection, which needs
# committed rows (as in tests/a2a_endpoint).
pytestmark = pytest.mark.django_db(transaction=True)

AGENT = "/a2a/acme/support"


@pytest.fixture
def operator_token(world) -> str:
    seed_demo_agents(tenant=world.a.tenant)
    _, plaintext = api_token_create(
        tenant=world.a.tenant, subject="program:ops", name="ops", kind=ApiToken.Kind.OPERATOR
    )
    return plaintext


def get_task(client, token: str):
    body = {"jsonrpc": "2.0", "id": 7, "method": "GetTask", "params": {"id": "t1.nope"}}
    return client.post(
        AGENT,
        data=json.dumps(body),
        content_type="application/json",
        headers={"A2A-Version": "1.0", "Authorization": f"Bearer {token}"},
    )


def error_reason(response) -> tuple[str, dict]:
    error = response.json()["error"]
    (info,) = [d for d in error["data"] if d["@type"].endswith("google.rpc.ErrorInfo")]
    return info["reason"], info.get("metadata", {})


@pytest.mark.parametrize(
    ("kind", "presented"),
    [(ApiToken.Kind.PARTNER, "operator_token"), (ApiToken.Kind.OPERATOR, "partner_token")],
)
def test_authenticate_bearer_refuses_the_other_kind_by_name(world, operator_token, kind, presented):
    token = operator_token if kind == ApiToken.Kind.PARTNER else world.a.token
    with pytest.raises(TokenError) as exc:
        authenticate_bearer(f"Bearer {token}", kind=kind)
    assert exc.value.reason == presented
    assert presented.split("_")[0] in str(exc.value)


def test_authenticate_bearer_takes_its_own_kind_and_any_kind_without_one(world, operator_token):
    assert authenticate_bearer(f"Bearer {world.a.token}", kind="partner").subject == (
        world.a.subject
    )
    assert authenticate_bearer(f"Bearer {operator_token}", kind="operator").subject == (
        "program:ops"
    )
    assert authenticate_bearer(f"Bearer {operator_token}").subject == "program:ops"


def test_operator_token_is_refused_by_the_a2a_endpoint(client, world, operator_token):
    response = get_task(client, operator_token)
    assert response.status_code == HTTPStatus.UNAUTHORIZED, response.content
    assert response.json()["error"]["code"] == -32000
    assert error_reason(response) == ("UNAUTHENTICATED", {"reason": "operator_token"})
    assert "operator token" in response.json()["error"]["message"]
    assert response["WWW-Authenticate"].startswith("Bearer ")
    assert not Task.objects.exists()


def test_partner_token_still_reaches_the_a2a_endpoint(client, world, operator_token):
    # Authenticated: the task is simply not there.
    assert error_reason(get_task(client, world.a.token))[0] == "TASK_NOT_FOUND"


def test_partner_token_is_refused_by_the_rest_channel_by_name(client, world, operator_token):
    auth = {"HTTP_AUTHORIZATION": f"Bearer {world.a.token}"}
    for response in (
        client.get("/api/v1/interactions", **auth),
        client.get("/api/v1/interactions/i-nope", **auth),
        client.post(
            "/api/v1/interactions/i-nope/answer",
            {"approved": True},
            content_type="application/json",
            **auth,
        ),
    ):
        assert response.status_code == HTTPStatus.FORBIDDEN, response.content
        assert "partner token" in response.json()["detail"]
    ok = client.get("/api/v1/interactions", HTTP_AUTHORIZATION=f"Bearer {operator_token}")
    assert ok.status_code == HTTPStatus.OK
