"""Approvals answered in-band (interactions/v1) on the demo deployer, its policy saying
``deciders: either``: only extension metadata approves, the held call is sent once as it was
held, a denial reaches the model. Under the demo's own policy (no ``deciders``) only the
tenant's operators decide, and the caller is told who may.

The services and the turn loop are called directly; what the caller sees on the wire is in
tests/a2a_endpoint/test_interactions_wire.py."""

import json

import pytest

from runtime.agents.agent_models import Agent, DemoRecord
from runtime.decisions.decision_models import Effect, Interaction
from runtime.kernel import extensions as ext
from runtime.kernel.errors import InvalidParams, UnsupportedOperation
from runtime.kernel.task_models import AuditEvent, Task
from tests.core import decide, in_band, open_interaction, reply, run, start, status_text

pytestmark = pytest.mark.django_db

BUILD = "2026.10.06-1"


@pytest.fixture
def held_in_band(agents) -> Task:
    """A deploy held for approval, under a policy that lets the caller decide in band."""
    Agent.objects.filter(tenant=agents.a.tenant, slug="deployer").update(
        tool_policy={"deploy/deploy_build": {"action": "approve", "deciders": "either"}}
    )
    task = start(agents.a, "deployer", f"deploy build {BUILD} to staging")
    assert task.state == "TASK_STATE_AUTH_REQUIRED"
    return task


def approve(task: Task, **answer):
    """The caller's in-band answer: interactions/v1 metadata (and the same answer as data)."""
    return reply(
        task,
        None,
        parts=[{"data": answer}],
        extensions=[ext.INTERACTIONS],
        metadata=in_band(open_interaction(task), **answer),
    )


def test_a_held_call_is_an_approval_interaction_without_its_arguments(held_in_band):
    effect = Effect.objects.get()
    assert effect.state == Effect.State.HELD
    interaction = open_interaction(held_in_band)
    assert (interaction.public_id, interaction.kind) == (effect.public_id, "approval")
    assert interaction.prompt == "Approve deploy / deploy_build?"
    assert interaction.detail == {
        "server": "deploy",
        "tool": "deploy_build",
        "reason": "Deployments change what customers run.",
    }
    assert effect.arguments == {"build": BUILD, "environment": "staging"}
    assert BUILD not in json.dumps(held_in_band.status_message)
    assert not DemoRecord.objects.exists()


def test_a_text_reply_never_approves(held_in_band):
    history = list(held_in_band.history)
    for parts in ([{"text": "yes, approved"}], [{"data": {"approved": True}}], [{"data": True}]):
        with pytest.raises(UnsupportedOperation, match="text never approves") as refused:
            reply(held_in_band, None, parts=parts)
        assert refused.value.reason == "UNSUPPORTED_OPERATION"
    held_in_band.refresh_from_db()
    assert held_in_band.state == "TASK_STATE_AUTH_REQUIRED"
    assert held_in_band.history == history
    assert Interaction.objects.get().state == Interaction.State.OPEN
    assert Effect.objects.get().state == Effect.State.HELD
    assert not DemoRecord.objects.exists()
    assert not AuditEvent.objects.exists()


@pytest.mark.parametrize("answer", [{"approved": True}, {"value": True}], ids=["approved", "value"])
def test_approving_in_band_sends_the_call_once_and_completes(agents, held_in_band, answer):
    assert approve(held_in_band, **answer).task.pk == held_in_band.pk
    done = run(held_in_band)
    assert done.state == "TASK_STATE_COMPLETED"
    assert status_text(done) == f"Deployed build {BUILD} to staging."
    record = DemoRecord.objects.get()
    assert record.data == {"build": BUILD, "environment": "staging"}
    effect = Effect.objects.get()
    assert effect.state == Effect.State.SUCCEEDED
    assert effect.approved_by == agents.a.subject
    assert record.effect_id == effect.public_id
    audit = AuditEvent.objects.get()
    assert (audit.action, audit.actor, audit.via) == ("approved", agents.a.subject, "inband")
    assert "arguments" not in json.dumps(done.status_message)


def test_approving_twice_with_the_same_message_sends_once(held_in_band):
    interaction = open_interaction(held_in_band)
    message_id = "m-approve-once"
    first = reply(
        held_in_band, "ok", messageId=message_id, metadata=in_band(interaction, approved=True)
    )
    run(held_in_band)
    again = reply(
        held_in_band, "ok", messageId=message_id, metadata=in_band(interaction, approved=True)
    )
    assert (first.replayed, again.replayed) == (False, True)
    assert again.task.pk == held_in_band.pk
    assert run(held_in_band).state == "TASK_STATE_COMPLETED"
    assert DemoRecord.objects.count() == 1


def test_denying_in_band_tells_the_model_tool_denied(held_in_band):
    approve(held_in_band, approved=False)
    done = run(held_in_band)
    assert done.state == "TASK_STATE_COMPLETED"
    # The model got tool.denied with the reason (below) and says so in its own words.
    assert f"Build {BUILD} was not deployed to staging: denied" in status_text(done)
    assert not DemoRecord.objects.exists()
    effect = Effect.objects.get()
    assert effect.state == Effect.State.DENIED
    assert effect.outcome["error"] == "tool.denied"
    results = [e for e in done.transcript if e["type"] == "tool_result"]
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
def test_an_approval_answer_that_is_not_a_boolean_is_refused(held_in_band, answer):
    with pytest.raises(InvalidParams):
        approve(held_in_band, **answer)
    assert Interaction.objects.get().state == Interaction.State.OPEN


@pytest.mark.parametrize(
    "rule",
    ["approve", {"action": "approve"}, {"action": "approve", "deciders": "operators"}],
    ids=["plain", "no-deciders", "operators"],
)
def test_an_in_band_approval_under_a_policy_without_deciders_is_refused(agents, rule):
    # The caller never sees a call's arguments (interactions/v1), so by default it does
    # not approve them; the refusal says who may decide.
    Agent.objects.filter(tenant=agents.a.tenant, slug="deployer").update(
        tool_policy={"deploy/deploy_build": rule}
    )
    held = start(agents.a, "deployer", f"deploy build {BUILD} to staging")
    assert Interaction.objects.get().deciders == Interaction.Deciders.OPERATORS
    with pytest.raises(UnsupportedOperation) as refused:
        approve(held, approved=True)
    assert refused.value.reason == "OPERATOR_DECISION_REQUIRED"
    assert refused.value.message.startswith(
        "Only admins or operators of the agent's organisation may decide this approval; "
        "the caller cannot answer it in band"
    )
    assert Interaction.objects.get().state == Interaction.State.OPEN
    assert not DemoRecord.objects.exists()
    assert not AuditEvent.objects.exists()
    # An operator still decides it.
    decide(open_interaction(held), approved=True)
    assert run(held).state == "TASK_STATE_COMPLETED"
    assert DemoRecord.objects.count() == 1


def test_deciders_caller_lets_only_the_caller_decide(agents):
    from runtime.decisions.approvers import Decider
    from runtime.kernel.errors import DeciderRefused
    from tests.core import flow_answer

    Agent.objects.filter(tenant=agents.a.tenant, slug="deployer").update(
        tool_policy={"deploy/deploy_build": {"action": "approve", "deciders": "caller"}}
    )
    held = start(agents.a, "deployer", f"deploy build {BUILD} to staging")
    interaction = open_interaction(held)
    assert interaction.approvers == ["caller"]
    with pytest.raises(DeciderRefused):
        flow_answer(
            tenant=agents.a.tenant,
            interaction_id=interaction.public_id,
            answer={"approved": True},
            by="user:operator@acme.test",
            via="page",
            decider=Decider(subject="user:operator@acme.test"),
        )
    approve(held, approved=True)
    assert run(held).state == "TASK_STATE_COMPLETED"
    assert Effect.objects.get().approved_by == agents.a.subject


def test_an_operator_approval_resumes_the_task_with_no_client_message(held_in_band):
    history = list(held_in_band.history)
    decide(open_interaction(held_in_band), approved=True)
    done = run(held_in_band)
    assert done.state == "TASK_STATE_COMPLETED"
    assert Effect.objects.get().approved_by == "user:operator@acme.test"
    assert DemoRecord.objects.count() == 1
    assert not [m for m in done.history[len(history) :] if m["role"] == "ROLE_USER"]
