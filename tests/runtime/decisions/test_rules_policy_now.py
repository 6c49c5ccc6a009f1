"""A standing rule allows a call only while its maker could approve that call under the policy
rule that holds it now, and only calls held by the policy rule it was made under
(docs/how-to/policy.md, "Standing rules"): an operator's rule never lets an admin-only call run,
before or after the
policy is tightened; nor once its maker left a group, was demoted or left, nor once the rule
asks for stages, more than one person or is ``risk: high``. A rule that no longer applies
says why, once, on the rule and in the audit; the call is held for people as normal."""

import importlib

import pytest

from runtime.decisions.decision_models import Effect, Interaction, StandingRule
from runtime.decisions.standing_rules import rule_create
from runtime.kernel.errors import DeciderRefused
from runtime.kernel.task_models import AuditEvent, TaskState
from tenants.models import ApproverGroup, Membership
from tests.core import decide, flow_answer, member, run, send

pytestmark = pytest.mark.django_db

# Production deploys are for admins; anything else for the default approvers.
ADMIN_ONLY = [
    {
        "title": "Production",
        "when": [{"field": "environment", "op": "equals", "value": "production"}],
        "action": "approve",
        "approvers": ["admin"],
    },
    {"action": "approve"},
]


@pytest.fixture
def env_deployer(deployer):
    """The agent "dep", deploying rel-1 to the environment named by the message's text."""
    return lambda policy: deployer(policy, build="rel-1", environment="{{ text }}")


def rule_from_approval(side, environment="staging", role="operator", task=None) -> StandingRule:
    """``role`` approves a held deploy to ``environment`` (``task``'s, when already held) and
    makes a rule with no conditions, for any caller, from that approval."""
    task = task or run(send(side, "dep", environment))
    interaction = Interaction.objects.get(task=task, state="open")
    decider = member(side, role)
    flow_answer(
        tenant=side.tenant,
        interaction_id=interaction.public_id,
        answer={"approved": True},
        by=decider.subject,
        via="page",
        decider=decider,
    )
    rule = rule_create(
        tenant=side.tenant,
        interaction_id=interaction.public_id,
        decider=decider,
        caller_only=False,
        conditions=[],
        duration="1d",
    )
    assert run(task).state == TaskState.COMPLETED
    return rule


def held_for_people(side, environment="staging") -> Interaction:
    """A call no rule allowed: the task waits, its call held, an approval open."""
    task = run(send(side, "dep", environment))
    assert task.state == TaskState.AUTH_REQUIRED
    effect = Effect.objects.get(task=task)
    assert effect.state == Effect.State.HELD and effect.approved_by == ""
    return Interaction.objects.get(task=task, state="open")


def allowed_by(side, rule, environment="staging") -> None:
    task = run(send(side, "dep", environment))
    assert task.state == TaskState.COMPLETED
    assert Effect.objects.get(task=task).approved_by == f"rule:{rule.public_id}"


def tighten(agent, policy) -> None:
    agent.tool_policy = {"deploy/deploy_build": policy}
    agent.save(update_fields=["tool_policy"])


def test_an_operators_rule_never_lets_an_admin_only_call_run(agents, env_deployer):
    side = agents.a
    env_deployer(ADMIN_ONLY)
    # The operator may not decide a production deploy ...
    production = held_for_people(side, "production")
    with pytest.raises(DeciderRefused, match="Only admins"):
        decide(production, by=side.operator.subject, approved=True)
    # ... so their rule, made on a staging deploy with no conditions, never allows one.
    rule = rule_from_approval(side, "staging")
    again = held_for_people(side, "production")
    assert again.approvers == ["admin"]
    assert rule.policy_rule["rule"] == 2 and rule.policy_rule["when"] == []
    assert not AuditEvent.objects.filter(action="allowed_by_rule").exists()
    # Not a rule that stopped applying: it still allows the staging deploys it was made for.
    allowed_by(side, rule, "staging")
    rule.refresh_from_db()
    assert rule.inapplicable_reason == "" and rule.uses == 1


def test_an_operators_rule_stops_when_its_policy_rule_is_tightened_to_admins(agents, env_deployer):
    side = agents.a
    agent = env_deployer(ADMIN_ONLY)
    rule = rule_from_approval(side, "staging")
    tighten(agent, [ADMIN_ONLY[0], {"action": "approve", "approvers": ["admin"]}])
    interaction = held_for_people(side, "staging")
    assert interaction.approvers == ["admin"]
    held_for_people(side, "staging")
    rule.refresh_from_db()
    assert "only admins may" in rule.inapplicable_reason
    assert rule.inapplicable_since is not None and rule.uses == 0
    # Said once, however many calls it no longer allows.
    said = AuditEvent.objects.get(action="rule_inapplicable")
    assert said.actor == f"rule:{rule.public_id}" and said.detail["rule"] == rule.public_id
    assert said.detail["reason"] == rule.inapplicable_reason
    assert (said.detail["server"], said.detail["tool"]) == ("deploy", "deploy_build")
    assert not AuditEvent.objects.filter(action="allowed_by_rule").exists()


def test_a_plain_entry_tightened_to_admins_stops_an_operators_rule(agents, env_deployer):
    side = agents.a
    agent = env_deployer("approve")
    rule = rule_from_approval(side)
    allowed_by(side, rule)
    tighten(agent, {"action": "approve", "approvers": ["admin"]})
    held_for_people(side)
    rule.refresh_from_db()
    assert "only admins may" in rule.inapplicable_reason


def test_an_admins_rule_still_applies_when_the_rule_is_tightened_to_admins(agents, env_deployer):
    side = agents.a
    agent = env_deployer("approve")
    rule = rule_from_approval(side, role="admin")
    tighten(agent, {"action": "approve", "approvers": ["admin"]})
    allowed_by(side, rule)
    rule.refresh_from_db()
    assert (rule.uses, rule.inapplicable_reason) == (1, "")


def test_a_rule_made_under_one_rule_of_an_entry_never_matches_calls_another_holds(
    agents, env_deployer
):
    side = agents.a
    # Both rules' calls are the operators' to decide: still, a rule made under the default
    # rule is no rule for production deploys, which the admin wrote a rule of their own for.
    env_deployer(
        [
            {**ADMIN_ONLY[0], "approvers": ["operator"]},
            {"action": "approve"},
        ]
    )
    rule = rule_from_approval(side, "staging")
    held = held_for_people(side, "production")
    assert held.state == "open" and held.kind == Interaction.Kind.APPROVAL
    allowed_by(side, rule, "staging")
    rule.refresh_from_db()
    assert rule.uses == 1  # the staging call only


def test_a_rule_whose_policy_rule_is_gone_says_so(agents, env_deployer):
    side = agents.a
    agent = env_deployer(ADMIN_ONLY)
    rule = rule_from_approval(side, "staging")
    # The admin splits the default rule: staging deploys are now held by a rule of their own.
    tighten(
        agent,
        [
            ADMIN_ONLY[0],
            {"when": [{"field": "environment", "op": "equals", "value": "staging"}]},
        ],
    )
    held_for_people(side, "staging")
    rule.refresh_from_db()
    assert "no longer in the policy" in rule.inapplicable_reason


@pytest.mark.parametrize(
    "now",
    [
        {"action": "approve", "required": 2},
        {"action": "approve", "risk": "high"},
        {
            "action": "approve",
            "stages": [{"approvers": ["operator"]}, {"approvers": ["operator"]}],
        },
    ],
    ids=["required-2", "risk-high", "stages"],
)
def test_a_rule_stops_when_its_policy_rule_asks_for_more_since(agents, env_deployer, now):
    side = agents.a
    agent = env_deployer("approve")
    rule = rule_from_approval(side, role="admin")
    tighten(agent, now)
    interaction = held_for_people(side)
    assert interaction.approvals_required == (1 if "risk" in now else 2)
    rule.refresh_from_db()
    assert rule.inapplicable_reason
    assert AuditEvent.objects.filter(action="rule_inapplicable").count() == 1


def test_a_rule_stops_when_its_maker_is_not_in_the_group_that_decides(agents, env_deployer):
    side = agents.a
    release = ApproverGroup.objects.create(tenant=side.tenant, slug="release")
    ApproverGroup.objects.create(tenant=side.tenant, slug="sre")
    operator = Membership.objects.get(tenant=side.tenant, user=side.operator)
    release.members.add(operator)
    agent = env_deployer({"action": "approve", "approvers": ["group:release"]})
    rule = rule_from_approval(side)
    allowed_by(side, rule)
    # The call's rule now names a group its maker is not in.
    tighten(agent, {"action": "approve", "approvers": ["group:sre"]})
    held_for_people(side)
    rule.refresh_from_db()
    assert "only members of group sre may" in rule.inapplicable_reason
    # Back to the maker's group, but they have left it.
    tighten(agent, {"action": "approve", "approvers": ["group:release"]})
    release.members.remove(operator)
    held_for_people(side)
    rule.refresh_from_db()
    assert "only members of group release may" in rule.inapplicable_reason
    # In the group again: the rule applies again, and no longer says it does not.
    release.members.add(operator)
    allowed_by(side, rule)
    rule.refresh_from_db()
    assert rule.inapplicable_reason == "" and rule.inapplicable_since is None
    assert AuditEvent.objects.filter(action="rule_inapplicable").count() == 2


@pytest.mark.parametrize("change", ["viewer", "removed", "deactivated"])
def test_a_rule_stops_when_its_maker_may_no_longer_decide(agents, env_deployer, change):
    side = agents.a
    env_deployer("approve")
    rule = rule_from_approval(side)
    operator = Membership.objects.get(tenant=side.tenant, user=side.operator)
    if change == "viewer":
        operator.role = Membership.Role.VIEWER
        operator.save(update_fields=["role"])
    elif change == "removed":
        operator.delete()
    else:
        side.operator.is_active = False
        side.operator.save(update_fields=["is_active"])
    held_for_people(side)
    rule.refresh_from_db()
    assert "user:operator@acme.test" in rule.inapplicable_reason
    assert AuditEvent.objects.filter(action="rule_inapplicable").count() == 1


def test_another_rule_that_still_applies_is_used(agents, env_deployer):
    side = agents.a
    agent = env_deployer("approve")
    first, second = run(send(side, "dep", "staging")), run(send(side, "dep", "staging"))
    by_operator = rule_from_approval(side, task=first)
    by_admin = rule_from_approval(side, role="admin", task=second)
    allowed_by(side, by_operator)
    tighten(agent, {"action": "approve", "approvers": ["admin"]})
    allowed_by(side, by_admin)
    by_operator.refresh_from_db()
    assert by_operator.inapplicable_reason and by_operator.uses == 1


def test_a_rule_made_before_its_policy_rule_was_recorded_never_matches_a_conditional_entry(
    agents, env_deployer
):
    side = agents.a
    agent = env_deployer("approve")
    rule = rule_from_approval(side)
    # As a rule made before rules recorded the policy rule they were made under.
    StandingRule.objects.filter(pk=rule.pk).update(policy_rule={})
    allowed_by(side, rule)
    tighten(agent, [ADMIN_ONLY[0], {"action": "approve"}])
    held_for_people(side, "staging")
    held_for_people(side, "production")
    # The maker is still asked about: a plain entry tightened stops it too.
    tighten(agent, {"action": "approve", "approvers": ["admin"]})
    held_for_people(side)
    rule.refresh_from_db()
    assert "only admins may" in rule.inapplicable_reason


def test_a_rule_whose_maker_was_not_recorded_allows_nothing_and_says_why(agents, env_deployer):
    side = agents.a
    env_deployer("approve")
    rule = rule_from_approval(side)
    StandingRule.objects.filter(pk=rule.pk).update(maker_kind="", maker_membership=None)
    held_for_people(side)
    rule.refresh_from_db()
    assert "who made it was not recorded" in rule.inapplicable_reason


def test_the_migration_gives_earlier_rules_their_policy_rule_and_maker(agents, env_deployer):
    from django.apps import apps

    from tenants.models import ApiToken
    from tenants.tokens import api_token_create

    backfill = importlib.import_module(
        "runtime.migrations.0028_standing_rule_policy_rule_maker"
    ).rules_backfill
    side = agents.a
    agent = env_deployer(ADMIN_ONLY)
    by_person = rule_from_approval(side, "staging")
    made_under = by_person.policy_rule
    bot, _ = api_token_create(
        tenant=side.tenant, subject="program:bot", name="bot", kind=ApiToken.Kind.OPERATOR
    )
    # An operator token acting as a member's subject: which of the two made the rule?
    api_token_create(
        tenant=side.tenant,
        subject="user:admin@acme.test",
        name="admin's bot",
        kind=ApiToken.Kind.OPERATOR,
    )

    def earlier(created_by):
        return StandingRule.objects.create(
            tenant=side.tenant,
            agent=agent,
            server="deploy",
            tool="deploy_build",
            created_by=created_by,
        )

    by_program, by_either, by_nobody = (
        earlier("program:bot"),
        earlier("user:admin@acme.test"),
        earlier("user:gone@acme.test"),
    )
    StandingRule.objects.filter(pk=by_person.pk).update(
        policy_rule={}, maker_kind="", maker_membership=None
    )
    backfill(apps, None)
    for rule in (by_person, by_program, by_either, by_nobody):
        rule.refresh_from_db()
    # Its policy rule, from the approval it was made from; its maker, from the decision's audit.
    assert by_person.policy_rule == made_under
    assert (by_person.maker_kind, by_person.maker_membership.user) == ("person", side.operator)
    assert (by_program.maker_kind, by_program.maker_token_id) == ("program", bot.pk)
    assert by_program.policy_rule == {}
    # Not told apart: the lesser rights, a program's.
    assert by_either.maker_kind == "program" and by_either.maker_membership is None
    assert by_nobody.maker_kind == "" and by_nobody.maker_membership is None


def test_rules_passed_over_cost_no_query_each_once_they_said_why(agents, env_deployer):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    side = agents.a
    agent = env_deployer("approve")
    held = [run(send(side, "dep", "staging")) for _ in range(4)]
    rule_from_approval(side, task=held[0])
    tighten(agent, {"action": "approve", "approvers": ["admin"]})
    held_for_people(side)  # the rule says why, once

    def queries() -> int:
        with CaptureQueriesContext(connection) as captured:
            held_for_people(side)
        return len(captured)

    one = queries()
    tighten(agent, "approve")
    for task in held[1:]:
        rule_from_approval(side, task=task)
    tighten(agent, {"action": "approve", "approvers": ["admin"]})
    held_for_people(side)
    assert StandingRule.objects.exclude(inapplicable_reason="").count() == 4
    assert queries() == one
