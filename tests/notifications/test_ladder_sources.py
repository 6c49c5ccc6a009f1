"""Ladders from AGENT.md and from Django admin: which one an item climbs, driven by beat with
a controlled clock, each step notified and audited."""

from datetime import timedelta

import pytest
from django.core import mail
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from notifications.models import Ladder, LadderStep
from notifications.services import ladder_for, ladder_save, ladders_advance
from runtime.agents.agent_models import Agent
from runtime.decisions.decision_models import Interaction
from runtime.decisions.interaction_state import interactions_expire
from runtime.kernel.task_models import AuditEvent
from runtime.policy.ladders import ladder_parse
from tests.core import start
from tests.notifications.conftest import HOLD

pytestmark = pytest.mark.django_db


@pytest.fixture
def deployer(agents, notify, channel):
    channel(agents.a.tenant, "ops mail", "email", email_roles=["operator", "admin"])
    return Agent.objects.get(tenant=agents.a.tenant, slug="deployer")


def file_ladder(agent: Agent, value) -> None:
    """What load_agents stores for an AGENT.md ``ladder``."""
    agent.ladder = ladder_parse(value)
    agent.save(update_fields=["ladder"])


def hold(side, capture, agent="deployer", text=HOLD) -> Interaction:
    with capture(execute=True):
        task = start(side, agent, text)
    mail.outbox.clear()
    return Interaction.objects.get(task=task, state="open")


def advance(capture, at) -> int:
    with capture(execute=True):
        return ladders_advance(now=at)


def test_an_agent_md_ladder_reminds_escalates_and_expires_by_beat(
    agents, deployer, django_capture_on_commit_callbacks
):
    capture = django_capture_on_commit_callbacks
    file_ladder(
        deployer,
        [
            "remind after 15m",
            "escalate to admins after 1h, widen to admins",
            "expire after 2h",
        ],
    )
    held = hold(agents.a, capture)
    opened = held.created_at
    assert held.expires_at - opened == pytest.approx(timedelta(hours=2), abs=timedelta(seconds=2))

    assert advance(capture, opened + timedelta(minutes=14)) == 0
    assert advance(capture, opened + timedelta(minutes=15)) == 1
    assert sorted(m.to[0] for m in mail.outbox) == ["admin@acme.test", "operator@acme.test"]
    reminded = AuditEvent.objects.get(action="reminded")
    assert (reminded.actor, reminded.detail["ladder"], reminded.detail["step"]) == (
        "system:ladder",
        "AGENT.md",
        1,
    )

    mail.outbox.clear()
    assert advance(capture, opened + timedelta(hours=1)) == 1
    assert [m.to for m in mail.outbox] == [["admin@acme.test"]]  # the step's roles only
    escalated = AuditEvent.objects.get(action="escalated")
    assert escalated.detail["roles"] == ["admin"]
    # Carried for the approvers' rules, which widen who may decide.
    assert escalated.detail["widen_to"] == "admin"

    # The expire step is no beat step of the ladder: the expiry it set closes the item.
    assert advance(capture, opened + timedelta(hours=2)) == 0
    assert interactions_expire(now=opened + timedelta(hours=2) - timedelta(seconds=5)) == 0
    assert interactions_expire(now=opened + timedelta(hours=2, seconds=5)) == 1
    assert AuditEvent.objects.filter(action="expired", interaction=held).exists()
    assert list(LadderStep.objects.values_list("step", "action")) == [
        (1, "remind"),
        (2, "escalate"),
    ]


# Each ladder is told apart by its first step's time.
FILE_AGENT = ["remind after 1m"]
FILE_TOOL = ["remind after 2m"]
FILE_SERVER = ["remind after 3m"]


@pytest.mark.parametrize(
    "file_value, admin, expected",
    [
        ({"steps": FILE_AGENT}, [], ("AGENT.md", "1m")),
        # Same scope (the agent): Django admin's wins.
        ({"steps": FILE_AGENT}, [("agent", "", "10m")], ("admin", "10m")),
        # The file's tool ladder is more specific than the admin's agent ladder...
        ({"steps": FILE_AGENT, "tools": {"deploy/deploy_build": FILE_TOOL}}, [("agent", "", "10m")], ("AGENT.md", "2m")),
        # ...and "server/tool" than "server".
        ({"tools": {"deploy": FILE_SERVER, "deploy/deploy_build": FILE_TOOL}}, [], ("AGENT.md", "2m")),
        ({"tools": {"deploy": FILE_SERVER}}, [("agent", "", "10m")], ("AGENT.md", "3m")),
        # Same scope (the agent's tool): Django admin's wins.
        ({"tools": {"deploy/deploy_build": FILE_TOOL}}, [("agent", "deploy/deploy_build", "11m")], ("admin", "11m")),
        # The tenant's own ladders (every agent) are less specific than any agent's.
        ({"steps": FILE_AGENT}, [(None, "", "12m"), (None, "deploy/deploy_build", "13m")], ("AGENT.md", "1m")),
        ({}, [(None, "", "12m"), (None, "deploy/deploy_build", "13m")], ("admin", "13m")),
        ({}, [(None, "", "12m")], ("admin", "12m")),
        ({}, [], None),
    ],
    ids=[
        "file-agent",
        "admin-agent-over-file-agent",
        "file-tool-over-admin-agent",
        "file-tool-over-file-server",
        "file-server-over-admin-agent",
        "admin-agent-tool-over-file-tool",
        "file-agent-over-admin-tenant-and-tool",
        "admin-tool-over-admin-tenant",
        "admin-tenant",
        "none",
    ],
)  # fmt: skip
def test_the_most_specific_ladder_wins_and_admin_wins_at_the_same_scope(
    agents, deployer, django_capture_on_commit_callbacks, file_value, admin, expected
):
    if file_value:
        file_ladder(deployer, file_value)
    for agent, tool, after in admin:
        ladder_save(
            tenant=agents.a.tenant,
            agent=deployer if agent else None,
            tool=tool,
            steps=[f"remind after {after}"],
        )
    held = hold(agents.a, django_capture_on_commit_callbacks)
    found = ladder_for(held, list(Ladder.objects.filter(tenant=agents.a.tenant)))
    if expected is None:
        assert found is None
    else:
        assert (found[0], found[1][0]["after"]) == expected


def test_a_tool_ladder_never_applies_to_a_question(
    agents, notify, django_capture_on_commit_callbacks
):
    reviewer = Agent.objects.get(tenant=agents.a.tenant, slug="code-reviewer")
    file_ladder(reviewer, {"steps": FILE_AGENT})
    question = hold(agents.a, django_capture_on_commit_callbacks, "code-reviewer", "review it")
    assert question.kind == "question"
    assert ladder_for(question, [])[0] == "AGENT.md"
    ladder_save(tenant=agents.a.tenant, tool="deploy/deploy_build", steps=["remind after 1m"])
    reviewer.ladder = {}
    reviewer.save(update_fields=["ladder"])
    question.task.agent.refresh_from_db()
    assert ladder_for(question, list(Ladder.objects.all())) is None


def test_deleting_the_admin_ladder_brings_the_files_back_at_the_next_beat(
    agents, deployer, django_capture_on_commit_callbacks
):
    capture = django_capture_on_commit_callbacks
    file_ladder(deployer, ["escalate to operators after 30m"])
    admin = ladder_save(tenant=agents.a.tenant, agent=deployer, steps=["remind after 10m"])
    first = hold(agents.a, capture)
    assert advance(capture, first.created_at + timedelta(hours=1)) == 1
    taken = AuditEvent.objects.get(interaction=first)
    assert (taken.action, taken.detail["ladder"], taken.detail["after"]) == (
        "reminded",
        "admin",
        "10m",
    )

    admin.delete()
    second = hold(agents.a, capture, text="deploy build b-2 to staging")
    assert advance(capture, second.created_at + timedelta(hours=1)) == 1
    taken = AuditEvent.objects.get(interaction=second)
    assert (taken.action, taken.detail["ladder"], taken.detail["roles"]) == (
        "escalated",
        "AGENT.md",
        ["operator"],
    )
    # The other tenant's deployer has no ladder: nothing happened there.
    assert not AuditEvent.objects.filter(tenant_id=agents.b.tenant.pk).exists()


def test_django_admin_ladders_take_sentences_but_no_expire_step(agents):
    ladder = ladder_save(
        tenant=agents.a.tenant, steps=["remind after 15m", "escalate to admins after 1h"]
    )
    assert ladder.steps == [
        {"after": "15m", "action": "remind", "roles": []},
        {"after": "1h", "action": "escalate", "roles": ["admin"]},
    ]
    with pytest.raises(ValueError, match="step 2: action expiry is the agent's"):
        ladder_save(tenant=agents.a.tenant, steps=["remind after 15m", "expire after 1h"])


def test_a_ladder_stored_around_its_checks_stops_only_its_own_items(
    agents, deployer, django_capture_on_commit_callbacks
):
    capture = django_capture_on_commit_callbacks
    Agent.objects.filter(pk=deployer.pk).update(ladder={"steps": ["remind whenever"]})
    broken = hold(agents.a, capture)
    reviewer = Agent.objects.get(tenant=agents.a.tenant, slug="code-reviewer")
    file_ladder(reviewer, ["remind after 1m"])
    question = hold(agents.a, capture, "code-reviewer", "review it")
    assert advance(capture, timezone.now() + timedelta(hours=1)) == 1
    assert LadderStep.objects.get().interaction_id == question.pk
    assert not LadderStep.objects.filter(interaction=broken).exists()


def test_a_beat_reads_in_a_fixed_number_of_queries_however_many_items_wait(
    agents, deployer, django_capture_on_commit_callbacks
):
    capture = django_capture_on_commit_callbacks
    file_ladder(deployer, ["remind after 1h", "escalate to admins after 2h"])
    ladder_save(tenant=agents.a.tenant, tool="github/open_pr", steps=["remind after 1h"])

    def queries_of_a_quiet_beat() -> int:
        with CaptureQueriesContext(connection) as queries:
            assert advance(capture, timezone.now()) == 0
        return len(queries)

    for build in range(3):
        hold(agents.a, capture, text=f"deploy build q-{build} to staging")
    few = queries_of_a_quiet_beat()
    for build in range(3, 9):
        hold(agents.a, capture, text=f"deploy build q-{build} to staging")
    # (One of them finds the tenants whose open approvals carry their policy rule's ladder.)
    assert queries_of_a_quiet_beat() == few <= 7
