"""The tenant's default expiry (the expire step of the ladder its admin sets on the settings
page) is what an agent without an expiry of its own gets: a policy rule's expires, then the
agent's (its AGENT.md ladder, or its interactionTtlSeconds when it gives one, 24 hours too),
then the tenant's, then 24 hours."""

from datetime import timedelta

import pytest

from notifications.tenant_ladder import tenant_ladder_set
from tests.core import DEPLOY_TOOL, REPORT_RESULT, open_interaction, run, send

pytestmark = pytest.mark.django_db


def deployer(make_agent, policy="approve", slug="dep", **fields):
    return make_agent(
        slug,
        [
            {
                "call": {
                    "server": "deploy",
                    "tool": "deploy_build",
                    "args": {"build": "b-1", "environment": "staging"},
                }
            },
            *REPORT_RESULT,
        ],
        tools=[DEPLOY_TOOL],
        tool_policy={"deploy/deploy_build": policy},
        **fields,
    )


def held(side, slug="dep"):
    interaction = open_interaction(run(send(side, slug, "ship it")))
    # Read when the approval opens: its length, to the minute.
    length = interaction.expires_at - interaction.created_at
    return round(length.total_seconds() / 60) * 60, interaction.request or {}


def test_an_agent_without_its_own_expiry_gets_the_tenants_default(agents, make_agent):
    deployer(make_agent)
    assert held(agents.a)[0] == timedelta(hours=24).total_seconds()
    tenant_ladder_set(
        tenant=agents.a.tenant, text="remind after 1h; expire after 2h, then escalate", actor="t"
    )
    seconds, request = held(agents.a)
    assert seconds == timedelta(hours=2).total_seconds()
    assert request["onExpiry"]["action"] == "escalate"


def test_the_rule_then_the_agent_win_over_the_tenants_default(agents, make_agent):
    tenant_ladder_set(tenant=agents.a.tenant, text="expire after 2h", actor="t")
    deployer(make_agent, {"action": "approve", "expires": "30m"}, slug="ruled")
    deployer(make_agent, slug="ttl", interaction_ttl_seconds=3600)
    deployer(make_agent, slug="laddered", ladder={"steps": [{"after": "3h", "action": "expire"}]})
    assert held(agents.a, "ruled")[0] == 30 * 60
    assert held(agents.a, "ttl")[0] == 3600
    assert held(agents.a, "laddered")[0] == 3 * 3600


def test_an_agent_that_says_24_hours_keeps_them_under_a_tenant_default(agents, make_agent):
    """86400 given is the agent's own (it once read as "not set"); none given is not set."""
    tenant_ladder_set(tenant=agents.a.tenant, text="expire after 2h", actor="t")
    unset = deployer(make_agent, slug="unset")
    deployer(make_agent, slug="day", interaction_ttl_seconds=86400)
    assert unset.interaction_ttl_seconds is None
    assert held(agents.a, "unset")[0] == 2 * 3600
    assert held(agents.a, "day")[0] == 24 * 3600


def test_the_upgrade_clears_the_old_built_in_and_keeps_every_other_expiry(agents, make_agent):
    """Before runtime 0040, 86400 was what an agent without an expiry got: such rows become
    "not set" (what they meant), the others keep their value."""
    from importlib import import_module

    from django.apps import apps

    from runtime.agents.agent_models import Agent

    migration = import_module("runtime.migrations.0040_admin_names_and_agent_expiry")
    old = deployer(make_agent, slug="old", interaction_ttl_seconds=86400)
    hour = deployer(make_agent, slug="hour", interaction_ttl_seconds=3600)
    migration.unset_the_built_in(apps, None)
    stored = dict(
        Agent.objects.filter(pk__in=[old.pk, hour.pk]).values_list(
            "slug", "interaction_ttl_seconds"
        )
    )
    assert stored == {"old": None, "hour": 3600}
    migration.set_the_built_in(apps, None)
    assert Agent.objects.get(pk=old.pk).interaction_ttl_seconds == 86400


def test_another_tenants_default_is_not_this_ones(agents, make_agent):
    tenant_ladder_set(tenant=agents.b.tenant, text="expire after 2h", actor="t")
    deployer(make_agent)
    assert held(agents.a)[0] == 24 * 3600


@pytest.mark.parametrize(
    "sentence",
    [
        "remind after 1h",
        "escalate to operators and admins after 2h, widen to admins",
        "warn 30m before expiry",
        "expire after 24h",
        "expire after 24h, then escalate",
        "expire after 1d, then approve",
    ],
)
def test_a_stored_step_reads_back_as_the_sentence_it_was(sentence):
    from runtime.policy.ladders import step_sentence, steps_parse, steps_stored

    (stored,) = steps_stored(steps_parse([sentence]))
    assert step_sentence(stored) == sentence
