"""Closing the loop: a channel that told of an item hears what became of it
(decided, expired, voided, canceled; one approval of several in), once each, through the
same fan-out, delivery and sweep machinery as the openings."""

import json
from datetime import timedelta

import pytest
from django.core import mail
from django.utils import timezone

from notifications.follow_ups import follow_ups_missing, notifications_follow_up
from notifications.models import Delivery, FollowUp
from notifications.tasks import sweep_follow_ups, sweep_notifications
from runtime.agents.agent_models import Agent
from runtime.decisions.decision_models import Interaction, Receipt
from runtime.decisions.interaction_state import interactions_expire
from runtime.kernel.task_models import AuditEvent, TaskState
from runtime.turn.cancel import task_stop
from tests.core import DEPLOY_TOOL, REPORT_RESULT, decide, deploy_step, run
from tests.notifications.conftest import BUILD
from tests.notifications.test_delivery import hold

pytestmark = pytest.mark.django_db


def types(hook) -> list[str]:
    return [event["type"] for event in hook.events]


def test_a_webhook_hears_decided_voided_and_expired_once_each(
    agents, notify, receivers, channel, settings, django_capture_on_commit_callbacks
):
    capture = django_capture_on_commit_callbacks
    hook = receivers()
    _, hook.secret = channel(agents.a.tenant, "pager", "webhook", url=hook.url)
    interaction = hold(agents.a, capture)
    # The decision's follow-up message is lost (its on-commit callbacks are dropped), and so
    # is the turn's resumption; the policy changes before the worker sends the call.
    decide(interaction, approved=True, reason="go ahead")
    agent = Agent.objects.get(tenant=agents.a.tenant, slug="deployer")
    # The rule that holds the call changes (another tool's entry would void nothing).
    Agent.objects.filter(pk=agent.pk).update(
        tool_policy={
            **agent.tool_policy,
            "deploy/deploy_build": {"action": "approve", "editable": True},
        }
    )
    with capture(execute=True):
        task = run(interaction.task)  # the approval is void: nothing is sent
    assert task.state == TaskState.AUTH_REQUIRED
    assert types(hook) == ["interaction.opened", "interaction.voided"]
    voided = hook.events[1]["data"]
    assert voided["interactionId"] == interaction.public_id and voided["outcome"] == "voided"
    assert "tool policy changed" in voided["reason"]
    assert voided["decider"] == {"kind": "system", "name": "system:receipts"}

    # The sweep finds the decision no follow-up ran for, past its grace period.
    settings.NOTIFY_FAN_OUT_GRACE_SECONDS = 0
    [(audit_pk, interaction_pk)] = follow_ups_missing()
    assert AuditEvent.objects.get(pk=audit_pk).action == "approved"
    with capture(execute=True):
        assert sweep_follow_ups() == 1
    assert types(hook)[-1] == "interaction.decided"
    decided = hook.events[-1]["data"]
    receipt = Receipt.objects.get(decision="approved")
    assert decided["outcome"] == "approved" and decided["reason"] == "go ahead"
    assert decided["decider"] == {"kind": "person", "name": "user:operator@acme.test"}
    assert (decided["channel"], decided["receiptId"]) == ("page", receipt.public_id)
    assert decided["summary"] == f'build="{BUILD}", environment="staging"'
    assert FollowUp.objects.get(audit_event_id=audit_pk).swept is True

    # Reopened by the void, it expires.
    Interaction.objects.filter(pk=interaction.pk).update(expires_at=timezone.now())
    with capture(execute=True):
        assert interactions_expire() == 1
    assert types(hook)[-1] == "interaction.expired"
    assert hook.events[-1]["data"]["outcome"] == "expired"

    # Once each: the messages again, the sweep again.
    with capture(execute=True):
        for marker in FollowUp.objects.all():
            assert (
                notifications_follow_up(
                    audit_pk=marker.audit_event_id, interaction_pk=marker.interaction_id
                )
                == 0
            )
        assert sweep_follow_ups() == 0
        sweep_notifications()
    assert types(hook) == [
        "interaction.opened",
        "interaction.voided",
        "interaction.decided",
        "interaction.expired",
    ]
    assert hook.bad_signatures == 0


def test_chat_and_mail_hear_who_decided_and_how(
    agents, notify, receivers, channel, django_capture_on_commit_callbacks
):
    capture = django_capture_on_commit_callbacks
    slack = receivers(path="/slack")
    channel(agents.a.tenant, "chat", "slack", url=slack.url)
    teams = receivers(path="/teams")
    channel(agents.a.tenant, "teams", "teams", url=teams.url)
    channel(agents.a.tenant, "mail", "email", email_roles=["operator"])
    interaction = hold(agents.a, capture)
    assert len(mail.outbox) == 1
    opening = teams.events[0]["attachments"][0]
    assert opening["contentType"] == "application/vnd.microsoft.card.adaptive"
    runs = [run["text"] for block in opening["content"]["body"] for run in block["inlines"]]
    assert "partner:acme-client" in runs and any(f'"build": "{BUILD}"' in r for r in runs)
    with capture(execute=True):
        decide(interaction, by="user:admin@acme.test", approved=False, reason="frozen <!here>")
    follow_up = json.dumps(slack.events[-1])
    assert "Denied by admin@acme.test via page" in follow_up
    assert "<!here>" not in follow_up
    card = teams.events[-1]["attachments"][0]["content"]
    assert card["type"] == "AdaptiveCard"
    assert "Denied by admin@acme.test via page" in json.dumps(card)
    assert card["actions"][0] == {
        "type": "Action.OpenUrl",
        "title": "Open in Countersign",
        "url": f"https://countersign.example/inbox/{interaction.public_id}/",
    }
    # Mail: a short message to those the opening mailed, no links (nothing left to decide).
    message = mail.outbox[-1]
    assert message.to == ["operator@acme.test"] and len(mail.outbox) == 2
    assert message.subject.startswith("[deployer] Denied by admin@acme.test via page: ")
    assert "frozen <!here>" in message.body and "Approve:" not in message.body


def test_the_other_approvers_hear_that_one_approval_of_two_is_in(
    agents, notify, receivers, channel, make_agent, django_capture_on_commit_callbacks
):
    capture = django_capture_on_commit_callbacks
    make_agent(
        "dep",
        [deploy_step(), *REPORT_RESULT],
        tools=[DEPLOY_TOOL],
        tool_policy={"deploy/deploy_build": {"action": "approve", "required": 2}},
    )
    hook = receivers()
    _, hook.secret = channel(agents.a.tenant, "pager", "webhook", url=hook.url)
    channel(agents.a.tenant, "mail", "email", email_roles=["operator", "admin"])
    interaction = hold(agents.a, capture, agent="dep", text="go")
    assert sorted(m.to[0] for m in mail.outbox) == ["admin@acme.test", "operator@acme.test"]
    with capture(execute=True):
        decide(interaction, approved=True)  # the operator's: 1 of 2
    assert types(hook)[-1] == "interaction.approval_recorded"
    data = hook.events[-1]["data"]
    assert (data["approvals"], data["approvalsRequired"]) == (1, 2)
    recorded = {m.to[0]: m for m in mail.outbox[2:]}
    assert set(recorded) == {"admin@acme.test", "operator@acme.test"}
    for message in recorded.values():
        assert "1 of 2 approvals in (operator@acme.test via page)" in message.subject
    # The other approver gets links to decide; the one who approved does not.
    assert (
        "Approve: https://countersign.example/integrations/email/"
        in recorded["admin@acme.test"].body
    )
    assert "Approve:" not in recorded["operator@acme.test"].body


def test_the_next_stages_approvers_hear_that_its_their_turn(
    agents, notify, receivers, channel, make_agent, django_capture_on_commit_callbacks
):
    capture = django_capture_on_commit_callbacks
    stages = [
        {"title": "an operator", "approvers": ["operator"], "required": 1},
        {"title": "an admin", "approvers": ["admin"], "required": 1},
    ]
    make_agent(
        "dep",
        [deploy_step(), *REPORT_RESULT],
        tools=[DEPLOY_TOOL],
        tool_policy={"deploy/deploy_build": {"action": "approve", "stages": stages}},
    )
    hook = receivers()
    _, hook.secret = channel(agents.a.tenant, "pager", "webhook", url=hook.url)
    channel(agents.a.tenant, "mail", "email", email_roles=["operator", "admin"])
    interaction = hold(agents.a, capture, agent="dep", text="go")
    # At the opening only stage 1's approvers may decide: the admin is told, without links.
    opened = {m.to[0]: m for m in mail.outbox}
    assert "Approve:" in opened["operator@acme.test"].body
    assert "Approve:" not in opened["admin@acme.test"].body
    with capture(execute=True):
        decide(interaction, approved=True)  # the operator's: stage 1 done
    data = hook.events[-1]["data"]
    assert hook.events[-1]["type"] == "interaction.approval_recorded"
    assert (data["stage"], data["stages"]) == (1, 2)
    assert data["nextStage"] == {"stage": 2, "approvers": ["admin"], "title": "an admin"}
    recorded = {m.to[0]: m for m in mail.outbox[2:]}
    for message in recorded.values():
        assert (
            "Stage 1 of 2 approved (operator@acme.test via page); stage 2 (an admin) now "
            "waits for admins" in message.subject
        )
    assert "Approve:" in recorded["admin@acme.test"].body
    assert "Approve:" not in recorded["operator@acme.test"].body


def test_a_canceled_task_closes_what_its_channels_told_of(
    agents, notify, receivers, channel, django_capture_on_commit_callbacks
):
    capture = django_capture_on_commit_callbacks
    hook = receivers()
    _, hook.secret = channel(agents.a.tenant, "pager", "webhook", url=hook.url)
    interaction = hold(agents.a, capture)
    with capture(execute=True):
        task_stop(
            tenant=agents.a.tenant,
            task_id=interaction.task.public_id,
            by="user:admin@acme.test",
            via="page",
            reason="wrong build",
        )
    assert types(hook) == ["interaction.opened", "interaction.canceled"]
    assert hook.events[-1]["data"]["decidedBy"] == "user:admin@acme.test"


def test_an_opening_not_sent_before_the_decision_is_never_sent(
    agents, notify, receivers, channel, django_capture_on_commit_callbacks
):
    capture = django_capture_on_commit_callbacks
    hook = receivers(script=[503])
    _, hook.secret = channel(agents.a.tenant, "pager", "webhook", url=hook.url)
    interaction = hold(agents.a, capture)
    opening = Delivery.objects.get(event="opened")
    assert opening.state == "pending" and hook.events == []
    with capture(execute=True):
        decide(interaction, approved=True)
    # Told what became of it (its opening may yet arrive: it is on its way) ...
    assert types(hook) == ["interaction.decided"]
    with capture(execute=True):
        sweep_notifications()
    opening.refresh_from_db()
    # ... but the opening is not sent: it would ask for a decision already taken.
    assert (opening.state, opening.attempts) == ("skipped", 1)
    assert types(hook) == ["interaction.decided"]


def test_items_no_channel_told_of_are_never_followed_up(
    agents, notify, settings, django_capture_on_commit_callbacks
):
    capture = django_capture_on_commit_callbacks
    interaction = hold(agents.a, capture)
    with capture(execute=True):
        decide(interaction, approved=True)
    settings.NOTIFY_FAN_OUT_GRACE_SECONDS = 0
    assert follow_ups_missing(now=timezone.now() + timedelta(seconds=1)) == []
    assert not Delivery.objects.exists()


def test_a_tenant_without_a_channel_queues_no_follow_up(
    agents, notify, receivers, channel, django_capture_on_commit_callbacks
):
    capture = django_capture_on_commit_callbacks
    quiet = hold(agents.a, capture)
    with capture(execute=True):
        decide(quiet, approved=True)
    # No channel could hear of it: the follow-up (a marker telling no one) is not asked for.
    assert not FollowUp.objects.exists()

    # A channel made since (in this process: the cached answer is dropped at once) hears of
    # the next decision.
    hook = receivers()
    _, hook.secret = channel(agents.a.tenant, "pager", "webhook", url=hook.url)
    told = hold(agents.a, capture)
    with capture(execute=True):
        decide(told, approved=True)
    assert FollowUp.objects.get().interaction_id == told.pk
    assert types(hook) == ["interaction.opened", "interaction.decided"]
