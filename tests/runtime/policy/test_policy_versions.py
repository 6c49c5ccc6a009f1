"""Per-tool policy versions: an approval binds the version of the entry (or
rule of it) that held its call, so editing another tool's entry, or another rule of the same
entry, voids nothing; editing the tool's own entry or rule voids its approval as before."""

import pytest

from runtime.agents.agent_models import Agent, DemoRecord
from runtime.decisions.decision_models import Interaction, Receipt
from runtime.kernel.task_models import AuditEvent, TaskState
from tests.core import (
    DEPLOY_TOOL,
    REPORT_RESULT,
    decide,
    flow_answer,
    open_interaction,
    run,
    send,
    status_text,
)

pytestmark = pytest.mark.django_db

PR_TOOL = {
    "server": "github",
    "tool": "create_pull_request",
    "schema": {"type": "object", "properties": {"repo": {"type": "string"}}},
}


@pytest.fixture
def two_tools(make_agent):
    """An agent with two tools, A (deploy/deploy_build, which it calls) and B (github)."""

    def make(deploy="approve", environment="staging"):
        return make_agent(
            "two",
            [
                {
                    "call": {
                        "server": "deploy",
                        "tool": "deploy_build",
                        "args": {"build": "b-1", "environment": environment},
                    }
                },
                *REPORT_RESULT,
            ],
            tools=[DEPLOY_TOOL, PR_TOOL],
            tool_policy={"deploy/deploy_build": deploy, "github/create_pull_request": "approve"},
        )

    return make


def edit(agent, key, entry):
    policy = {**Agent.objects.get(pk=agent.pk).tool_policy, key: entry}
    Agent.objects.filter(pk=agent.pk).update(tool_policy=policy)


def test_editing_tool_bs_entry_leaves_tool_as_approval_valid(agents, two_tools):
    agent = two_tools()
    approval = open_interaction(run(send(agents.a, "two")))
    decide(approval, approved=True)
    # B's entry changes between A's approval and its sending.
    edit(agent, "github/create_pull_request", {"action": "deny", "bulk": False})
    task = run(approval.task)
    assert task.state == TaskState.COMPLETED, status_text(task)
    assert DemoRecord.objects.filter(effect_id=approval.public_id).count() == 1
    assert not Receipt.objects.filter(decision="void").exists()
    assert not AuditEvent.objects.filter(action="approval_voided").exists()


def test_editing_tool_bs_entry_keeps_the_first_of_two_approvals_counting(agents, two_tools):
    agent = two_tools({"action": "approve", "required": 2})
    approval = open_interaction(run(send(agents.a, "two")))
    assert decide(approval, by="user:op1@acme.test", approved=True).state == "open"
    edit(agent, "github/create_pull_request", "allow")
    closed = decide(approval, by="user:op2@acme.test", approved=True)
    assert closed.state == "answered" and closed.answer["approvals"] == 2
    assert run(approval.task).state == TaskState.COMPLETED
    assert DemoRecord.objects.count() == 1


def test_editing_tool_as_own_entry_voids_its_approval_as_before(agents, two_tools):
    agent = two_tools()
    approval = open_interaction(run(send(agents.a, "two")))
    decide(approval, approved=True)
    edit(agent, "deploy/deploy_build", {"action": "approve", "bulk": False})
    task = run(approval.task)
    assert task.state == TaskState.AUTH_REQUIRED
    assert "tool policy changed" in status_text(task)
    assert not DemoRecord.objects.exists()
    assert Receipt.objects.filter(decision="void", effect_public_id=approval.public_id).exists()
    # And a first approval of two no longer counts once A's entry changed.
    Interaction.objects.filter(pk=approval.pk).update(approvals=[])
    edit(agent, "deploy/deploy_build", {"action": "approve", "required": 2})
    assert decide(approval, by="user:op1@acme.test", approved=True).state == "open"
    edit(agent, "deploy/deploy_build", {"action": "approve", "required": 2, "risk": "normal"})
    again = decide(approval, by="user:op2@acme.test", approved=True)
    assert again.state == "open" and [a["by"] for a in again.approvals] == ["user:op2@acme.test"]


def test_another_rule_of_the_same_entry_changing_leaves_the_approval_valid(agents, two_tools):
    production = {"field": "environment", "op": "equals", "value": "production"}
    rules = [
        {"when": [production], "action": "approve"},
        {"action": "allow"},
    ]
    agent = two_tools(rules, environment="production")
    approval = open_interaction(run(send(agents.a, "two")))
    decide(approval, approved=True)
    # The default rule changes (staging now waits too): the production approval still holds.
    edit(agent, "deploy/deploy_build", [rules[0], {"action": "approve", "title": "the rest"}])
    assert run(approval.task).state == TaskState.COMPLETED
    assert DemoRecord.objects.count() == 1

    second = open_interaction(run(send(agents.a, "two")))
    flow_answer(
        tenant=agents.a.tenant,
        interaction_id=second.public_id,
        answer={"approved": True},
        by="user:operator@acme.test",
        via="page",
    )
    # The production rule itself changes: its approval is void.
    edit(
        agent,
        "deploy/deploy_build",
        [{**rules[0], "required": 2}, {"action": "approve", "title": "the rest"}],
    )
    assert run(second.task).state == TaskState.AUTH_REQUIRED
    assert DemoRecord.objects.count() == 1
