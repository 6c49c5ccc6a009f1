"""Questions (interactions/v1, kind question): asked on the status message, answered on the
same task by text, data or extension metadata; checked against the question's choices."""

import pytest

from runtime import extensions as ext
from runtime.models import AuditEvent, Interaction, Task, TaskEvent
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

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("eager")]

REVIEWER = "/a2a/acme/code-reviewer"
PROMPT = "Which base branch should I compare this diff against?"


def send(client, token, message, path=REVIEWER, headers=None):
    return rpc(client, path, "SendMessage", {"message": message}, token=token, headers=headers)


def test_with_the_extension_the_question_is_typed_on_the_status_message(agents, client):
    response = send(client, agents.a.token, user_message("review"), headers=EXTENSIONS)
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
    response = send(client, agents.a.token, user_message("review"))
    task = task_of(response)
    assert "A2A-Extensions" not in response
    assert task["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"
    assert status_text(task) == PROMPT
    assert "metadata" not in task["status"]["message"]
    assert "extensions" not in task["status"]["message"]
    # The same task read later without the extension shows no extension data either.
    got = result_of(rpc(client, REVIEWER, "GetTask", {"id": task["id"]}, token=agents.a.token))
    assert "metadata" not in got["status"]["message"]


@pytest.mark.parametrize("how", ["text", "data", "metadata"])
def test_a_question_is_answered_by_text_data_or_metadata(agents, client, how):
    asked = task_of(send(client, agents.a.token, user_message("review"), headers=EXTENSIONS))
    interaction_id = interaction_of(asked)["interactionId"]
    base = {"text": "main", "data": "release/2.1", "metadata": "develop"}[how]
    answer_fields = {
        "text": {"parts": [{"text": base}]},
        "data": {"parts": [{"data": base}]},
        "metadata": {
            "parts": [{"text": "not this"}],
            "extensions": [ext.INTERACTIONS],
            "metadata": interaction_metadata(interaction_id, value=base),
        },
    }[how]
    done = task_of(send(client, agents.a.token, answer_message(asked, **answer_fields)))
    assert done["id"] == asked["id"]
    assert done["status"]["state"] == "TASK_STATE_COMPLETED"
    assert status_text(done) == f"Reviewed the diff against {base}: no findings."
    assert done["artifacts"][0]["parts"][0]["data"]["base"] == base
    interaction = Interaction.objects.get()
    assert interaction.state == Interaction.State.ANSWERED
    assert interaction.answer == {"value": base}
    assert interaction.answered_by == agents.a.subject
    assert interaction.answered_via == "inband"


def test_answering_moves_the_same_task_to_working_and_then_completed(agents, client):
    asked = task_of(send(client, agents.a.token, user_message("review")))
    task_of(send(client, agents.a.token, answer_message(asked, parts=[{"text": "main"}])))
    states = list(
        TaskEvent.objects.filter(task__public_id=asked["id"])
        .order_by("seq")
        .values_list("state", flat=True)
    )
    paused = states.index("TASK_STATE_INPUT_REQUIRED")
    assert states[paused + 1] == "TASK_STATE_WORKING"
    assert states[-1] == "TASK_STATE_COMPLETED"
    assert Task.objects.count() == 1
    runs = Task.objects.get().runs
    assert len(runs) == 2
    assert runs[1]["resumedFrom"] == runs[0]["runId"]
    assert runs[1]["interactionId"] == Interaction.objects.get().public_id


def test_a_wrong_interaction_id_is_invalid_params_and_the_question_stays_open(agents, client):
    asked = task_of(send(client, agents.a.token, user_message("review"), headers=EXTENSIONS))
    wrong = answer_message(
        asked,
        parts=[{"text": "main"}],
        metadata=interaction_metadata("q_not-this-one", value="main"),
    )
    response = send(client, agents.a.token, wrong, headers=EXTENSIONS)
    assert_error(response, -32602, "INVALID_PARAMS")
    assert Interaction.objects.get().state == Interaction.State.OPEN
    got = as_task(
        result_of(rpc(client, REVIEWER, "GetTask", {"id": asked["id"]}, token=agents.a.token))
    )
    assert got["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"
    assert got["history"] == asked["history"]


def test_an_empty_answer_is_invalid_params(agents, client):
    asked = task_of(send(client, agents.a.token, user_message("review")))
    response = send(client, agents.a.token, answer_message(asked, parts=[{"text": "   "}]))
    assert_error(response, -32602, "INVALID_PARAMS")
    assert Interaction.objects.get().state == Interaction.State.OPEN


def test_the_same_answer_sent_twice_is_applied_once(agents, client):
    asked = task_of(send(client, agents.a.token, user_message("review")))
    answer = answer_message(asked, parts=[{"text": "main"}])
    first = task_of(send(client, agents.a.token, answer))
    again = task_of(send(client, agents.a.token, answer))
    assert again["id"] == first["id"]
    assert again["status"] == first["status"]
    assert again["history"] == first["history"]
    task = Task.objects.get()
    assert sum(1 for e in task.transcript if e["type"] == "answer") == 1
    assert AuditEvent.objects.filter(action="answered").count() == 1
    assert [m["messageId"] for m in task.history].count(answer["messageId"]) == 1


@pytest.fixture
def chooser(make_agent):
    make_agent(
        "chooser",
        [
            {
                "ask": {
                    "id": "env",
                    "prompt": "Which environment?",
                    "choices": ["staging", "production"],
                    "allowCustom": False,
                }
            },
            {"reply": "Chose {{ answers.env }}."},
        ],
    )
    return "/a2a/acme/chooser"


def test_a_choice_question_shows_its_choices(agents, client, chooser):
    asked = task_of(send(client, agents.a.token, user_message("go"), chooser, EXTENSIONS))
    assert interaction_of(asked)["detail"] == {
        "choices": ["staging", "production"],
        "allowCustom": False,
    }


@pytest.mark.parametrize("value", ["moon", "Staging", 3, ["staging"]])
def test_a_choice_question_refuses_a_value_outside_its_choices(agents, client, chooser, value):
    asked = task_of(send(client, agents.a.token, user_message("go"), chooser, EXTENSIONS))
    interaction_id = interaction_of(asked)["interactionId"]
    answer = answer_message(
        asked, parts=[{"text": "x"}], metadata=interaction_metadata(interaction_id, value=value)
    )
    response = send(client, agents.a.token, answer, chooser, EXTENSIONS)
    assert_error(response, -32602, "INVALID_PARAMS")
    assert Interaction.objects.get().state == Interaction.State.OPEN
    # A listed value is then accepted.
    answer = answer_message(
        asked,
        parts=[{"text": "x"}],
        metadata=interaction_metadata(interaction_id, value="production"),
    )
    done = task_of(send(client, agents.a.token, answer, chooser, EXTENSIONS))
    assert done["status"]["state"] == "TASK_STATE_COMPLETED"
    assert status_text(done) == "Chose production."


def test_a_choice_question_accepts_a_listed_text_answer(agents, client, chooser):
    asked = task_of(send(client, agents.a.token, user_message("go"), chooser))
    done = task_of(
        send(client, agents.a.token, answer_message(asked, parts=[{"text": "staging"}]), chooser)
    )
    assert status_text(done) == "Chose staging."
