"""What a caller sees of interactions (interactions/v1) on the wire: a pause typed on the
status message under the extension and plain text without it, never a held call's arguments,
and the JSON-RPC errors an unacceptable answer gets. What the answers do to the task is in
tests/runtime/decisions/test_approvals.py and test_questions.py."""

import json

import pytest

from runtime.agents.agent_models import DemoRecord
from runtime.decisions.decision_models import Effect, Interaction
from runtime.kernel import extensions as ext
from tests.a2a_client import (
    EXTENSIONS,
    answer_message,
    as_task,
    assert_error,
    interaction_metadata,
    interaction_of,
    result_of,
    rpc,
    status_text,
    task_of,
    user_message,
)
from tests.core import CHOOSER, caller_may_approve

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("eager")]

DEPLOYER = "/a2a/acme/deployer"
REVIEWER = "/a2a/acme/code-reviewer"
BUILD = "2026.10.06-1"
PROMPT = "Which base branch should I compare this diff against?"


def send(client, token, message, path=DEPLOYER, headers=EXTENSIONS):
    return rpc(client, path, "SendMessage", {"message": message}, token=token, headers=headers)


def get(client, token, task, path=DEPLOYER) -> dict:
    return as_task(result_of(rpc(client, path, "GetTask", {"id": task["id"]}, token=token)))


@pytest.fixture
def held_on_the_wire(agents, client):
    """A deploy held for approval, which the caller may approve in band (``deciders:
    either``): the task as the caller saw it."""
    caller_may_approve(agents.a.tenant)
    task = task_of(send(client, agents.a.token, user_message(f"deploy build {BUILD} to staging")))
    assert task["status"]["state"] == "TASK_STATE_AUTH_REQUIRED"
    return task


def approve(client, token, task, **answer):
    interaction_id = interaction_of(task)["interactionId"]
    message = answer_message(
        task,
        parts=[{"data": answer}],
        extensions=[ext.INTERACTIONS],
        metadata=interaction_metadata(interaction_id, **answer),
    )
    return send(client, token, message)


# --- approvals ---------------------------------------------------------------------------


def test_a_held_call_is_an_approval_interaction_without_its_arguments(
    agents, client, held_on_the_wire
):
    effect = Effect.objects.get()
    assert effect.state == Effect.State.HELD
    pause = interaction_of(held_on_the_wire)
    progress = pause.pop("progress")
    assert pause == {
        "interactionId": effect.public_id,
        "kind": "approval",
        "prompt": "Approve deploy / deploy_build?",
        "detail": {
            "server": "deploy",
            "tool": "deploy_build",
            "reason": "Deployments change what customers run.",
        },
    }
    # Its progress: one approval of one needed, and the deadline (never who decides).
    assert (progress["approvals"], progress["required"]) == (0, 1)
    assert progress["expiresAt"].endswith("Z")
    assert progress["text"].startswith("waiting for an approval; expires ")
    # The prompt alone on the message: a single approval's progress is in the metadata.
    assert held_on_the_wire["status"]["message"]["parts"] == [
        {"text": "Approve deploy / deploy_build?"}
    ]
    assert not DemoRecord.objects.exists()
    # Never the call's arguments on the wire: not on the pause, nor on reads of it.
    got = result_of(
        rpc(
            client,
            DEPLOYER,
            "GetTask",
            {"id": held_on_the_wire["id"], "historyLength": 0},
            token=agents.a.token,
            headers=EXTENSIONS,
        )
    )
    listed = result_of(
        rpc(
            client,
            DEPLOYER,
            "ListTasks",
            {"historyLength": 0},
            token=agents.a.token,
            headers=EXTENSIONS,
        )
    )
    for body in (held_on_the_wire["status"], got, listed):
        text = json.dumps(body)
        assert "arguments" not in text
        assert BUILD not in text
        assert '"environment"' not in text


def test_a_text_reply_is_unsupported_operation_and_the_task_is_unchanged(
    agents, client, held_on_the_wire
):
    response = send(
        client, agents.a.token, answer_message(held_on_the_wire, parts=[{"text": "yes"}])
    )
    error = assert_error(response, -32004, "UNSUPPORTED_OPERATION")
    assert "text never approves" in error["message"]
    got = get(client, agents.a.token, held_on_the_wire)
    assert got["status"]["state"] == "TASK_STATE_AUTH_REQUIRED"
    assert got["history"] == held_on_the_wire["history"]


def test_an_approval_answer_that_is_not_a_boolean_is_invalid_params(
    agents, client, held_on_the_wire
):
    response = approve(client, agents.a.token, held_on_the_wire, approved="yes")
    assert_error(response, -32602, "INVALID_PARAMS")
    assert Interaction.objects.get().state == Interaction.State.OPEN


def test_approving_in_band_answers_with_the_completed_task(agents, client, held_on_the_wire):
    done = task_of(approve(client, agents.a.token, held_on_the_wire, approved=True))
    assert done["id"] == held_on_the_wire["id"]
    assert done["status"]["state"] == "TASK_STATE_COMPLETED"
    assert status_text(done) == f"Deployed build {BUILD} to staging."
    assert "arguments" not in json.dumps(done)


def test_operators_only_approvals_are_operator_decision_required(agents, client):
    # The demo deployer's policy names no deciders: the tenant's operators decide.
    held = task_of(send(client, agents.a.token, user_message(f"deploy build {BUILD} to staging")))
    error = assert_error(
        approve(client, agents.a.token, held, approved=True),
        -32004,
        "OPERATOR_DECISION_REQUIRED",
    )
    assert error["message"].startswith(
        "Only admins or operators of the agent's organisation may decide this approval; "
        "the caller cannot answer it in band"
    )
    assert not DemoRecord.objects.exists()


def test_an_operator_approval_shows_on_the_next_read(agents, client, held_on_the_wire):
    from tests.core import flow_answer

    flow_answer(
        tenant=agents.a.tenant,
        interaction_id=interaction_of(held_on_the_wire)["interactionId"],
        answer={"approved": True},
        by="user:operator@acme.test",
        via="page",
    )
    assert (
        get(client, agents.a.token, held_on_the_wire)["status"]["state"] == "TASK_STATE_COMPLETED"
    )
    assert Effect.objects.get().state == Effect.State.SUCCEEDED


# --- questions ---------------------------------------------------------------------------


def test_with_the_extension_the_question_is_typed_on_the_status_message(agents, client):
    response = send(client, agents.a.token, user_message("review"), REVIEWER)
    task = task_of(response)
    assert response["A2A-Extensions"] == ext.INTERACTIONS
    assert task["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"
    message = task["status"]["message"]
    assert message["role"] == "ROLE_AGENT"
    assert message["extensions"] == [ext.INTERACTIONS]
    assert message["parts"] == [{"text": PROMPT}]
    interaction = interaction_of(task)
    stored = Interaction.objects.get()
    assert interaction == {
        "interactionId": stored.public_id,
        "kind": "question",
        "prompt": PROMPT,
        "detail": {},
    }


def test_without_the_extension_the_question_is_plain_text(agents, client):
    response = send(client, agents.a.token, user_message("review"), REVIEWER, None)
    task = task_of(response)
    assert "A2A-Extensions" not in response
    assert task["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"
    assert status_text(task) == PROMPT
    assert "metadata" not in task["status"]["message"]
    assert "extensions" not in task["status"]["message"]
    # The same task read later without the extension shows no extension data either.
    got = result_of(rpc(client, REVIEWER, "GetTask", {"id": task["id"]}, token=agents.a.token))
    assert "metadata" not in got["status"]["message"]


def test_a_wrong_interaction_id_is_invalid_params_and_the_question_stays_open(agents, client):
    asked = task_of(send(client, agents.a.token, user_message("review"), REVIEWER))
    wrong = answer_message(
        asked,
        parts=[{"text": "main"}],
        metadata=interaction_metadata("q_not-this-one", value="main"),
    )
    response = send(client, agents.a.token, wrong, REVIEWER)
    assert_error(response, -32602, "INVALID_PARAMS")
    assert Interaction.objects.get().state == Interaction.State.OPEN
    got = as_task(
        result_of(rpc(client, REVIEWER, "GetTask", {"id": asked["id"]}, token=agents.a.token))
    )
    assert got["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"
    assert got["history"] == asked["history"]


def test_an_empty_answer_is_invalid_params(agents, client):
    asked = task_of(send(client, agents.a.token, user_message("review"), REVIEWER, None))
    response = send(
        client, agents.a.token, answer_message(asked, parts=[{"text": "   "}]), REVIEWER, None
    )
    assert_error(response, -32602, "INVALID_PARAMS")
    assert Interaction.objects.get().state == Interaction.State.OPEN


def test_the_same_answer_sent_twice_gets_the_same_task(agents, client):
    asked = task_of(send(client, agents.a.token, user_message("review"), REVIEWER, None))
    answer = answer_message(asked, parts=[{"text": "main"}])
    first = task_of(send(client, agents.a.token, answer, REVIEWER, None))
    again = task_of(send(client, agents.a.token, answer, REVIEWER, None))
    assert again["id"] == first["id"]
    assert again["status"] == first["status"]
    assert again["history"] == first["history"]


def test_a_choice_question_shows_its_choices_and_refuses_others(agents, client, make_agent):
    make_agent("chooser", CHOOSER)
    chooser = "/a2a/acme/chooser"
    asked = task_of(send(client, agents.a.token, user_message("go"), chooser))
    interaction = interaction_of(asked)
    assert interaction["detail"] == {"choices": ["staging", "production"], "allowCustom": False}
    answer = answer_message(
        asked,
        parts=[{"text": "x"}],
        metadata=interaction_metadata(interaction["interactionId"], value="moon"),
    )
    assert_error(send(client, agents.a.token, answer, chooser), -32602, "INVALID_PARAMS")


# --- connections -------------------------------------------------------------------------


def test_a_connection_request_is_typed_on_the_status_message(agents, client):
    message = user_message("open a pull request on payments-api: fix rounding")
    task = task_of(send(client, agents.a.token, message, "/a2a/acme/coder"))
    assert task["status"]["state"] == "TASK_STATE_AUTH_REQUIRED"
    interaction = interaction_of(task)
    stored = Interaction.objects.get()
    assert (interaction["interactionId"], interaction["kind"]) == (stored.public_id, "connection")
    assert interaction["prompt"] == status_text(task) == stored.prompt
    assert interaction["detail"] == stored.detail
    assert interaction["detail"]["app"] == "github"
