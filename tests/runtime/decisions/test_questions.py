"""Questions (interactions/v1, kind question): asked when the turn pauses, answered on the
same task by text, data or extension metadata; checked against the question's choices.

The services and the turn loop are called directly; how a question looks on the wire is in
tests/a2a_endpoint/test_interactions_wire.py."""

import pytest

from runtime.decisions.decision_models import Interaction
from runtime.kernel import extensions as ext
from runtime.kernel.errors import InvalidParams
from runtime.kernel.task_models import AuditEvent, Task
from tests.core import (
    CHOOSER,
    in_band,
    open_interaction,
    reply,
    run,
    send,
    start,
    states,
    status_text,
)

pytestmark = pytest.mark.django_db

PROMPT = "Which base branch should I compare this diff against?"


@pytest.fixture
def asked(agents) -> Task:
    """The demo code reviewer, paused on its question."""
    task = start(agents.a, "code-reviewer", "review")
    assert task.state == "TASK_STATE_INPUT_REQUIRED"
    return task


def test_a_question_is_an_open_interaction_on_the_paused_task(asked):
    interaction = open_interaction(asked)
    assert (interaction.kind, interaction.prompt, interaction.detail) == ("question", PROMPT, {})
    assert status_text(asked) == PROMPT
    assert asked.status_message["role"] == "ROLE_AGENT"


@pytest.mark.parametrize("how", ["text", "data", "metadata"])
def test_a_question_is_answered_by_text_data_or_metadata(agents, asked, how):
    interaction = open_interaction(asked)
    base = {"text": "main", "data": "release/2.1", "metadata": "develop"}[how]
    answer_fields = {
        "text": {"parts": [{"text": base}]},
        "data": {"parts": [{"data": base}]},
        "metadata": {
            "parts": [{"text": "not this"}],
            "extensions": [ext.INTERACTIONS],
            "metadata": in_band(interaction, value=base),
        },
    }[how]
    assert reply(asked, None, **answer_fields).task.pk == asked.pk
    done = run(asked)
    assert done.state == "TASK_STATE_COMPLETED"
    assert status_text(done) == f"Reviewed the diff against {base}: no findings."
    assert done.artifacts[0]["parts"][0]["data"]["base"] == base
    interaction.refresh_from_db()
    assert interaction.state == Interaction.State.ANSWERED
    assert interaction.answer == {"value": base}
    assert interaction.answered_by == agents.a.subject
    assert interaction.answered_via == "inband"


def test_answering_moves_the_same_task_to_working_and_then_completed(asked):
    reply(asked, "main")
    asked.refresh_from_db()
    assert asked.state == "TASK_STATE_WORKING"
    run(asked)
    found = states(asked)
    paused = found.index("TASK_STATE_INPUT_REQUIRED")
    assert found[paused + 1] == "TASK_STATE_WORKING"
    assert found[-1] == "TASK_STATE_COMPLETED"
    assert Task.objects.count() == 1
    runs = asked.runs
    assert len(runs) == 2
    assert runs[1]["resumedFrom"] == runs[0]["runId"]
    assert runs[1]["interactionId"] == Interaction.objects.get().public_id


def test_a_wrong_interaction_id_is_invalid_params_and_the_question_stays_open(asked):
    history = list(asked.history)
    wrong = {ext.INTERACTIONS: {"interactionId": "q_not-this-one", "value": "main"}}
    with pytest.raises(InvalidParams, match="interactionId"):
        reply(asked, "main", metadata=wrong)
    assert Interaction.objects.get().state == Interaction.State.OPEN
    asked.refresh_from_db()
    assert asked.state == "TASK_STATE_INPUT_REQUIRED"
    assert asked.history == history


def test_an_empty_answer_is_invalid_params(asked):
    with pytest.raises(InvalidParams, match="empty"):
        reply(asked, "   ")
    assert Interaction.objects.get().state == Interaction.State.OPEN


def test_the_same_answer_sent_twice_is_applied_once(asked):
    first = reply(asked, "main", messageId="m-answer-once")
    run(asked)
    again = reply(asked, "main", messageId="m-answer-once")
    assert (first.replayed, again.replayed) == (False, True)
    assert again.task.pk == asked.pk
    task = Task.objects.get()
    assert task.state == "TASK_STATE_COMPLETED"
    assert sum(1 for e in task.transcript if e["type"] == "answer") == 1
    assert AuditEvent.objects.filter(action="answered").count() == 1
    assert [m["messageId"] for m in task.history].count("m-answer-once") == 1


@pytest.fixture
def chooser(agents, make_agent) -> Task:
    """A question with choices and no custom answer, asked."""
    make_agent("chooser", CHOOSER)
    return run(send(agents.a, "chooser"))


def test_a_choice_question_shows_its_choices(chooser):
    assert open_interaction(chooser).detail == {
        "choices": ["staging", "production"],
        "allowCustom": False,
    }


@pytest.mark.parametrize("value", ["moon", "Staging", 3, ["staging"]])
def test_a_choice_question_refuses_a_value_outside_its_choices(chooser, value):
    interaction = open_interaction(chooser)
    with pytest.raises(InvalidParams, match="must be one of"):
        reply(chooser, "x", metadata=in_band(interaction, value=value))
    assert Interaction.objects.get().state == Interaction.State.OPEN
    # A listed value is then accepted.
    reply(chooser, "x", metadata=in_band(interaction, value="production"))
    done = run(chooser)
    assert done.state == "TASK_STATE_COMPLETED"
    assert status_text(done) == "Chose production."


def test_a_choice_question_accepts_a_listed_text_answer(chooser):
    reply(chooser, "staging")
    assert status_text(run(chooser)) == "Chose staging."
