"""Reminders and escalation, driven by the beat service with a controlled clock."""

from datetime import timedelta

import pytest
from django.core import mail
from django.db import connection
from django.test.utils import CaptureQueriesContext

from notifications.digests import digests_send
from notifications.models import Delivery, DigestItem, Ladder, LadderStep
from notifications.services import ladder_save, ladders_advance, preference_set
from runtime.agents.agent_models import Agent
from runtime.decisions.decision_models import Interaction
from runtime.decisions.interaction_state import interactions_expire
from runtime.kernel.task_models import AuditEvent
from tests.core import decide, start
from tests.notifications.conftest import HOLD

pytestmark = pytest.mark.django_db

LADDER = [
    {"after": "15m", "action": "remind"},
    {"after": "1h", "action": "escalate", "roles": ["admin"]},
]


@pytest.fixture
def held(agents, notify, channel, django_capture_on_commit_callbacks):
    channel(agents.a.tenant, "ops mail", "email", email_roles=["operator"])
    deployer = Agent.objects.get(tenant=agents.a.tenant, slug="deployer")
    ladder_save(tenant=agents.a.tenant, agent=deployer, steps=LADDER)
    with django_capture_on_commit_callbacks(execute=True):
        start(agents.a, "deployer", HOLD)
    mail.outbox.clear()
    return Interaction.objects.get(tenant=agents.a.tenant, state="open")


def advance(capture, at) -> int:
    with capture(execute=True):
        return ladders_advance(now=at)


def test_reminder_then_escalation_each_notified_and_audited(
    held, agents, django_capture_on_commit_callbacks
):
    capture, opened = django_capture_on_commit_callbacks, held.created_at
    assert advance(capture, opened + timedelta(minutes=14)) == 0
    assert not mail.outbox and not AuditEvent.objects.exists()

    assert advance(capture, opened + timedelta(minutes=15)) == 1
    assert [m.to for m in mail.outbox] == [["operator@acme.test"]]
    assert "still waits" in mail.outbox[0].subject
    reminded = AuditEvent.objects.get()
    assert (reminded.action, reminded.actor, reminded.via) == (
        "reminded",
        "system:ladder",
        "ladder",
    )
    assert reminded.interaction_id == held.pk and reminded.detail["step"] == 1

    # The same beat again, or a second beat at once: the step is taken once.
    assert advance(capture, opened + timedelta(minutes=20)) == 0
    assert len(mail.outbox) == 1

    page = agents.a.client_for(agents.a.operator).get("/inbox/")
    assert "reminded" in page.content.decode()

    assert advance(capture, opened + timedelta(hours=1)) == 1
    assert [m.to for m in mail.outbox[1:]] == [["admin@acme.test"]]
    assert "escalated" in mail.outbox[1].subject
    escalated = AuditEvent.objects.filter(action="escalated").get()
    assert escalated.detail["roles"] == ["admin"]
    assert list(Delivery.objects.order_by("step").values_list("event", "step")) == [
        ("opened", 0),
        ("reminder", 1),
        ("escalation", 2),
    ]
    with CaptureQueriesContext(connection) as queries:
        page = agents.a.client_for(agents.a.operator).get("/inbox/")
    assert "escalated to admin" in page.content.decode()
    # Read with the page's rows, not in a query of its own.
    assert not [q for q in queries if q["sql"].startswith('SELECT "notifications_ladderstep"')]
    detail = agents.a.client_for(agents.a.operator).get(f"/inbox/{held.public_id}/")
    assert "Step 2: escalated to admin" in detail.content.decode()

    # Then the expiry (the agent's interactionTtlSeconds) closes it, audited as ever; the
    # ladder has nothing left to do for a closed item.
    assert interactions_expire(now=held.expires_at + timedelta(seconds=1)) == 1
    assert AuditEvent.objects.filter(action="expired", interaction=held).exists()
    assert advance(capture, held.expires_at + timedelta(hours=1)) == 0


def test_a_decided_item_climbs_no_further(held, django_capture_on_commit_callbacks):
    decide(held, approved=False, reason="not now")
    assert advance(django_capture_on_commit_callbacks, held.created_at + timedelta(days=1)) == 0
    assert not LadderStep.objects.exists() and not mail.outbox


def test_a_tool_ladder_wins_over_the_agent_ladder_and_other_tenants_are_untouched(
    held, agents, django_capture_on_commit_callbacks
):
    deployer = Agent.objects.get(tenant=agents.a.tenant, slug="deployer")
    ladder_save(
        tenant=agents.a.tenant,
        agent=deployer,
        tool="deploy/deploy_build",
        steps=[{"after": "5m", "action": "escalate", "roles": ["operator", "admin"]}],
    )
    ladder_save(tenant=agents.b.tenant, steps=[{"after": "1m", "action": "remind"}])
    assert advance(django_capture_on_commit_callbacks, held.created_at + timedelta(minutes=5)) == 1
    assert sorted(m.to[0] for m in mail.outbox) == ["admin@acme.test", "operator@acme.test"]
    assert LadderStep.objects.get().action == "escalate"
    assert Ladder.objects.count() == 3


@pytest.mark.parametrize(
    "steps, problem",
    [
        ([], "non-empty"),
        ([{"after": "soon", "action": "remind"}], "not a duration"),
        ([{"after": "1h", "action": "page"}], "action must be"),
        ([{"after": "1h", "action": "escalate", "roles": ["root"]}], "roles must be"),
        ([{"after": "1h", "action": "remind"}, {"after": "5m", "action": "remind"}], "order"),
    ],
)
def test_a_bad_ladder_is_refused_with_the_reason(agents, steps, problem):
    with pytest.raises(ValueError, match=problem):
        ladder_save(tenant=agents.a.tenant, steps=steps)
    assert not Ladder.objects.exists()


def test_a_member_who_turned_email_off_gets_none(
    agents, notify, channel, django_capture_on_commit_callbacks
):
    channel(agents.a.tenant, "ops", "email", email_roles=["operator", "admin"])
    operator = agents.a.operator.memberships.get()
    preference_set(membership=operator, email_enabled=False, digest_minutes=0)
    with django_capture_on_commit_callbacks(execute=True):
        start(agents.a, "deployer", HOLD)
    assert [m.to for m in mail.outbox] == [["admin@acme.test"]]


def two_held_for_a_digest(agents, channel, capture) -> None:
    """The operator chose a 30-minute digest; a staging and a production deploy are held."""
    channel(agents.a.tenant, "ops", "email", email_roles=["operator"])
    operator = agents.a.operator.memberships.get()
    preference_set(membership=operator, email_enabled=True, digest_minutes=30)
    with capture(execute=True):
        start(agents.a, "deployer", HOLD)
        start(agents.a, "deployer", "deploy build b-2 to production")


def test_a_member_who_chose_a_digest_gets_one_every_n_minutes(
    agents, notify, channel, django_capture_on_commit_callbacks
):
    two_held_for_a_digest(agents, channel, django_capture_on_commit_callbacks)
    assert not mail.outbox  # held for the digest
    assert Delivery.objects.filter(state="delivered").count() == 2

    first = Interaction.objects.earliest("created_at").created_at
    assert digests_send(now=first + timedelta(minutes=1)) == 1
    assert [m.to for m in mail.outbox] == [["operator@acme.test"]]
    assert "2 item(s)" in mail.outbox[0].subject
    assert mail.outbox[0].body.count("/inbox/") == 2
    # Each item with its summary and arguments: a staging and a production deploy differ.
    assert "Deploy b-2 to production" in mail.outbox[0].body
    assert '"environment": "staging"' in mail.outbox[0].body

    # Nothing new: no digest; something new within the 30 minutes waits for them to pass.
    assert digests_send(now=first + timedelta(minutes=2)) == 0
    with django_capture_on_commit_callbacks(execute=True):
        start(agents.a, "deployer", "deploy build b-3 to staging")
    assert digests_send(now=first + timedelta(minutes=20)) == 0
    assert digests_send(now=first + timedelta(minutes=31)) == 1
    assert "1 item(s)" in mail.outbox[1].subject


def test_a_digest_lists_only_what_still_waits(
    agents, notify, channel, django_capture_on_commit_callbacks
):
    two_held_for_a_digest(agents, channel, django_capture_on_commit_callbacks)
    staging, production = Interaction.objects.order_by("created_at")
    decide(staging, by="user:admin@acme.test", approved=False)
    assert digests_send(now=production.created_at + timedelta(minutes=1)) == 1
    [digest] = mail.outbox
    assert "1 item(s)" in digest.subject and digest.body.count("/inbox/") == 1
    assert "Deploy b-2 to production" in digest.body and "staging" not in digest.body
    assert "1 more were decided or closed before this digest." in digest.body
    # Nothing of it waits any more: no digest at all, and nothing held back for the next.
    decide(production, by="user:admin@acme.test", approved=False)
    with django_capture_on_commit_callbacks(execute=True):
        start(agents.a, "deployer", "deploy build b-3 to staging")
    Interaction.objects.filter(state="open").update(state="expired")
    assert digests_send(now=production.created_at + timedelta(minutes=40)) == 0
    assert len(mail.outbox) == 1
    assert not DigestItem.objects.filter(sent_at__isnull=True).exists()


def test_one_ladder_per_scope_holds_on_every_database(agents):
    """The tenant-wide ladder (no agent) is unique too: the constraint it had was one SQLite
    does not create (nulls_distinct=False, W047 at every start), so two could be saved."""
    from django.core import checks
    from django.core.exceptions import ValidationError
    from django.db import IntegrityError, transaction

    tenant = agents.a.tenant
    deployer = Agent.objects.get(tenant=tenant, slug="deployer")
    Ladder.objects.create(tenant=tenant, agent=None, tool="", steps=LADDER)
    Ladder.objects.create(tenant=tenant, agent=deployer, tool="", steps=LADDER)
    for agent in (None, deployer):
        with pytest.raises(IntegrityError), transaction.atomic():
            Ladder.objects.create(tenant=tenant, agent=agent, tool="", steps=LADDER)
        # Django admin's form is told before the database is asked.
        with pytest.raises(ValidationError, match="a ladder for this tool already"):
            Ladder(tenant=tenant, agent=agent, tool="", steps=LADDER).full_clean()
    # Another tool, another tenant: other scopes.
    Ladder.objects.create(tenant=tenant, agent=None, tool="deploy/deploy_build", steps=LADDER)
    Ladder.objects.create(tenant=agents.b.tenant, agent=None, tool="", steps=LADDER)
    ladder_save(tenant=tenant, steps=LADDER[:1])  # replaces the tenant's own, as before
    assert Ladder.objects.get(tenant=tenant, agent=None, tool="").steps == [
        {"after": "15m", "action": "remind", "roles": []}
    ]
    found = checks.run_checks(databases=["default"])
    assert not [c for c in found if c.id == "models.W047"]
