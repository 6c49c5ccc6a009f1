"""Approvals answered in-band (interactions/v1) on the demo deployer: only extension metadata
approves, the held call is sent once as it was held, a denial reaches the model."""

import json

import pytest

from runtime import extensions as ext
from runtime.models import Agent, AuditEvent, DemoRecord, Effect, Interaction, Task
from tests.a2a_endpoint.conftest import (
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

DEPLOYER = "/a2a/acme/deployer"
BUILD = "2026.10.06-1"


def send(client, token, message):
    return rpc(
        client, DEPLOYER, "SendMessage", {"message": message}, token=token, headers=EXTENSIONS
    )


@pytest.fixture
def held(agents, client):
    """A deploy held for approval: the task as the caller saw it."""
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


def test_a_held_call_is_an_approval_interaction_without_its_arguments(agents, client, held):
    effect = Effect.objects.get()
    assert effect.state == Effect.State.HELD
    assert interaction_of(held) == {
        "interactionId": effect.public_id,
        "kind": "approval",
        "prompt": "Approve deploy / deploy_build?",
        "detail": {
            "server": "deploy",
            "tool": "deploy_build",
            "reason": "Deployments change what customers run.",
        },
    }
    assert not DemoRecord.objects.exists()
    # Never the call's arguments on the wire: not on the pause, nor on reads of it.
    got = result_of(
        rpc(
            client,
            DEPLOYER,
            "GetTask",
            {"id": held["id"], "historyLength": 0},
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
    for body in (held["status"], got, listed):
        text = json.dumps(body)
        assert "arguments" not in text
        assert BUILD not in text
        assert '"environment"' not in text


def test_a_text_reply_never_approves(agents, client, held):
    for parts in ([{"text": "yes, approved"}], [{"data": {"approved": True}}], [{"data": True}]):
        response = send(client, agents.a.token, answer_message(held, parts=parts))
        error = assert_error(response, -32004, "UNSUPPORTED_OPERATION")
        assert "text never approves" in error["message"]
    got = as_task(
        result_of(rpc(client, DEPLOYER, "GetTask", {"id": held["id"]}, token=agents.a.token))
    )
    assert got["status"]["state"] == "TASK_STATE_AUTH_REQUIRED"
    assert got["history"] == held["history"]
    assert Interaction.objects.get().state == Interaction.State.OPEN
    assert Effect.objects.get().state == Effect.State.HELD
    assert not DemoRecord.objects.exists()
    assert not AuditEvent.objects.exists()


@pytest.mark.parametrize("answer", [{"approved": True}, {"value": True}], ids=["approved", "value"])
def test_approving_in_band_sends_the_call_once_and_completes(agents, client, held, answer):
    done = task_of(approve(client, agents.a.token, held, **answer))
    assert done["id"] == held["id"]
    assert done["status"]["state"] == "TASK_STATE_COMPLETED"
    assert status_text(done) == f"Deployed build {BUILD} to staging."
    record = DemoRecord.objects.get()
    assert record.data == {"build": BUILD, "environment": "staging"}
    effect = Effect.objects.get()
    assert effect.state == Effect.State.SUCCEEDED
    assert effect.approved_by == agents.a.subject
    assert record.effect_id == effect.public_id
    audit = AuditEvent.objects.get()
    assert (audit.action, audit.actor, audit.via) == ("approved", agents.a.subject, "inband")
    assert "arguments" not in json.dumps(done)


def test_approving_twice_with_the_same_message_sends_once(agents, client, held):
    interaction_id = interaction_of(held)["interactionId"]
    message = answer_message(
        held, parts=[{"text": "ok"}], metadata=interaction_metadata(interaction_id, approved=True)
    )
    first = task_of(send(client, agents.a.token, message))
    again = task_of(send(client, agents.a.token, message))
    assert first["id"] == again["id"] and again["status"]["state"] == "TASK_STATE_COMPLETED"
    assert DemoRecord.objects.count() == 1


def test_denying_in_band_tells_the_model_tool_denied(agents, client, held):
    done = task_of(approve(client, agents.a.token, held, approved=False))
    assert done["status"]["state"] == "TASK_STATE_COMPLETED"
    # The model got tool.denied with the reason (below) and says so in its own words.
    assert f"Build {BUILD} was not deployed to staging: denied" in status_text(done)
    assert not DemoRecord.objects.exists()
    effect = Effect.objects.get()
    assert effect.state == Effect.State.DENIED
    assert effect.outcome["error"] == "tool.denied"
    results = [e for e in Task.objects.get().transcript if e["type"] == "tool_result"]
    assert results == [
        {
            "type": "tool_result",
            "step": results[0]["step"],
            "ok": False,
            "error": "tool.denied",
            "reason": "denied",
        }
    ]
    assert AuditEvent.objects.get().action == "denied"


@pytest.mark.parametrize("answer", [{"approved": "yes"}, {"value": "true"}, {"value": 1}, {}])
def test_an_approval_answer_that_is_not_a_boolean_is_refused(agents, client, held, answer):
    response = approve(client, agents.a.token, held, **answer)
    assert_error(response, -32602, "INVALID_PARAMS")
    assert Interaction.objects.get().state == Interaction.State.OPEN


def test_operators_only_approvals_cannot_be_answered_in_band(agents, client):
    Agent.objects.filter(tenant=agents.a.tenant, slug="deployer").update(
        tool_policy={"deploy/deploy_build": {"action": "approve", "deciders": "operators"}}
    )
    held = task_of(send(client, agents.a.token, user_message(f"deploy build {BUILD} to staging")))
    assert Interaction.objects.get().deciders == Interaction.Deciders.OPERATORS
    error = assert_error(
        approve(client, agents.a.token, held, approved=True), -32004, "OPERATOR_DECISION_REQUIRED"
    )
    assert "operator must decide" in error["message"]
    assert Interaction.objects.get().state == Interaction.State.OPEN
    assert not DemoRecord.objects.exists()


def test_an_operator_approval_resumes_the_task_with_no_client_message(agents, client, held):
    from runtime.services.interactions import interaction_answer

    interaction_answer(
        tenant=agents.a.tenant,
        interaction_id=interaction_of(held)["interactionId"],
        answer={"approved": True},
        by="user:operator@acme.test",
        via="page",
    )
    got = as_task(
        result_of(rpc(client, DEPLOYER, "GetTask", {"id": held["id"]}, token=agents.a.token))
    )
    assert got["status"]["state"] == "TASK_STATE_COMPLETED"
    assert Effect.objects.get().approved_by == "user:operator@acme.test"
    assert DemoRecord.objects.count() == 1
