"""A 0.x host (the Wildo host speaks A2A 0.2.5) point by point, on the wire, in the 0.x
dialect: requests built as that host builds them, and what it expects each one to get. The 1.0
binding keeps 1.0's interrupted states (tests/a2a_endpoint/test_streams.py, test_tasks.py); the
disconnect of a direct stream needs a live server (test_seed004_live.py)."""

import json

import pytest
from a2a.compat.v0_3 import types as v03
from django.urls import reverse

from runtime.decisions.decision_models import Interaction
from runtime.kernel import extensions as ext
from runtime.kernel.push.push_models import PushConfig, PushSettings
from runtime.kernel.task_models import Task
from tests.a2a_client import assert_error, result_of, rpc, sse_results
from tests.core import flow_answer

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("eager")]

SUPPORT = "/a2a/acme/support"
DEPLOYER = "/a2a/acme/deployer"
REVIEWER = "/a2a/acme/code-reviewer"
DEPLOY = "deploy build 2026.10.06-1 to staging"


def seed_request(client, path, token, method, params, *, headers=None, request_id=1):
    """As the seed's sendMessage() sends it: content-type and Authorization, no A2A-Version,
    no X-A2A-Extensions unless given."""
    merged = {"Authorization": f"Bearer {token}", **(headers or {})}
    return client.post(
        path,
        data=json.dumps({"jsonrpc": "2.0", "id": request_id, "method": method, "params": params}),
        content_type="application/json",
        headers=merged,
    )


def seed_message(text: str, **fields) -> dict:
    """The seed's message: role and parts, no messageId, no kind on the message."""
    return {"role": "user", "parts": [{"kind": "text", "text": text}], **fields}


def send(client, path, token, text, **kw):
    return seed_request(client, path, token, "message/send", {"message": seed_message(text)}, **kw)


def list_tasks_1_0(client, path, token) -> dict:
    return result_of(rpc(client, path, "ListTasks", {}, token=token))


def test_the_seeds_own_request_without_a_message_id_is_answered(agents, client):
    reply = result_of(send(client, SUPPORT, agents.a.token, "How do I reset my password?"))
    assert reply["kind"] == "message" and reply["role"] == "agent"
    v03.Message.model_validate(reply)
    assert "To reset your password" in reply["parts"][0]["text"]
    # "Retain contextId to continue the conversation": the same context's next turn.
    again = result_of(
        seed_request(
            client,
            SUPPORT,
            agents.a.token,
            "message/send",
            {"message": seed_message("and my e-mail?", contextId=reply["contextId"])},
        )
    )
    assert again["contextId"] == reply["contextId"]
    first, second = Task.objects.order_by("turn")
    assert first.context_id == second.context_id and second.turn == 2
    # The minted messageIds are the server's own, one per message.
    minted = [t.history[0]["messageId"] for t in (first, second)]
    assert len(set(minted)) == 2 and all(m.startswith("minted-") for m in minted)


def test_a_blocking_completed_reply_creates_no_task_handle(agents, client):
    token = agents.a.token
    params = {"message": {**seed_message("hello"), "messageId": "m-once"}}
    reply = result_of(seed_request(client, SUPPORT, token, "message/send", params))
    assert reply["kind"] == "message" and "taskId" not in reply
    # The turn ran in a worker (a task row, for the operators' pages and audit), but no
    # task method of either dialect finds it: no task was created for the caller.
    (task,) = Task.objects.all()
    assert task.state == "TASK_STATE_COMPLETED" and task.direct
    assert list_tasks_1_0(client, SUPPORT, token) == {
        "tasks": [],
        "nextPageToken": "",
        "pageSize": 50,
        "totalSize": 0,
    }
    assert_error(rpc(client, SUPPORT, "GetTask", {"id": task.public_id}, token=token), -32001)
    assert_error(rpc(client, SUPPORT, "CancelTask", {"id": task.public_id}, token=token), -32001)
    for method, method_params in (
        ("tasks/get", {"id": task.public_id}),
        ("tasks/cancel", {"id": task.public_id}),
        ("tasks/resubscribe", {"id": task.public_id}),
        (
            "tasks/pushNotificationConfig/set",
            {"taskId": task.public_id, "pushNotificationConfig": {"url": "https://h.test/x"}},
        ),
        ("tasks/pushNotificationConfig/list", {"id": task.public_id}),
    ):
        assert_error(seed_request(client, SUPPORT, token, method, method_params), -32001)
    answer = {"message": {**seed_message("more"), "taskId": task.public_id}}
    assert_error(seed_request(client, SUPPORT, token, "message/send", answer), -32001)
    # A retry (same messageId) gets the same reply and starts nothing.
    assert result_of(seed_request(client, SUPPORT, token, "message/send", params)) == reply
    assert Task.objects.count() == 1
    # The operators still see the turn on their task page.
    page = reverse("approvals:task", args=[task.public_id])
    client.force_login(agents.a.admin)
    shown = client.get(page)
    assert shown.status_code == 200
    assert b"a direct reply: the caller was given no task handle" in shown.content


def test_an_approval_gate_in_a_blocking_send_is_a_task_in_input_required(agents, client):
    token = agents.a.token
    task = result_of(
        send(client, DEPLOYER, token, DEPLOY, headers={"X-A2A-Extensions": ext.INTERACTIONS})
    )
    v03.Task.model_validate(task)
    assert task["kind"] == "task" and task["status"]["state"] == "input-required"
    # interactions/v1 still says what the pause is: an approval, decided in the application.
    pause = task["status"]["message"]["metadata"][ext.INTERACTIONS]
    assert pause["kind"] == "approval"
    # The task handle was handed out: every method finds it, in both dialects.
    got = result_of(seed_request(client, DEPLOYER, token, "tasks/get", {"id": task["id"]}))
    assert got["status"]["state"] == "input-required"
    listed = list_tasks_1_0(client, DEPLOYER, token)
    assert [t["id"] for t in listed["tasks"]] == [task["id"]]
    assert listed["tasks"][0]["status"]["state"] == "TASK_STATE_AUTH_REQUIRED"  # 1.0's name
    assert not Task.objects.get(public_id=task["id"]).direct


def test_nonblocking_send_returns_a_task_at_once(agents, client):
    params = {"message": seed_message("hello"), "configuration": {"blocking": False}}
    task = result_of(seed_request(client, SUPPORT, agents.a.token, "message/send", params))
    assert task["kind"] == "task" and task["id"] and task["contextId"]
    assert list_tasks_1_0(client, SUPPORT, agents.a.token)["totalSize"] == 1


def test_a_direct_stream_whose_turn_completes_sends_message_frames_and_no_task(agents, client):
    response = seed_request(
        client, SUPPORT, agents.a.token, "message/stream", {"message": seed_message("hello")}
    )
    assert response["Content-Type"] == "text/event-stream"
    frames = [body["result"] for body in sse_results(response)]
    assert frames and all(frame["kind"] == "message" for frame in frames)
    final = frames[-1]
    v03.Message.model_validate(final)
    assert "taskId" not in final and final["contextId"]
    assert "hello" in final["parts"][0]["text"]
    assert list_tasks_1_0(client, SUPPORT, agents.a.token)["totalSize"] == 0
    assert Task.objects.get().direct


def test_a_direct_stream_ends_at_an_approval_gate_with_the_task_in_input_required(agents, client):
    token = agents.a.token
    response = seed_request(
        client, DEPLOYER, token, "message/stream", {"message": seed_message(DEPLOY)}
    )
    frames = [body["result"] for body in sse_results(response)]
    # The terminal frame is the task in input-required; the stream ended there.
    last = frames[-1]
    assert last["kind"] == "task" and last["status"]["state"] == "input-required"
    v03.Task.model_validate(last)
    assert all(frame["kind"] != "message" for frame in frames)
    # Following the task after that is tasks/get (or tasks/resubscribe); the person decides
    # through the application.
    interaction = Interaction.objects.get(task__public_id=last["id"])
    flow_answer(
        tenant=agents.a.tenant,
        interaction_id=interaction.public_id,
        answer={"approved": True},
        by="user:operator@acme.test",
        via="page",
    )
    done = result_of(seed_request(client, DEPLOYER, token, "tasks/get", {"id": last["id"]}))
    assert done["status"]["state"] == "completed"


def test_a_stream_on_a_task_it_answers_streams_that_task_to_its_end(agents, client):
    token = agents.a.token
    asked = result_of(send(client, REVIEWER, token, "review this diff"))
    assert asked["status"]["state"] == "input-required"
    answer = seed_message("main", taskId=asked["id"], contextId=asked["contextId"])
    frames = [
        body["result"]
        for body in sse_results(
            seed_request(client, REVIEWER, token, "message/stream", {"message": answer})
        )
    ]
    assert frames[0]["kind"] == "task" and frames[0]["id"] == asked["id"]
    assert frames[-1]["kind"] == "status-update" and frames[-1]["final"] is True
    assert frames[-1]["status"]["state"] == "completed"


@pytest.mark.parametrize(
    ("part", "stored"),
    [
        ({"text": "plain"}, {"text": "plain"}),
        ({"data": {"n": 1}}, {"data": {"n": 1}}),
        (
            {"file": {"bytes": "aGk=", "mimeType": "text/plain", "name": "hi.txt"}},
            {"raw": "aGk=", "mediaType": "text/plain", "filename": "hi.txt"},
        ),
    ],
    ids=["text", "data", "file"],
)
def test_a_part_without_kind_but_one_content_is_read_as_that_kind(agents, client, part, stored):
    message = {"role": "user", "parts": [part]}
    reply = result_of(
        seed_request(client, SUPPORT, agents.a.token, "message/send", {"message": message})
    )
    assert reply["kind"] == "message"
    first = Task.objects.get().history[0]["parts"][0]
    assert {k: first[k] for k in stored} == stored


def test_a_0_3_push_config_receives_0_3_task_bodies_and_a_1_0_config_stream_responses(
    agents, client, settings
):
    from runtime.kernel.push import push_delivery
    from runtime.kernel.push.push_models import PushDelivery
    from tests.a2a_endpoint.receiver import Receiver

    settings.PUSH_ALLOW_PRIVATE_HOSTS = True
    push = PushSettings.objects.get_or_create(tenant=agents.a.tenant)[0]
    push.allowed_hosts = "127.0.0.1"
    push.save()
    receiver03 = Receiver(secret=push.secret, path="/hook03").start()
    receiver10 = Receiver(secret=push.secret, path="/hook10").start()
    try:
        token = agents.a.token
        asked = result_of(send(client, REVIEWER, token, "review this diff"))
        set03 = seed_request(
            client,
            REVIEWER,
            token,
            "tasks/pushNotificationConfig/set",
            {"taskId": asked["id"], "pushNotificationConfig": {"url": receiver03.url}},
        )
        assert result_of(set03)["pushNotificationConfig"]["url"] == receiver03.url
        created10 = rpc(
            client,
            REVIEWER,
            "CreateTaskPushNotificationConfig",
            {"taskId": asked["id"], "url": receiver10.url},
            token=token,
        )
        assert result_of(created10)["url"] == receiver10.url
        assert {c.url: c.dialect for c in PushConfig.objects.all()} == {
            receiver03.url: "0.3",
            receiver10.url: "1.0",
        }
        answer = seed_message("main", taskId=asked["id"], contextId=asked["contextId"])
        seed_request(client, REVIEWER, token, "message/send", {"message": answer})
        while PushDelivery.objects.filter(state=PushDelivery.State.PENDING).exists():
            for pk in PushConfig.objects.values_list("pk", flat=True):
                push_delivery.push_deliver(config_pk=pk, worker_id="test-push")
        assert receiver03.events and receiver10.events
        for body in receiver03.events:
            task = v03.Task.model_validate(body)
            assert body["kind"] == "task" and task.id == asked["id"]
        states = [b["status"]["state"] for b in receiver03.events]
        assert states[0] == "working" and states[-1] == "completed"
        assert any(b.get("artifacts") for b in receiver03.events)
        assert all(r["headers"]["content-type"] == "application/json" for r in receiver03.requests)
        # The 1.0 config of the same task keeps 1.0 StreamResponses.
        assert all({"statusUpdate", "artifactUpdate"} & set(b) for b in receiver10.events)
        assert receiver10.events[-1]["statusUpdate"]["status"]["state"] == "TASK_STATE_COMPLETED"
    finally:
        receiver03.stop()
        receiver10.stop()
