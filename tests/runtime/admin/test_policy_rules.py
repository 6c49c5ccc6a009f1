"""The policy editor's rows for conditional rules (runtime.admin.policy_rules): every policy
AGENT.md accepts goes to rows and back unchanged (the demo agents', every example in the
docs, and one of every key); a rule's conditions and keys are edited as rows, errors are shown
next to the field and row they name, and a save writes policy.changed with its diff."""

import html as htmllib
import json
import re
from http import HTTPStatus
from pathlib import Path

import pytest
import yaml

from runtime.admin.policy_preview import policy_fields
from runtime.admin.policy_rules import canonical
from runtime.admin.policy_table import PolicyTableField, tool_keys
from runtime.agents.agent_models import Agent, PolicyVersion
from runtime.agents.agent_schema import policy_problems
from runtime.agents.agentfile import parse_agent_file
from runtime.agents.demo import AGENTS_DIR
from runtime.kernel.task_models import AuditEvent
from runtime.policy.ladders import ladder_parse
from tests.admin_pages import form_data, tenant_admin_client

ROOT = Path(__file__).resolve().parents[3]
DEPLOY_SCHEMA = {
    "type": "object",
    "properties": {
        "build": {"type": "string"},
        "environment": {"type": "string", "enum": ["staging", "production"]},
        "replicas": {"type": "integer"},
        "ratio": {"type": "number"},
        "dry": {"type": "boolean"},
        "tags": {"type": "array"},
        "target": {"type": "object", "properties": {"region": {"type": "string"}}},
    },
}
TOOLS = [{"server": "deploy", "tool": "deploy_build", "schema": DEPLOY_SCHEMA}, {"server": "docs"}]
# One of every key a rule or entry may have, and every way of writing one.
EVERY_KEY = {
    "deploy/deploy_build": [
        {
            "when": [
                {"field": "environment", "op": "equals", "value": "production"},
                {"field": "replicas", "op": "gte", "value": 3},
                {"field": "ratio", "op": "lt", "value": 0.5},
                {"field": "dry", "op": "equals", "value": False},
                {"field": "target.region", "op": "in", "value": ["eu-west-1", "eu, central"]},
                {"field": "build", "op": "prefix", "value": "2026."},
                {"field": "tags", "op": "equals", "value": ["a", "b"]},
            ],
            "title": "Deploy {build} to production",
            "impact": "Puts {build} in front of customers",
            "action": "approve",
            "stages": [
                {"title": "Release", "approvers": ["group:release"], "required": 1},
                {"approvers": ["admin"], "required": 2},
            ],
            "risk": "low",
            "editable": True,
            "bulk": False,
            "redact": ["target.region"],
            "timeout": "5m",
            "expires": "2h",
            "warn": ["30m", "5m"],
            "on_expiry": {"action": "escalate", "to": ["admin"], "expires": "1h"},
        },
        {
            "when": [{"field": "environment", "op": "in", "value": ["staging", "2"]}],
            "action": "approve",
            "approvers": ["operator", "group:sre"],
            "required": 2,
            "ladder": [
                "remind after 10m",
                {"action": "escalate", "after": "1h", "roles": ["admin"]},
            ],
            "mode": "shadow",
        },
        {
            "when": [{"field": "dry", "op": "equals", "value": True}],
            "action": "approve",
            "warn": "10m",
            "expires": "1h",
            "on_expiry": "deny",
            "deciders": "either",
        },
        {
            "action": "approve",
            "required": 1,
            "bulk": True,
            "title": "Deploy {build}",
            "timeout": 30,
        },
    ],
    "docs": {"action": "approve", "deciders": "caller", "risk": "normal"},
    "other/tool": [{"action": "deny"}],
}


def agent_files() -> list:
    """Every AGENT.md of the repository: the demo agents' and those the docs show."""
    found = []
    for path in sorted(AGENTS_DIR.glob("*.md")):
        spec = parse_agent_file(path)
        found.append(
            pytest.param(
                spec.tool_policy, spec.ladder, spec.tools, id=path.name.removesuffix(".md")
            )
        )
    for path in sorted((ROOT / "docs").rglob("*.md")):
        for number, match in enumerate(re.finditer(r"```ya?ml\n(.*?)```", path.read_text(), re.S)):
            try:
                data = yaml.safe_load(match.group(1).split("\n---")[0].lstrip("-\n"))
            except yaml.YAMLError:
                continue
            if not isinstance(data, dict) or not isinstance(data.get("policy"), dict):
                continue
            if policy_problems(data["policy"]):
                continue
            ladder = ladder_parse(data.get("ladder")) or {}
            found.append(
                pytest.param(
                    data["policy"],
                    ladder,
                    data.get("tools") or [],
                    id=f"{path.relative_to(ROOT)}#{number}",
                )
            )
    return found


def page(document: dict, tools: list) -> tuple[PolicyTableField, dict]:
    """The editor as the agent's page shows ``document``, and what submitting it posts."""
    field = PolicyTableField()
    widget = field.widget
    widget.offered = tool_keys(tools)
    widget.fields = policy_fields([*widget.offered, *document["policy"]], tools, {})
    return field, form_data(widget.render("policy", document))


def posted(field: PolicyTableField, data: dict) -> dict:
    return field.clean(field.widget.value_from_datadict(data, None, "policy"))


@pytest.mark.parametrize(
    ("policy", "ladder", "tools"),
    [*agent_files(), pytest.param(EVERY_KEY, {}, TOOLS, id="every-key")],
)
def test_every_valid_policy_goes_to_rows_and_back_unchanged(policy, ladder, tools):
    assert policy_problems(policy) == []
    document = {"policy": policy, "ladder": ladder}
    field, data = page(document, tools)
    # No JSON on the page but the expert's view: a conditional entry is rows.
    assert not any(k.endswith("-rules") for k in data)
    assert posted(field, data) == document
    # The rows alone say it all: without the rules as they were written (kept so that a page
    # saved as shown makes no new version), what they post acts the same, key for key.
    rows_only = {k: v for k, v in data.items() if not k.endswith("-orig")}
    field, _ = page(document, tools)
    again = posted(field, rows_only)
    assert again["ladder"] == ladder
    assert set(again["policy"]) == set(policy)
    for key, entry in policy.items():
        if isinstance(entry, list):
            assert [canonical(r) for r in again["policy"][key]] == [canonical(r) for r in entry]
        else:
            assert canonical(again["policy"][key]) == canonical(entry)


def test_the_rows_name_the_tools_fields_and_the_operators():
    document = {"policy": EVERY_KEY, "ladder": {}}
    field = PolicyTableField()
    field.widget.offered = tool_keys(TOOLS)
    field.widget.fields = policy_fields(list(EVERY_KEY), TOOLS, {})
    html = field.widget.render("policy", document)
    fields = re.search(r'<select name="policy-0-r0-c0-field"[^>]*>(.*?)</select>', html, re.S)
    options = re.findall(r'<option value="([^"]*)"', fields.group(1))
    assert options == [
        "",
        "build",
        "environment",
        "replicas",
        "ratio",
        "dry",
        "tags",
        "target.region",
    ]
    ops = re.search(r'<select name="policy-0-r0-c0-op"[^>]*>(.*?)</select>', html, re.S)
    assert re.findall(r'<option value="([^"]*)"', ops.group(1)) == [
        "equals",
        "in",
        "prefix",
        "lt",
        "lte",
        "gt",
        "gte",
    ]
    # A tool whose schema is unknown (a whole server) takes a field's path as text.
    assert re.search(r'<input type="text" name="policy-2-r0-c0-field"', html)
    data = form_data(html)
    assert data["policy-0-r0-c3-value"] == "false"
    assert data["policy-0-r0-c4-value"] == '["eu-west-1", "eu, central"]'
    assert data["policy-0-r1-c0-value"] == "staging, 2"  # a string field: "2" is a text
    assert data["policy-0-r0-s0-approvers"] == "group:release"
    assert data["policy-0-r0-on_expiry"] == "escalate"
    assert data["policy-0-r1-ladder"] == "remind after 10m; escalate to admins after 1h"


# --- the agent's page ------------------------------------------------------------------------


def change_page(client, agent) -> str:
    response = client.get(f"/admin/runtime/agent/{agent.pk}/change/")
    assert response.status_code == HTTPStatus.OK
    return response.content.decode()


def deployer(world) -> Agent:
    return Agent.objects.get(tenant=world.a.tenant, slug="deployer")


@pytest.mark.django_db
def test_a_tenant_admin_edits_a_rule_and_its_condition_as_rows(agents):
    agent = deployer(agents)
    client = tenant_admin_client(agents.a)
    data = form_data(change_page(client, agent))
    assert data["policy-0-tool"] == "deploy/deploy_build"
    assert data["policy-0-r0-c0-field"] == "environment"
    assert data["policy-0-r0-c0-value"] == "production"
    assert data["policy-0-r0-required"] == "2"

    # Saved as shown: no new version of the policy.
    data["description"] = "Deploys builds."
    assert client.post(f"/admin/runtime/agent/{agent.pk}/change/", data).status_code == 302
    assert not AuditEvent.objects.filter(action="policy.changed").exists()

    data = form_data(change_page(client, agent))
    before = agent.tool_policy
    data["policy-0-r0-c0-value"] = "staging"
    data["policy-0-r0-required"] = "3"
    data["policy-0-r0-approvers"] = "admin, group:release"
    # The spare rule, below the default: a dry run is allowed, tried before the default.
    data.update(
        {
            "policy-0-r2-c0-field": "durationSeconds",
            "policy-0-r2-c0-op": "lt",
            "policy-0-r2-c0-value": "1",
            "policy-0-r2-action": "allow",
        }
    )
    response = client.post(f"/admin/runtime/agent/{agent.pk}/change/", data)
    assert response.status_code == 302, response.content.decode()[:3000]
    agent.refresh_from_db()
    first, default = before["deploy/deploy_build"]
    assert agent.tool_policy["deploy/deploy_build"] == [
        {
            **first,
            "when": [{"field": "environment", "op": "equals", "value": "staging"}],
            "required": 3,
            "approvers": ["admin", "group:release"],
        },
        {"when": [{"field": "durationSeconds", "op": "lt", "value": 1}], "action": "allow"},
        default,
    ]
    event = AuditEvent.objects.get(action="policy.changed")
    assert event.detail["source"] == "admin"
    assert "value: staging" in event.detail["diff"] and "required: 3" in event.detail["diff"]
    assert "-      value: production" in event.detail["diff"]
    assert PolicyVersion.objects.filter(agent=agent).count() >= 2


@pytest.mark.django_db
def test_a_rule_removed_and_an_entry_made_conditional(agents):
    agent = deployer(agents)
    client = tenant_admin_client(agents.a)
    data = form_data(change_page(client, agent))
    data["policy-0-r0-delete"] = "on"
    response = client.post(f"/admin/runtime/agent/{agent.pk}/change/", data)
    assert response.status_code == 302
    agent.refresh_from_db()
    assert agent.tool_policy["deploy/deploy_build"] == [
        {"title": "Deploy {build} to {environment}", "action": "approve"}
    ]
    # Every rule removed: the tool has no entry (a person approves each call), and its row
    # has its own decision again.
    data = form_data(change_page(client, agent))
    data["policy-0-r0-delete"] = "on"
    assert client.post(f"/admin/runtime/agent/{agent.pk}/change/", data).status_code == 302
    agent.refresh_from_db()
    assert agent.tool_policy == {}
    data = form_data(change_page(client, agent))
    data["policy-0-action"] = "deny"
    assert client.post(f"/admin/runtime/agent/{agent.pk}/change/", data).status_code == 302
    agent.refresh_from_db()
    assert agent.tool_policy == {"deploy/deploy_build": "deny"}
    # A plain entry split into rules: its decision set to none, its spare rule filled.
    data = form_data(change_page(client, agent))
    assert data["policy-0-action"] == "deny"
    data.update({"policy-0-r0-action": "allow", "policy-0-r0-c0-field": "environment"})
    data["policy-0-r0-c0-value"] = "staging"
    response = client.post(f"/admin/runtime/agent/{agent.pk}/change/", data)
    assert response.status_code == 200
    assert "either a decision in its row or rules" in response.content.decode()
    data["policy-0-action"] = ""
    assert client.post(f"/admin/runtime/agent/{agent.pk}/change/", data).status_code == 302
    agent.refresh_from_db()
    assert agent.tool_policy == {
        "deploy/deploy_build": [
            {
                "when": [{"field": "environment", "op": "equals", "value": "staging"}],
                "action": "allow",
            }
        ]
    }


def error_after(html: str, name: str) -> str:
    """The errors shown right after the field ``name`` (or its row), as text."""
    start = html.index(f'name="{name}')
    found = re.search(r'<ul class="errorlist policy-errors">(.*?)</ul>', html[start:], re.S)
    assert found and found.start() < 2500, f"no error next to {name}"
    return htmllib.unescape(re.sub(r"<[^>]+>", " ", found.group(1)))


@pytest.mark.parametrize(
    ("edit", "near", "message"),
    [
        ({"policy-0-r0-required": "25"}, "policy-0-r0-required", "from 1 to 20"),
        (
            {"policy-0-r0-c0-field": "enviroment"},
            "policy-0-r0-c0-value",
            "'enviroment' is not a field of the tool",
        ),
        (
            {"policy-0-r0-c0-op": "gt"},
            "policy-0-r0-c0-value",
            "gt takes a number",
        ),
        ({"policy-0-r1-approvers": "bosses"}, "policy-0-r1-approvers", "'bosses' is not admin"),
        ({"policy-0-r0-expires": "soon"}, "policy-0-r0-expires", "soon"),
        ({"policy-0-r1-ladder": "remind after soon"}, "policy-0-r1-ladder", "not a duration"),
        (
            {"policy-0-r2-c0-field": "environment", "policy-0-r2-c0-value": "staging"},
            "policy-0-r2-action",
            "choose a decision for this rule",
        ),
        (
            {
                "policy-0-r0-s0-approvers": "admin",
                "policy-0-r0-s0-required": "0",
                "policy-0-r0-required": "",
            },
            "policy-0-r0-s0-required",
            "must be a whole number",
        ),
    ],
)
@pytest.mark.django_db
def test_an_error_is_shown_next_to_its_field_and_changes_nothing(agents, edit, near, message):
    agent = deployer(agents)
    client = tenant_admin_client(agents.a)
    data = form_data(change_page(client, agent))
    data.update(edit)
    before = Agent.objects.get(pk=agent.pk)
    response = client.post(f"/admin/runtime/agent/{agent.pk}/change/", data)
    assert response.status_code == HTTPStatus.OK
    html = response.content.decode()
    assert message in error_after(html, near)
    # What was typed is still there, to correct.
    again = form_data(html)
    for name, value in edit.items():
        if not name.endswith("-field"):
            assert again[name] == value
    after = Agent.objects.get(pk=agent.pk)
    assert (after.tool_policy, after.updated_at) == (before.tool_policy, before.updated_at)
    assert not AuditEvent.objects.filter(action="policy.changed").exists()


@pytest.mark.django_db
def test_the_json_view_still_edits_a_conditional_entry(agents):
    agent = deployer(agents)
    client = tenant_admin_client(agents.a)
    data = form_data(change_page(client, agent))
    document = json.loads(data["policy-json"])
    document["policy"]["deploy/deploy_build"][0]["required"] = 4
    data["policy-json"] = json.dumps(document)
    assert client.post(f"/admin/runtime/agent/{agent.pk}/change/", data).status_code == 302
    agent.refresh_from_db()
    assert agent.tool_policy["deploy/deploy_build"][0]["required"] == 4
    assert form_data(change_page(client, agent))["policy-0-r0-required"] == "4"
