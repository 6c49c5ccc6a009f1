"""Out of office on every medium: one rule (notifications.routing) for
e-mail and for a member's own channel of any medium (their Teams chat here; their Slack DM in
tests/integrations/slack/test_away_dm.py): while they are away it is left out and their
delegate's own channel is told instead, or, without a delegate, the others only. When nobody
who may decide an item is here, it escalates to the admins, once, and the audit says why."""

from datetime import timedelta

import pytest
from django.core import mail
from django.utils import timezone

from notifications.models import Delivery, LadderStep
from notifications.routing import UNCOVERED_STEP
from runtime.kernel.task_models import AuditEvent
from tenants.models import Membership
from tenants.services import away_set, membership_add
from tests.core import start
from tests.notifications.conftest import HOLD

pytestmark = pytest.mark.django_db

OPERATORS_ONLY = {"action": "approve", "approvers": ["operator"]}


def member(side, user) -> Membership:
    return Membership.objects.get(tenant=side.tenant, user=user)


def away(membership: Membership, delegate: Membership | None = None) -> None:
    away_set(
        membership=membership,
        until=timezone.now() + timedelta(days=2),
        delegate=delegate,
        actor="user:test",
    )


def test_an_away_members_teams_chat_is_skipped_and_their_delegates_is_told(
    agents, notify, receivers, channel, django_capture_on_commit_callbacks
):
    mine, theirs, team = (receivers(path=f"/{n}") for n in ("mine", "theirs", "team"))
    channel(
        agents.a.tenant, "operator chat", "teams", url=mine.url, member_email="operator@acme.test"
    )
    # The delegate's own chat only takes another agent's items: it stands in all the same.
    channel(
        agents.a.tenant,
        "admin chat",
        "teams",
        url=theirs.url,
        member_email="admin@acme.test",
        agents=["someone-else"],
    )
    channel(agents.a.tenant, "team chat", "teams", url=team.url)
    away(member(agents.a, agents.a.operator), delegate=member(agents.a, agents.a.admin))
    with django_capture_on_commit_callbacks(execute=True):
        start(agents.a, "deployer", HOLD)
    assert (len(mine.events), len(theirs.events), len(team.events)) == (0, 1, 1)
    assert not Delivery.objects.filter(channel__member__user=agents.a.operator).exists()


def test_without_a_delegate_the_rest_are_told_and_back_the_member_is_told_again(
    agents, notify, receivers, channel, django_capture_on_commit_callbacks
):
    mine, team = receivers(path="/mine"), receivers(path="/team")
    channel(
        agents.a.tenant, "operator chat", "teams", url=mine.url, member_email="operator@acme.test"
    )
    channel(agents.a.tenant, "team chat", "teams", url=team.url)
    operator = member(agents.a, agents.a.operator)
    away(operator)
    with django_capture_on_commit_callbacks(execute=True):
        start(agents.a, "deployer", HOLD)
    assert (len(mine.events), len(team.events)) == (0, 1)
    Membership.objects.filter(pk=operator.pk).update(away_from=None, away_until=None)
    with django_capture_on_commit_callbacks(execute=True):
        start(agents.a, "deployer", HOLD)
    assert (len(mine.events), len(team.events)) == (1, 2)


def test_a_members_own_channel_names_a_member_of_the_tenant(agents, channel):
    from notifications.channel_settings import ChannelError

    with pytest.raises(ChannelError, match="no member of this tenant"):
        channel(
            agents.a.tenant,
            "theirs",
            "email",
            email_roles=["operator"],
            member_email="operator@globex.test",
        )


def test_nobody_here_to_decide_escalates_to_the_admins_once_and_the_audit_says_why(
    agents, notify, channel, held_under, django_capture_on_commit_callbacks
):
    channel(agents.a.tenant, "admins", "email", email_roles=["admin"])
    # The only operator is away; their delegate, an admin, may not decide operators' items.
    away(member(agents.a, agents.a.operator), delegate=member(agents.a, agents.a.admin))
    with django_capture_on_commit_callbacks(execute=True):
        held = held_under(agents.a, OPERATORS_ONLY)
    held.refresh_from_db()
    assert held.widened_to == ["admin"]
    step = LadderStep.objects.get(interaction=held)
    assert (step.step, step.action, step.roles) == (UNCOVERED_STEP, "escalate", ["admin"])
    audit = AuditEvent.objects.get(action="escalated", interaction=held)
    assert audit.actor == "system:away"
    assert audit.detail["reason"].startswith("Nobody who may decide it is here: operator@acme.test")
    assert audit.detail["away"] == ["operator@acme.test"]
    escalations = Delivery.objects.filter(interaction=held, event="escalation")
    assert [d.roles for d in escalations] == [["admin"]]
    assert any(m.to == ["admin@acme.test"] for m in mail.outbox)


def test_a_delegate_here_who_may_decide_covers_the_item(
    agents, notify, channel, held_under, django_capture_on_commit_callbacks
):
    other, _ = membership_add(
        tenant=agents.a.tenant, email="second@acme.test", role="operator", actor="user:test"
    )
    away(member(agents.a, agents.a.operator), delegate=other)
    with django_capture_on_commit_callbacks(execute=True):
        held = held_under(agents.a, OPERATORS_ONLY)
    assert not LadderStep.objects.filter(interaction=held).exists()
    assert not AuditEvent.objects.filter(action="escalated").exists()
    # Both operators away, the delegate too: nobody is left.
    away(other)
    with django_capture_on_commit_callbacks(execute=True):
        second = held_under(agents.a, OPERATORS_ONLY, slug="dep2")
    assert LadderStep.objects.filter(interaction=second, step=UNCOVERED_STEP).count() == 1
