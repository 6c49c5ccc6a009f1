"""Who may decide an approval (policy ``approvers``), the two-person rule (``required: 2``)
and an escalation step that widens who may decide, through the core's services."""

from datetime import timedelta

import pytest

from notifications.services import ladder_save, ladders_advance
from runtime.agents.agent_models import DemoRecord
from runtime.decisions.approvers import Decider, decider_refusal
from runtime.decisions.decision_models import InteractionApproval, Receipt
from runtime.kernel.errors import AlreadyDecided, DeciderRefused, UnsupportedOperation
from runtime.kernel.task_models import AuditEvent
from runtime.policy.lookup import policy_for
from tenants.models import ApproverGroup, Membership
from tests.core import (
    DEPLOY_TOOL,
    flow_answer,
    in_band,
    member,
    reply,
    run,
    status_text,
)

pytestmark = pytest.mark.django_db


def answer(interaction, decider: Decider, approved=True, via="page"):
    return flow_answer(
        tenant=interaction.tenant,
        interaction_id=interaction.public_id,
        answer={"approved": approved},
        by=decider.subject,
        via=via,
        decider=decider,
    )


def test_policy_reads_approvers_and_required(make_agent):
    agent = make_agent(
        "p",
        [],
        tools=[DEPLOY_TOOL],
        tool_policy={
            "deploy/deploy_build": {"action": "approve", "approvers": ["admin", "group:sre"]},
            "deploy": {"action": "approve", "required": 2},
            "github": {"action": "approve", "approvers": ["operator", "caller"]},
        },
    )
    named = policy_for(agent, "deploy", "deploy_build", {})
    assert (named.approvers, named.required, named.deciders) == (
        ("admin", "group:sre"),
        1,
        "operators",
    )
    two = policy_for(agent, "deploy", "other", {})
    # Two people decide: the caller's in-band answer is never one of them.
    assert (two.required, two.deciders) == (2, "operators")
    assert policy_for(agent, "github", "x", {}).deciders == "either"


def test_an_approval_records_its_approvers_and_refuses_others_with_the_reason(agents, holder):
    interaction = holder({"action": "approve", "approvers": ["admin"]})(agents.a)
    assert (interaction.approvers, interaction.approvals_required) == (["admin"], 1)
    operator = member(agents.a, "operator")
    assert decider_refusal(interaction, operator) == "Only admins may decide this approval."
    with pytest.raises(DeciderRefused, match="Only admins"):
        answer(interaction, operator)
    # A program with an operator token is an operator too.
    with pytest.raises(DeciderRefused):
        answer(interaction, Decider(subject="program:bot"), via="rest")
    interaction.refresh_from_db()
    assert interaction.state == "open" and not AuditEvent.objects.exists()
    decided = answer(interaction, member(agents.a, "admin"))
    assert decided.state == "answered" and decided.answered_by == "user:admin@acme.test"


def test_a_named_group_decides_and_other_operators_do_not(agents, holder):
    side = agents.a
    group = ApproverGroup.objects.create(tenant=side.tenant, slug="release")
    interaction = holder({"action": "approve", "approvers": ["group:release"]})(side)
    operator, admin = member(side, "operator"), member(side, "admin")
    assert "members of group release" in decider_refusal(interaction, operator)
    assert decider_refusal(interaction, admin) is not None
    group.members.add(Membership.objects.get(pk=operator.membership_id))
    assert decider_refusal(interaction, operator) is None
    # A group of the same name in another tenant counts for nothing here.
    other = ApproverGroup.objects.create(tenant=agents.b.tenant, slug="release")
    other.members.add(Membership.objects.get(tenant=agents.b.tenant, user=agents.b.admin))
    assert decider_refusal(interaction, admin) is not None
    assert answer(interaction, operator).state == "answered"


def test_viewers_never_decide_even_when_named(agents, holder):
    side = agents.a
    group = ApproverGroup.objects.create(tenant=side.tenant, slug="all")
    viewer = member(side, "viewer")
    group.members.add(Membership.objects.get(pk=viewer.membership_id))
    interaction = holder({"action": "approve", "approvers": ["group:all"]})(side)
    assert decider_refusal(interaction, viewer) == "Viewers can see but not decide."


def test_caller_decides_in_band_only_when_named(agents, holder):
    side = agents.a
    interaction = holder({"action": "approve", "approvers": ["admin"]}, slug="ops-only")(side)
    with pytest.raises(
        UnsupportedOperation, match="may decide this approval; the caller cannot answer it in band"
    ):
        reply(interaction.task, None, metadata=in_band(interaction, approved=True))

    interaction = holder({"action": "approve", "approvers": ["caller"]}, slug="caller")(side)
    assert interaction.deciders == "either"
    reply(interaction.task, None, metadata=in_band(interaction, approved=True))
    interaction.refresh_from_db()
    assert interaction.answered_via == "inband" and interaction.state == "answered"
    # Nobody but the caller was named: operators see it and cannot decide it.
    held = holder({"action": "approve", "approvers": ["caller"]}, slug="caller2")(side)
    with pytest.raises(DeciderRefused):
        answer(held, member(side, "admin"))


def test_two_person_rule_first_approval_recorded_then_second_resumes(agents, holder):
    side = agents.a
    interaction = holder({"action": "approve", "required": 2})(side)
    assert interaction.approvals_required == 2
    operator, admin = member(side, "operator"), member(side, "admin")

    first = answer(interaction, operator)
    assert first.state == "open"
    assert [a["by"] for a in first.approvals] == ["user:operator@acme.test"]
    recorded = AuditEvent.objects.get()
    assert (recorded.action, recorded.detail["approvals"], recorded.detail["required"]) == (
        "approval_recorded",
        1,
        2,
    )
    # The task still waits: nothing is sent on the first approval.
    assert run(interaction.task).state == "TASK_STATE_AUTH_REQUIRED"
    assert not DemoRecord.objects.exists()

    # The same person cannot be the second.
    with pytest.raises(DeciderRefused, match="another person"):
        answer(interaction, operator)
    assert InteractionApproval.objects.count() == 1

    second = answer(interaction, admin)
    assert second.state == "answered" and second.answered_by == "user:admin@acme.test"
    assert second.answer == {"approved": True, "approvals": 2}
    assert list(AuditEvent.objects.order_by("id").values_list("action", flat=True)) == [
        "approval_recorded",
        "approved",
    ]
    # Each person's approval has its receipt: the first says it waited.
    receipts = list(Receipt.objects.filter(effect_public_id=interaction.public_id).order_by("id"))
    assert [(r.decider, r.decision) for r in receipts] == [
        ("user:operator@acme.test", "approved"),
        ("user:admin@acme.test", "approved"),
    ]
    assert receipts[0].reason.startswith("1 of 2")
    task = run(interaction.task)
    assert task.state == "TASK_STATE_COMPLETED"
    assert DemoRecord.objects.filter(effect_id=interaction.public_id).count() == 1


def test_two_person_rule_a_denial_by_anyone_ends_it(agents, holder):
    side = agents.a
    interaction = holder({"action": "approve", "required": 2})(side)
    answer(interaction, member(side, "operator"))
    # The first approver may also change their mind and deny.
    denied = answer(interaction, member(side, "operator"), approved=False)
    assert denied.state == "answered" and denied.answer == {"approved": False}
    with pytest.raises(AlreadyDecided):
        answer(interaction, member(side, "admin"))
    task = run(interaction.task)
    assert task.state == "TASK_STATE_COMPLETED"
    assert status_text(task) == "error: tool.denied"
    assert not DemoRecord.objects.exists()


def test_two_person_rule_refuses_the_callers_answer(agents, holder):
    interaction = holder({"action": "approve", "required": 2})(agents.a)
    with pytest.raises(
        UnsupportedOperation, match="may decide this approval; the caller cannot answer it in band"
    ):
        reply(interaction.task, None, metadata=in_band(interaction, approved=True))


def test_escalation_widens_who_may_decide_from_then_on(
    agents, holder, django_capture_on_commit_callbacks
):
    side = agents.a
    ApproverGroup.objects.create(tenant=side.tenant, slug="release")
    take = holder({"action": "approve", "approvers": ["group:release"]})
    ladder_save(
        tenant=side.tenant,
        tool="deploy/deploy_build",
        steps=[
            {"after": "15m", "action": "remind"},
            {"after": "1h", "action": "escalate", "roles": ["admin"], "widen_to": "admin"},
        ],
    )
    interaction = take(side)
    admin = member(side, "admin")
    opened = interaction.created_at

    def beat(at):
        with django_capture_on_commit_callbacks(execute=False):
            return ladders_advance(now=at)

    assert beat(opened + timedelta(minutes=30)) == 1  # the reminder widens nothing
    interaction.refresh_from_db()
    assert interaction.widened_to == [] and decider_refusal(interaction, admin) is not None

    assert beat(opened + timedelta(hours=1)) == 1
    interaction.refresh_from_db()
    assert interaction.widened_to == ["admin"]
    assert decider_refusal(interaction, admin) is None
    # Operators were not added: only the roles the step names.
    assert decider_refusal(interaction, member(side, "operator")) is not None
    widened = AuditEvent.objects.get(action="widened")
    assert (widened.actor, widened.via, widened.detail["roles"], widened.detail["step"]) == (
        "system:ladder",
        "ladder",
        ["admin"],
        2,
    )
    assert answer(interaction, admin).state == "answered"


def test_widen_to_is_only_for_escalation_steps_of_deciding_roles():
    from notifications.ladders import steps_clean

    with pytest.raises(ValueError, match="widen_to"):
        steps_clean([{"after": "1h", "action": "remind", "widen_to": "admin"}])
    with pytest.raises(ValueError, match="widen_to"):
        steps_clean([{"after": "1h", "action": "escalate", "widen_to": "viewer"}])
    assert steps_clean([{"after": "1h", "action": "escalate", "widen_to": "operator"}])[0][
        "widen_to"
    ] in ("operator", ["operator"])


def test_an_approval_under_another_policy_version_no_longer_counts(agents, holder):
    """What trusta's void does (a change of the tool's entry between approvals): the first
    approval approved the old entry, so a second person's approval under the new one is 1 of
    2, and the first person may approve again."""
    side = agents.a
    interaction = holder({"action": "approve", "required": 2})(side)
    operator, admin = member(side, "operator"), member(side, "admin")
    answer(interaction, operator)
    agent = interaction.task.agent
    agent.tool_policy = {"deploy/deploy_build": {"action": "approve", "required": 2, "bulk": False}}
    agent.save()

    still = answer(interaction, admin)
    assert still.state == "open"
    assert [a["by"] for a in still.approvals] == ["user:admin@acme.test"]
    assert answer(interaction, operator).state == "answered"
    assert InteractionApproval.objects.filter(interaction=interaction).count() == 3
