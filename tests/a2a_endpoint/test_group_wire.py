"""An approval group on the A2A wire (interactions/v1): the caller
sees one pause listing every held call of the model's reply (one interaction per call, the
first at the top for a client that knows one interaction), answers each in band by its
interactionId, and the task goes on once each has its answer. Never a call's arguments."""

import json

import pytest

from runtime.agents.agent_models import DemoRecord
from runtime.decisions.decision_models import Interaction
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
from tests.groups import model_stub, planner, two_deploys

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("eager")]

PLANNER = "/a2a/acme/planner"


@pytest.fixture
def llm(settings, monkeypatch):
    with model_stub(settings, monkeypatch) as stub:
        yield stub


def send(client, token, message, headers=EXTENSIONS):
    return rpc(client, PLANNER, "SendMessage", {"message": message}, token=token, headers=headers)


def get(client, token, task, headers=EXTENSIONS) -> dict:
    response = rpc(client, PLANNER, "GetTask", {"id": task["id"]}, token=token, headers=headers)
    return as_task(result_of(response))


def answer(client, token, task, interaction_id, approved: bool):
    message = answer_message(
        task,
        parts=[{"data": {"approved": approved}}],
        extensions=[ext.INTERACTIONS],
        metadata=interaction_metadata(interaction_id, approved=approved),
    )
    return send(client, token, message)


@pytest.fixture
def paused(agents, client, llm):
    """A group of two held deploys the caller may decide in band (``deciders: either``)."""
    planner(
        agents.a.tenant, policy={"deploy/deploy_build": {"action": "approve", "deciders": "either"}}
    )
    two_deploys(llm, then="Staging deployed, production not.")
    task = task_of(send(client, agents.a.token, user_message("deploy b-1 everywhere")))
    assert task["status"]["state"] == "TASK_STATE_AUTH_REQUIRED"
    return task


def test_the_caller_sees_one_pause_listing_the_group(agents, client, paused):
    calls = list(Interaction.objects.order_by("group_position"))
    data = interaction_of(paused)
    # A client that knows one interaction reads the first call at the top.
    assert {k: data[k] for k in ("interactionId", "kind", "prompt", "detail")} == {
        "interactionId": calls[0].public_id,
        "kind": "approval",
        "prompt": "Approve deploy / deploy_build?",
        "detail": calls[0].detail,
    }
    assert data["groupId"] == calls[0].group_id
    assert [i["interactionId"] for i in data["interactions"]] == [c.public_id for c in calls]
    assert all(i["kind"] == "approval" for i in data["interactions"])
    assert status_text(paused).startswith("Approve 2 calls of one reply:")
    # Never a call's arguments on the wire, and plain text without the extension.
    wire = json.dumps(paused["status"])
    # (The build as a JSON string: a random contextId such as "...ab-1f..." may hold b-1.)
    assert "staging" not in wire and "production" not in wire and '"b-1"' not in wire
    plain = get(client, agents.a.token, paused, headers={})
    assert "metadata" not in plain["status"]["message"]
    assert status_text(plain) == status_text(paused)


def test_the_caller_answers_each_call_and_the_task_goes_on_once(agents, client, paused, llm):
    first, second = Interaction.objects.order_by("group_position")
    # The second call first: a group's calls are answered in any order.
    after = task_of(answer(client, agents.a.token, paused, second.public_id, False))
    assert after["status"]["state"] == "TASK_STATE_AUTH_REQUIRED"
    data = interaction_of(after)
    assert data["interactionId"] == first.public_id
    assert [i["interactionId"] for i in data["interactions"]] == [first.public_id]
    assert [(o["interactionId"], o["outcome"], o["decidedBy"]) for o in data["outcomes"]] == [
        (second.public_id, "denied", "caller")
    ]
    assert len(llm.requests) == 1  # the turn did not go on
    # Already answered: the decision that won stands.
    again = answer(client, agents.a.token, after, second.public_id, True)
    assert_error(again, -32004, "INTERACTION_ALREADY_DECIDED")
    done = task_of(answer(client, agents.a.token, after, first.public_id, True))
    assert done["status"]["state"] == "TASK_STATE_COMPLETED", done["status"]
    assert status_text(done) == "Staging deployed, production not."
    assert len(llm.requests) == 2
    assert list(DemoRecord.objects.values_list("effect_id", flat=True)) == [first.public_id]
    assert {i.answered_via for i in Interaction.objects.all()} == {"inband"}


def test_an_answer_naming_no_call_of_the_group_is_refused(agents, client, paused):
    response = answer(client, agents.a.token, paused, "eff_not_in_the_group", True)
    error = assert_error(response, -32602, "INVALID_PARAMS")
    assert "does not name an open interaction" in error["message"]
    # Text never approves, in a group as alone.
    text = answer_message(paused, parts=[{"text": "yes to both"}])
    assert_error(send(client, agents.a.token, text), -32004)
    assert set(Interaction.objects.values_list("state", flat=True)) == {"open"}


def test_a_group_for_the_operators_is_not_answered_in_band(agents, client, llm):
    planner(agents.a.tenant)  # deciders: operators, the default
    two_deploys(llm)
    task = task_of(send(client, agents.a.token, user_message("deploy b-1 everywhere")))
    first = Interaction.objects.order_by("group_position").first()
    response = answer(client, agents.a.token, task, first.public_id, True)
    assert_error(response, -32004, "OPERATOR_DECISION_REQUIRED")
    assert set(Interaction.objects.values_list("state", flat=True)) == {"open"}
