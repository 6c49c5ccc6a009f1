"""The operator REST channel: /api/v1/interactions with operator tokens and sessions."""

import time
from http import HTTPStatus

import pytest
from django.test import Client
from django.utils import timezone

from runtime.decisions.decision_models import Interaction
from runtime.kernel.task_models import AuditEvent, TaskState
from tenants.lookup_cache import LOOKUP_CACHE_SECONDS
from tenants.models import ApiToken
from tenants.tokens import api_token_create, api_token_revoke
from tests.core import run

pytestmark = pytest.mark.django_db


def bearer(token: str) -> dict:
    return {"HTTP_AUTHORIZATION": f"Bearer {token}"}


def answer(client, interaction, body: dict, **headers):
    return client.post(
        f"/api/v1/interactions/{interaction.public_id}/answer",
        body,
        content_type="application/json",
        **headers,
    )


def test_operator_token_lists_open_interactions_with_filters(agents, client):
    make = agents.a.extra["make"]
    approval = make.approval()
    question = make.question()
    auth = bearer(agents.a.extra["operator_token"])
    rows = client.get("/api/v1/interactions", **auth).json()["results"]
    assert [r["id"] for r in rows] == [question.public_id, approval.public_id]
    assert rows[1]["agent"] == "deployer" and rows[1]["subject"] == agents.a.subject
    only = client.get("/api/v1/interactions", {"kind": "approval"}, **auth).json()["results"]
    assert [r["id"] for r in only] == [approval.public_id]
    only = client.get("/api/v1/interactions", {"agent": "code-reviewer"}, **auth).json()
    assert [r["id"] for r in only["results"]] == [question.public_id]
    none = client.get("/api/v1/interactions", {"state": "answered"}, **auth).json()
    assert none["results"] == []
    bad = client.get("/api/v1/interactions", {"state": "sideways"}, **auth)
    assert bad.status_code == HTTPStatus.BAD_REQUEST


def test_read_one_interaction_with_its_held_call(agents, client):
    approval = agents.a.extra["make"].approval(build="b-7")
    auth = bearer(agents.a.extra["operator_token"])
    body = client.get(f"/api/v1/interactions/{approval.public_id}", **auth).json()
    assert body["kind"] == "approval" and body["state"] == "open"
    assert body["heldCall"]["arguments"] == {"build": "b-7", "environment": "staging"}


def test_operator_token_approves_as_its_subject_via_rest(agents, client):
    approval = agents.a.extra["make"].approval()
    response = answer(
        client, approval, {"approved": True}, **bearer(agents.a.extra["operator_token"])
    )
    assert response.status_code == HTTPStatus.OK, response.content
    assert response.json()["answeredBy"] == "program:acme-ops"
    assert response.json()["answeredVia"] == "rest"
    event = AuditEvent.objects.get(interaction=approval)
    assert (event.actor, event.action, event.via) == ("program:acme-ops", "approved", "rest")
    assert run(approval.task).state == TaskState.COMPLETED


def test_deny_with_a_reason_over_rest(agents, client):
    approval = agents.a.extra["make"].approval()
    auth = bearer(agents.a.extra["operator_token"])
    answer(client, approval, {"approved": False, "reason": "change freeze"}, **auth)
    approval.refresh_from_db()
    assert approval.answer == {"approved": False, "reason": "change freeze"}
    assert "change freeze" in run(approval.task).status_message["parts"][0]["text"]


def test_answer_a_question_over_rest_respecting_choices(agents, client):
    question = agents.a.extra["make"].question()
    question.request = {**question.request, "choices": ["main", "develop"]}
    question.save(update_fields=["request"])
    auth = bearer(agents.a.extra["operator_token"])
    refused = answer(client, question, {"value": "trunk"}, **auth)
    assert refused.status_code == HTTPStatus.BAD_REQUEST
    assert "must be one of" in refused.json()["detail"]
    assert answer(client, question, {"value": "main"}, **auth).status_code == HTTPStatus.OK
    question.refresh_from_db()
    assert question.answer == {"value": "main"}


@pytest.mark.parametrize(
    "body",
    [{}, {"approved": True, "value": 1}, {"approved": "maybe"}, {"value": True}, "not json"],
)
def test_bad_answers_are_400_and_change_nothing(agents, client, body):
    approval = agents.a.extra["make"].approval()
    response = answer(client, approval, body, **bearer(agents.a.extra["operator_token"]))
    assert response.status_code == HTTPStatus.BAD_REQUEST
    approval.refresh_from_db()
    assert approval.state == Interaction.State.OPEN


def test_second_answer_is_409_and_names_who_decided(agents, client):
    approval = agents.a.extra["make"].approval()
    auth = bearer(agents.a.extra["operator_token"])
    answer(client, approval, {"approved": False}, **auth)
    response = answer(client, approval, {"approved": True}, **auth)
    assert response.status_code == HTTPStatus.CONFLICT
    assert response.json()["answeredBy"] == "program:acme-ops"
    assert "program:acme-ops" in response.json()["detail"]
    assert AuditEvent.objects.filter(interaction=approval).count() == 1


def test_partner_tokens_are_refused(agents, client):
    approval = agents.a.extra["make"].approval()
    auth = bearer(agents.a.token)
    assert client.get("/api/v1/interactions", **auth).status_code == HTTPStatus.FORBIDDEN
    assert answer(client, approval, {"approved": True}, **auth).status_code == 403
    approval.refresh_from_db()
    assert approval.state == Interaction.State.OPEN


def test_no_credentials_is_401(agents, client):
    assert client.get("/api/v1/interactions").status_code == HTTPStatus.UNAUTHORIZED


def test_session_operator_decides_as_user_with_csrf(agents):
    approval = agents.a.extra["make"].approval()
    client = Client(enforce_csrf_checks=True)
    client.force_login(agents.a.operator)
    assert answer(client, approval, {"approved": True}).status_code == HTTPStatus.FORBIDDEN
    client.get("/inbox/")  # sets the CSRF cookie
    token = client.cookies["csrftoken"].value
    response = answer(client, approval, {"approved": True}, HTTP_X_CSRFTOKEN=token)
    assert response.status_code == HTTPStatus.OK
    assert response.json()["answeredBy"] == f"user:{agents.a.operator.email}"
    assert response.json()["answeredVia"] == "rest"


def test_session_viewer_reads_but_cannot_answer(agents):
    approval = agents.a.extra["make"].approval()
    client = agents.a.client_for(agents.a.viewer)
    assert client.get("/api/v1/interactions").status_code == HTTPStatus.OK
    assert answer(client, approval, {"approved": True}).status_code == HTTPStatus.FORBIDDEN
    approval.refresh_from_db()
    assert approval.state == Interaction.State.OPEN


def test_schema_lists_the_interaction_routes(agents, client):
    schema = client.get("/api/schema", {"format": "json"}).json()
    paths = schema["paths"]
    assert "post" in paths["/api/v1/interactions/{public_id}/answer"]
    post = paths["/api/v1/interactions/{public_id}/answer"]["post"]
    assert "409" in post["responses"] and "requestBody" in post
    assert "get" in paths["/api/v1/interactions"]


# --- the operator token's row, cached per process as the A2A endpoint's (tenants.tokens) -----


def test_an_operator_token_revoked_in_this_process_is_refused_at_once(agents, client):
    token = agents.a.extra["operator_token"]
    assert client.get("/api/v1/interactions", **bearer(token)).status_code == HTTPStatus.OK
    assert api_token_revoke(token=ApiToken.objects.get(prefix=token.split("_")[1]))
    response = client.get("/api/v1/interactions", **bearer(token))
    assert response.status_code == HTTPStatus.UNAUTHORIZED
    assert "revoked" in response.json()["detail"]


def test_an_operator_token_revoked_by_another_process_is_refused_within_one_second(agents, client):
    token = agents.a.extra["operator_token"]
    assert client.get("/api/v1/interactions", **bearer(token)).status_code == HTTPStatus.OK
    # As another process revokes it: a row written without this process's signals.
    ApiToken.objects.filter(prefix=token.split("_")[1]).update(revoked_at=timezone.now())
    revoked = time.monotonic()
    time.sleep(max(0.0, revoked + LOOKUP_CACHE_SECONDS - time.monotonic()))
    response = client.get("/api/v1/interactions", **bearer(token))
    assert response.status_code == HTTPStatus.UNAUTHORIZED
    assert "revoked" in response.json()["detail"]


def test_an_operator_token_minted_after_its_prefix_was_refused_works_at_once(agents, client):
    _, token = api_token_create(
        tenant=agents.a.tenant, subject="program:new", name="new", kind=ApiToken.Kind.OPERATOR
    )
    row = ApiToken.objects.get(prefix=token.split("_")[1])
    row.delete()
    assert client.get("/api/v1/interactions", **bearer(token)).status_code == 401
    # The row comes back without a signal (bulk_create sends none), as another process
    # would write it: a refusal is checked against the database, not the cache.
    ApiToken.objects.bulk_create([row])
    assert client.get("/api/v1/interactions", **bearer(token)).status_code == HTTPStatus.OK
