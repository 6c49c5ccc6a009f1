"""Who owns a task: anonymous callers of a public agent are strangers to each other,
a retried SendMessage is one task, and a late in-band answer says who decided first."""

import json

import pytest
from django.core.exceptions import ValidationError

from config.celery import app
from runtime.decisions.decision_models import Interaction
from runtime.kernel.push.push_models import PushConfig, PushSettings
from runtime.kernel.task_models import Context, Task, TaskEvent
from tenants.tokens import api_token_create
from tests.a2a_client import (
    EXTENSIONS,
    assert_error,
    error_info,
    field_violations,
    interaction_metadata,
    result_of,
    rpc,
    task_of,
    user_message,
)
from tests.core import Maker, decide, run

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("eager")]

TCK = "/a2a/acme/tck"
SUPPORT = "/a2a/acme/support"
DEPLOYER = "/a2a/acme/deployer"


def send(client, path, message, token=None, **params):
    return rpc(client, path, "SendMessage", {"message": message, **params}, token=token)


def asking(client, token=None, **fields) -> dict:
    """A tck task waiting for input (TASK_STATE_INPUT_REQUIRED)."""
    message = user_message(messageId=f"tck-input-required-{Task.objects.count()}", **fields)
    task = task_of(send(client, TCK, message, token))
    assert task["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"
    return task


# --- 1. anonymous callers are strangers to each other -------------------------------------


def test_anonymous_callers_each_get_their_own_subject(agents, client):
    first = asking(client, contextId="shared")
    second = asking(client, contextId="shared")
    subjects = set(Task.objects.values_list("subject", flat=True))
    assert len(subjects) == 2
    assert all(s.startswith("anonymous:") and len(s) > len("anonymous:") + 20 for s in subjects)
    # The same contextId joins nobody's context: each is the first turn of a context of its own.
    assert Context.objects.filter(context_id="shared").count() == 2
    assert [first["id"].split(".")[0], second["id"].split(".")[0]] == ["t1", "t1"]
    assert first["contextId"] == second["contextId"] == "shared"


def test_anonymous_list_tasks_lists_nothing(agents, client):
    asking(client)
    asking(client)
    listed = result_of(rpc(client, TCK, "ListTasks", {}))
    assert listed["tasks"] == []
    assert listed["totalSize"] == 0
    assert listed["nextPageToken"] == ""
    # A partner with a token still lists its own tasks on the same agent.
    asking(client, agents.a.token)
    assert result_of(rpc(client, TCK, "ListTasks", {}, token=agents.a.token))["totalSize"] == 1


def test_anonymous_task_id_is_the_capability_for_get_answer_and_cancel(agents, client):
    mine = asking(client)
    got = result_of(rpc(client, TCK, "GetTask", {"id": mine["id"]}))
    assert got["id"] == mine["id"]
    # The caller that knows the id continues its own task...
    answer = user_message("more", taskId=mine["id"], contextId=mine["contextId"])
    assert task_of(send(client, TCK, answer))["status"]["state"] == "TASK_STATE_COMPLETED"
    # ...and cancels another of its own.
    other = asking(client)
    canceled = result_of(rpc(client, TCK, "CancelTask", {"id": other["id"]}))
    assert canceled["status"]["state"] == "TASK_STATE_CANCELED"
    assert Task.objects.get(public_id=other["id"]).subject.startswith("anonymous:")


def test_anonymous_caller_without_the_task_id_reaches_nothing(agents, client):
    victim = asking(client)
    context = Context.objects.get(tasks__public_id=victim["id"])
    # The id's random part is 128 bits (token_urlsafe(16)): not something to guess.
    assert len(context.key) == 22
    guessed = f"t1.{'A' * 22}"
    partners = asking(client, agents.a.token)
    for task_id in (guessed, partners["id"]):
        assert_error(rpc(client, TCK, "GetTask", {"id": task_id}), -32001, "TASK_NOT_FOUND")
        assert_error(rpc(client, TCK, "CancelTask", {"id": task_id}), -32001, "TASK_NOT_FOUND")
        answer = user_message("x", taskId=task_id)
        assert_error(send(client, TCK, answer), -32001, "TASK_NOT_FOUND")
        config = {"taskId": task_id, "url": "https://hooks.example.test/a2a"}
        assert_error(
            rpc(client, TCK, "CreateTaskPushNotificationConfig", config), -32001, "TASK_NOT_FOUND"
        )
    # A partner with a token cannot reach an anonymous caller's task either.
    assert_error(
        rpc(client, TCK, "GetTask", {"id": victim["id"]}, token=agents.a.token),
        -32001,
        "TASK_NOT_FOUND",
    )
    assert Task.objects.get(public_id=victim["id"]).state == "TASK_STATE_INPUT_REQUIRED"


def test_a_token_cannot_act_as_an_anonymous_subject(agents):
    for subject in ("anonymous", "anonymous:abc"):
        with pytest.raises(ValidationError):
            api_token_create(tenant=agents.a.tenant, subject=subject, name="x")


def test_a_token_made_before_the_rule_with_an_anonymous_subject_is_refused(agents, client):
    # ApiToken.clean refuses such subjects now; a row from before it must not become a key to
    # every anonymous caller's tasks.
    from tenants.models import ApiToken

    token_row, token = api_token_create(tenant=agents.a.tenant, subject="partner:old", name="old")
    ApiToken.objects.filter(pk=token_row.pk).update(subject="anonymous:abc")
    response = send(client, TCK, user_message(), token)
    assert response.status_code == 401
    assert error_info(response.json()["error"])["metadata"]["reason"] == "reserved_subject"
    assert not Task.objects.exists()


# --- 2. a retried SendMessage is one task --------------------------------------------------


@pytest.mark.parametrize("fields", [{}, {"contextId": "ticket-9"}])
def test_a_retried_send_message_returns_the_same_task(agents, client, fields):
    message = user_message("hello", **fields)
    ids = {task_of(send(client, SUPPORT, message, agents.a.token))["id"] for _ in range(3)}
    assert len(ids) == 1
    assert Task.objects.count() == 1
    assert Context.objects.get().turns == 1
    # One turn ran: one submitted status among the task's events.
    events = TaskEvent.objects.filter(state="TASK_STATE_SUBMITTED").count()
    assert events == 1


def test_a_retried_send_message_registers_its_inline_push_config_once(
    agents, client, loopback_only
):
    PushSettings.objects.create(tenant=agents.a.tenant, allowed_hosts="*.test")
    # The deliveries that the eager turn makes stay on this machine (the outbound guard
    # refuses the address unless private hosts are allowed); this test counts configs.
    loopback_only.answer("hooks.example.test", "127.0.0.1")
    message = user_message("hello")
    # No config id: registering it again would make a second receiver of every event.
    configuration = {"taskPushNotificationConfig": {"url": "https://hooks.example.test/a2a"}}
    for _ in range(3):
        task_of(send(client, SUPPORT, message, agents.a.token, configuration=configuration))
    assert PushConfig.objects.count() == 1


def test_a_retried_send_message_returns_the_same_direct_reply(agents, client):
    message = user_message("hi", messageId="tck-message-response-retry")
    first = result_of(send(client, TCK, message, agents.a.token))
    again = result_of(send(client, TCK, message, agents.a.token))
    assert "message" in first
    assert again == first
    assert Task.objects.count() == 1


def test_a_reused_message_id_with_a_different_message_is_invalid_params(agents, client):
    message = user_message("hello")
    task = task_of(send(client, SUPPORT, message, agents.a.token))
    for changed in ({**message, "parts": [{"text": "bye"}]}, {**message, "contextId": "elsewhere"}):
        error = assert_error(send(client, SUPPORT, changed, agents.a.token), -32602)
        assert field_violations(error)[0]["field"] == "message.messageId"
        assert error_info(error)["metadata"]["taskId"] == task["id"]
    assert Task.objects.count() == 1
    assert Context.objects.count() == 1


def test_the_same_message_id_from_another_subject_is_its_own_task(agents, client):
    _, other = api_token_create(tenant=agents.a.tenant, subject="partner:other", name="o")
    message = user_message("hello")
    mine = task_of(send(client, SUPPORT, message, agents.a.token))
    theirs = task_of(send(client, SUPPORT, message, other))
    assert mine["id"] != theirs["id"]


def test_a_retried_answer_with_a_different_message_is_invalid_params(agents, client):
    task = asking(client, agents.a.token)
    answer = user_message("main", taskId=task["id"], contextId=task["contextId"])
    done = task_of(send(client, TCK, answer, agents.a.token))
    assert done["status"]["state"] == "TASK_STATE_COMPLETED"
    assert task_of(send(client, TCK, answer, agents.a.token))["id"] == task["id"]
    changed = {**answer, "parts": [{"text": "develop"}]}
    error = assert_error(send(client, TCK, changed, agents.a.token), -32602)
    assert field_violations(error)[0]["field"] == "message.messageId"


# --- 3. a late in-band answer says who decided first ----------------------------------------


def _late_approval(client, agents, interaction: Interaction):
    task = interaction.task
    message = user_message(
        "yes",
        taskId=task.public_id,
        contextId=task.wire_context_id,
        metadata=interaction_metadata(interaction.public_id, approved=True),
    )
    return rpc(
        client,
        DEPLOYER,
        "SendMessage",
        {"message": message},
        token=agents.a.token,
        headers=EXTENSIONS,
    )


@pytest.mark.parametrize("task_ran", [False, True], ids=["task-running", "task-completed"])
def test_an_inband_approval_after_an_operator_decided_says_who_and_when(agents, client, task_ran):
    interaction = Maker(agents.a).approval()
    # The decision's resume goes to the queue, not inline: the turn has not run yet.
    app.conf.update(task_always_eager=False)
    try:
        decide(interaction, by="user:operator@acme.test", approved=False)
    finally:
        app.conf.update(task_always_eager=True)
    if task_ran:
        assert run(interaction.task).state == "TASK_STATE_COMPLETED"
    else:
        assert Task.objects.get(pk=interaction.task_id).state == "TASK_STATE_WORKING"
    error = assert_error(_late_approval(client, agents, interaction), -32004)
    info = error_info(error)
    interaction.refresh_from_db()
    assert info["reason"] == "INTERACTION_ALREADY_DECIDED"
    assert info["metadata"]["interactionId"] == interaction.public_id
    # The partner learns the kind of decider, never the operator's e-mail.
    assert info["metadata"]["decidedBy"] == "operator"
    assert info["metadata"]["decidedVia"] == "page"
    assert info["metadata"]["decidedAt"] == interaction.answered_at.isoformat()
    assert "by operator" in error["message"]
    assert "operator@acme.test" not in json.dumps(error)
    # The operator's decision stands.
    assert interaction.answer == {"approved": False}


# --- 4. anonymous callers' streams are counted per address --------------------------------


def subscribe(client, task_id: str, address: str):
    body = {"jsonrpc": "2.0", "id": 1, "method": "SubscribeToTask", "params": {"id": task_id}}
    return client.post(
        TCK,
        json.dumps(body),
        content_type="application/json",
        headers={"A2A-Version": "1.0"},
        REMOTE_ADDR=address,
    )


def test_anonymous_callers_share_no_stream_limit_across_addresses(agents, client, settings):
    """Callers without a token are one subject: the per-caller stream limit counts them by
    their address, so one of them cannot take every anonymous caller's streams."""
    settings.A2A_STREAMS_PER_TOKEN = 2
    task = asking(client)
    held = [subscribe(client, task["id"], "10.0.0.1") for _ in range(2)]
    try:
        assert all(r["Content-Type"] == "text/event-stream" for r in held)
        refused = assert_error(
            subscribe(client, task["id"], "10.0.0.1"), -32000, "TOO_MANY_STREAMS"
        )
        assert error_info(refused)["metadata"] == {"scope": "address", "limit": "2"}
        other = subscribe(client, task["id"], "10.0.0.2")
        held.append(other)
        assert other["Content-Type"] == "text/event-stream"
        # A partner's token has its own share, as before.
        mine = rpc(client, TCK, "SubscribeToTask", {"id": task["id"]}, token=agents.a.token)
        assert_error(mine, -32001, "TASK_NOT_FOUND")
    finally:
        for response in held:
            response.close()
