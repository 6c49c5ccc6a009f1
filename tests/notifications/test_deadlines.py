"""Deadlines: a policy rule's ``expires``, ``warn`` and ``on_expiry`` are steps of the
ladder engine (warnings before the deadline, an outcome at it); an operator extends an open
item (REST; bounded, audited, the caller told); every timer fires once, however often the
beat runs (a restarted worker runs it again)."""

from datetime import timedelta

import pytest
from django.core import mail

from integrations.webhook.transport import webhook_event
from notifications.models import Delivery, LadderStep
from notifications.services import ladders_advance
from runtime.agents.agent_models import DemoRecord
from runtime.decisions.decision_models import Interaction
from runtime.decisions.interaction_state import interactions_expire
from runtime.kernel import extensions as ext
from runtime.kernel.task_models import AuditEvent, TaskState
from runtime.policy.checks import policy_rule_problems
from runtime.policy.ladders import steps_parse
from tests.core import decide, run

pytestmark = pytest.mark.django_db

WARNED = {"action": "approve", "expires": "2h", "warn": ["30m", "5m"]}


@pytest.fixture
def mailed(agents, notify, channel):
    """An e-mail channel to the tenant's operators and admins."""
    channel(agents.a.tenant, "ops mail", "email", email_roles=["operator", "admin"])


def advance(capture, at) -> int:
    with capture(execute=True):
        return ladders_advance(now=at)


def expire(capture, at) -> int:
    with capture(execute=True):
        return interactions_expire(now=at)


def last_progress(interaction) -> dict:
    interaction.task.refresh_from_db()
    return interaction.task.status_ext[ext.INTERACTIONS]["progress"]


def test_the_deadline_syntax_is_one_for_ladders_and_rules():
    warn, expire_step = steps_parse(["warn 30m before expiry", "expire after 2h, then escalate"])
    assert (warn["action"], warn["seconds"], warn["before"]) == ("warn", 1800, "30m")
    assert expire_step["on_expiry"] == {"action": "escalate", "to": ["admin"]}
    mapping = steps_parse(
        [
            {"before": "10m", "action": "warn"},
            {
                "after": "1h",
                "action": "expire",
                "on_expiry": {"action": "escalate", "to": ["operator"], "expires": "10m"},
            },
        ]
    )
    assert mapping[1]["on_expiry"] == {"action": "escalate", "to": ["operator"], "expires": "10m"}
    # What a rule may not say: approve on expiry without risk: low, a warning that is no
    # duration, a deadline on a call that is never held.
    entry = "deploy/deploy_build"
    assert policy_rule_problems({entry: {"action": "approve", "on_expiry": "approve"}}) == [
        ([entry, "on_expiry"], "approve on expiry only where the rule sets risk: low")
    ]
    assert policy_rule_problems({entry: {"action": "approve", "warn": "soon"}})[0][0] == [
        entry,
        "warn",
    ]
    assert policy_rule_problems({entry: {"action": "allow", "expires": "2m"}})[0][0] == [
        entry,
        "expires",
    ]
    assert not policy_rule_problems(
        {entry: {"action": "approve", "risk": "low", "expires": "2m", "on_expiry": "approve"}}
    )


def test_a_warned_item_is_extended_and_decided_in_time(
    agents, held_under, mailed, django_capture_on_commit_callbacks
):
    capture = django_capture_on_commit_callbacks
    with capture(execute=True):
        held = held_under(agents.a, WARNED)
    deadline = held.expires_at
    assert timedelta(hours=2) - (deadline - held.created_at) < timedelta(seconds=5)
    mail.outbox.clear()

    # Not yet: 31 minutes before. Then the 30-minute warning, once, however often the beat
    # runs (a restarted worker's beat runs it again).
    assert advance(capture, deadline - timedelta(minutes=31)) == 0
    assert advance(capture, deadline - timedelta(minutes=29)) == 1
    assert advance(capture, deadline - timedelta(minutes=29)) == 0
    assert advance(capture, deadline - timedelta(minutes=20)) == 0
    warned = LadderStep.objects.get(interaction=held)
    assert warned.action == "warn"
    assert AuditEvent.objects.filter(action="warned", interaction=held).count() == 1
    subjects = [m.subject for m in mail.outbox]
    assert len(subjects) == 2 and all("Expires in 29 min" in s for s in subjects), subjects

    # An operator extends it by 30 minutes over REST: audited, the channels told, the caller
    # sees the new deadline on its task (a status update).
    client = agents.a.client_for(agents.a.operator)
    events_before = held.task.events.count()
    with capture(execute=True):
        response = client.post(
            f"/api/v1/interactions/{held.public_id}/extend",
            {"by": "30m"},
            content_type="application/json",
        )
    assert response.status_code == 200, response.content
    held.refresh_from_db()
    assert held.expires_at == deadline + timedelta(minutes=30)
    extended = AuditEvent.objects.get(action="extended", interaction=held)
    assert (extended.actor, extended.via) == ("user:operator@acme.test", "rest")
    assert Delivery.objects.filter(interaction=held, event="extended").count() == 1
    assert held.task.events.count() == events_before + 1
    progress = last_progress(held)
    assert progress["expiresAt"].startswith(held.expires_at.strftime("%Y-%m-%dT%H:%M"))
    held.task.refresh_from_db()
    assert held.task.state == TaskState.AUTH_REQUIRED
    assert held.task.status_message["parts"][1]["text"] == progress["text"]

    # The moved deadline warns again, once.
    assert advance(capture, held.expires_at - timedelta(minutes=29)) == 1
    assert advance(capture, held.expires_at - timedelta(minutes=29)) == 0
    # The old deadline passes: nothing expires. The item is decided in time.
    assert expire(capture, deadline + timedelta(minutes=1)) == 0
    decided = decide(held, approved=True, reason="in time")
    assert decided.state == Interaction.State.ANSWERED
    assert run(held.task).state == TaskState.COMPLETED


def test_extending_is_bounded_and_only_for_who_may_decide(agents, held_under, settings):
    settings.INTERACTION_EXTEND_MAX_SECONDS = 3600
    held = held_under(agents.a, WARNED)
    url = f"/api/v1/interactions/{held.public_id}/extend"
    operator = agents.a.client_for(agents.a.operator)

    def extend(client, by):
        return client.post(url, {"by": by}, content_type="application/json")

    assert extend(operator, "forever").status_code == 400
    assert extend(operator, "45m").status_code == 200
    too_long = extend(operator, "30m")
    assert too_long.status_code == 400 and "15 left" in too_long.json()["detail"]
    assert extend(agents.a.client_for(agents.a.viewer), "1m").status_code == 403
    assert extend(agents.b.client_for(agents.b.operator), "1m").status_code == 404
    held.refresh_from_db()
    assert (held.request["deadline"]["extended"], held.request["deadline"]["round"]) == (2700, 1)
    assert AuditEvent.objects.filter(action="extended").count() == 1
    decide(held, approved=False, reason="no")
    assert extend(operator, "1m").status_code == 409


def test_on_expiry_escalate_moves_the_item_and_its_deadline_once(
    agents, held_under, mailed, django_capture_on_commit_callbacks
):
    capture = django_capture_on_commit_callbacks
    rule = {
        "action": "approve",
        "approvers": ["operator"],
        "expires": "2m",
        "on_expiry": {"action": "escalate", "to": ["admin"], "expires": "10m"},
    }
    with capture(execute=True):
        held = held_under(agents.a, rule)
    first = held.expires_at
    passed = first + timedelta(seconds=1)
    # Escalated, not denied: admins may decide it now, with a new deadline of 10 minutes.
    assert expire(capture, passed) == 1
    held.refresh_from_db()
    assert held.state == Interaction.State.OPEN
    assert held.widened_to == ["admin"]
    assert held.expires_at == passed + timedelta(minutes=10)
    escalated = AuditEvent.objects.get(action="expiry_escalated", interaction=held)
    assert escalated.detail["roles"] == ["admin"]
    assert Delivery.objects.filter(interaction=held, event="escalated").exists()
    assert "admin@acme.test" in {m.to[0] for m in mail.outbox if "escalated" in m.subject}
    held.task.refresh_from_db()
    assert held.task.state == TaskState.AUTH_REQUIRED
    # The same sweep again (a restarted worker): nothing more happens.
    assert expire(capture, passed) == 0
    # Past the new deadline: denied as expired (an item escalates once).
    assert expire(capture, held.expires_at + timedelta(seconds=1)) == 1
    held.refresh_from_db()
    assert held.state == Interaction.State.EXPIRED
    assert AuditEvent.objects.filter(action="expiry_escalated").count() == 1


def test_an_escalated_item_is_decided_by_an_admin(agents, held_under):
    held = held_under(
        agents.a,
        {"action": "approve", "approvers": ["operator"], "expires": "2m", "on_expiry": "escalate"},
    )
    assert interactions_expire(now=held.expires_at + timedelta(seconds=1)) == 1
    held.refresh_from_db()
    # As long again as the first deadline.
    assert held.request["deadline"]["first"] == 120
    decided = decide(held, by="user:admin@acme.test", approved=True)
    assert decided.state == Interaction.State.ANSWERED


@pytest.mark.parametrize("allowed", [False, True])
def test_approve_on_expiry_only_with_risk_low_and_the_tenants_leave(agents, held_under, allowed):
    agents.a.tenant.expiry_may_approve = allowed
    agents.a.tenant.save(update_fields=["expiry_may_approve"])
    held = held_under(
        agents.a, {"action": "approve", "risk": "low", "expires": "2m", "on_expiry": "approve"}
    )
    assert interactions_expire(now=held.expires_at + timedelta(seconds=1)) == 1
    held.refresh_from_db()
    assert held.answered_by == "system:expiry"
    assert held.answer["approved"] is allowed
    task = run(held.task)
    assert task.state == TaskState.COMPLETED
    assert DemoRecord.objects.filter(effect_id=held.public_id).exists() is allowed


def test_the_webhook_events_are_named_for_the_deadline():
    now = None
    for event in ("expiring", "extended", "escalated"):
        body = webhook_event({"event": event, "title": "t"}, now or _now())
        assert body["type"] == f"interaction.{event}"


def _now():
    from django.utils import timezone

    return timezone.now()
