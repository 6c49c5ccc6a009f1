"""AGENT.md's policy keys for who may decide (``approvers``, ``required``): checked by the
front matter's JSON Schema and runtime/agents/agentfile.py with the file, line and field; the same
checks in Django admin's agent form."""

import json

import pytest

from runtime.admin.agent_admin import AgentForm
from runtime.agents.agentfile import AgentFileError, parse_agent_file
from tests.runtime.admin.agent_forms import model_fields, rows_fields

FILE = """---
name: guarded
description: Deploys with care.
policy:
  deploy/deploy_build: {POLICY}
---
Deploy.
"""


def parse(tmp_path, policy: str):
    path = tmp_path / "guarded.md"
    path.write_text(FILE.replace("{POLICY}", policy))
    return parse_agent_file(path)


def test_approvers_and_required_load(tmp_path):
    spec = parse(
        tmp_path,
        "{action: approve, approvers: [admin, 'group:release-managers'], required: 2}",
    )
    assert spec.tool_policy["deploy/deploy_build"] == {
        "action": "approve",
        "approvers": ["admin", "group:release-managers"],
        "required": 2,
    }


@pytest.mark.parametrize(
    ("policy", "field", "message"),
    [
        ("{action: approve, approvers: [boss]}", "approvers.0", "is not admin, operator"),
        ("{action: approve, approvers: []}", "approvers", "must be a list of admin"),
        ("{action: approve, approvers: admin}", "approvers", "must be a list of admin"),
        ("{action: approve, required: 21}", "required", "must be a whole number from 1 to 20"),
        ("{action: approve, required: 0}", "required", "must be a whole number from 1 to 20"),
        ("{action: approve, approvers: [caller, admin], required: 2}", "required", "caller"),
        ("{action: approve, approvers: ['group:no spaces']}", "approvers.0", "group:<name>"),
    ],
)
def test_bad_approvers_are_named_with_line_and_field(tmp_path, policy, field, message):
    with pytest.raises(AgentFileError) as error:
        parse(tmp_path, policy)
    assert error.value.field == f"policy.deploy/deploy_build.{field}"
    assert error.value.line == 5
    assert message in error.value.message


@pytest.mark.django_db
def test_admin_form_refuses_the_same(world):
    def form(policy):
        data = {
            "tenant": world.a.tenant.pk,
            "slug": "x",
            "name": "x",
            "description": "x",
            "version": "1",
            # The policy table's JSON view (runtime.admin.policy_table).
            "policy-json": json.dumps({"policy": json.loads(policy)}),
            "policy-json-initial": json.dumps({"policy": {}, "ladder": {}}),
            "interaction_ttl_seconds": 60,
        }
        # The model, skills and tools as the page's fields say them (runtime.admin.agent_fields).
        data = model_fields(data, {"provider": "scripted", "script": []})
        data = rows_fields(rows_fields(data, "skills", []), "tools", [])
        return AgentForm(data=data)

    bad = form('{"deploy": {"action": "approve", "approvers": ["caller"], "required": 2}}')
    assert not bad.is_valid()
    assert "deploy.required: 2 people must approve" in str(bad.errors["policy"])
    good = form('{"deploy": {"action": "approve", "approvers": ["operator"], "required": 2}}')
    assert good.is_valid(), good.errors
