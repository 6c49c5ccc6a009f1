"""Conditional policy entries: a tool's entry as a list of rules with
``when`` conditions over the call's arguments, the first that holds deciding; the condition
language shared with standing rules; errors at load with field paths; which rule held a call
on the decision page, over REST and on receipts."""

import json
from datetime import timedelta
from pathlib import Path

import pytest

from notifications.services import ladder_for
from runtime.agents.agent_models import Agent, DemoRecord
from runtime.agents.agent_schema import policy_problems
from runtime.agents.agentfile import AgentFileError, parse_agent_file
from runtime.decisions.decision_models import Effect, Interaction, Receipt
from runtime.kernel.errors import InvalidParams
from runtime.kernel.task_models import TaskState
from runtime.policy.conditions import conditions_hold, schema_fields, undeclared_fields
from runtime.policy.rules import policy_rule_for
from tests.core import (
    DEPLOY_TOOL,
    REPORT_RESULT,
    decide,
    flow_answer,
    open_interaction,
    run,
    send,
    status_text,
)

pytestmark = pytest.mark.django_db

PRODUCTION = {"field": "environment", "op": "equals", "value": "production"}
HOLD_PRODUCTION = [
    {"title": "Deploy to production", "when": [PRODUCTION], "action": "approve"},
    {"title": "Anything else", "action": "allow"},
]


def deployer(make_agent, policy, environment="{{ text }}", **fields):
    """A deployer whose model deploys b-1 to the environment the caller's text names."""
    return make_agent(
        "dep",
        [
            {
                "call": {
                    "server": "deploy",
                    "tool": "deploy_build",
                    "args": {"build": "b-1", "environment": environment},
                }
            },
            *REPORT_RESULT,
        ],
        tools=[DEPLOY_TOOL],
        tool_policy={"deploy/deploy_build": policy},
        **fields,
    )


def test_one_entry_holds_a_production_deploy_and_lets_a_staging_one_through(
    agents, make_agent, client
):
    deployer(make_agent, HOLD_PRODUCTION)
    staging = run(send(agents.a, "dep", "staging"))
    assert staging.state == TaskState.COMPLETED
    assert Effect.objects.get(task=staging).approved_by == "policy"
    assert DemoRecord.objects.count() == 1

    production = run(send(agents.a, "dep", "production"))
    assert production.state == TaskState.AUTH_REQUIRED
    held = open_interaction(production)
    # Which rule held it is kept server side: the wire's detail never names argument values.
    assert held.request["policyRule"]["entry"] == "deploy/deploy_build"
    assert held.request["policyRule"]["rule"] == 1
    assert held.request["policyRule"]["title"] == "Deploy to production"
    assert "production" not in str(production.status_ext) and "rule" not in held.detail

    side = agents.a
    page = side.client_for(side.operator).get(f"/inbox/{held.public_id}/").content.decode()
    assert "Held by" in page
    assert (
        "deploy/deploy_build, rule 1 of 2 (Deploy to production): when environment = production"
        in page
    )
    api = side.client_for(side.operator).get(f"/api/v1/interactions/{held.public_id}").json()
    assert api["heldBy"]["rule"] == 1 and api["heldBy"]["when"] == [PRODUCTION]

    decide(held, approved=True)
    assert run(production).state == TaskState.COMPLETED
    receipt = Receipt.objects.get(effect_public_id=held.public_id)
    assert (receipt.policy_entry, receipt.policy_rule) == ("deploy/deploy_build", 1)
    assert DemoRecord.objects.count() == 2


def test_the_first_rule_that_holds_decides_and_the_last_without_when_is_the_default(
    agents, make_agent
):
    agent = deployer(
        make_agent,
        [
            {"when": [PRODUCTION], "action": "deny"},
            {"when": [{"field": "build", "op": "prefix", "value": "b-"}], "action": "allow"},
            {"action": "approve"},
        ],
    )
    rule = policy_rule_for(agent, "deploy", "deploy_build", {"environment": "production"})
    assert (rule.action, rule.number) == ("deny", 1)
    rule = policy_rule_for(agent, "deploy", "deploy_build", {"build": "b-2", "environment": "x"})
    assert (rule.action, rule.number) == ("allow", 2)
    rule = policy_rule_for(agent, "deploy", "deploy_build", {"build": "rel-2"})
    assert (rule.action, rule.number, rule.label()) == (
        "approve",
        3,
        "deploy/deploy_build, rule 3 of 3: the default rule",
    )
    task = run(send(agents.a, "dep", "production"))
    assert task.state == TaskState.COMPLETED
    assert status_text(task) == "error: tool.denied"
    assert Effect.objects.get(task=task).outcome["reason"] == "denied by the tool policy"


def test_when_no_rule_holds_the_servers_entry_applies_then_approve(agents, make_agent):
    agent = make_agent(
        "x",
        [],
        tools=[DEPLOY_TOOL],
        tool_policy={"deploy/deploy_build": [{"when": [PRODUCTION], "action": "deny"}]},
    )
    staging = {"environment": "staging"}
    assert policy_rule_for(agent, "deploy", "deploy_build", staging).source == "default"
    assert policy_rule_for(agent, "deploy", "deploy_build", staging).action == "approve"
    agent.tool_policy["deploy"] = "allow"
    found = policy_rule_for(agent, "deploy", "deploy_build", staging)
    assert (found.entry, found.action) == ("deploy", "allow")
    assert policy_rule_for(
        agent, "deploy", "deploy_build", {"environment": "production"}
    ).action == ("deny")


@pytest.mark.parametrize(
    ("conditions", "arguments", "holds"),
    [
        # Nested fields by path; a digit indexes a list.
        (
            [{"field": "target.region", "op": "equals", "value": "eu"}],
            {"target": {"region": "eu"}},
            True,
        ),
        ([{"field": "target.region", "op": "equals", "value": "eu"}], {"target": "eu"}, False),
        (
            [{"field": "hosts.1", "op": "prefix", "value": "db-"}],
            {"hosts": ["web-1", "db-2"]},
            True,
        ),
        ([{"field": "hosts.5", "op": "prefix", "value": "db-"}], {"hosts": ["db-1"]}, False),
        # Numbers; a text or true is never a number.
        ([{"field": "replicas", "op": "gt", "value": 3}], {"replicas": 4}, True),
        ([{"field": "replicas", "op": "gt", "value": 3}], {"replicas": 3}, False),
        ([{"field": "replicas", "op": "gte", "value": 3}], {"replicas": 3.0}, True),
        ([{"field": "replicas", "op": "lt", "value": 3}], {"replicas": "2"}, False),
        ([{"field": "replicas", "op": "lte", "value": 1}], {"replicas": True}, False),
        # Objects and lists compared whole, as JSON: one more key is another value.
        ([{"field": "t", "op": "equals", "value": {"a": 1}}], {"t": {"a": 1}}, True),
        ([{"field": "t", "op": "equals", "value": {"a": 1}}], {"t": {"a": 1, "b": 2}}, False),
        ([{"field": "t", "op": "equals", "value": {"a": 1}}], {"t": {"a": True}}, False),
        ([{"field": "t", "op": "in", "value": [[1], [2, 3]]}], {"t": [2, 3]}, True),
        # Every condition must hold; a field the call lacks never matches.
        (
            [PRODUCTION, {"field": "build", "op": "in", "value": ["a", "b"]}],
            {"environment": "production", "build": "c"},
            False,
        ),
        ([PRODUCTION], {}, False),
    ],
)
def test_the_condition_language(conditions, arguments, holds):
    assert conditions_hold(conditions, arguments) is holds


NESTED = {
    "type": "object",
    "properties": {
        "build": {"type": "string"},
        "target": {
            "type": "object",
            "properties": {"region": {"type": "string"}, "replicas": {"type": "integer"}},
        },
        "labels": {"type": "object"},
        "hosts": {"type": "array", "items": {"type": "string"}},
        "odd.name": {"type": "string"},
    },
}


def test_schema_fields_reach_nested_ones_and_undeclared_fields_are_found():
    assert schema_fields(NESTED) == {
        "build": "string",
        "target.region": "string",
        "target.replicas": "integer",
        "labels": "json",
        "hosts": "json",
    }
    assert undeclared_fields({"build": "x", "target": {"region": "eu"}}, NESTED) == []
    assert undeclared_fields({"build": "x", "force": True}, NESTED) == ["force"]
    assert undeclared_fields({"target": {"region": "eu", "extra": 1}}, NESTED) == ["target.extra"]
    # A free-form object is compared whole: nothing inside it is undeclared.
    assert undeclared_fields({"labels": {"anything": 1}}, NESTED) == []


def agent_file(tmp_path: Path, policy: str) -> Path:
    path = tmp_path / "AGENT.md"
    path.write_text(
        "---\n"
        "name: dep\n"
        "description: d\n"
        "tools:\n"
        "  - server: deploy\n"
        "    tool: deploy_build\n"
        "    schema:\n"
        "      type: object\n"
        "      properties:\n"
        "        build: {type: string}\n"
        "        environment: {type: string, enum: [staging, production]}\n"
        "        replicas: {type: integer}\n"
        "policy:\n"
        "  deploy/deploy_build:\n"
        f"{policy}"
        "---\n"
        "Deploy.\n"
    )
    return path


def test_a_conditional_entry_loads_as_written(tmp_path):
    spec = parse_agent_file(
        agent_file(
            tmp_path,
            "    - when: [{field: environment, op: equals, value: production}]\n"
            "      action: approve\n"
            "      required: 3\n"
            "      ladder: [remind after 5m, expire after 2h]\n"
            "    - {action: allow, title: the rest}\n",
        )
    )
    assert spec.tool_policy["deploy/deploy_build"][0]["required"] == 3
    assert spec.tool_policy["deploy/deploy_build"][1] == {"action": "allow", "title": "the rest"}


@pytest.mark.parametrize(
    ("policy", "line", "field", "message"),
    [
        (
            # A misspelt ``when`` would make the rule hold every call.
            "    - {whne: [], action: approve}\n    - {action: allow}\n",
            15,
            "policy.deploy/deploy_build.0.whne",
            "is not a field here",
        ),
        (
            "    - {action: allow}\n"
            "    - {when: [{field: environment, op: equals, value: production}], action: deny}\n",
            15,
            "policy.deploy/deploy_build.0",
            "the rules after it would never be used",
        ),
        (
            "    - {when: [{field: enviroment, op: equals, value: production}], action: approve}\n",
            15,
            "policy.deploy/deploy_build.0.when.0.field",
            "'enviroment' is not a field of the tool's arguments (build, environment, replicas)",
        ),
        (
            "    - {when: [{field: replicas, op: gt, value: many}], action: approve}\n",
            15,
            "policy.deploy/deploy_build.0.when.0.value",
            "gt takes a number",
        ),
        (
            "    - {when: [{field: build, op: gt, value: 3}], action: approve}\n",
            15,
            "policy.deploy/deploy_build.0.when.0.op",
            "a string field takes equals, in, prefix",
        ),
        (
            "    - {when: [{field: environment, op: like, value: prod}], action: approve}\n",
            15,
            "policy.deploy/deploy_build.0.when.0.op",
            "must be one of equals, in, prefix, lt, lte, gt, gte",
        ),
        (
            "    - when: [{field: environment, op: equals, value: production}]\n"
            "      action: approve\n"
            "      ladder: [remind after soon]\n",
            17,
            "policy.deploy/deploy_build.0.ladder.0",
            "is not a duration",
        ),
        (
            "    - when: [{field: environment, op: equals, value: production}]\n"
            "      action: approve\n"
            "      stages: [{approvers: [operator], required: 2}, {approvers: [caller]}]\n",
            17,
            "policy.deploy/deploy_build.0.stages.1.approvers",
            "not the caller",
        ),
    ],
)
def test_a_broken_conditional_entry_is_named_with_its_line_and_field_path(
    tmp_path, policy, line, field, message
):
    with pytest.raises(AgentFileError) as error:
        parse_agent_file(agent_file(tmp_path, policy))
    assert error.value.field == field
    assert message in error.value.message
    assert error.value.line == line


FILES_AGENT = """---
name: files
description: d
tools:
  - server: fs
policy:
  fs/delete_file:
    - when: [{field: %s, op: prefix, value: /etc}]
      action: deny
    - action: approve
---
Files.
"""


def test_a_condition_on_a_discovered_tool_is_checked_against_its_cached_schema(agents, tmp_path):
    """A tenant's MCP tool has no schema in AGENT.md: its discovery's is what a call meets,
    so a typo in ``when`` would silently never hold (deleting /etc falls to the default)."""
    from django.core.management import CommandError, call_command

    from runtime.agents.agent_models import ToolServer
    from tests.admin_pages import form_data, tenant_admin_client

    schema = {"type": "object", "properties": {"path": {"type": "string"}}}
    ToolServer.objects.create(
        tenant=agents.a.tenant,
        name="fs",
        kind="mcp",
        url="https://fs.example.test/mcp",
        tools=[{"name": "delete_file", "description": "", "inputSchema": schema}],
    )
    path = tmp_path / "files.md"
    path.write_text(FILES_AGENT % "pth")
    with pytest.raises(CommandError) as refused:
        call_command("load_agents", str(path), "--tenant", agents.a.tenant.slug)
    assert str(refused.value) == (
        f"{path}:8: policy.fs/delete_file.0.when.0.field: 'pth' is not a field of the "
        "tool's arguments (path)"
    )
    assert not Agent.objects.filter(tenant=agents.a.tenant, slug="files").exists()
    # Another tenant's server of the same name is not this tenant's: nothing to check against.
    call_command("load_agents", str(path), "--tenant", agents.b.tenant.slug)
    path.write_text(FILES_AGENT % "path")
    call_command("load_agents", str(path), "--tenant", agents.a.tenant.slug)
    agent = Agent.objects.get(tenant=agents.a.tenant, slug="files")
    assert policy_rule_for(agent, "fs", "delete_file", {"path": "/etc/passwd"}).action == "deny"

    # Django admin's JSON view checks the same.
    client = tenant_admin_client(agents.a)
    data = form_data(client.get(f"/admin/runtime/agent/{agent.pk}/change/").content.decode())
    typo = [{"when": [{"field": "pth", "op": "prefix", "value": "/etc"}], "action": "deny"}]
    data["policy-json"] = json.dumps({"policy": {"fs/delete_file": typo}, "ladder": {}})
    response = client.post(f"/admin/runtime/agent/{agent.pk}/change/", data)
    assert response.status_code == 200
    assert "fs/delete_file.0.when.0.field: &#x27;pth&#x27; is not a field" in (
        response.content.decode()
    )
    agent.refresh_from_db()
    assert agent.tool_policy["fs/delete_file"][0]["when"][0]["field"] == "path"


def test_a_plain_entry_with_when_or_a_ladder_is_refused(tmp_path):
    """Conditions on a mapping would hold for every call: only a list of rules takes them."""
    with pytest.raises(AgentFileError) as error:
        parse_agent_file(
            agent_file(
                tmp_path,
                "    when: [{field: environment, op: equals, value: production}]\n"
                "    action: allow\n",
            )
        )
    assert error.value.field == "policy.deploy/deploy_build.when"
    assert "write the entry as a list of rules" in error.value.message
    with pytest.raises(AgentFileError, match="goes under ladder.tools"):
        parse_agent_file(agent_file(tmp_path, "    {action: approve, ladder: [remind after 5m]}\n"))


@pytest.mark.parametrize(
    "entry",
    [
        "    {action: approve, expiry: 2m, bogus: 1}\n",
        "    - {action: approve, expiry: 2m, bogus: 1}\n",
    ],
)
def test_an_unknown_key_is_refused_in_a_single_rule_as_in_a_list(tmp_path, entry):
    """Every form of a rule is checked the same way: a key the policy does not know (a typo,
    a setting that does not exist) would be silently ignored."""
    with pytest.raises(AgentFileError) as error:
        parse_agent_file(agent_file(tmp_path, entry))
    listed = entry.lstrip().startswith("-")
    assert error.value.field == "policy.deploy/deploy_build" + (".0" if listed else "") + ".expiry"
    assert error.value.message.startswith("is not a field here (action, deciders, approvers")
    # The fields named are those of that form: conditions and a ladder only in a list's rules.
    assert ("when" in error.value.message) is listed
    assert error.value.line == 15
    # Django admin's JSON view checks with the same function.
    rule = {"action": "approve", "bogus": 1}
    problems = policy_problems({"deploy/deploy_build": [rule] if listed else rule})
    assert [path for path, _ in problems] == [
        ["deploy/deploy_build", *([0] if listed else []), "bogus"]
    ]
    assert problems[0][1].startswith("is not a field here")


def test_a_rules_own_risk_asks_for_a_step_up_for_its_calls_only(agents, make_agent):
    deployer(
        make_agent,
        [
            {"when": [PRODUCTION], "action": "approve", "risk": "high"},
            {"action": "approve"},
        ],
    )
    staging = open_interaction(run(send(agents.a, "dep", "staging")))
    production = open_interaction(run(send(agents.a, "dep", "production")))
    assert (staging.risk, production.risk) == ("normal", "high")
    decide(staging, approved=True)  # no step-up
    from runtime.kernel.errors import StepUpRequired

    with pytest.raises(StepUpRequired):
        decide(production, approved=True)
    decide(production, approved=True, stepped_up=True)


def test_an_edit_into_another_rule_is_refused(agents, make_agent):
    """Staging's rule lets its arguments be edited; an edit into production (two people)
    would send a production deploy on one person's approval."""
    deployer(
        make_agent,
        [
            {"when": [PRODUCTION], "action": "approve", "required": 2},
            {"action": "approve", "editable": True},
        ],
    )
    held = open_interaction(run(send(agents.a, "dep", "staging")))
    with pytest.raises(InvalidParams, match="fall under another rule"):
        flow_answer(
            tenant=agents.a.tenant,
            interaction_id=held.public_id,
            answer={"approved": True},
            by="user:operator@acme.test",
            via="page",
            arguments={"build": "b-1", "environment": "production"},
        )
    effect = Effect.objects.get(public_id=held.public_id)
    assert effect.arguments["environment"] == "staging"
    assert open_interaction(held.task).pk == held.pk
    # Within the rule, the edit is taken.
    flow_answer(
        tenant=agents.a.tenant,
        interaction_id=held.public_id,
        answer={"approved": True},
        by="user:operator@acme.test",
        via="page",
        arguments={"build": "b-2", "environment": "staging"},
    )
    assert run(held.task).state == TaskState.COMPLETED


def test_a_rules_ladder_sets_the_expiry_and_the_reminders_of_its_approvals(agents, make_agent):
    deployer(
        make_agent,
        [
            {
                "when": [PRODUCTION],
                "action": "approve",
                "ladder": ["remind after 5m", "expire after 2h"],
            },
            {"action": "approve"},
        ],
        interaction_ttl_seconds=86400,
    )
    production = open_interaction(run(send(agents.a, "dep", "production")))
    staging = open_interaction(run(send(agents.a, "dep", "staging")))
    # Both times are read when the approval opens, a moment apart.
    assert abs(production.expires_at - production.created_at - timedelta(hours=2)).seconds < 5
    assert abs(staging.expires_at - staging.created_at - timedelta(days=1)).seconds < 5
    source, steps = ladder_for(production, [])
    assert source == "policy rule" and [s["action"] for s in steps] == ["remind", "expire"]
    assert ladder_for(staging, []) is None


def test_the_admin_table_shows_a_conditional_entry_and_keeps_it(agents, make_agent):
    from tests.admin_pages import form_data, tenant_admin_client

    agent = deployer(make_agent, HOLD_PRODUCTION)
    client = tenant_admin_client(agents.a)
    html = client.get(f"/admin/runtime/agent/{agent.pk}/change/").content.decode()
    assert "Conditional: 2 rules, tried in order" in html
    # Its rules are rows: each condition's field, operator and value, each rule's keys.
    assert 'aria-label="value of condition 1 of rule 1 for deploy/deploy_build"' in html
    assert 'aria-label="decision for rule 2 for deploy/deploy_build"' in html
    # No decision cell of its own: its rules decide.
    assert 'aria-label="decision for deploy/deploy_build"' not in html
    data = form_data(html)
    data["policy-steps"] = "remind after 15m"  # another change, made in the table
    response = client.post(f"/admin/runtime/agent/{agent.pk}/change/", data)
    assert response.status_code == 302
    agent.refresh_from_db()
    assert agent.tool_policy == {"deploy/deploy_build": HOLD_PRODUCTION}
    assert agent.ladder["steps"][0]["action"] == "remind"

    # The JSON view is checked as AGENT.md is, with the tool's schema.
    data = form_data(client.get(f"/admin/runtime/agent/{agent.pk}/change/").content.decode())
    wrong = [{"when": [{"field": "env", "op": "equals", "value": "x"}], "action": "deny"}]
    import json

    data["policy-json"] = json.dumps({"policy": {"deploy/deploy_build": wrong}, "ladder": {}})
    response = client.post(f"/admin/runtime/agent/{agent.pk}/change/", data)
    assert response.status_code == 200
    assert "deploy/deploy_build.0.when.0.field: &#x27;env&#x27; is not a field" in (
        response.content.decode()
    )
    assert Agent.objects.get(pk=agent.pk).tool_policy == {"deploy/deploy_build": HOLD_PRODUCTION}


def test_the_demo_deployer_holds_staging_for_one_person_and_production_for_two(agents):
    """The demo's conditional entry keeps its flow 3 (a held deploy) as it was."""
    from tests.core import start

    staging = open_interaction(start(agents.a, "deployer", "deploy build b-1 to staging"))
    production = open_interaction(start(agents.a, "deployer", "deploy build b-2 to production"))
    assert (staging.approvals_required, production.approvals_required) == (1, 2)
    assert production.request["policyRule"]["title"] == "Deploy {build} to production"
    decide(staging, approved=True)
    assert run(staging.task).state == TaskState.COMPLETED
    decide(production, by="user:operator@acme.test", approved=True)
    assert Interaction.objects.get(pk=production.pk).state == "open"
