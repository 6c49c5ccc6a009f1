"""Flows 1-4 run by a 0.3 client on the live stack: the a2a-sdk 1.3's 0.3 compatibility
transport (a2a.compat.v0_3.jsonrpc_transport), chosen the way the SDK chooses it for a card
that offers only 0.3. Every request it makes is recorded, so the test also proves it spoke
0.3 (slash-named methods, A2A-Version: 0.3), not 1.0."""

import json

import httpx
import pytest
from a2a.types import Message, Role, TaskState
from a2a.utils.errors import (
    InvalidParamsError,
    TaskNotCancelableError,
    TaskNotFoundError,
    UnsupportedOperationError,
)

from connections.models import App
from connections.services import connection_connect_token
from runtime.agents.agent_models import DemoRecord
from runtime.decisions.decision_models import Interaction
from runtime.kernel import extensions as ext
from tenants.models import Tenant, User
from tests.core import caller_may_approve, flow_answer
from tests.interop.clients03 import Partner03
from tests.sdk_client import as_dict, status_text, user_message

pytestmark = pytest.mark.django_db(transaction=True)

BUILD = "2026.10.06-1"
DEPLOY = f"deploy build {BUILD} to staging"


@pytest.fixture
def partner03(live_stack, demo):
    p = Partner03(live_stack.url, demo["token"])
    yield p
    # Every call went out in the 0.3 dialect.
    assert p.requests
    assert all("/" in method and version == "0.3" for method, version in p.requests), p.requests
    p.close()


@pytest.fixture
def agents(demo) -> dict:
    return demo["agents"]


def interaction_of(task_id: str) -> Interaction:
    return Interaction.objects.filter(task__public_id=task_id).latest("created_at")


def operator_answers(demo, task_id: str, **answer) -> None:
    flow_answer(
        tenant=Tenant.objects.get(slug=demo["tenant"]),
        interaction_id=interaction_of(task_id).public_id,
        answer=answer,
        by="user:operator@demo.test",
        via="page",
    )


# --- flow 1: support --------------------------------------------------------------------------


def test_flow_1_blocking_send_answers_with_a_message(partner03, agents):
    reply = partner03.send(agents["support"], user_message("How do I reset my password?"))
    assert isinstance(reply, Message)
    assert reply.role == Role.ROLE_AGENT
    assert "Reset password" in reply.parts[0].text
    assert reply.context_id and not reply.task_id
    assert partner03.requests[-1][0] == "message/send"


def test_flow_1_non_blocking_send_returns_a_task_then_tasks_get_until_done(partner03, agents):
    task = partner03.send(agents["support"], user_message("Is the API up?"), polling=True)
    assert task.status.state in (
        TaskState.TASK_STATE_SUBMITTED,
        TaskState.TASK_STATE_WORKING,
        TaskState.TASK_STATE_COMPLETED,
    )
    done = partner03.wait_for(agents["support"], task.id)
    assert done.status.state == TaskState.TASK_STATE_COMPLETED
    assert '"Is the API up?"' in status_text(done)
    assert ("tasks/get", "0.3") in partner03.requests


# --- flow 2: a question answered on the same task ---------------------------------------------


def test_flow_2_question_answered_on_the_same_task(partner03, agents):
    reviewer = agents["code-reviewer"]
    asked = partner03.send(reviewer, user_message("review this diff to payments-api"))
    assert asked.status.state == TaskState.TASK_STATE_INPUT_REQUIRED
    assert "base branch" in status_text(asked)
    done = partner03.send(
        reviewer, user_message("main", task_id=asked.id, context_id=asked.context_id)
    )
    assert done.id == asked.id
    assert done.status.state == TaskState.TASK_STATE_COMPLETED
    assert done.artifacts and "main" in json.dumps(as_dict(done.artifacts[0]))
    with pytest.raises(TaskNotCancelableError):
        partner03.cancel(reviewer, done.id)
    with pytest.raises(UnsupportedOperationError):
        partner03.send(reviewer, user_message("more", task_id=done.id, context_id=done.context_id))
    with pytest.raises(TaskNotFoundError):
        partner03.get(reviewer, "t1.does-not-exist")


def test_flow_2_cancel_closes_the_question(partner03, agents):
    reviewer = agents["code-reviewer"]
    asked = partner03.send(reviewer, user_message("review this"))
    canceled = partner03.cancel(reviewer, asked.id)
    assert canceled.status.state == TaskState.TASK_STATE_CANCELED
    assert ("tasks/cancel", "0.3") in partner03.requests


# --- flow 3: a held deploy ------------------------------------------------------------------


def test_flow_3_held_deploy_approved_by_an_operator(partner03, agents, demo):
    task = partner03.send(agents["deployer"], user_message(DEPLOY))
    # In the 0.x dialect an approval pause is input-required.
    assert task.status.state == TaskState.TASK_STATE_INPUT_REQUIRED
    assert status_text(task) == "Approve deploy / deploy_build?"
    assert not task.status.message.metadata
    operator_answers(demo, task.id, approved=True)
    done = partner03.wait_for(agents["deployer"], task.id)
    assert done.status.state == TaskState.TASK_STATE_COMPLETED
    assert status_text(done) == f"Deployed build {BUILD} to staging."
    assert DemoRecord.objects.get(kind="deployment").data["build"] == BUILD


def test_flow_3_with_the_extension_approves_in_band(partner03, agents, demo):
    caller_may_approve(Tenant.objects.get(slug=demo["tenant"]))
    # The compat transport sends the extension as A2A-Extensions and X-A2A-Extensions.
    on = [ext.INTERACTIONS]
    task = partner03.send(agents["deployer"], user_message(DEPLOY), extensions=on)
    pause = as_dict(task.status)["message"]["metadata"][ext.INTERACTIONS]
    assert pause["kind"] == "approval"
    with pytest.raises(InvalidParamsError):
        partner03.send(
            agents["deployer"],
            user_message(
                "ok",
                task_id=task.id,
                context_id=task.context_id,
                metadata={ext.INTERACTIONS: {"interactionId": "i_nope", "approved": True}},
            ),
            extensions=on,
        )
    done = partner03.send(
        agents["deployer"],
        user_message(
            "ok",
            task_id=task.id,
            context_id=task.context_id,
            metadata={
                ext.INTERACTIONS: {"interactionId": pause["interactionId"], "approved": True}
            },
        ),
        extensions=on,
    )
    assert done.id == task.id
    assert done.status.state == TaskState.TASK_STATE_COMPLETED
    assert interaction_of(task.id).answered_via == "inband"


# --- flow 4: a connection, then a held pull request -------------------------------------------


def test_flow_4_connect_then_approve_the_pull_request(partner03, agents, demo):
    coder = agents["coder"]
    task = partner03.send(coder, user_message("open a pull request on payments-api: fix rounding"))
    assert task.status.state == TaskState.TASK_STATE_INPUT_REQUIRED
    assert status_text(task).startswith("Connect github")
    connection_connect_token(
        tenant=Tenant.objects.get(slug=demo["tenant"]),
        app=App.objects.get(slug="github"),
        token="ghp_x",
        by=User.objects.get(email="operator@demo.test"),
    )
    held = partner03.wait_for(
        coder,
        task.id,
        states={TaskState.TASK_STATE_INPUT_REQUIRED},
        predicate=lambda t: status_text(t) == "Approve github / create_pull_request?",
    )
    operator_answers(demo, held.id, approved=True)
    done = partner03.wait_for(coder, task.id)
    assert done.status.state == TaskState.TASK_STATE_COMPLETED


# --- streamed: message/stream and tasks/resubscribe -------------------------------------------


def stream_states(events) -> list[int]:
    return [e.status_update.status.state for e in events if e.HasField("status_update")]


def is_paused(event) -> bool:
    """A status update that pauses the task (in 0.x, an approval or a connection reads as
    input-required)."""
    return (
        event.HasField("status_update")
        and event.status_update.status.state == TaskState.TASK_STATE_INPUT_REQUIRED
    )


def test_streamed_flow_1_a_direct_stream_answers_with_the_reply_message(partner03, agents):
    # A direct message/stream whose turn completes sends its reply Message, no task.
    events = partner03.stream(agents["support"], user_message("How do I reset my password?"))
    assert [e.WhichOneof("payload") for e in events] == ["message"]
    assert "Reset password" in events[-1].message.parts[0].text
    assert not events[-1].message.task_id
    assert ("message/stream", "0.3") in partner03.requests


def test_streamed_flow_2_closes_at_the_question_and_the_answer_streams_on_the_same_task(
    partner03, agents
):
    reviewer = agents["code-reviewer"]
    asked = partner03.stream(reviewer, user_message("Review this diff of payments-api"))
    # A direct stream's one frame when the turn pauses: the task, in input-required.
    [first] = [e.task for e in asked]
    assert first.status.state == TaskState.TASK_STATE_INPUT_REQUIRED
    answered = partner03.stream(
        reviewer, user_message("main", task_id=first.id, context_id=first.context_id)
    )
    assert answered[0].task.id == first.id
    assert stream_states(answered)[-1] == TaskState.TASK_STATE_COMPLETED
    [artifact] = [e.artifact_update for e in answered if e.HasField("artifact_update")]
    assert artifact.artifact.name == "review.json"
    assert artifact.last_chunk is True


def test_streamed_flow_3_ends_at_the_approval_and_resubscribe_carries_the_result(
    partner03, agents, demo
):
    deployer = agents["deployer"]
    events = partner03.stream(deployer, user_message(DEPLOY))
    # The approval gate is the stream's terminal frame, the task in input-required.
    [task] = [e.task for e in events]
    assert task.status.state == TaskState.TASK_STATE_INPUT_REQUIRED
    assert status_text(task) == "Approve deploy / deploy_build?"

    def on_event(event):
        if event.HasField("task"):
            operator_answers(demo, task.id, approved=True)

    followed = partner03.subscribe(deployer, task.id, on_event=on_event)
    assert followed[0].task.id == task.id
    assert stream_states(followed)[-1] == TaskState.TASK_STATE_COMPLETED
    assert status_text(followed[-1].status_update) == f"Deployed build {BUILD} to staging."


def test_streamed_flow_4_and_resubscribe_through_each_pause(partner03, agents, demo):
    coder = agents["coder"]
    cut = partner03.stream(coder, user_message("open a pull request on payments-api: fix rounding"))
    [task] = [e.task for e in cut]
    assert status_text(task).startswith("Connect github")

    def connect(event):
        if event.HasField("task"):
            connection_connect_token(
                tenant=Tenant.objects.get(slug=demo["tenant"]),
                app=App.objects.get(slug="github"),
                token="ghp_x",
                by=User.objects.get(email="operator@demo.test"),
            )

    # Connected, the task goes on to its next pause, where the subscription ends (final).
    resumed = partner03.subscribe(coder, task.id, on_event=connect)
    assert resumed[0].task.id == task.id
    assert is_paused(resumed[-1])
    assert "create_pull_request" in status_text(resumed[-1].status_update)

    def approve(event):
        if event.HasField("task"):
            operator_answers(demo, task.id, approved=True)

    events = partner03.subscribe(coder, task.id, on_event=approve)
    assert stream_states(events)[-1] == TaskState.TASK_STATE_COMPLETED
    assert ("tasks/resubscribe", "0.3") in partner03.requests
    with pytest.raises(UnsupportedOperationError):
        partner03.subscribe(coder, task.id)


# --- the 0.3 stream on the wire -------------------------------------------------------------


def test_a_0_3_stream_on_the_wire_ends_at_the_approval_and_resubscribe_carries_the_result(
    live_stack, demo
):
    """Raw SSE: every frame a 0.3 object with the request's id. A direct message/stream ends
    at the approval gate with the task in input-required; tasks/resubscribe then
    follows it through the operator's approval, final only where it closes."""
    from a2a.compat.v0_3 import types as v03

    url = f"{live_stack.url}{demo['agents']['deployer']}"
    headers = {"Authorization": f"Bearer {demo['token']}", "A2A-Version": "0.3"}

    def frames_of(body, on_frame=None) -> list[dict]:
        frames = []
        with httpx.stream("POST", url, json=body, headers=headers, timeout=60) as response:
            assert response.headers["content-type"].startswith("text/event-stream")
            for line in response.iter_lines():
                if line.startswith("data: "):
                    frames.append(json.loads(line[len("data: ") :]))
                    if on_frame is not None:
                        on_frame(frames[-1]["result"])
        return frames

    message = {
        "kind": "message",
        "messageId": "m-stream-03",
        "role": "user",
        "parts": [{"kind": "text", "text": DEPLOY}],
    }
    sent = frames_of(
        {"jsonrpc": "2.0", "id": "s-03", "method": "message/stream", "params": {"message": message}}
    )
    assert [f["id"] for f in sent] == ["s-03"]
    task = sent[0]["result"]
    v03.Task.model_validate(task)
    assert task["kind"] == "task" and task["status"]["state"] == "input-required"

    def approve(result):
        if result["kind"] == "task":
            operator_answers(demo, task["id"], approved=True)

    followed = frames_of(
        {"jsonrpc": "2.0", "id": 9, "method": "tasks/resubscribe", "params": {"id": task["id"]}},
        approve,
    )
    assert all(f["id"] == 9 for f in followed)
    results = [f["result"] for f in followed]
    assert results[0]["kind"] == "task"
    for update in results[1:]:
        assert update["kind"] in ("status-update", "artifact-update")
        if update["kind"] == "status-update":
            v03.TaskStatusUpdateEvent.model_validate(update)
    statuses = [
        (u["status"]["state"], u["final"]) for u in results[1:] if u["kind"] == "status-update"
    ]
    assert statuses[-1] == ("completed", True)
    assert [final for _state, final in statuses].count(True) == 1
