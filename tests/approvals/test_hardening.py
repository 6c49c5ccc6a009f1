"""Hostile input on the operator channel: REST answers held to JSON and its types, text
PostgreSQL cannot store refused at the edge, ids with a NUL in page paths, and the REST
channel's one exception handler."""

import json
from http import HTTPStatus
from urllib.parse import urlencode

import pytest
from django.conf import settings as django_settings
from django.urls import reverse
from rest_framework.exceptions import ValidationError

from approvals.api_errors import rest_exception_handler
from runtime.decisions.decision_models import Effect, Interaction
from runtime.kernel.errors import (
    AlreadyDecided,
    InvalidParams,
    NotAllowed,
    RuntimeFault,
    TaskNotCancelable,
    TaskNotFound,
    UnsupportedOperation,
)
from runtime.kernel.task_models import AuditEvent, Task

pytestmark = pytest.mark.django_db


def bearer(token: str) -> dict:
    return {"HTTP_AUTHORIZATION": f"Bearer {token}"}


def answer_url(interaction) -> str:
    return f"/api/v1/interactions/{interaction.public_id}/answer"


def post_json(client, interaction, body, **headers):
    raw = body if isinstance(body, str | bytes) else json.dumps(body)
    return client.post(answer_url(interaction), raw, content_type="application/json", **headers)


def assert_unchanged(interaction):
    interaction.refresh_from_db()
    assert interaction.state == Interaction.State.OPEN
    assert interaction.answer is None
    assert not AuditEvent.objects.filter(interaction=interaction).exists()


def assert_400_naming(response, field: str):
    assert response.status_code == HTTPStatus.BAD_REQUEST, response.content
    body = response.json()
    assert body["field"] == field, body
    assert body["detail"].startswith(f"{field}: "), body


# --- a REST answer is JSON, and approved is a JSON boolean ----------------------------------


@pytest.mark.parametrize(
    "form",
    [{"reason": "LGTM, ship it"}, {"approved": "yes"}, {"approved": "on"}, {"approved": "1"}],
)
@pytest.mark.parametrize(
    "content_type", ["application/x-www-form-urlencoded", "multipart/form-data"]
)
def test_form_encoded_rest_answer_is_415_and_decides_nothing(agents, client, form, content_type):
    approval = agents.a.extra["make"].approval()
    auth = bearer(agents.a.extra["operator_token"])
    if content_type == "multipart/form-data":
        response = client.post(answer_url(approval), form, **auth)
    else:
        response = client.post(
            answer_url(approval), urlencode(form), content_type=content_type, **auth
        )
    assert response.status_code == HTTPStatus.UNSUPPORTED_MEDIA_TYPE, response.content
    assert content_type in response.json()["detail"]
    assert_unchanged(approval)


def test_empty_form_rest_answer_is_400_never_a_denial(agents, client):
    # No body at all: nothing to parse, so no media type to refuse; still not a decision.
    approval = agents.a.extra["make"].approval()
    response = client.post(
        answer_url(approval),
        "",
        content_type="application/x-www-form-urlencoded",
        **bearer(agents.a.extra["operator_token"]),
    )
    assert_400_naming(response, "approved")
    assert_unchanged(approval)


@pytest.mark.parametrize("approved", ["yes", "on", "1", "true", 1, 0, None, [], {}, "false"])
def test_rest_approved_must_be_a_json_boolean(agents, client, approved):
    approval = agents.a.extra["make"].approval()
    response = post_json(
        client, approval, {"approved": approved}, **bearer(agents.a.extra["operator_token"])
    )
    assert_400_naming(response, "approved")
    assert "JSON boolean" in response.json()["detail"]
    assert_unchanged(approval)


@pytest.mark.parametrize("body", [{"reason": "LGTM, ship it"}, {}])
def test_rest_approval_without_approved_is_400_naming_it_never_a_denial(agents, client, body):
    approval = agents.a.extra["make"].approval()
    response = post_json(client, approval, body, **bearer(agents.a.extra["operator_token"]))
    assert_400_naming(response, "approved")
    assert_unchanged(approval)


def test_rest_question_without_value_is_400_naming_it(agents, client):
    question = agents.a.extra["make"].question()
    response = post_json(
        client, question, {"reason": "x"}, **bearer(agents.a.extra["operator_token"])
    )
    assert_400_naming(response, "value")
    assert_unchanged(question)


def test_rest_json_true_and_false_still_decide(agents, client):
    auth = bearer(agents.a.extra["operator_token"])
    make = agents.a.extra["make"]
    for approved in (True, False):
        approval = make.approval()
        response = post_json(client, approval, {"approved": approved, "reason": "ok"}, **auth)
        assert response.status_code == HTTPStatus.OK, response.content
        approval.refresh_from_db()
        assert approval.answer["approved"] is approved


# --- text PostgreSQL cannot store, and lengths, are 400 naming the field ---------------------

BAD_TEXTS = {
    "nul": "ship\u0000it",
    "lone high surrogate": "\ud800",
    "lone low surrogate": "ok \udfff",
}


@pytest.mark.parametrize("text", BAD_TEXTS.values(), ids=BAD_TEXTS.keys())
@pytest.mark.parametrize(
    "shape",
    [lambda t: t, lambda t: {"note": t}, lambda t: [t], lambda t: {t: 1}],
    ids=["text", "in an object", "in a list", "as a key"],
)
def test_rest_value_with_nul_or_lone_surrogate_is_400_naming_value(agents, client, text, shape):
    question = agents.a.extra["make"].question()
    response = post_json(
        client, question, {"value": shape(text)}, **bearer(agents.a.extra["operator_token"])
    )
    assert_400_naming(response, "value")
    assert_unchanged(question)


@pytest.mark.parametrize("text", BAD_TEXTS.values(), ids=BAD_TEXTS.keys())
def test_rest_reason_with_nul_or_lone_surrogate_is_400_naming_reason(agents, client, text):
    approval = agents.a.extra["make"].approval()
    response = post_json(
        client,
        approval,
        {"approved": True, "reason": text},
        **bearer(agents.a.extra["operator_token"]),
    )
    assert_400_naming(response, "reason")
    assert_unchanged(approval)


def test_rest_strings_longer_than_their_limit_are_400(agents, client):
    auth = bearer(agents.a.extra["operator_token"])
    make = agents.a.extra["make"]
    approval = make.approval()
    assert_400_naming(
        post_json(client, approval, {"approved": True, "reason": "r" * 1001}, **auth), "reason"
    )
    assert_unchanged(approval)
    question = make.question()
    assert_400_naming(post_json(client, question, {"value": "v" * 4001}, **auth), "value")
    assert_400_naming(post_json(client, question, {"value": {"k": ["v" * 4001]}}, **auth), "value")
    assert_unchanged(question)
    assert post_json(client, question, {"value": "v" * 4000}, **auth).status_code == 200


def test_rest_deep_nesting_and_non_finite_numbers_are_400(agents, client):
    auth = bearer(agents.a.extra["operator_token"])
    question = agents.a.extra["make"].question()
    deep = {"value": json.loads("[" * 40 + "]" * 40)}
    assert_400_naming(post_json(client, question, deep, **auth), "value")
    # Deeper than the JSON parser's recursion: still an unreadable body, not a 500.
    too_deep = '{"value": ' + "[" * 100_000 + "]" * 100_000 + "}"
    assert post_json(client, question, too_deep, **auth).status_code == HTTPStatus.BAD_REQUEST
    for constant in ("NaN", "Infinity", "-Infinity"):
        response = post_json(client, question, f'{{"value": {constant}}}', **auth)
        assert response.status_code == HTTPStatus.BAD_REQUEST, constant
    assert_unchanged(question)


@pytest.mark.parametrize(
    "result",
    [
        '"\\u0000"',
        '{"id": "\\ud800"}',
        "[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[1]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]",
        "[" * 5000 + "]" * 5000,
    ],
    ids=["nul", "lone surrogate", "too deep", "deeper than the parser"],
)
def test_page_effect_result_postgres_cannot_store_is_400(agents, result):
    effect = agents.a.extra["make"].uncertain()
    client = agents.a.client_for(agents.a.operator)
    response = client.post(
        reverse("approvals:effect", args=[effect.public_id]),
        {"resolution": "happened", "result": result},
    )
    assert response.status_code == HTTPStatus.BAD_REQUEST, response.content[:300]
    effect.refresh_from_db()
    assert effect.state == Effect.State.UNCERTAIN


def test_page_effect_result_nan_is_kept_as_text(agents):
    effect = agents.a.extra["make"].uncertain()
    client = agents.a.client_for(agents.a.operator)
    response = client.post(
        reverse("approvals:effect", args=[effect.public_id]),
        {"resolution": "happened", "result": "NaN"},
    )
    assert response.status_code == HTTPStatus.FOUND
    effect.refresh_from_db()
    assert effect.outcome["result"] == "NaN"


def test_page_decision_text_with_nul_is_400(agents):
    make = agents.a.extra["make"]
    approval = make.approval()
    question = make.question()
    client = agents.a.client_for(agents.a.operator)
    url = reverse("approvals:interaction", args=[approval.public_id])
    response = client.post(url, {"decision": "approve", "reason": "a\u0000b"})
    assert response.status_code == HTTPStatus.BAD_REQUEST
    url = reverse("approvals:interaction", args=[question.public_id])
    response = client.post(url, {"decision": "answer", "custom": "a\u0000b"})
    assert response.status_code == HTTPStatus.BAD_REQUEST
    assert_unchanged(approval)
    assert_unchanged(question)


# --- an id with a NUL in a path is 404, never 500 --------------------------------------------


def test_nul_in_any_id_path_is_404_never_500(agents):
    make = agents.a.extra["make"]
    task = make.approval().task
    client = agents.a.client_for(agents.a.admin)
    api = bearer(agents.a.extra["operator_token"])
    nul = "%00"
    gets = [
        f"/inbox/{nul}/",
        f"/inbox/i-{nul}x/",
        f"/effects/{nul}/",
        f"/tasks/{nul}/",
        f"/tasks/{task.public_id}{nul}/",
        f"/tasks/{nul}/artifacts/a1",
        f"/tasks/{task.public_id}/artifacts/{nul}",
        f"/connections/{nul}/token",
        f"/connections/{nul}/oauth",
        f"/connections/{nul}/disconnect",
    ]
    for path in gets:
        assert client.get(path).status_code == HTTPStatus.NOT_FOUND, path
    posts = [f"/inbox/{nul}/", f"/effects/{nul}/", f"/connections/{nul}/token"]
    for path in posts:
        response = client.post(path, {"decision": "approve", "resolution": "fail"})
        assert response.status_code == HTTPStatus.NOT_FOUND, path
    for path in (f"/api/v1/interactions/{nul}", f"/api/v1/interactions/{nul}x"):
        assert client.get(path, **api).status_code == HTTPStatus.NOT_FOUND, path
    response = client.post(
        f"/api/v1/interactions/{nul}/answer",
        {"approved": True},
        content_type="application/json",
        **api,
    )
    assert response.status_code == HTTPStatus.NOT_FOUND
    assert Task.objects.filter(pk=task.pk, state=task.state).exists()


def test_nul_in_list_filters_is_never_500(agents):
    agents.a.extra["make"].approval()
    client = agents.a.client_for(agents.a.admin)
    nul = "\u0000"
    pages = [
        ("/inbox/", {"kind": nul, "agent": nul}),
        ("/inbox/fragment", {"kind": nul, "agent": nul}),
        ("/tasks/", {"state": nul, "before": nul, "after": f"{nul}~1"}),
        ("/audit/", {"before": f"{nul}~1~1"}),
        ("/connections/", {"app": nul}),
    ]
    for path, query in pages:
        assert client.get(path, query).status_code == HTTPStatus.OK, path
    api = bearer(agents.a.extra["operator_token"])
    for query in ({"state": nul}, {"kind": nul}, {"agent": nul}):
        status = client.get("/api/v1/interactions", query, **api).status_code
        assert status == HTTPStatus.BAD_REQUEST, query
    # A cursor is decoded, not looked up: one that means nothing starts at the first page.
    status = client.get("/api/v1/interactions", {"cursor": nul}, **api).status_code
    assert status < HTTPStatus.INTERNAL_SERVER_ERROR


# --- one exception handler maps the core's faults -------------------------------------------


def test_rest_exception_handler_is_the_one_configured():
    handler = django_settings.REST_FRAMEWORK["EXCEPTION_HANDLER"]
    assert handler == "approvals.api_errors.rest_exception_handler"


def test_rest_exception_handler_maps_every_fault_of_the_core(agents):
    approval = agents.a.extra["make"].approval()
    approval.state = Interaction.State.ANSWERED
    approval.answered_by = "user:first@acme.test"
    approval.answered_via = "page"
    cases = [
        (TaskNotFound("No such interaction."), 404, {"detail": "No such interaction."}),
        (
            InvalidParams("answer", "must be one of ['a']"),
            400,
            {"detail": "must be one of ['a']", "field": "answer"},
        ),
        (NotAllowed("This effect is done."), 409, {"detail": "This effect is done."}),
        (TaskNotCancelable("Task is completed."), 409, {"detail": "Task is completed."}),
        (
            UnsupportedOperation("Not here.", "NOPE"),
            400,
            {"detail": "Not here.", "reason": "NOPE"},
        ),
    ]
    for fault, status, body in cases:
        response = rest_exception_handler(fault, {})
        assert (response.status_code, response.data) == (status, body), fault
    decided = rest_exception_handler(AlreadyDecided(approval), {})
    assert decided.status_code == HTTPStatus.CONFLICT
    assert decided.data["answeredBy"] == "user:first@acme.test"
    assert decided.data["answeredVia"] == "page"
    assert "user:first@acme.test" in decided.data["detail"]
    # A fault the handler does not know stays a server error (logged), not a made-up answer.
    assert rest_exception_handler(RuntimeFault("boom"), {}) is None


def test_rest_validation_errors_name_their_field():
    response = rest_exception_handler(ValidationError({"reason": ["Too long."]}), {})
    assert response.status_code == HTTPStatus.BAD_REQUEST
    assert response.data["field"] == "reason"
    assert response.data["detail"] == "reason: Too long."
    assert response.data["errors"] == {"reason": ["Too long."]}


def test_a_crafted_cursor_on_the_rest_list_is_404_never_500(agents, client):
    import base64

    agents.a.extra["make"].approval()
    auth = bearer(agents.a.extra["operator_token"])
    # base64 of "p=x" and the like: a position that is not a time we could have written.
    for raw in ("p=x", "p=2026-13-45", "o=1&p=9999-99-99"):
        cursor = base64.b64encode(raw.encode()).decode()
        response = client.get("/api/v1/interactions", {"cursor": cursor}, **auth)
        assert response.status_code == HTTPStatus.NOT_FOUND, (raw, response.status_code)
    assert client.get("/api/v1/interactions", **auth).status_code == HTTPStatus.OK
