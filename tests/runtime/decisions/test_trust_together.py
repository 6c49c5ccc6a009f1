"""Where receipts, edit-then-approve and step-up meet approvers and standing rules: a rule's
decision is a receipt, a void rule decision holds the call for a person, and a two-person
approval is approved as the call stands."""

from unittest import mock

import pytest

from approvals.decision_form import edit_form
from runtime.agents.agent_models import Agent, DemoRecord
from runtime.decisions.approvers import Decider
from runtime.decisions.decision_models import Effect, Interaction, Receipt
from runtime.decisions.facts import decision_facts
from runtime.decisions.standing_rules import rule_use_record
from runtime.kernel.errors import InvalidParams
from runtime.kernel.task_models import TaskState
from tests.core import (
    DEPLOY_TOOL,
    REPORT_RESULT,
    approved_with_rule,
    deploy_step,
    flow_answer,
    run,
    send,
)

pytestmark = pytest.mark.django_db


def test_a_call_a_rule_allows_has_a_receipt_with_the_rule_as_decider(agents, deployer):
    side = agents.a
    deployer()
    rule = approved_with_rule(side, "dep", "rel-1")
    task = run(send(side, "dep", "rel-2"))
    assert task.state == TaskState.COMPLETED
    effect = Effect.objects.get(task=task)
    receipt = Receipt.objects.get(effect_public_id=effect.public_id)
    assert (receipt.channel, receipt.decider, receipt.rule_id, receipt.decision) == (
        "rule",
        f"rule:{rule.public_id}",
        rule.public_id,
        Receipt.Decision.APPROVED,
    )
    assert receipt.sent_arguments_hash == effect.arguments_hash


def test_a_rule_decision_void_before_the_send_holds_the_call_for_a_person(agents, deployer):
    side = agents.a
    deployer()
    approved_with_rule(side, "dep", "rel-1")
    stricter = {"deploy/deploy_build": {"action": "approve", "approvers": ["admin"]}}

    def policy_changes_right_after(**kwargs):
        rule_use_record(**kwargs)
        # The agent's policy changes between the rule's decision and the send.
        Agent.objects.filter(pk=kwargs["task"].agent_id).update(tool_policy=stricter)
        kwargs["task"].agent.tool_policy = stricter

    with mock.patch("runtime.turn.calls.rule_use_record", policy_changes_right_after):
        task = run(send(side, "dep", "rel-2"))
    assert task.state == TaskState.AUTH_REQUIRED
    effect = Effect.objects.get(task=task)
    assert effect.state == Effect.State.HELD
    interaction = Interaction.objects.get(task=task, public_id=effect.public_id)
    assert interaction.state == Interaction.State.OPEN
    assert interaction.approvers == ["admin"]
    assert interaction.detail["voided"] is True
    assert not DemoRecord.objects.filter(effect_id=effect.public_id).exists()
    assert Receipt.objects.filter(
        effect_public_id=effect.public_id, decision=Receipt.Decision.VOID
    ).exists()


def test_a_two_person_approval_cannot_be_edited(agents, deployer):
    side = agents.a
    deployer({"action": "approve", "editable": True, "required": 2})
    task = run(send(side, "dep", "rel-1"))
    interaction = Interaction.objects.get(task=task, state="open")
    facts = decision_facts(interaction=interaction, decider=Decider(subject=side.operator.subject))
    assert edit_form(facts) is None
    with pytest.raises(InvalidParams, match="cannot be edited"):
        flow_answer(
            tenant=side.tenant,
            interaction_id=interaction.public_id,
            answer={"approved": True},
            by=side.operator.subject,
            via="page",
            arguments={"build": "rel-9", "environment": "staging"},
        )
    interaction.refresh_from_db()
    assert interaction.approvals == []
    assert Effect.objects.get(task=task).arguments["build"] == "rel-1"


def test_a_policy_changed_while_the_run_waited_judges_the_call_it_makes_next(
    agents, make_agent, monkeypatch
):
    """The run keeps its task in memory between its transactions; the agent's tool policy is
    read again with each one, so an admin's "deny" given while the run waited (a model, a
    tool, here a scripted wait) stops the call the run makes next."""
    from runtime.turn import runner

    agent = make_agent(
        "dep",
        [{"wait": 0.01}, deploy_step(build="rel-1"), *REPORT_RESULT],
        tools=[DEPLOY_TOOL],
        tool_policy={"deploy/deploy_build": "allow"},
    )
    waited = runner.lease_wait

    def admin_denies_meanwhile(**kwargs):
        Agent.objects.filter(pk=agent.pk).update(tool_policy={"deploy/deploy_build": "deny"})
        return waited(**kwargs)

    monkeypatch.setattr(runner, "lease_wait", admin_denies_meanwhile)
    task = run(send(agents.a, "dep", "go"))
    effect = Effect.objects.get(task=task)
    assert effect.state == Effect.State.DENIED
    assert not DemoRecord.objects.filter(effect_id=effect.public_id).exists()
