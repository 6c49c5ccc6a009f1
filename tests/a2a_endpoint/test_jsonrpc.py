"""The JSON-RPC envelope, A2A errors, identity and versions of POST /a2a/<tenant>/<agent>."""

import json
from datetime import timedelta

import pytest
from django.utils import timezone

from runtime.kernel import extensions as ext
from runtime.kernel.task_models import Task
from tenants.tokens import api_token_create, api_token_revoke
from tests.a2a_client import (
    assert_error,
    error_info,
    field_violations,
    post,
    result_of,
    rpc,
    task_of,
    user_message,
)

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("eager")]

SUPPORT = "/a2a/acme/support"
NO_TASK = {"id": "t1.does-not-exist"}


# --- the envelope ---------------------------------------------------------------------------


def test_invalid_json_is_a_parse_error(agents, client):
    response = post(client, SUPPORT, '{"jsonrpc": "2.0", "id": 1,', token=agents.a.token)
    error = assert_error(response, -32700, "PARSE_ERROR")
    assert response.json()["id"] is None
    assert error["message"].startswith("Parse error")


@pytest.mark.parametrize(
    "body",
    [
        [{"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": NO_TASK}],
        [],
        "GetTask",
        42,
        None,
    ],
    ids=["batch", "empty-batch", "string", "number", "null"],
)
def test_a_body_that_is_not_one_request_object_is_an_invalid_request(agents, client, body):
    response = post(client, SUPPORT, json.dumps(body), token=agents.a.token)
    assert_error(response, -32600, "INVALID_REQUEST")


@pytest.mark.parametrize(
    "envelope",
    [
        {"jsonrpc": "1.0", "id": 1, "method": "GetTask", "params": NO_TASK},
        {"id": 1, "method": "GetTask", "params": NO_TASK},
        {"jsonrpc": 2.0, "id": 1, "method": "GetTask", "params": NO_TASK},
    ],
    ids=["1.0", "missing", "number"],
)
def test_jsonrpc_must_be_the_string_2_0(agents, client, envelope):
    response = post(client, SUPPORT, json.dumps(envelope), token=agents.a.token)
    assert "jsonrpc" in assert_error(response, -32600, "INVALID_REQUEST")["message"]


def test_a_request_without_an_id_is_refused_not_treated_as_a_notification(agents, client):
    envelope = {"jsonrpc": "2.0", "method": "GetTask", "params": NO_TASK}
    response = post(client, SUPPORT, json.dumps(envelope), token=agents.a.token)
    assert "id is required" in assert_error(response, -32600, "INVALID_REQUEST")["message"]


@pytest.mark.parametrize("request_id", [{"a": 1}, [1], True])
def test_an_id_that_is_not_a_string_or_number_is_refused(agents, client, request_id):
    envelope = {"jsonrpc": "2.0", "id": request_id, "method": "GetTask", "params": NO_TASK}
    response = post(client, SUPPORT, json.dumps(envelope), token=agents.a.token)
    assert_error(response, -32600, "INVALID_REQUEST")


def test_the_request_id_is_echoed_in_results_and_errors(agents, client):
    ok = rpc(client, SUPPORT, "ListTasks", {}, token=agents.a.token, request_id="req-7")
    assert ok.json()["id"] == "req-7"
    failed = rpc(client, SUPPORT, "GetTask", NO_TASK, token=agents.a.token, request_id=99)
    assert failed.json()["id"] == 99


@pytest.mark.parametrize(
    "method, params, field",
    [
        ("SendMessage", {"message": {"messageId": 5, "role": "ROLE_USER"}}, "params"),
        (
            "SendMessage",
            {"message": {"messageId": "m", "role": "ROLE_USER", "parts": "hello"}},
            "params",
        ),
        (
            "SendMessage",
            {
                "message": {"messageId": "m", "role": "ROLE_USER", "parts": [{"text": "x"}]},
                "configuration": {"historyLength": "many"},
            },
            "params",
        ),
        ("GetTask", {"id": ["t1"]}, "params"),
        ("ListTasks", {"pageSize": "ten"}, "params"),
        ("CancelTask", {"id": {"x": 1}}, "params"),
    ],
    ids=[
        "messageId-number",
        "parts-string",
        "historyLength-string",
        "id-list",
        "pageSize",
        "cancel",
    ],
)
def test_wrong_param_types_are_invalid_params_with_field_violations(
    agents, client, method, params, field
):
    response = rpc(client, SUPPORT, method, params, token=agents.a.token)
    error = assert_error(response, -32602, "INVALID_PARAMS")
    assert [v["field"] for v in field_violations(error)] == [field]
    assert field_violations(error)[0]["description"]
    assert not Task.objects.exists()


@pytest.mark.parametrize("params", [[1, 2], "message", 7])
def test_params_must_be_an_object(agents, client, params):
    response = rpc(client, SUPPORT, "SendMessage", params, token=agents.a.token)
    error = assert_error(response, -32602, "INVALID_PARAMS")
    assert field_violations(error) == [{"field": "params", "description": "must be an object"}]


@pytest.mark.parametrize(
    "message, field",
    [
        ({"messageId": "m1", "role": "ROLE_USER", "parts": []}, "message.parts"),
        ({"messageId": "m1", "role": "ROLE_USER"}, "message.parts"),
        ({"messageId": "m1", "role": "ROLE_USER", "parts": [{}]}, "message.parts[0]"),
        (
            {"messageId": "m1", "role": "ROLE_USER", "parts": [{"text": "a"}, {"metadata": {}}]},
            "message.parts[1]",
        ),
        ({"messageId": "m1", "role": "ROLE_AGENT", "parts": [{"text": "a"}]}, "message.role"),
        ({"messageId": "m1", "parts": [{"text": "a"}]}, "message.role"),
        ({"messageId": "m1", "role": "ROLE_NOPE", "parts": [{"text": "a"}]}, "message.role"),
        ({"role": "ROLE_USER", "parts": [{"text": "a"}]}, "message.messageId"),
        ({"messageId": "", "role": "ROLE_USER", "parts": [{"text": "a"}]}, "message.messageId"),
    ],
    ids=[
        "no-parts",
        "parts-missing",
        "empty-part",
        "second-part-empty",
        "role-agent",
        "role-missing",
        "role-unknown",
        "messageId-missing",
        "messageId-empty",
    ],
)
def test_a_malformed_message_is_invalid_params_naming_the_field(agents, client, message, field):
    response = rpc(client, SUPPORT, "SendMessage", {"message": message}, token=agents.a.token)
    error = assert_error(response, -32602, "INVALID_PARAMS")
    assert [v["field"] for v in field_violations(error)] == [field]
    assert not Task.objects.exists()


def test_send_message_without_a_message_is_invalid_params(agents, client):
    response = rpc(client, SUPPORT, "SendMessage", {}, token=agents.a.token)
    error = assert_error(response, -32602, "INVALID_PARAMS")
    assert field_violations(error)[0]["field"] == "message"


@pytest.mark.parametrize("upload_limit", [None, 256], ids=["a2a-limit", "django-limit"])
def test_an_oversized_body_is_a_clear_413_not_a_500(agents, client, settings, upload_limit):
    settings.A2A_MAX_BODY_BYTES = 512 if upload_limit is None else 1_000_000
    if upload_limit is not None:
        settings.DATA_UPLOAD_MAX_MEMORY_SIZE = upload_limit
    message = user_message("x" * 2000)
    response = rpc(client, SUPPORT, "SendMessage", {"message": message}, token=agents.a.token)
    error = assert_error(response, -32600, "INVALID_REQUEST", status=413)
    assert "larger than" in error["message"]
    assert not Task.objects.exists()


@pytest.mark.parametrize("content_type", ["text/plain", "application/x-www-form-urlencoded", None])
def test_a_body_that_is_not_json_is_refused_with_415(agents, client, content_type):
    body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "ListTasks", "params": {}})
    response = post(
        client, SUPPORT, body, token=agents.a.token, headers={"Content-Type": content_type}
    )
    assert_error(response, -32005, "CONTENT_TYPE_NOT_SUPPORTED", status=415)


def test_application_a2a_json_is_accepted(agents, client):
    body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "ListTasks", "params": {}})
    response = post(
        client,
        SUPPORT,
        body,
        token=agents.a.token,
        headers={"Content-Type": "application/a2a+json"},
    )
    assert result_of(response)["tasks"] == []


# --- methods ---------------------------------------------------------------------------------


@pytest.mark.parametrize("method", ["tasks/get", "message/send", "Nope", "sendMessage"])
def test_an_unknown_method_is_method_not_found(agents, client, method):
    response = rpc(client, SUPPORT, method, {}, token=agents.a.token)
    error = assert_error(response, -32601, "METHOD_NOT_FOUND")
    assert error_info(error)["metadata"] == {"method": method}


@pytest.mark.parametrize(
    ("method", "params"),
    [
        ("CreateTaskPushNotificationConfig", {"taskId": "t1.x", "url": "https://example.com/hook"}),
        ("GetTaskPushNotificationConfig", {"taskId": "t1.x", "id": "cfg"}),
        ("ListTaskPushNotificationConfigs", {"taskId": "t1.x"}),
        ("DeleteTaskPushNotificationConfig", {"taskId": "t1.x", "id": "cfg"}),
    ],
)
def test_push_methods_on_an_unknown_task_are_task_not_found(agents, client, method, params):
    # Push is served (tests/a2a_endpoint/test_push.py); a task the caller cannot see is
    # answered as missing, whatever the method.
    response = rpc(client, SUPPORT, method, params, token=agents.a.token)
    assert_error(response, -32001, "TASK_NOT_FOUND")


def test_a_send_asking_for_push_to_a_host_the_tenant_does_not_allow_changes_nothing(agents, client):
    params = {
        "message": user_message(),
        "configuration": {"taskPushNotificationConfig": {"url": "https://example.com/hook"}},
    }
    response = rpc(client, SUPPORT, "SendMessage", params, token=agents.a.token)
    assert_error(response, -32602, "INVALID_PARAMS")
    assert not Task.objects.exists()


@pytest.mark.parametrize("params", [None, {}])
def test_get_extended_agent_card_is_unsupported(agents, client, params):
    response = rpc(client, SUPPORT, "GetExtendedAgentCard", params, token=agents.a.token)
    assert_error(response, -32004, "UNSUPPORTED_OPERATION")


def test_get_on_the_endpoint_is_405_pointing_at_the_card(agents, client):
    response = client.get(SUPPORT, headers={"Authorization": f"Bearer {agents.a.token}"})
    assert response.status_code == 405
    assert response["Allow"] == "POST"


# --- versions and extensions -----------------------------------------------------------------


@pytest.mark.parametrize("version", [None, "", "0.3", "0.3.0", "99.0", "2.0", "1", "one"])
def test_a2a_versions_other_than_1_0_are_version_not_supported(agents, client, version):
    response = rpc(
        client, SUPPORT, "ListTasks", {}, token=agents.a.token, headers={"A2A-Version": version}
    )
    error = assert_error(response, -32009, "VERSION_NOT_SUPPORTED")
    assert error_info(error)["metadata"] == {"supported": "1.0"}


@pytest.mark.parametrize("version", ["1.0", "1.0.2", " 1.0 "])
def test_a2a_version_1_0_with_any_patch_is_accepted(agents, client, version):
    response = rpc(
        client, SUPPORT, "ListTasks", {}, token=agents.a.token, headers={"A2A-Version": version}
    )
    assert result_of(response)["totalSize"] == 0


def test_the_version_may_come_as_a_query_parameter(agents, client):
    response = rpc(
        client,
        f"{SUPPORT}?A2A-Version=1.0",
        "ListTasks",
        {},
        token=agents.a.token,
        headers={"A2A-Version": None},
    )
    assert result_of(response)["totalSize"] == 0


def test_extensions_are_activated_by_header_and_only_implemented_ones_are_echoed(agents, client):
    requested = f"https://example.com/ext/unknown/v1, {ext.INTERACTIONS} ,{ext.EFFECTS},"
    response = rpc(
        client,
        SUPPORT,
        "ListTasks",
        {},
        token=agents.a.token,
        headers={"A2A-Extensions": requested},
    )
    result_of(response)
    echoed = {uri.strip() for uri in response["A2A-Extensions"].split(",")}
    assert echoed == {ext.INTERACTIONS, ext.EFFECTS}


def test_unknown_extensions_alone_are_ignored_and_not_echoed(agents, client):
    response = rpc(
        client,
        SUPPORT,
        "ListTasks",
        {},
        token=agents.a.token,
        headers={"A2A-Extensions": "https://example.com/ext/unknown/v1"},
    )
    result_of(response)
    assert "A2A-Extensions" not in response


def test_activated_extensions_are_echoed_on_errors_too(agents, client):
    response = rpc(
        client,
        SUPPORT,
        "GetTask",
        NO_TASK,
        token=agents.a.token,
        headers={"A2A-Extensions": ext.INTERACTIONS},
    )
    assert_error(response, -32001, "TASK_NOT_FOUND")
    assert response["A2A-Extensions"] == ext.INTERACTIONS


# --- identity --------------------------------------------------------------------------------


def _expired_token(side) -> str:
    _, token = api_token_create(
        tenant=side.tenant,
        subject="partner:late",
        name="late",
        expires_at=timezone.now() - timedelta(minutes=1),
    )
    return token


def _revoked_token(side) -> str:
    row, token = api_token_create(tenant=side.tenant, subject="partner:gone", name="gone")
    api_token_revoke(token=row)
    return token


@pytest.mark.parametrize(
    "make_header, reason",
    [
        (lambda side: None, "missing"),
        (lambda side: "", "missing"),
        (lambda side: "Bearer", "malformed"),
        (lambda side: "Bearer not-a-token", "malformed"),
        (lambda side: f"Basic {side.token}", "malformed"),
        (lambda side: "Bearer cs_AAAAAAAAAAAA_" + "A" * 43, "unknown"),
        (
            lambda side: "Bearer " + side.token[:-1] + ("A" if side.token[-1] != "A" else "B"),
            "unknown",
        ),
        (_revoked_token, "revoked"),
        (_expired_token, "expired"),
    ],
    ids=[
        "missing",
        "empty",
        "no-credentials",
        "not-ours",
        "basic",
        "unknown-prefix",
        "wrong-secret",
        "revoked",
        "expired",
    ],
)
@pytest.mark.parametrize("path", [SUPPORT, "/a2a/acme/no-such-agent", "/a2a/nowhere/support"])
def test_bad_credentials_get_401_with_www_authenticate_bearer(
    agents, client, make_header, reason, path
):
    header = make_header(agents.a)
    if reason in ("revoked", "expired"):
        header = f"Bearer {header}"
    response = rpc(
        client, path, "SendMessage", {"message": user_message()}, headers={"Authorization": header}
    )
    error = assert_error(response, -32000, "UNAUTHENTICATED", status=401)
    assert error_info(error)["metadata"] == {"reason": reason}
    assert response["WWW-Authenticate"].startswith("Bearer ")
    assert ("invalid_token" in response["WWW-Authenticate"]) == (reason != "missing")
    assert not Task.objects.exists()


def _not_found_answer(response) -> tuple[int, dict]:
    return response.status_code, response.json()


def test_other_tenants_agent_and_an_out_of_scope_agent_look_exactly_like_a_missing_one(
    agents, client
):
    _, scoped = api_token_create(
        tenant=agents.a.tenant,
        subject="partner:scoped",
        name="scoped",
        all_agents=False,
        agent_slugs=["tck"],
    )
    params = {"message": user_message()}
    missing = rpc(client, "/a2a/acme/no-such-agent", "SendMessage", params, token=agents.a.token)
    assert missing.status_code == 404
    assert_error(missing, -32000, "AGENT_NOT_FOUND", status=404)
    answers = [
        rpc(client, "/a2a/globex/support", "SendMessage", params, token=agents.a.token),
        rpc(client, "/a2a/nowhere/support", "SendMessage", params, token=agents.a.token),
        rpc(client, SUPPORT, "SendMessage", params, token=scoped),
        rpc(client, "/a2a/globex/support", "GetTask", NO_TASK, token=agents.a.token),
    ]
    for answer in answers:
        assert _not_found_answer(answer) == _not_found_answer(missing)
    assert not Task.objects.exists()
    # The scoped token works on the agent it names.
    assert task_of(rpc(client, "/a2a/acme/tck", "SendMessage", params, token=scoped))


def test_a_public_agent_accepts_anonymous_callers(agents, client):
    response = rpc(client, "/a2a/acme/tck", "SendMessage", {"message": user_message()})
    task = task_of(response)
    assert task["status"]["state"] == "TASK_STATE_COMPLETED"
    # Each anonymous caller's task has a subject of its own, never the shared one.
    assert Task.objects.get().subject.startswith("anonymous:")


def test_a_private_agent_refuses_anonymous_callers(agents, client):
    response = rpc(client, SUPPORT, "SendMessage", {"message": user_message()})
    assert_error(response, -32000, "UNAUTHENTICATED", status=401)


def test_a_task_of_another_subject_is_not_found(agents, client):
    _, other = api_token_create(tenant=agents.a.tenant, subject="partner:someone-else", name="x")
    mine = task_of(
        rpc(client, SUPPORT, "SendMessage", {"message": user_message()}, token=agents.a.token)
    )
    for method in ("GetTask", "CancelTask"):
        response = rpc(client, SUPPORT, method, {"id": mine["id"]}, token=other)
        error = assert_error(response, -32001, "TASK_NOT_FOUND")
        assert error_info(error)["metadata"] == {"taskId": mine["id"]}
    answer = user_message(taskId=mine["id"])
    assert_error(rpc(client, SUPPORT, "SendMessage", {"message": answer}, token=other), -32001)
    assert result_of(rpc(client, SUPPORT, "ListTasks", {}, token=other))["tasks"] == []


def test_a_task_of_another_tenant_is_not_found_either_way(agents, client):
    mine = task_of(
        rpc(client, SUPPORT, "SendMessage", {"message": user_message()}, token=agents.a.token)
    )
    # On tenant A's path, B's token gets the agent-not-found answer ...
    missing = rpc(client, "/a2a/acme/no-such-agent", "GetTask", NO_TASK, token=agents.b.token)
    crossed = rpc(client, SUPPORT, "GetTask", {"id": mine["id"]}, token=agents.b.token)
    assert _not_found_answer(crossed) == _not_found_answer(missing)
    # ... and on its own tenant's same-named agent, A's task id is simply unknown.
    own = rpc(client, "/a2a/globex/support", "GetTask", {"id": mine["id"]}, token=agents.b.token)
    assert_error(own, -32001, "TASK_NOT_FOUND")
