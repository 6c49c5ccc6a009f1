"""Flows 1-4 streamed through the a2a-sdk client (SendStreamingMessage, SubscribeToTask):
the Task first, then the task's updates in order; open through AUTH_REQUIRED, closed at
INPUT_REQUIRED and at the end; a disconnect ends the watching, never the task."""

import threading

import pytest
from a2a.types import TaskState
from a2a.utils.errors import TaskNotFoundError, UnsupportedOperationError

from connections.models import App
from connections.services import connection_connect_token
from runtime.agents.agent_models import DemoRecord
from runtime.decisions.decision_models import Interaction
from runtime.kernel import extensions as ext
from runtime.kernel.task_models import Task
from tenants.models import Tenant, User
from tests.core import flow_answer
from tests.sdk_client import Partner, as_dict, payload, status_text, user_message

pytestmark = pytest.mark.django_db(transaction=True)

BUILD = "2026.10.06-1"
DEPLOY = f"deploy build {BUILD} to staging"
QUESTION = "Which base branch should I compare this diff against?"
ON = [ext.INTERACTIONS]


def kinds(events) -> list[str]:
    return [e.WhichOneof("payload") for e in events]


def states(events) -> list[int]:
    return [e.status_update.status.state for e in events if e.HasField("status_update")]


def assert_one_task(events, task_id: str | None = None):
    """Every event is about the task the first event announced."""
    first = events[0].task
    assert first.id and (task_id is None or first.id == task_id)
    for event in events[1:]:
        assert payload(event).task_id == first.id
        assert payload(event).context_id == first.context_id
    return first


def approve(demo, task_id: str) -> None:
    """The operator approves on the task page (the service layer), outside A2A."""
    interaction = Interaction.objects.filter(
        task__public_id=task_id, state=Interaction.State.OPEN
    ).get()
    flow_answer(
        tenant=Tenant.objects.get(slug=demo["tenant"]),
        interaction_id=interaction.public_id,
        answer={"approved": True},
        by="user:operator@demo.test",
        via="page",
    )


def is_auth_required(event) -> bool:
    return (
        event.HasField("status_update")
        and event.status_update.status.state == TaskState.TASK_STATE_AUTH_REQUIRED
    )


def test_flow_1_support_streams_the_task_then_its_updates_to_completion(partner, agents):
    events = partner.stream(agents["support"], user_message("How do I reset my password?"))
    assert kinds(events)[0] == "task"
    first = assert_one_task(events)
    assert first.history[0].parts[0].text == "How do I reset my password?"
    assert states(events)[-1] == TaskState.TASK_STATE_COMPLETED
    assert events[-1].HasField("status_update")  # the stream closed at the terminal state
    assert "Reset password" in status_text(events[-1].status_update)
    # The stream carried what GetTask now says.
    task = partner.get(agents["support"], first.id)
    assert as_dict(task.status) == as_dict(events[-1].status_update.status)


def test_flow_2_the_stream_closes_at_the_question_and_the_answer_streams_on_the_same_task(
    partner, agents
):
    reviewer = agents["code-reviewer"]
    asked = partner.stream(
        reviewer, user_message("Review this diff of payments-api"), extensions=ON
    )
    first = assert_one_task(asked)
    last = asked[-1].status_update
    assert last.status.state == TaskState.TASK_STATE_INPUT_REQUIRED
    assert states(asked).count(TaskState.TASK_STATE_INPUT_REQUIRED) == 1
    pause = as_dict(last.status.message)["metadata"][ext.INTERACTIONS]
    assert pause["kind"] == "question" and pause["prompt"] == QUESTION
    # Exactly as GetTask gives it to a caller with the extension on.
    got = partner.get(reviewer, first.id, extensions=ON)
    assert as_dict(got.status) == as_dict(last.status)

    answered = partner.stream(
        reviewer, user_message("release/2026.10", task_id=first.id, context_id=first.context_id)
    )
    again = assert_one_task(answered, first.id)
    assert again.status.state == TaskState.TASK_STATE_WORKING
    assert states(answered)[-1] == TaskState.TASK_STATE_COMPLETED
    assert "release/2026.10" in status_text(answered[-1].status_update)
    [artifact_event] = [e.artifact_update for e in answered if e.HasField("artifact_update")]
    assert artifact_event.artifact.name == "review.json"
    assert as_dict(artifact_event.artifact.parts[0])["data"]["base"] == "release/2026.10"
    # A whole artifact in one event: it replaces any earlier version, and nothing follows it.
    assert artifact_event.append is False and artifact_event.last_chunk is True
    assert kinds(answered).index("artifact_update") < len(answered) - 1


def test_flow_3_the_deployer_stream_stays_open_through_the_approval_and_carries_the_result(
    partner, agents, demo
):
    approvals = []

    def on_event(event):
        if is_auth_required(event):
            approvals.append(event)
            approve(demo, event.status_update.task_id)

    events = partner.stream(
        agents["deployer"], user_message(DEPLOY), extensions=ON, on_event=on_event
    )
    first = assert_one_task(events)
    [held] = approvals
    pause = as_dict(held.status_update.status)["message"]["metadata"][ext.INTERACTIONS]
    assert pause["kind"] == "approval" and pause["prompt"] == "Approve deploy / deploy_build?"
    assert BUILD not in str(as_dict(held.status_update.status))
    assert states(events)[-1] == TaskState.TASK_STATE_COMPLETED
    assert states(events).index(TaskState.TASK_STATE_AUTH_REQUIRED) < len(states(events)) - 1
    assert status_text(events[-1].status_update) == f"Deployed build {BUILD} to staging."
    assert DemoRecord.objects.get(kind="deployment").data == {
        "build": BUILD,
        "environment": "staging",
    }
    assert Interaction.objects.get(task__public_id=first.id).answered_via == "page"


def test_flow_4_one_stream_carries_the_connection_the_approval_and_the_pull_request(
    partner, agents, demo
):
    pauses = []

    def on_event(event):
        if not is_auth_required(event):
            return
        pauses.append(status_text(event.status_update))
        if len(pauses) == 1:
            connection_connect_token(
                tenant=Tenant.objects.get(slug=demo["tenant"]),
                app=App.objects.get(slug="github"),
                token="ghp_x",
                by=User.objects.get(email="operator@demo.test"),
            )
        else:
            approve(demo, event.status_update.task_id)

    events = partner.stream(
        agents["coder"],
        user_message("open a pull request on payments-api: fix rounding"),
        on_event=on_event,
    )
    assert_one_task(events)
    assert pauses[0].startswith("Connect github")
    assert pauses[1] == "Approve github / create_pull_request?"
    assert states(events)[-1] == TaskState.TASK_STATE_COMPLETED
    assert status_text(events[-1].status_update).startswith(
        "Opened pull request https://github.example/payments-api/"
    )


def test_subscribe_after_a_disconnect_sends_the_task_then_the_rest(partner, agents, demo):
    deployer = agents["deployer"]
    # The client goes away at the pause: the task waits on, untouched.
    cut = partner.stream(deployer, user_message(DEPLOY), stop_when=is_auth_required)
    task_id = cut[0].task.id
    assert is_auth_required(cut[-1])
    row = Task.objects.get(public_id=task_id)
    assert row.state == "TASK_STATE_AUTH_REQUIRED"

    def on_event(event):
        if event.HasField("task"):
            approve(demo, task_id)

    events = partner.subscribe(deployer, task_id, on_event=on_event)
    assert kinds(events)[0] == "task"
    assert events[0].task.status.state == TaskState.TASK_STATE_AUTH_REQUIRED
    assert assert_one_task(events, task_id)
    assert states(events)[-1] == TaskState.TASK_STATE_COMPLETED

    # A terminal task has nothing more to stream: the spec's UnsupportedOperationError.
    with pytest.raises(UnsupportedOperationError):
        partner.subscribe(deployer, task_id)
    with pytest.raises(TaskNotFoundError):
        partner.subscribe(deployer, "t1.does-not-exist")


def test_subscribe_to_a_task_waiting_for_input_carries_the_answer_to_the_end(partner, agents):
    """The conformance kit's STREAM-SUB-002: a subscriber to a task waiting for input sees the
    task, then what the answer brings, and the stream closes at the terminal state."""
    reviewer = agents["code-reviewer"]
    asked = partner.send(reviewer, user_message("Review this diff of payments-api"))
    assert asked.status.state == TaskState.TASK_STATE_INPUT_REQUIRED

    answered = []

    def answer():
        # The same partner on a second client of its own: the first one's loop runs the stream.
        other = Partner(partner.base_url, partner.token)
        try:
            answered.append(
                other.send(
                    reviewer,
                    user_message("release/2026.10", task_id=asked.id, context_id=asked.context_id),
                )
            )
        finally:
            other.close()

    answering = threading.Thread(target=answer)

    def on_event(event):
        if event.HasField("task"):
            answering.start()

    events = partner.subscribe(reviewer, asked.id, on_event=on_event)
    answering.join(timeout=30)
    assert answered and answered[0].status.state == TaskState.TASK_STATE_COMPLETED
    assert kinds(events)[0] == "task"
    assert events[0].task.status.state == TaskState.TASK_STATE_INPUT_REQUIRED
    assert_one_task(events, asked.id)
    assert states(events)[-1] == TaskState.TASK_STATE_COMPLETED


def test_two_streams_on_one_task_get_the_same_events_and_one_closing_leaves_the_other(
    partner, agents, demo
):
    deployer = agents["deployer"]
    held = partner.send(deployer, user_message(DEPLOY))
    assert held.status.state == TaskState.TASK_STATE_AUTH_REQUIRED
    # One watcher leaves at once.
    gone = partner.subscribe(deployer, held.id, stop_when=lambda e: True)
    assert kinds(gone) == ["task"]

    def on_event(event):
        if event.HasField("task"):
            approve(demo, held.id)

    events = partner.subscribe(deployer, held.id, on_event=on_event)
    assert states(events)[-1] == TaskState.TASK_STATE_COMPLETED
    assert Task.objects.get(public_id=held.id).state == "TASK_STATE_COMPLETED"
