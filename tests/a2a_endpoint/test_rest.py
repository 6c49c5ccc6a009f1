"""The HTTP+JSON binding (A2A 1.0 §11, a2a_endpoint.rest) on each agent's URL: every route,
the same methods, identity, tenant scope and extensions as JSON-RPC, errors as
google.rpc.Status with §5.4's HTTP statuses, and streams of bare StreamResponses."""

import json

import pytest
from a2a import types as a2a
from google.protobuf import json_format

from a2a_endpoint import rest, views
from a2a_endpoint.lean import LeanA2AHandler
from runtime.kernel import extensions as ext
from runtime.kernel.push.push_models import PushConfig, PushSettings
from runtime.kernel.task_models import Task
from tests.a2a_client import result_of, rpc, sse_results, user_message

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("eager")]

SUPPORT = "/a2a/acme/support"
REVIEWER = "/a2a/acme/code-reviewer"
DEPLOYER = "/a2a/acme/deployer"


def call(client, verb, path, body=None, *, token=None, headers=None, query=""):
    merged = {"A2A-Version": "1.0", **(headers or {})}
    if token is not None:
        merged["Authorization"] = f"Bearer {token}"
    merged = {k: v for k, v in merged.items() if v is not None}
    url = path + (f"?{query}" if query else "")
    if verb in ("GET", "DELETE"):
        return getattr(client, verb.lower())(url, headers=merged)
    return client.post(
        url,
        data=json.dumps(body) if body is not None else "",
        content_type=merged.pop("Content-Type", "application/json"),
        headers=merged,
    )


def status_of(response, code: int, reason: str) -> dict:
    """A google.rpc.Status error body (AIP-193) with the ErrorInfo ``reason``."""
    assert response.status_code == code, response.content
    assert response["Content-Type"] == "application/json"
    error = response.json()["error"]
    assert error["code"] == code
    info = next(d for d in error["details"] if d["@type"].endswith("google.rpc.ErrorInfo"))
    assert info["reason"] == reason and info["domain"] == "a2a-protocol.org"
    return error


def send(client, path, token, text="hello", **configuration):
    body = {"message": user_message(text)}
    if configuration:
        body["configuration"] = configuration
    response = call(client, "POST", f"{path}/message:send", body, token=token)
    assert response.status_code == 200, response.content
    return response.json()


def test_send_get_list_and_cancel_answer_as_json_rpc_does(agents, client):
    token = agents.a.token
    sent = send(client, REVIEWER, token, "review this diff")
    task = json_format.ParseDict(sent["task"], a2a.Task())
    assert task.status.state == a2a.TaskState.TASK_STATE_INPUT_REQUIRED
    got = call(client, "GET", f"{REVIEWER}/tasks/{task.id}", token=token, query="historyLength=1")
    assert got.status_code == 200
    assert got.json() == result_of(
        rpc(client, REVIEWER, "GetTask", {"id": task.id, "historyLength": 1}, token=token)
    )
    listed = call(
        client,
        "GET",
        f"{REVIEWER}/tasks",
        token=token,
        query=f"contextId={task.context_id}&status=input-required&pageSize=5"
        "&includeArtifacts=false",
    ).json()
    assert [t["id"] for t in listed["tasks"]] == [task.id]
    assert listed["pageSize"] == 5 and listed["totalSize"] == 1
    # The enum's own name works as well as its lowercase spelling (§11.5).
    by_name = call(
        client, "GET", f"{REVIEWER}/tasks", token=token, query="status=TASK_STATE_COMPLETED"
    )
    assert by_name.json()["totalSize"] == 0
    canceled = call(client, "POST", f"{REVIEWER}/tasks/{task.id}:cancel", token=token)
    assert canceled.status_code == 200
    assert canceled.json()["status"]["state"] == "TASK_STATE_CANCELED"
    again = call(client, "POST", f"{REVIEWER}/tasks/{task.id}:cancel", token=token)
    assert again.json()["status"]["state"] == "TASK_STATE_CANCELED"  # idempotent


def test_an_answer_on_the_same_task_completes_it(agents, client):
    token = agents.a.token
    asked = send(client, REVIEWER, token, "review this diff")["task"]
    answer = user_message("main", taskId=asked["id"], contextId=asked["contextId"])
    done = call(client, "POST", f"{REVIEWER}/message:send", {"message": answer}, token=token)
    assert done.json()["task"]["status"]["state"] == "TASK_STATE_COMPLETED"
    assert done.json()["task"]["artifacts"]


def test_errors_are_google_rpc_status_with_the_a2a_http_statuses(agents, client):
    token = agents.a.token
    status_of(call(client, "GET", f"{SUPPORT}/tasks/nope", token=token), 404, "TASK_NOT_FOUND")
    done = send(client, SUPPORT, token)["task"]
    status_of(
        call(client, "POST", f"{SUPPORT}/tasks/{done['id']}:cancel", token=token),
        409,
        "TASK_NOT_CANCELABLE",
    )
    status_of(
        call(client, "POST", f"{SUPPORT}/tasks/{done['id']}:subscribe", token=token),
        400,
        "UNSUPPORTED_OPERATION",
    )
    bad = call(client, "POST", f"{SUPPORT}/message:send", {"message": {"role": "ROLE_USER"}})
    status_of(bad, 401, "UNAUTHENTICATED")
    assert bad["WWW-Authenticate"].startswith("Bearer")
    invalid = status_of(
        call(client, "POST", f"{SUPPORT}/message:send", {"message": {}}, token=token),
        400,
        "INVALID_PARAMS",
    )
    assert any(d["@type"].endswith("google.rpc.BadRequest") for d in invalid["details"])
    status_of(
        call(
            client,
            "POST",
            f"{SUPPORT}/message:send",
            {"message": user_message()},
            token=token,
            headers={"Content-Type": "text/plain"},
        ),
        415,
        "CONTENT_TYPE_NOT_SUPPORTED",
    )
    for version in (None, "0.3", "99.0"):
        status_of(
            call(
                client,
                "POST",
                f"{SUPPORT}/message:send",
                {"message": user_message()},
                token=token,
                headers={"A2A-Version": version},
            ),
            400,
            "VERSION_NOT_SUPPORTED",
        )
    status_of(
        call(client, "GET", f"{SUPPORT}/extendedAgentCard", token=token),
        400,
        "UNSUPPORTED_OPERATION",
    )
    status_of(
        call(client, "GET", f"{SUPPORT}/tasks", token=token, query="pageSize=lots"),
        400,
        "INVALID_PARAMS",
    )
    wrong_verb = call(client, "GET", f"{SUPPORT}/message:send", token=token)
    status_of(wrong_verb, 405, "METHOD_NOT_ALLOWED")
    assert wrong_verb["Allow"] == "POST"
    # Bad input changed nothing: only the one completed task exists.
    assert Task.objects.count() == 1


def test_another_tenants_task_and_agent_look_missing(agents, client):
    theirs = send(client, "/a2a/globex/support", agents.b.token, "hi", returnImmediately=True)[
        "task"
    ]
    path = f"/a2a/globex/support/tasks/{theirs['id']}"
    status_of(call(client, "GET", path, token=agents.a.token), 404, "AGENT_NOT_FOUND")
    mine = f"{SUPPORT}/tasks/{theirs['id']}"
    status_of(call(client, "GET", mine, token=agents.a.token), 404, "TASK_NOT_FOUND")
    status_of(call(client, "POST", f"{mine}:cancel", token=agents.a.token), 404, "TASK_NOT_FOUND")
    assert call(client, "GET", f"{SUPPORT}/tasks", token=agents.a.token).json()["totalSize"] == 0


def test_extensions_are_activated_by_the_same_header(agents, client):
    response = call(
        client,
        "POST",
        f"{DEPLOYER}/message:send",
        {"message": user_message("deploy build 2026.10.06-1 to staging")},
        token=agents.a.token,
        headers={"A2A-Extensions": ext.INTERACTIONS},
    )
    assert response["A2A-Extensions"] == ext.INTERACTIONS
    task = response.json()["task"]
    assert task["status"]["state"] == "TASK_STATE_AUTH_REQUIRED"
    pause = task["status"]["message"]["metadata"][ext.INTERACTIONS]
    assert pause["kind"] == "approval"


def test_push_configs_create_get_list_and_delete(agents, client):
    PushSettings.objects.update_or_create(
        tenant=agents.a.tenant, defaults={"allowed_hosts": "*.example.com"}
    )
    token = agents.a.token
    task = send(client, REVIEWER, token, "review this diff")["task"]
    base = f"{REVIEWER}/tasks/{task['id']}/pushNotificationConfigs"
    created = call(
        client,
        "POST",
        base,
        {"id": "c1", "url": "https://hooks.example.com/a2a", "token": "t"},
        token=token,
    )
    assert created.status_code == 200, created.content
    assert created.json() == {
        "id": "c1",
        "taskId": task["id"],
        "url": "https://hooks.example.com/a2a",
        "token": "t",
    }
    assert PushConfig.objects.get().dialect == "1.0"
    assert call(client, "GET", f"{base}/c1", token=token).json()["id"] == "c1"
    listed = call(client, "GET", base, token=token, query="pageSize=10").json()
    assert [c["id"] for c in listed["configs"]] == ["c1"] and listed["nextPageToken"] == ""
    for _ in range(2):  # idempotent
        deleted = call(client, "DELETE", f"{base}/c1", token=token)
        assert (deleted.status_code, deleted.json()) == (200, {})
    status_of(call(client, "GET", f"{base}/c1", token=token), 404, "TASK_NOT_FOUND")


def test_message_stream_sends_bare_stream_responses(agents, client):
    response = call(
        client,
        "POST",
        f"{REVIEWER}/message:stream",
        {"message": user_message("review this diff")},
        token=agents.a.token,
    )
    assert response.status_code == 200
    assert response["Content-Type"] == "text/event-stream"
    events = sse_results(response)  # here each one is a bare StreamResponse
    assert "jsonrpc" not in events[0] and "task" in events[0]
    for event in events:
        json_format.ParseDict(event, a2a.StreamResponse())
    assert events[-1]["statusUpdate"]["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"


def test_the_card_declares_the_binding_on_the_agents_url(agents, client):
    card = client.get(
        f"{SUPPORT}/.well-known/agent-card.json",
        headers={"Authorization": f"Bearer {agents.a.token}", "A2A-Version": "1.0"},
    ).json()
    assert card["supportedInterfaces"][:2] == [
        {
            "url": "http://testserver/a2a/acme/support",
            "protocolBinding": binding,
            "protocolVersion": "1.0",
        }
        for binding in ("JSONRPC", "HTTP+JSON")
    ]


def test_the_lean_handler_routes_the_binding_and_keeps_json_rpc_first():
    resolve = LeanA2AHandler.fast_resolve
    assert resolve("/a2a/acme/support").func is views.endpoint
    assert resolve("/a2a/acme/support/").func is views.endpoint
    for path, route in (
        ("/a2a/acme/support/message:send", "/message:send"),
        ("/a2a/acme/support/tasks", "/tasks"),
        ("/a2a/acme/support/tasks/t1.x-y_z:cancel", "/tasks/t1.x-y_z:cancel"),
        ("/a2a/acme/support/tasks/t1/pushNotificationConfigs/c1", None),
    ):
        found = resolve(path)
        assert found.func is rest.endpoint
        assert found.kwargs["tenant"] == "acme" and found.kwargs["agent"] == "support"
        if route:
            assert found.kwargs["route"] == route
