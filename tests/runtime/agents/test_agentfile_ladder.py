"""Reminder ladders in AGENT.md: parsed with the same grammar as Django admin's, checked by
the JSON Schema and by runtime.policy.ladders with file, line and field, and an expire step sets the
expiry of the items it covers."""

import json
from datetime import timedelta

import pytest
from django.core.management import CommandError

from runtime.agents.agent_models import Agent
from runtime.agents.agent_schema import AGENT_SCHEMA
from runtime.decisions.decision_models import Interaction
from runtime.policy.ladders import LadderError, ladder_parse, steps_parse
from tests.core import load_agents, start

pytestmark = pytest.mark.django_db

AGENT = """---
name: helper
description: Helps.
tools:
  - server: deploy
    tool: deploy_build
    schema: {type: object}
  - server: github
policy:
  deploy/deploy_build: approve
ladder:
  steps:
    - remind after 15m
    - escalate to admins after 1h
    - expire after 24h
  tools:
    deploy/deploy_build:
      - remind after 5m
      - escalate to operators and admins after 30m, widen to admins
      - expire after 2h
    github:
      - {after: 10m, action: remind}
model:
  provider: scripted
  script:
    - steps:
        - reply: "Hi."
---
Be helpful.
"""


def test_a_ladder_in_agent_md_loads_per_agent_and_per_tool(world, tmp_path):
    (tmp_path / "helper.md").write_text(AGENT)
    assert "1 created" in load_agents(tmp_path)
    ladder = Agent.objects.get(tenant=world.a.tenant, slug="helper").ladder
    assert ladder == {
        "steps": [
            {"after": "15m", "action": "remind", "roles": []},
            {"after": "1h", "action": "escalate", "roles": ["admin"]},
            {"after": "24h", "action": "expire", "roles": []},
        ],
        "tools": {
            "deploy/deploy_build": [
                {"after": "5m", "action": "remind", "roles": []},
                {
                    "after": "30m",
                    "action": "escalate",
                    "roles": ["operator", "admin"],
                    "widen_to": "admin",
                },
                {"after": "2h", "action": "expire", "roles": []},
            ],
            "github": [{"after": "10m", "action": "remind", "roles": []}],
        },
    }
    assert "1 unchanged" in load_agents(tmp_path)
    # The short form is the agent's steps.
    (tmp_path / "helper.md").write_text(
        AGENT.replace(AGENT[AGENT.index("ladder:") : AGENT.index("model:")], "ladder: [remind after 1m]\n")
    )  # fmt: skip
    assert "1 updated" in load_agents(tmp_path)
    assert Agent.objects.get(tenant=world.a.tenant, slug="helper").ladder == {
        "steps": [{"after": "1m", "action": "remind", "roles": []}]
    }


def test_every_parsed_step_carries_the_role_an_escalation_widens_to():
    sentence, mapping = steps_parse(
        [
            "Escalate to operators, admins after 1h, widen to admins",
            {"after": "2h", "action": "escalate", "roles": ["admin"]},
        ]
    )
    assert sentence == {
        "after": "1h",
        "seconds": 3600,
        "action": "escalate",
        "roles": ["operator", "admin"],
        "widen_to": "admin",
        "before": "",
        "on_expiry": None,
    }
    assert mapping["widen_to"] is None and mapping["seconds"] == 7200
    assert steps_parse(["remind after 30s"])[0] == {
        "after": "30s",
        "seconds": 30,
        "action": "remind",
        "roles": [],
        "widen_to": None,
        "before": "",
        "on_expiry": None,
    }


def test_the_schema_describes_the_ladder():
    ladder = AGENT_SCHEMA["properties"]["ladder"]
    assert ladder["then"]["maxItems"] == 10
    assert set(ladder["else"]["properties"]) == {"steps", "tools"}


@pytest.mark.parametrize(
    "old, new, line, field, message",
    [
        ("    - remind after 15m\n", "    - remind after soon\n", 13, "ladder.steps.0", "'soon' is not a duration"),
        ("    - remind after 15m\n", "    - nag after 15m\n", 13, "ladder.steps.0", "'nag after 15m' is not a step such as"),
        ("    - remind after 15m\n", "    - remind them\n", 13, "ladder.steps.0", "must be a step such as 'remind after 15m'"),
        ("    - remind after 15m\n", "    - 15\n", 13, "ladder.steps.0", "must be a step such as 'remind after 15m', or a mapping"),
        ("    - escalate to admins after 1h\n", "    - escalate to bosses after 1h\n", 14, "ladder.steps.1", "'bosses' is not a role"),
        ("    - escalate to admins after 1h\n", "    - remind after 1m\n", 14, "ladder.steps.1", "steps must come in order of time"),
        ("    - expire after 24h\n", "    - expire after 24h\n    - remind after 48h\n", 16, "ladder.steps.3", "no step can follow expire"),
        ("    - escalate to admins after 1h\n", "    - remind after 1h, widen to admins\n", 14, "ladder.steps.1", "only an escalation widens"),
        ("    - escalate to admins after 1h\n", "    - escalate to admins after 1h, widen to viewers\n", 14, "ladder.steps.1", "widen to: 'viewers' is not a role (admins, operators)"),
        ("      - {after: 10m, action: remind}\n", "      - {after: 10m, action: page}\n", 22, "ladder.tools.github.0.action", "must be one of remind, escalate, expire"),
        ("      - {after: 10m, action: remind}\n", "      - {after: 10m, action: remind, who: me}\n", 22, "ladder.tools.github.0.who", "is not a field here (after, before, on_expiry, action, roles, widen_to)"),
        ("      - {after: 10m, action: remind}\n", "      - {after: 10m, action: escalate, roles: [root]}\n", 22, "ladder.tools.github.0.roles.0", "must be one of admin, operator, viewer"),
        ("    github:\n", "    gitlab:\n", 22, "ladder.tools.gitlab", "this agent has no tool server 'gitlab'"),
        ("    deploy/deploy_build:\n", "    deploy/rollback:\n", 18, "ladder.tools.deploy/rollback", "this agent has no tool 'deploy/rollback'"),
        ("  tools:\n    deploy", "  tool:\n    deploy", 17, "ladder.tool", "is not a field here (steps, tools)"),
        ("  steps:\n    - remind after 15m\n    - escalate to admins after 1h\n    - expire after 24h\n", "  steps: []\n", 12, "ladder.steps", "must be a list of 1 to 10 steps"),
        ("name: helper\n", "name: helper\ninteractionTtlSeconds: 600\n", 16, "ladder.steps.2", "give the expiry once: here or interactionTtlSeconds"),
    ],
    ids=[
        "bad-duration",
        "unknown-verb",
        "no-after",
        "not-a-step",
        "unknown-role",
        "out-of-order",
        "step-after-expire",
        "widen-a-reminder",
        "widen-to-viewers",
        "mapping-bad-action",
        "mapping-unknown-field",
        "mapping-bad-role",
        "tool-server-not-the-agents",
        "tool-not-the-agents",
        "unknown-key",
        "empty-steps",
        "two-expiries",
    ],
)  # fmt: skip
def test_a_broken_ladder_names_its_file_line_and_field(
    world, tmp_path, old, new, line, field, message
):
    assert old in AGENT
    path = tmp_path / "broken.md"
    path.write_text(AGENT.replace(old, new, 1))
    with pytest.raises(CommandError) as caught:
        load_agents(path)
    assert str(caught.value).startswith(f"{path}:{line}: {field}: "), str(caught.value)
    assert message in str(caught.value), str(caught.value)
    assert not Agent.objects.exists()


def test_the_short_form_names_its_steps_as_written(world, tmp_path):
    path = tmp_path / "short.md"
    path.write_text(AGENT.replace(AGENT[AGENT.index("ladder:") : AGENT.index("model:")], "ladder:\n  - remind after 1h\n  - remind after 5m\n"))  # fmt: skip
    with pytest.raises(CommandError, match=rf"^{path}:13: ladder\.1: steps must come in order"):
        load_agents(path)


def test_django_admin_agent_form_checks_the_ladder_the_same_way():
    from runtime.admin.agent_admin import AgentForm

    expected = ["ladder: steps.1: 'nobody' is not a role (admins, operators, viewers)"]
    initial = json.dumps({"policy": {}, "ladder": {}})
    # The policy table's JSON view, as AGENT.md spells it...
    document = {"ladder": ["remind after 1h", "escalate to nobody after 2h"]}
    form = AgentForm(data={"policy-json": json.dumps(document), "policy-json-initial": initial})
    form.is_valid()
    assert form.errors["policy"] == expected
    # ...and the table's ladder of the other approvals.
    data = {
        "policy-total": "0",
        "policy-steps": "remind after 1h; escalate to nobody after 2h",
        "policy-json": initial,
        "policy-json-initial": initial,
    }
    form = AgentForm(data=data)
    form.is_valid()
    assert form.errors["policy"] == expected
    with pytest.raises(LadderError):
        ladder_parse({"steps": ["expire after 1h", "remind after 2h"]})


def test_an_expire_step_sets_the_expiry_of_the_items_it_covers(agents):
    deployer = Agent.objects.get(tenant=agents.a.tenant, slug="deployer")
    reviewer = Agent.objects.get(tenant=agents.a.tenant, slug="code-reviewer")
    deployer.ladder = ladder_parse(
        {"steps": ["expire after 3h"], "tools": {"deploy/deploy_build": ["expire after 2h"]}}
    )
    deployer.save(update_fields=["ladder"])
    reviewer.ladder = ladder_parse(["remind after 5m", "expire after 45m"])
    reviewer.save(update_fields=["ladder"])

    held = Interaction.objects.get(task=start(agents.a, "deployer", "deploy build b-1 to staging"))
    assert held.expires_at - held.created_at == pytest.approx(
        timedelta(hours=2), abs=timedelta(seconds=5)
    )
    question = Interaction.objects.get(task=start(agents.a, "code-reviewer", "review this diff"))
    assert question.kind == "question"
    assert question.expires_at - question.created_at == pytest.approx(
        timedelta(minutes=45), abs=timedelta(seconds=5)
    )

    # A tool ladder without an expire step: the agent's expire step; none: interactionTtlSeconds.
    deployer.ladder = ladder_parse(
        {"steps": ["expire after 3h"], "tools": {"deploy": ["remind after 1m"]}}
    )
    deployer.save(update_fields=["ladder"])
    held = Interaction.objects.get(task=start(agents.a, "deployer", "deploy build b-2 to staging"))
    assert held.expires_at - held.created_at == pytest.approx(
        timedelta(hours=3), abs=timedelta(seconds=5)
    )
    deployer.ladder = {}
    deployer.save(update_fields=["ladder"])
    held = Interaction.objects.get(task=start(agents.a, "deployer", "deploy build b-3 to staging"))
    # Its file gives no interactionTtlSeconds (and the tenant no default): 24 hours.
    assert deployer.interaction_ttl_seconds is None
    ttl = timedelta(hours=24)
    assert held.expires_at - held.created_at == pytest.approx(ttl, abs=timedelta(seconds=5))
    # The other tenant's deployer, with no ladder, is untouched.
    other = Interaction.objects.get(task=start(agents.b, "deployer", "deploy build b-1 to staging"))
    assert other.expires_at - other.created_at == pytest.approx(ttl, abs=timedelta(seconds=5))


def test_a_ladder_stored_around_its_checks_never_fails_a_pause(agents):
    deployer = Agent.objects.get(tenant=agents.a.tenant, slug="deployer")
    Agent.objects.filter(pk=deployer.pk).update(ladder={"steps": ["expire whenever"]})
    held = Interaction.objects.get(task=start(agents.a, "deployer", "deploy build b-1 to staging"))
    ttl = timedelta(hours=24)  # no TTL in its file, no tenant default
    assert held.state == "open"
    assert held.expires_at - held.created_at == pytest.approx(ttl, abs=timedelta(seconds=5))
