"""The A2A 0.3 / 0.2.5 dialect on the 1.0 endpoint (a2a_endpoint.dialect03): how a request
picks it, each 0.3 method and its shapes (checked against the a2a-sdk's 0.3 pydantic types),
its errors, and one task read in both dialects."""

import base64
import uuid

import pytest
from a2a.compat.v0_3 import types as v03
from django.urls import reverse

from a2a_endpoint import dialect03, wire03
from runtime.agents.agent_models import Agent
from runtime.decisions.decision_models import Interaction
from runtime.kernel import extensions as ext
from runtime.kernel.push.push_models import PushConfig, PushSettings
from runtime.kernel.task_models import Task
from tests.a2a_client import (
    as_task,
    assert_error,
    post,
    result_of,
    rpc,
    sse_first_result,
    sse_results,
    task_of,
    user_message,
)
from tests.core import caller_may_approve, flow_answer

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("eager")]

SUPPORT = "/a2a/acme/support"
REVIEWER = "/a2a/acme/code-reviewer"
DEPLOYER = "/a2a/acme/deployer"
NO_VERSION = {"A2A-Version": None}


def rpc03(client, path, method, params=None, *, token, headers=None, request_id=1):
    """A 0.3 client's request: a slash-named method and no A2A-Version (unless given)."""
    return rpc(
        client,
        path,
        method,
        params,
        token=token,
        headers={**NO_VERSION, **(headers or {})},
        request_id=request_id,
    )


def message03(text="hello", **fields) -> dict:
    message = {
        "kind": "message",
        "messageId": f"m-{uuid.uuid4()}",
        "role": "user",
        "parts": [{"kind": "text", "text": text}],
    }
    message.update(fields)
    return message


def send03(client, path, token, text="hello", *, message=None, configuration=None, **kw):
    params = {"message": message or message03(text)}
    if configuration is not None:
        params["configuration"] = configuration
    return rpc03(client, path, "message/send", params, token=token, **kw)


def task03(response) -> dict:
    result = result_of(response)
    assert result["kind"] == "task", result
    v03.Task.model_validate(result)
    return result


def message_result03(response) -> dict:
    result = result_of(response)
    assert result["kind"] == "message", result
    v03.Message.model_validate(result)
    return result


def text_of(message: dict) -> str:
    return " ".join(p["text"] for p in message["parts"] if p["kind"] == "text")


# --- choosing the dialect ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "headers",
    [NO_VERSION, {"A2A-Version": "0.3"}, {"A2A-Version": "0.3.0"}, {"A2A-Version": "0.2.5"}],
    ids=["no-version", "0.3", "0.3.0", "0.2.5"],
)
def test_slash_named_methods_speak_0_3(agents, client, headers):
    response = send03(client, SUPPORT, agents.a.token, headers=headers)
    assert message_result03(response)["role"] == "agent"


def test_a2a_version_0_3_with_a_pascal_case_method_is_version_not_supported(agents, client):
    response = rpc03(
        client,
        SUPPORT,
        "GetTask",
        {"id": "x"},
        token=agents.a.token,
        headers={"A2A-Version": "0.3"},
    )
    assert_error(response, -32009, "VERSION_NOT_SUPPORTED")


def test_pascal_case_stays_1_0_and_a_slash_method_under_1_0_is_method_not_found(agents, client):
    assert_error(
        rpc03(client, SUPPORT, "GetTask", {"id": "x"}, token=agents.a.token),
        -32009,
        "VERSION_NOT_SUPPORTED",
    )
    assert_error(
        rpc(client, SUPPORT, "tasks/get", {"id": "x"}, token=agents.a.token),
        -32601,
        "METHOD_NOT_FOUND",
    )


def test_a2a_version_99_with_a_slash_method_is_version_not_supported(agents, client):
    response = send03(client, SUPPORT, agents.a.token, headers={"A2A-Version": "99.0"})
    assert_error(response, -32009, "VERSION_NOT_SUPPORTED")
    assert not Task.objects.exists()


# --- message/send -----------------------------------------------------------------------------


def test_blocking_send_whose_turn_completes_returns_a_message_and_no_task_handle(agents, client):
    reply = message_result03(send03(client, SUPPORT, agents.a.token, "How do I reset my password?"))
    assert "Reset password" in text_of(reply)
    assert reply["contextId"]
    assert "taskId" not in reply
    assert all(p["kind"] == "text" for p in reply["parts"])


def test_blocking_false_returns_a_task_in_working(agents, client):
    from config.celery import app

    # No worker consumes this run's queue: the turn waits, and the task comes back at once.
    app.conf.update(task_always_eager=False)
    task = task03(send03(client, SUPPORT, agents.a.token, configuration={"blocking": False}))
    assert task["status"]["state"] in ("submitted", "working")
    assert task["history"][0]["kind"] == "message"
    assert task["history"][0]["role"] == "user"
    assert Task.objects.filter(public_id=task["id"]).exists()


def test_blocking_true_is_the_default_and_non_boolean_is_invalid_params(agents, client):
    message_result03(send03(client, SUPPORT, agents.a.token, configuration={"blocking": True}))
    message_result03(send03(client, SUPPORT, agents.a.token, configuration={}))
    response = send03(client, SUPPORT, agents.a.token, configuration={"blocking": "no"})
    error = assert_error(response, -32602, "INVALID_PARAMS")
    assert "configuration.blocking" in error["message"]


def test_an_approval_pause_returns_the_task_interrupted_with_lowercase_states(agents, client):
    task = task03(send03(client, DEPLOYER, agents.a.token, "deploy build 2026.10.06-1 to staging"))
    # In the 0.x dialect an approval pause is input-required.
    assert task["status"]["state"] == "input-required"
    status_message = task["status"]["message"]
    assert status_message["kind"] == "message" and status_message["role"] == "agent"
    assert text_of(status_message) == "Approve deploy / deploy_build?"


def test_a_question_is_input_required_and_the_answer_on_the_same_task_completes_it(agents, client):
    asked = task03(send03(client, REVIEWER, agents.a.token, "review this diff"))
    assert asked["status"]["state"] == "input-required"
    answer = message03("main", taskId=asked["id"], contextId=asked["contextId"])
    done = task03(send03(client, REVIEWER, agents.a.token, message=answer))
    assert done["id"] == asked["id"]
    assert done["status"]["state"] == "completed"
    # The review is an artifact: the completed turn answers with its task, not a message.
    (artifact,) = done["artifacts"]
    assert artifact["parts"] and all("kind" in p for p in artifact["parts"])
    assert [m["role"] for m in done["history"]][:2] == ["user", "agent"]


def test_skill_id_in_metadata_selects_the_skill_and_an_unknown_one_is_invalid_params(
    agents, client
):
    message_result03(
        send03(client, SUPPORT, agents.a.token, message=message03(metadata={"skillId": "answer"}))
    )
    assert Task.objects.get().skill_id == "answer"
    response = send03(
        client, SUPPORT, agents.a.token, message=message03("x", metadata={"skillId": "nope"})
    )
    assert_error(response, -32602, "INVALID_PARAMS")
    assert Task.objects.count() == 1


def test_file_and_data_parts_in_the_0_3_shape_reach_the_core_as_1_0_parts(agents, client):
    raw = base64.b64encode(b"hello file").decode()
    parts = [
        {"kind": "text", "text": "see attached"},
        {"kind": "file", "file": {"bytes": raw, "mimeType": "text/plain", "name": "a.txt"}},
        {"kind": "data", "data": {"count": 42}, "metadata": {"m": 1}},
        {"kind": "data", "data": {"value": [1, 2]}, "metadata": {"data_part_compat": True}},
    ]
    reply = message_result03(
        send03(client, SUPPORT, agents.a.token, message=message03(parts=parts))
    )
    task = Task.objects.get()
    assert task.wire_context_id == reply["contextId"]
    stored = task.history[0]["parts"]
    assert stored[0] == {"text": "see attached"}
    assert stored[1]["mediaType"] == "text/plain" and stored[1]["filename"] == "a.txt"
    assert "raw" in stored[1] or "url" in stored[1]
    assert stored[2] == {"data": {"count": 42}, "metadata": {"m": 1}}
    assert stored[3] == {"data": [1, 2]}


@pytest.mark.parametrize(
    ("message", "field"),
    [
        (message03(role="ROLE_USER"), "message.role"),
        (message03(role="agent"), "message.role"),
        (message03(kind="task"), "message.kind"),
        # Without kind, a part must hold exactly one of text, file and data to be inferred.
        (message03(parts=[{"text": "two", "data": {"a": 1}}]), "message.parts[0].kind"),
        (message03(parts=[{"kind": "text", "text": 3}]), "message.parts[0].text"),
        (message03(parts=[{"kind": "file", "file": {"name": "x"}}]), "message.parts[0].file"),
        (
            message03(parts=[{"kind": "file", "file": {"bytes": "eA==", "uri": "https://x"}}]),
            "message.parts[0].file",
        ),
        (message03(parts=[{"kind": "data", "data": [1]}]), "message.parts[0].data"),
        (message03(parts="hello"), "message.parts"),
    ],
    ids=[
        "1.0-role",
        "agent-role",
        "kind",
        "part-without-kind-ambiguous",
        "text-not-string",
        "file-without-content",
        "file-with-both",
        "data-not-object",
        "parts-not-list",
    ],
)
def test_a_malformed_0_3_message_is_invalid_params_and_starts_nothing(
    agents, client, message, field
):
    response = send03(client, SUPPORT, agents.a.token, message=message)
    error = assert_error(response, -32602, "INVALID_PARAMS")
    assert field in error["message"]
    assert not Task.objects.exists()


def test_a_missing_message_and_non_object_params_are_invalid_params(agents, client):
    assert_error(rpc03(client, SUPPORT, "message/send", {}, token=agents.a.token), -32602)
    assert_error(rpc03(client, SUPPORT, "message/send", [1], token=agents.a.token), -32602)
    assert not Task.objects.exists()


# --- tasks/get, tasks/cancel ------------------------------------------------------------------


def test_tasks_get_and_cancel_in_0_3_shapes(agents, client):
    asked = task03(send03(client, REVIEWER, agents.a.token))
    got = task03(rpc03(client, REVIEWER, "tasks/get", {"id": asked["id"]}, token=agents.a.token))
    assert got["id"] == asked["id"] and got["status"]["state"] == "input-required"
    short = task03(
        rpc03(
            client,
            REVIEWER,
            "tasks/get",
            {"id": asked["id"], "historyLength": 0},
            token=agents.a.token,
        )
    )
    assert "history" not in short
    canceled = task03(
        rpc03(client, REVIEWER, "tasks/cancel", {"id": asked["id"]}, token=agents.a.token)
    )
    assert canceled["status"]["state"] == "canceled"
    assert canceled["status"]["message"]["role"] == "agent"
    other = task03(send03(client, REVIEWER, agents.a.token))
    answer = message03("main", taskId=other["id"], contextId=other["contextId"])
    task03(send03(client, REVIEWER, agents.a.token, message=answer))
    done = rpc03(client, REVIEWER, "tasks/cancel", {"id": other["id"]}, token=agents.a.token)
    assert_error(done, -32002, "TASK_NOT_CANCELABLE")


def test_unknown_and_other_tenants_tasks_are_task_not_found(agents, client):
    asked = task03(send03(client, REVIEWER, agents.a.token))
    for method in ("tasks/get", "tasks/cancel"):
        assert_error(
            rpc03(client, REVIEWER, method, {"id": "nope"}, token=agents.a.token),
            -32001,
            "TASK_NOT_FOUND",
        )
        assert_error(
            rpc03(
                client,
                "/a2a/globex/code-reviewer",
                method,
                {"id": asked["id"]},
                token=agents.b.token,
            ),
            -32001,
            "TASK_NOT_FOUND",
        )
    assert_error(rpc03(client, REVIEWER, "tasks/get", {}, token=agents.a.token), -32602)


def test_a_message_to_a_terminal_task_is_unsupported(agents, client):
    asked = task03(send03(client, REVIEWER, agents.a.token))
    rpc03(client, REVIEWER, "tasks/cancel", {"id": asked["id"]}, token=agents.a.token)
    answer = message03("main", taskId=asked["id"], contextId=asked["contextId"])
    response = send03(client, REVIEWER, agents.a.token, message=answer)
    assert_error(response, -32004, "UNSUPPORTED_OPERATION")


# --- push notification configs ----------------------------------------------------------------


@pytest.fixture
def push_allowed(agents, settings):
    settings.PUSH_ALLOW_PRIVATE_HOSTS = True
    PushSettings.objects.create(tenant=agents.a.tenant, allowed_hosts="127.0.0.1")


@pytest.mark.usefixtures("push_allowed")
def test_push_config_set_get_list_delete_in_0_3_shapes(agents, client):
    token = agents.a.token
    asked = task03(send03(client, REVIEWER, token))
    config = {
        "id": "cfg-1",
        "url": "http://127.0.0.1:9/hook",
        "token": "tok",
        "authentication": {"schemes": ["Bearer"], "credentials": "secret"},
    }
    created = result_of(
        rpc03(
            client,
            REVIEWER,
            "tasks/pushNotificationConfig/set",
            {"taskId": asked["id"], "pushNotificationConfig": config},
            token=token,
        )
    )
    v03.TaskPushNotificationConfig.model_validate(created)
    assert created == {
        "taskId": asked["id"],
        "pushNotificationConfig": {
            "id": "cfg-1",
            "url": "http://127.0.0.1:9/hook",
            "token": "tok",
            "authentication": {"schemes": ["Bearer"]},
        },
    }
    stored = PushConfig.objects.get(public_id="cfg-1")
    assert stored.auth_scheme == "Bearer"
    params = {"id": asked["id"], "pushNotificationConfigId": "cfg-1"}
    got = result_of(
        rpc03(client, REVIEWER, "tasks/pushNotificationConfig/get", params, token=token)
    )
    assert got == created
    # 0.2.5 names only the task: its first config.
    first = result_of(
        rpc03(
            client, REVIEWER, "tasks/pushNotificationConfig/get", {"id": asked["id"]}, token=token
        )
    )
    assert first == created
    listed = result_of(
        rpc03(
            client, REVIEWER, "tasks/pushNotificationConfig/list", {"id": asked["id"]}, token=token
        )
    )
    assert listed == [created]
    deleted = rpc03(client, REVIEWER, "tasks/pushNotificationConfig/delete", params, token=token)
    assert result_of(deleted) is None
    assert not PushConfig.objects.exists()
    assert_error(
        rpc03(client, REVIEWER, "tasks/pushNotificationConfig/get", params, token=token),
        -32001,
        "TASK_NOT_FOUND",
    )
    assert (
        result_of(
            rpc03(
                client,
                REVIEWER,
                "tasks/pushNotificationConfig/list",
                {"id": asked["id"]},
                token=token,
            )
        )
        == []
    )


@pytest.mark.parametrize(
    "params",
    [
        {"pushNotificationConfig": {"url": "http://127.0.0.1:9/h"}},
        {"taskId": "x", "pushNotificationConfig": {}},
        {"taskId": "x"},
        {
            "taskId": "x",
            "pushNotificationConfig": {
                "url": "http://127.0.0.1:9/h",
                "authentication": {"schemes": []},
            },
        },
        {"taskId": "x", "pushNotificationConfig": "http://127.0.0.1:9/h"},
    ],
    ids=["no-task", "no-url", "no-config", "no-schemes", "config-not-object"],
)
@pytest.mark.usefixtures("push_allowed")
def test_a_malformed_push_config_is_invalid_params(agents, client, params):
    response = rpc03(
        client, REVIEWER, "tasks/pushNotificationConfig/set", params, token=agents.a.token
    )
    assert_error(response, -32602, "INVALID_PARAMS")
    assert not PushConfig.objects.exists()


def test_delete_without_a_config_id_is_invalid_params(agents, client):
    asked = task03(send03(client, REVIEWER, agents.a.token))
    response = rpc03(
        client,
        REVIEWER,
        "tasks/pushNotificationConfig/delete",
        {"id": asked["id"]},
        token=agents.a.token,
    )
    assert_error(response, -32602, "INVALID_PARAMS")


@pytest.mark.usefixtures("push_allowed")
def test_a_push_config_with_the_message_is_registered(agents, client):
    configuration = {
        "blocking": True,
        "pushNotificationConfig": {"url": "http://127.0.0.1:9/hook", "token": "t"},
    }
    task = task03(send03(client, REVIEWER, agents.a.token, configuration=configuration))
    assert PushConfig.objects.get().task.public_id == task["id"]


# --- the other methods and errors -------------------------------------------------------------


def test_message_stream_writes_0_3_events(agents, client):
    response = rpc03(
        client,
        REVIEWER,
        "message/stream",
        {"message": message03("review")},
        token=agents.a.token,
        request_id="s-1",
    )
    bodies = sse_results(response)
    assert all(b["id"] == "s-1" and b["jsonrpc"] == "2.0" for b in bodies)
    results = [b["result"] for b in bodies]
    # The turn ran inline (eager) before the stream began: the task as the message left it,
    # then every update of the turn down to its pause.
    assert results[0]["kind"] == "task"
    v03.Task.model_validate(results[0])
    assert results[-1]["status"]["state"] == "input-required"
    for result in results[1:]:
        if result["kind"] == "status-update":
            v03.TaskStatusUpdateEvent.model_validate(result)
        else:
            assert result["kind"] == "artifact-update", result
            v03.TaskArtifactUpdateEvent.model_validate(result)


def test_tasks_resubscribe_sends_the_task_first_and_refuses_a_terminal_task(agents, client):
    asked = task03(send03(client, REVIEWER, agents.a.token))
    # The task waits for input: the stream sends it, then stays open for what follows.
    first = sse_first_result(
        rpc03(client, REVIEWER, "tasks/resubscribe", {"id": asked["id"]}, token=agents.a.token)
    )
    assert first["result"]["kind"] == "task"
    assert first["result"]["status"]["state"] == "input-required"
    rpc03(client, REVIEWER, "tasks/cancel", {"id": asked["id"]}, token=agents.a.token)
    ended = rpc03(client, REVIEWER, "tasks/resubscribe", {"id": asked["id"]}, token=agents.a.token)
    assert_error(ended, -32004, "UNSUPPORTED_OPERATION")
    unknown = rpc03(client, REVIEWER, "tasks/resubscribe", {"id": "nope"}, token=agents.a.token)
    assert_error(unknown, -32001, "TASK_NOT_FOUND")


@pytest.mark.parametrize(
    ("method", "params"),
    [
        ("message/stream", {"message": message03(role="user", parts=[{"metadata": {}}])}),
        ("message/stream", {}),
        ("message/stream", [1]),
        ("tasks/resubscribe", {}),
    ],
    ids=["part-without-content", "no-message", "params-not-object", "no-id"],
)
def test_malformed_stream_requests_are_plain_json_errors_and_start_nothing(
    agents, client, method, params
):
    response = rpc03(client, SUPPORT, method, params, token=agents.a.token)
    assert response["Content-Type"] == "application/json"
    assert_error(response, -32602)
    assert not Task.objects.exists()


def test_authenticated_extended_card_is_not_configured(agents, client):
    response = rpc03(client, SUPPORT, "agent/getAuthenticatedExtendedCard", token=agents.a.token)
    assert_error(response, -32007, "EXTENDED_AGENT_CARD_NOT_CONFIGURED")


def test_an_unknown_slash_method_is_method_not_found(agents, client):
    response = rpc03(client, SUPPORT, "tasks/list", {}, token=agents.a.token)
    assert_error(response, -32601, "METHOD_NOT_FOUND")


def test_errors_keep_the_request_id_and_parse_as_0_3_errors(agents, client):
    response = rpc03(
        client, SUPPORT, "tasks/get", {"id": "nope"}, token=agents.a.token, request_id="r-7"
    )
    body = response.json()
    assert body["id"] == "r-7"
    v03.JSONRPCErrorResponse.model_validate(body)


def test_extension_support_required_maps_to_invalid_request():
    body = dialect03.error_out(
        {"jsonrpc": "2.0", "id": 1, "error": {"code": -32008, "message": "m"}}
    )
    assert body["error"]["code"] == -32600
    same = {"jsonrpc": "2.0", "id": 1, "error": {"code": -32001, "message": "m"}}
    assert dialect03.error_out(same) == same


def test_a_body_that_is_not_json_is_a_parse_error_without_a_version(agents, client):
    response = post(client, SUPPORT, "{not json", token=agents.a.token, headers=NO_VERSION)
    assert_error(response, -32700, "PARSE_ERROR")


# --- extensions -------------------------------------------------------------------------------


@pytest.mark.parametrize("header", ["X-A2A-Extensions", "A2A-Extensions"])
def test_x_a2a_extensions_activates_like_a2a_extensions(agents, client, header):
    caller_may_approve(agents.a.tenant)  # approved in band below (deciders: either)
    response = send03(
        client,
        DEPLOYER,
        agents.a.token,
        "deploy build 2026.10.06-1 to staging",
        headers={header: ext.INTERACTIONS},
    )
    task = task03(response)
    pause = task["status"]["message"]["metadata"][ext.INTERACTIONS]
    assert pause["kind"] == "approval"
    assert response["X-A2A-Extensions"] == ext.INTERACTIONS
    assert response["A2A-Extensions"] == ext.INTERACTIONS
    # Approved in band: a message that continues a task the caller holds answers with the
    # task, even when the turn completes with no artifact.
    answer = message03(
        "ok",
        taskId=task["id"],
        contextId=task["contextId"],
        metadata={ext.INTERACTIONS: {"interactionId": pause["interactionId"], "approved": True}},
    )
    done = task03(
        send03(client, DEPLOYER, agents.a.token, message=answer, headers={header: ext.INTERACTIONS})
    )
    assert done["id"] == task["id"] and done["status"]["state"] == "completed"


def test_the_0_3_dialect_carries_an_approvals_progress_after_the_first_approval(agents, client):
    deployer = Agent.objects.get(tenant=agents.a.tenant, slug="deployer")
    deployer.tool_policy = {
        **deployer.tool_policy,
        "deploy/deploy_build": {"action": "approve", "required": 2},
    }
    deployer.save(update_fields=["tool_policy"])
    on = {"X-A2A-Extensions": ext.INTERACTIONS}
    held = task03(
        send03(client, DEPLOYER, agents.a.token, "deploy build 2026.10.06-1 to staging", headers=on)
    )
    opened = held["status"]["message"]["metadata"][ext.INTERACTIONS]["progress"]
    assert (opened["approvals"], opened["required"]) == (0, 2)
    flow_answer(
        tenant=agents.a.tenant,
        interaction_id=Interaction.objects.get(task__public_id=held["id"]).public_id,
        answer={"approved": True},
        by="user:operator@acme.test",
        via="page",
    )
    got = task03(
        rpc03(client, DEPLOYER, "tasks/get", {"id": held["id"]}, token=agents.a.token, headers=on)
    )
    assert got["status"]["state"] == "input-required"
    progress = got["status"]["message"]["metadata"][ext.INTERACTIONS]["progress"]
    assert (progress["approvals"], progress["required"]) == (1, 2)
    assert progress["text"].startswith("1 of 2 approvals; expires ")
    # The line as text too, for a 0.x client without the extension.
    plain = task03(rpc03(client, DEPLOYER, "tasks/get", {"id": held["id"]}, token=agents.a.token))
    assert "metadata" not in plain["status"]["message"]
    assert (
        text_of(plain["status"]["message"]) == f"Approve deploy / deploy_build? {progress['text']}"
    )


# --- one task, both dialects ------------------------------------------------------------------


def test_the_task_records_the_dialect_it_was_started_in_and_its_page_shows_it(agents, client):
    asked = task03(send03(client, REVIEWER, agents.a.token))
    modern = task_of(
        rpc(client, REVIEWER, "SendMessage", {"message": user_message("hi")}, token=agents.a.token)
    )
    assert Task.objects.get(public_id=asked["id"]).dialect == "0.3"
    assert Task.objects.get(public_id=modern["id"]).dialect == "1.0"
    page = agents.a.client_for(agents.a.viewer)

    def dialect_line(task_id: str) -> str:
        html = page.get(reverse("approvals:task", args=[task_id])).content.decode()
        return html[html.index("<dt>Dialect</dt>") :].split("</dd>")[0]

    assert "A2A 0.3 (slash-named methods" in dialect_line(asked["id"])
    assert "A2A 1.0" in dialect_line(modern["id"]) and "slash" not in dialect_line(modern["id"])


def test_a_task_created_in_0_3_is_read_in_1_0_and_answered_there(agents, client):
    asked = task03(send03(client, REVIEWER, agents.a.token))
    got = as_task(
        result_of(rpc(client, REVIEWER, "GetTask", {"id": asked["id"]}, token=agents.a.token))
    )
    assert got["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"
    assert got["history"][0]["role"] == "ROLE_USER"
    assert got["history"][0]["parts"] == [{"text": "hello"}]
    answer = user_message("main", taskId=asked["id"], contextId=asked["contextId"])
    done = task_of(rpc(client, REVIEWER, "SendMessage", {"message": answer}, token=agents.a.token))
    assert done["status"]["state"] == "TASK_STATE_COMPLETED"
    back = task03(rpc03(client, REVIEWER, "tasks/get", {"id": asked["id"]}, token=agents.a.token))
    assert back["status"]["state"] == "completed"
    assert [m["role"] for m in back["history"]] == [
        ("user" if m["role"] == "ROLE_USER" else "agent") for m in done["history"]
    ]


def test_a_task_created_in_1_0_is_read_answered_and_approved_in_0_3(agents, client, world):
    held = task_of(
        rpc(
            client,
            DEPLOYER,
            "SendMessage",
            {"message": user_message("deploy build 2026.10.06-1 to staging")},
            token=agents.a.token,
        )
    )
    assert held["status"]["state"] == "TASK_STATE_AUTH_REQUIRED"
    got = task03(rpc03(client, DEPLOYER, "tasks/get", {"id": held["id"]}, token=agents.a.token))
    assert got["status"]["state"] == "input-required"  # the 0.x spelling of the pause
    assert got["history"][0]["parts"] == [
        {"kind": "text", "text": "deploy build 2026.10.06-1 to staging"}
    ]
    interaction = Interaction.objects.get(task__public_id=held["id"])
    flow_answer(
        tenant=agents.a.tenant,
        interaction_id=interaction.public_id,
        answer={"approved": True},
        by="user:operator@acme.test",
        via="page",
    )
    done = task03(rpc03(client, DEPLOYER, "tasks/get", {"id": held["id"]}, token=agents.a.token))
    assert done["status"]["state"] == "completed"
    assert text_of(done["status"]["message"]) == "Deployed build 2026.10.06-1 to staging."


# --- the translation of stream events (for message/stream and tasks/resubscribe) ---------------


def test_stream_events_become_0_3_events():
    status = {
        "statusUpdate": {
            "taskId": "t",
            "contextId": "c",
            "status": {"state": "TASK_STATE_INPUT_REQUIRED", "timestamp": "2026-01-01T00:00:00Z"},
        }
    }
    out = wire03.event_out(status)
    assert out == {
        "kind": "status-update",
        "taskId": "t",
        "contextId": "c",
        "status": {"state": "input-required", "timestamp": "2026-01-01T00:00:00Z"},
        "final": True,
    }
    v03.TaskStatusUpdateEvent.model_validate(out)
    waiting = wire03.event_out(
        {
            "statusUpdate": {
                **status["statusUpdate"],
                "status": {"state": "TASK_STATE_AUTH_REQUIRED"},
            }
        }
    )
    # An approval pause is input-required, and the terminal frame of a 0.x stream.
    assert waiting["final"] is True and waiting["status"]["state"] == "input-required"
    artifact = wire03.event_out(
        {
            "artifactUpdate": {
                "taskId": "t",
                "contextId": "c",
                "artifact": {
                    "artifactId": "a",
                    "parts": [{"url": "https://x/f", "mediaType": "text/plain", "filename": "f"}],
                },
                "append": True,
                "lastChunk": False,
            }
        }
    )
    assert artifact["kind"] == "artifact-update" and artifact["append"] is True
    assert artifact["artifact"]["parts"] == [
        {"kind": "file", "file": {"uri": "https://x/f", "mimeType": "text/plain", "name": "f"}}
    ]
    v03.TaskArtifactUpdateEvent.model_validate(artifact)
    task = wire03.event_out(
        {"task": {"id": "t", "contextId": "c", "status": {"state": "TASK_STATE_SUBMITTED"}}}
    )
    assert task["kind"] == "task" and task["status"]["state"] == "submitted"
    message = wire03.event_out(
        {"message": {"messageId": "m", "role": "ROLE_AGENT", "parts": [{"data": 3}]}}
    )
    assert message["parts"] == [
        {"kind": "data", "data": {"value": 3}, "metadata": {"data_part_compat": True}}
    ]
    v03.Message.model_validate(message)
    with pytest.raises(ValueError):
        wire03.event_out({"nothing": {}})


def test_every_state_has_its_0_3_spelling():
    from runtime.kernel.task_models import TaskState

    spelled = {wire03.state_out(s) for s in TaskState.values}
    # No auth-required: a pause for a person is input-required in this dialect.
    assert spelled == {
        "submitted",
        "working",
        "input-required",
        "completed",
        "failed",
        "canceled",
        "rejected",
    }
    assert spelled <= {s.value for s in v03.TaskState}
    assert wire03.state_out("TASK_STATE_UNSPECIFIED") == "unknown"


# --- artifacts and direct replies through the conformance agent ------------------------------

TCK = "/a2a/acme/tck"


def tck_send(client, token, prefix: str) -> dict:
    message = message03("go", messageId=f"{prefix}-{uuid.uuid4()}")
    return result_of(send03(client, TCK, token, message=message))


def test_file_and_data_artifacts_are_written_as_0_3_parts(agents, client):
    raw = tck_send(client, agents.a.token, "tck-artifact-file")
    v03.Task.model_validate(raw)
    [part] = raw["artifacts"][0]["parts"]
    assert part["kind"] == "file"
    assert part["file"]["mimeType"] == "text/plain" and part["file"]["name"] == "output.txt"
    assert "bytes" in part["file"] or "uri" in part["file"]
    linked = tck_send(client, agents.a.token, "tck-artifact-file-url")
    [part] = linked["artifacts"][0]["parts"]
    assert part == {
        "kind": "file",
        "file": {
            "uri": "https://example.com/output.txt",
            "mimeType": "text/plain",
            "name": "output.txt",
        },
    }
    data = tck_send(client, agents.a.token, "tck-artifact-data")
    [part] = data["artifacts"][0]["parts"]
    assert part["kind"] == "data" and part["data"] == {"key": "value", "count": 42}


def test_a_direct_reply_is_a_message_and_a_rejection_is_a_rejected_task(agents, client):
    direct = tck_send(client, agents.a.token, "tck-message-response")
    assert direct["kind"] == "message" and text_of(direct) == "Direct message response"
    rejected = tck_send(client, agents.a.token, "tck-reject-task")
    assert rejected["kind"] == "task" and rejected["status"]["state"] == "rejected"
