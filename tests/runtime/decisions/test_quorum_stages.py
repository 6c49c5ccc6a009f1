"""Quorums and stages: ``required: N`` of the eligible approvers for any N,
and ``stages`` decided in order, each by its approvers; distinct people only (no program, no
system subject, nobody twice, in any stage); a denial at any stage ends it; the page and
REST say the progress ("2 of 3", "stage 1 of 2: operators")."""

import pytest

from runtime.agents.agent_models import DemoRecord
from runtime.decisions.approvers import Decider, approval_needs
from runtime.decisions.decision_models import Interaction, InteractionApproval, Receipt
from runtime.kernel.errors import ChannelRefused, DeciderRefused
from runtime.kernel.task_models import AuditEvent, TaskState
from tests.core import flow_answer, run

pytestmark = pytest.mark.django_db

TWO_OPERATORS_THEN_AN_ADMIN = {
    "action": "approve",
    "stages": [
        {"title": "operators", "approvers": ["operator"], "required": 2},
        {"title": "an admin", "approvers": ["admin"], "required": 1},
    ],
}


def approve(interaction, who: str, role: str = "operator", approved=True, via="page", **kind):
    decider = Decider(subject=who, role=role, **kind)
    return flow_answer(
        tenant=interaction.tenant,
        interaction_id=interaction.public_id,
        answer={"approved": approved},
        by=who,
        via=via,
        decider=decider,
    )


def test_three_of_the_eligible_approvers_close_a_quorum_of_three(agents, held_under):
    side = agents.a
    interaction = held_under(
        agents.a, {"action": "approve", "approvers": ["operator"], "required": 3}
    )
    assert interaction.approvals_required == 3
    assert approve(interaction, "user:op1@acme.test").state == "open"
    with pytest.raises(DeciderRefused, match="approved this already"):
        approve(interaction, "user:op1@acme.test", via="rest")
    # A program (an operator token) and a subject the system decides as never count.
    with pytest.raises(DeciderRefused, match="not a person"):
        approve(interaction, "program:bot", kind=Decider.PROGRAM)
    with pytest.raises(DeciderRefused, match="system decides as"):
        approve(interaction, "system:expiry")
    # Not an approver of this quorum: an admin (approvers: [operator]).
    with pytest.raises(DeciderRefused, match="Only operators"):
        approve(interaction, "user:admin@acme.test", role="admin")
    assert approve(interaction, "user:op2@acme.test").state == "open"

    client = side.client_for(side.operator)
    page = client.get(f"/inbox/{interaction.public_id}/").content.decode()
    assert "2 of 3" in page
    body = client.get(f"/api/v1/interactions/{interaction.public_id}").json()
    assert (body["progress"], body["approvalsRequired"]) == ("2 of 3", 3)
    assert run(interaction.task).state == TaskState.AUTH_REQUIRED  # still waiting

    closed = approve(interaction, "user:op3@acme.test")
    assert closed.state == "answered" and closed.answer["approvals"] == 3
    assert InteractionApproval.objects.filter(interaction=interaction).count() == 3
    assert [a["by"] for a in closed.approvals] == [f"user:op{i}@acme.test" for i in (1, 2, 3)]
    assert run(interaction.task).state == TaskState.COMPLETED
    assert DemoRecord.objects.filter(effect_id=interaction.public_id).count() == 1
    assert Receipt.objects.filter(effect_public_id=interaction.public_id).count() == 3


def test_bulk_triage_leaves_a_quorum_out(agents, held_under):
    interaction = held_under(agents.a, {"action": "approve", "required": 3})
    with pytest.raises(ChannelRefused, match="3 people must approve"):
        approve(interaction, "user:op1@acme.test", via="bulk")


def test_two_stages_are_decided_in_order(agents, held_under):
    side = agents.a
    interaction = held_under(agents.a, TWO_OPERATORS_THEN_AN_ADMIN)
    assert interaction.approvals_required == 3
    assert [s["required"] for s in interaction.request["stages"]] == [2, 1]
    # Stage 1 is the operators': an admin waits for stage 2.
    with pytest.raises(DeciderRefused, match="may decide stage 1 of 2"):
        approve(interaction, "user:admin@acme.test", role="admin")
    assert approve(interaction, "user:op1@acme.test").state == "open"

    client = side.client_for(side.operator)
    page = client.get(f"/inbox/{interaction.public_id}/").content.decode()
    assert "stage 1 of 2 (operators): operators" in page and "1 of 3" in page
    body = client.get(f"/api/v1/interactions/{interaction.public_id}").json()
    assert body["stage"] == 1
    assert [(s["required"], s["approved"]) for s in body["stages"]] == [(2, 1), (1, 0)]

    assert approve(interaction, "user:op2@acme.test").state == "open"
    # Stage 2: operators are done; the admin decides.
    with pytest.raises(DeciderRefused, match="may decide stage 2 of 2"):
        approve(interaction, "user:op3@acme.test")
    needs = approval_needs(Interaction.objects.get(pk=interaction.pk))
    assert (needs.stage, needs.stage_text()) == (1, "stage 2 of 2 (an admin): admins")
    body = client.get(f"/api/v1/interactions/{interaction.public_id}").json()
    assert body["stage"] == 2 and body["progress"] == "2 of 3"

    closed = approve(interaction, "user:admin@acme.test", role="admin")
    assert closed.state == "answered"
    assert [(a["by"], a["stage"]) for a in closed.approvals] == [
        ("user:op1@acme.test", 1),
        ("user:op2@acme.test", 1),
        ("user:admin@acme.test", 2),
    ]
    recorded = AuditEvent.objects.filter(action="approval_recorded", interaction=interaction)
    assert [e.detail["stage"] for e in recorded.order_by("id")] == [1, 1]
    assert run(interaction.task).state == TaskState.COMPLETED
    assert DemoRecord.objects.filter(effect_id=interaction.public_id).count() == 1


def test_the_same_person_never_counts_in_two_stages(agents, held_under):
    interaction = held_under(
        agents.a,
        {
            "action": "approve",
            "stages": [
                {"approvers": ["operator", "admin"], "required": 1},
                {"approvers": ["admin"], "required": 1},
            ],
        },
    )
    approve(interaction, "user:admin@acme.test", role="admin")
    with pytest.raises(DeciderRefused, match="approved this already"):
        approve(interaction, "user:admin@acme.test", role="admin")
    assert approve(interaction, "user:admin2@acme.test", role="admin").state == "answered"


@pytest.mark.parametrize("at_stage", [1, 2])
def test_a_denial_at_any_stage_ends_it(agents, held_under, at_stage):
    interaction = held_under(agents.a, TWO_OPERATORS_THEN_AN_ADMIN)
    if at_stage == 2:
        approve(interaction, "user:op1@acme.test")
        approve(interaction, "user:op2@acme.test")
        denied = approve(interaction, "user:admin@acme.test", role="admin", approved=False)
    else:
        approve(interaction, "user:op1@acme.test")
        denied = approve(interaction, "user:op2@acme.test", approved=False)
    assert denied.state == "answered" and denied.answer["approved"] is False
    task = run(interaction.task)
    assert task.state == TaskState.COMPLETED
    assert not DemoRecord.objects.exists()


def test_a_policy_tightened_to_stages_reaches_an_open_approval(agents, held_under):
    """Opened for one person; the policy then asks for two operators and an admin: the
    stricter holds, and what it asks for stays on the item once an approval is recorded."""
    interaction = held_under(agents.a, "approve")
    agent = interaction.task.agent
    agent.tool_policy = {"deploy/deploy_build": TWO_OPERATORS_THEN_AN_ADMIN}
    agent.save()
    assert approve(interaction, "user:op1@acme.test").state == "open"
    interaction.refresh_from_db()
    assert interaction.approvals_required == 3
    assert [s["required"] for s in interaction.request["stages"]] == [2, 1]
    # Loosened again: the item never asks less than it showed. The entry changed, so the
    # approval given under the other one no longer counts (its giver may approve again).
    agent.tool_policy = {"deploy/deploy_build": "approve"}
    agent.save()
    assert approve(interaction, "user:op2@acme.test").state == "open"
    assert approve(interaction, "user:op1@acme.test").state == "open"
    with pytest.raises(DeciderRefused, match="stage 2 of 2"):
        approve(interaction, "user:op3@acme.test")
    closed = approve(interaction, "user:admin@acme.test", role="admin")
    assert closed.state == "answered" and closed.answer["approvals"] == 3
