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


# --- one answer for the whole group ---------------------------------------------------------


def group_answer(client, token, task, data: dict, headers=EXTENSIONS):
    message = answer_message(task, parts=[{"data": data}], extensions=[ext.INTERACTIONS])
    return send(client, token, message, headers=headers)


def test_one_message_answers_every_call_of_the_group_and_the_turn_goes_on_once(
    agents, client, paused, llm
):
    first, second = Interaction.objects.order_by("group_position")
    answers = {first.public_id: {"approved": True}, second.public_id: {"approved": False}}
    done = task_of(group_answer(client, agents.a.token, paused, {"answers": answers}))
    assert done["status"]["state"] == "TASK_STATE_COMPLETED", done["status"]
    assert status_text(done) == "Staging deployed, production not."
    assert len(llm.requests) == 2  # one resume for both calls
    calls = list(Interaction.objects.order_by("group_position"))
    assert [(c.state, c.answered_via, c.answered_by) for c in calls] == [
        ("answered", "inband", "partner:acme-client"),
        ("answered", "inband", "partner:acme-client"),
    ]
    assert [c.answer["approved"] for c in calls] == [True, False]
    assert list(DemoRecord.objects.values_list("effect_id", flat=True)) == [first.public_id]
    # The message is kept once in the task's history, as any answer is.
    history = get(client, agents.a.token, done)["history"]
    assert sum(1 for m in history if m["parts"] == [{"data": {"answers": answers}}]) == 1


def test_all_answers_every_call_alike(agents, client, paused, llm):
    done = task_of(group_answer(client, agents.a.token, paused, {"all": {"approved": True}}))
    assert done["status"]["state"] == "TASK_STATE_COMPLETED", done["status"]
    assert DemoRecord.objects.count() == 2
    assert {i.answer["approved"] for i in Interaction.objects.all()} == {True}


@pytest.mark.parametrize(
    "data, words",
    [
        ({"answers": {"eff_not_in_the_group": {"approved": True}}}, "does not name an open"),
        ({"answers": {}}, "must be an object"),
        ({"all": {"approved": "yes"}}, "must be true or false"),
        ({"all": {"approved": True, "reason": "ok"}}, "takes approved only"),
    ],
)
def test_a_wrong_entry_refuses_the_whole_answer_and_changes_nothing(
    agents, client, paused, llm, data, words
):
    first, _ = Interaction.objects.order_by("group_position")
    if "answers" in data and data["answers"]:
        # A right entry beside the wrong one is not taken either.
        data = {"answers": {first.public_id: {"approved": True}, **data["answers"]}}
    error = assert_error(group_answer(client, agents.a.token, paused, data), -32602)
    assert words in error["message"], error
    assert set(Interaction.objects.values_list("state", flat=True)) == {"open"}
    assert not DemoRecord.objects.exists() and len(llm.requests) == 1
    assert get(client, agents.a.token, paused)["status"]["state"] == "TASK_STATE_AUTH_REQUIRED"


def test_a_call_left_out_refuses_the_answer(agents, client, paused, llm):
    first, second = Interaction.objects.order_by("group_position")
    data = {"answers": {first.public_id: {"approved": True}}}
    error = assert_error(group_answer(client, agents.a.token, paused, data), -32602)
    assert second.public_id in error["message"] and "nothing was decided" in error["message"]
    assert set(Interaction.objects.values_list("state", flat=True)) == {"open"}


def test_a_caller_not_allowed_to_decide_answers_no_call_of_the_group(agents, client, llm):
    planner(agents.a.tenant)  # deciders: operators, the default
    two_deploys(llm)
    task = task_of(send(client, agents.a.token, user_message("deploy b-1 everywhere")))
    response = group_answer(client, agents.a.token, task, {"all": {"approved": True}})
    assert_error(response, -32004, "OPERATOR_DECISION_REQUIRED")
    assert set(Interaction.objects.values_list("state", flat=True)) == {"open"}


def test_the_0_3_dialect_answers_a_group_in_one_message(agents, client, paused, llm):
    first, second = Interaction.objects.order_by("group_position")
    message = {
        "kind": "message",
        "messageId": "m-group-03",
        "role": "user",
        "taskId": paused["id"],
        "contextId": paused["contextId"],
        "parts": [
            {
                "kind": "data",
                "data": {
                    "answers": {
                        first.public_id: {"approved": False},
                        second.public_id: {"approved": True},
                    }
                },
            }
        ],
    }
    response = rpc(
        client,
        PLANNER,
        "message/send",
        {"message": message},
        token=agents.a.token,
        headers={"A2A-Version": None, **EXTENSIONS},
    )
    done = result_of(response)
    assert done["kind"] == "task" and done["status"]["state"] == "completed", done["status"]
    assert list(DemoRecord.objects.values_list("effect_id", flat=True)) == [second.public_id]
