"""Out of office: a member sets "away until ..." with a delegate over REST; while away they are
told of nothing and their delegate is told instead; a delegate gets no more rights than they
had (their links are their own)."""

from datetime import timedelta
from io import StringIO

import pytest
from django.core import mail
from django.core.management import CommandError, call_command
from django.utils import timezone

from runtime.decisions.approvers import Decider
from runtime.decisions.decision_models import Interaction, Receipt
from runtime.kernel.errors import DeciderRefused
from runtime.kernel.task_models import AuditEvent
from tenants.models import ApiToken, Membership
from tenants.services import membership_add
from tenants.tokens import api_token_create
from tests.approvals.test_api import bearer
from tests.core import flow_answer, start
from tests.notifications.conftest import HOLD

pytestmark = pytest.mark.django_db

AWAY = "/api/v1/me/away"


def week() -> str:
    return (timezone.now() + timedelta(days=7)).isoformat()


def put(client, body):
    return client.put(AWAY, body, content_type="application/json")


def test_a_member_sets_reads_and_clears_their_away_with_a_delegate(agents):
    operator = agents.a.client_for(agents.a.operator)
    assert operator.get(AWAY).json() == {
        "away": False,
        "since": None,
        "until": None,
        "delegate": None,
    }
    set_ = put(operator, {"until": week(), "delegate": "admin@acme.test"})
    assert set_.status_code == 200, set_.content
    assert set_.json()["away"] is True and set_.json()["delegate"] == "admin@acme.test"
    member = Membership.objects.get(tenant=agents.a.tenant, user=agents.a.operator)
    assert member.away_at() and member.delegate.user.email == "admin@acme.test"
    assert operator.get(AWAY).json()["away"] is True
    assert operator.delete(AWAY).json()["away"] is False
    member.refresh_from_db()
    assert not member.away_at() and member.delegate is None


@pytest.mark.parametrize(
    "body",
    [
        {"until": "yesterday"},
        {"until": (timezone.now() - timedelta(days=1)).isoformat()},
        {"until": (timezone.now() + timedelta(days=400)).isoformat()},
        {"until": "2099-01-01T00:00:00Z", "since": "2099-02-01T00:00:00Z"},
        # Another tenant's member, oneself, a viewer: never a delegate.
        {"until": "WEEK", "delegate": "operator@globex.test"},
        {"until": "WEEK", "delegate": "operator@acme.test"},
        {"until": "WEEK", "delegate": "viewer@acme.test"},
    ],
)
def test_a_bad_away_is_refused_and_changes_nothing(agents, body):
    body = {k: week() if v == "WEEK" else v for k, v in body.items()}
    response = put(agents.a.client_for(agents.a.operator), body)
    assert response.status_code == 400, response.content
    member = Membership.objects.get(tenant=agents.a.tenant, user=agents.a.operator)
    assert member.away_until is None and member.delegate is None


def test_a_token_is_no_member(agents, client):
    _, token = api_token_create(
        tenant=agents.a.tenant, subject="program:bot", name="bot", kind=ApiToken.Kind.OPERATOR
    )
    assert client.get(AWAY, **bearer(token)).status_code == 403
    assert client.put(AWAY, {"until": week()}, content_type="application/json").status_code in (
        401,
        403,
    )


def test_an_away_member_gets_no_notification_and_their_delegate_does(
    agents, notify, channel, django_capture_on_commit_callbacks
):
    channel(agents.a.tenant, "ops mail", "email", email_roles=["operator"])
    put(agents.a.client_for(agents.a.operator), {"until": week(), "delegate": "admin@acme.test"})
    with django_capture_on_commit_callbacks(execute=True):
        start(agents.a, "deployer", HOLD)
    assert Interaction.objects.filter(tenant=agents.a.tenant, state="open").exists()
    assert [m.to for m in mail.outbox] == [["admin@acme.test"]]
    # The delegate decides with their own rights: an admin may decide this approval, so the
    # mail carries their links.
    assert "/email/" in mail.outbox[0].body or "Approve" in mail.outbox[0].body


def test_back_from_away_the_member_is_told_again(
    agents, notify, channel, django_capture_on_commit_callbacks
):
    channel(agents.a.tenant, "ops mail", "email", email_roles=["operator"])
    operator = agents.a.client_for(agents.a.operator)
    put(operator, {"until": week()})
    operator.delete(AWAY)
    with django_capture_on_commit_callbacks(execute=True):
        start(agents.a, "deployer", HOLD)
    assert [m.to for m in mail.outbox] == [["operator@acme.test"]]


def test_from_a_shell_an_admin_sets_a_member_away_and_back(agents):
    out = StringIO()
    until = (timezone.now() + timedelta(days=3)).isoformat()
    call_command(
        "members", "away", "operator@acme.test", "--tenant", "acme", "--until", until,
        "--delegate", "admin@acme.test", stdout=out,
    )  # fmt: skip
    assert "is away in acme until" in out.getvalue() and "admin@acme.test" in out.getvalue()
    member = Membership.objects.get(tenant=agents.a.tenant, user=agents.a.operator)
    assert member.away_at() and member.delegate.user.email == "admin@acme.test"
    with pytest.raises(CommandError, match="same tenant|not a member"):
        call_command(
            "members", "away", "operator@acme.test", "--tenant", "acme", "--until", until,
            "--delegate", "operator@globex.test",
        )  # fmt: skip
    with pytest.raises(CommandError, match="not a time"):
        call_command("members", "away", "operator@acme.test", "--tenant", "acme", "--until", "soon")
    call_command("members", "back", "operator@acme.test", "--tenant", "acme", stdout=out)
    member.refresh_from_db()
    assert not member.away_at()


def away_with(side, delegate_email: str, role: str = "operator") -> None:
    put(side.client_for(getattr(side, role)), {"until": week(), "delegate": delegate_email})


def test_the_delegate_decides_and_the_receipt_and_audit_say_by_b_for_a(agents, held_under):
    away_with(agents.a, "admin@acme.test")
    held = held_under(agents.a, {"action": "approve"})
    decide(held, by="user:admin@acme.test", approved=True, reason="for the operator")
    receipt = Receipt.objects.get(effect_public_id=held.public_id)
    assert (receipt.decider, receipt.on_behalf_of) == (
        "user:admin@acme.test",
        "user:operator@acme.test",
    )
    audit = AuditEvent.objects.get(action="approved", interaction=held)
    assert (audit.actor, audit.detail["onBehalfOf"]) == (
        "user:admin@acme.test",
        "user:operator@acme.test",
    )


def test_a_delegate_without_the_right_cannot_approve_for_someone_who_could(agents, held_under):
    # Only operators decide; the operator's delegate is an admin, who may not.
    away_with(agents.a, "admin@acme.test")
    held = held_under(agents.a, {"action": "approve", "approvers": ["operator"]})
    with pytest.raises(DeciderRefused, match="Only operators"):
        decide(held, by="user:admin@acme.test", role="admin", approved=True)
    held.refresh_from_db()
    assert held.state == Interaction.State.OPEN


def test_a_quorum_counts_a_delegate_once(agents, held_under):
    membership_add(tenant=agents.a.tenant, email="op2@acme.test", role="operator", actor="t")
    away_with(agents.a, "op2@acme.test")
    held = held_under(
        agents.a, {"action": "approve", "approvers": ["operator", "admin"], "required": 2}
    )
    assert decide(held, by="user:op2@acme.test", approved=True).state == "open"
    # Approving again "for" the away operator is the same person: refused.
    with pytest.raises(DeciderRefused, match="approved this already"):
        decide(held, by="user:op2@acme.test", approved=True)
    closed = decide(held, by="user:admin@acme.test", role="admin", approved=True)
    assert closed.state == Interaction.State.ANSWERED
    assert [a["by"] for a in closed.approvals] == ["user:op2@acme.test", "user:admin@acme.test"]


def decide(interaction, *, by: str, role: str = "operator", **answer):
    """A member's decision on the page, as the member they are (their membership)."""
    member = Membership.objects.get(tenant=interaction.tenant, user__email=by.removeprefix("user:"))
    return flow_answer(
        tenant=interaction.tenant,
        interaction_id=interaction.public_id,
        answer=answer,
        by=by,
        via="page",
        decider=Decider.of_member(member),
    )
