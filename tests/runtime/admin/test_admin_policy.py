"""The policy editor in Django admin: the agent's tool policy and ladders as
a table, validated as AGENT.md's are, the JSON one click away, the version receipts bind to
shown; a tenant admin's change is what the next call meets."""

import html as htmllib
import json
import re
from http import HTTPStatus

import pytest

from runtime.admin.policy_table import step_sentence
from runtime.agents.agent_models import Agent
from runtime.agents.agent_schema import AGENT_SCHEMA, POLICY_KEYS
from runtime.decisions.decision_models import Effect
from runtime.decisions.receipts import policy_version
from runtime.kernel.task_models import AuditEvent, TaskState
from runtime.policy.ladders import ladder_parse
from tests.admin_pages import form_data, tenant_admin_client
from tests.core import DEPLOY_TOOL, run, send, status_text, tool_results

pytestmark = pytest.mark.django_db


@pytest.fixture
def shipper(agents, make_agent):
    return make_agent(
        "shipper",
        [
            {
                "call": {
                    "server": "deploy",
                    "tool": "deploy_build",
                    "args": {"build": "b-1", "environment": "staging"},
                }
            },
            {"if": {"result": "ok"}, "reply": "shipped"},
            {"if": {"result": "error"}, "reply": "not shipped: {{ last.reason }}"},
        ],
        tools=[DEPLOY_TOOL, {"server": "github"}],
        tool_policy={"deploy/deploy_build": "approve"},
    )


def page_of(client, agent):
    response = client.get(f"/admin/runtime/agent/{agent.pk}/change/")
    assert response.status_code == HTTPStatus.OK
    return response.content.decode()


def row_of(data: dict, tool: str) -> str:
    """The form prefix of the table's row for ``tool``."""
    for name, value in data.items():
        match = re.fullmatch(r"(policy-\d+-)tool", name)
        if match and value == tool:
            return match.group(1)
    raise AssertionError(f"no row for {tool}")


def errors(response) -> str:
    found = re.findall(r'class="errorlist[^"]*"[^>]*>(.*?)</ul>', response.content.decode(), re.S)
    return htmllib.unescape(" ".join(found))


def test_the_table_has_a_column_per_policy_key_of_the_agentfile_schema(shipper, agents):
    client = tenant_admin_client(agents.a)
    html = page_of(client, shipper)
    entry = AGENT_SCHEMA["properties"]["policy"]["additionalProperties"]["else"]["else"]
    # A column per key (the title and redact ones too); the keys a column cannot show
    # (stages, and a rule's deadline: expires, warn, on_expiry) come after them, kept as
    # they are by the row's hidden extra field. (``when`` and ``ladder`` pass the schema to be refused
    # with their own words: runtime.policy.checks.)
    schema_keys = entry["x-fields"]
    assert [k for k in entry["properties"] if k not in schema_keys] == ["when", "ladder"]
    assert schema_keys[: len(POLICY_KEYS)] == [key.name for key in POLICY_KEYS]
    assert {"title", "redact"} <= {key.name for key in POLICY_KEYS}
    assert schema_keys[len(POLICY_KEYS) :] == ["stages", "expires", "warn", "on_expiry"]
    start = html.index('class="policy-table"')
    header = html[start : html.index("</thead>", start)]
    for key in POLICY_KEYS:
        assert f">{key.label}</th>" in header
    assert ">ladder</th>" in header
    data = form_data(html)
    # The policy's entry, the agent's other tools (a whole server here), and empty rows.
    assert data[f"{row_of(data, 'deploy/deploy_build')}action"] == "approve"
    assert data[f"{row_of(data, 'github')}action"] == ""
    assert f"<code>{policy_version(shipper)}</code>" in html
    assert json.loads(data["policy-json"]) == {
        "policy": {"deploy/deploy_build": "approve"},
        "ladder": {},
    }


def test_a_tenant_admin_denies_a_tool_in_the_table_and_the_next_call_is_denied(shipper, agents):
    client = tenant_admin_client(agents.a)
    before = policy_version(shipper)
    data = form_data(page_of(client, shipper))
    data[f"{row_of(data, 'deploy/deploy_build')}action"] = "deny"
    response = client.post(f"/admin/runtime/agent/{shipper.pk}/change/", data)
    assert response.status_code == HTTPStatus.FOUND, errors(response)
    shipper.refresh_from_db()
    assert shipper.tool_policy == {"deploy/deploy_build": "deny"}
    assert policy_version(shipper) != before
    event = AuditEvent.objects.get(action="policy.changed")
    assert event.actor == agents.a.admin.subject
    assert event.detail["agent"] == "shipper"
    assert event.detail["version"] == policy_version(shipper)
    assert event.detail["previous_version"] == before and event.detail["source"] == "admin"
    assert "-  deploy/deploy_build: approve" in event.detail["diff"]
    assert "+  deploy/deploy_build: deny" in event.detail["diff"]
    assert f"<code>{policy_version(shipper)}</code>" in page_of(client, shipper)

    task = run(send(agents.a, "shipper"))
    assert task.state == TaskState.COMPLETED
    assert status_text(task).startswith("not shipped")
    assert tool_results(task)[0]["error"] == "tool.denied"
    assert Effect.objects.get(task=task).state == Effect.State.DENIED


def test_the_keys_of_an_entry_are_edited_with_their_widgets(shipper, agents):
    client = tenant_admin_client(agents.a)
    data = form_data(page_of(client, shipper))
    row = row_of(data, "deploy/deploy_build")
    data.update(
        {
            # Not the default (operators), which the table leaves out of the entry.
            f"{row}deciders": "either",
            f"{row}approvers": "admin, group:sre",
            f"{row}required": "2",
            f"{row}risk": "high",
            f"{row}editable": "on",
            f"{row}ladder": "remind after 5m; escalate to operators and admins after 1h",
        }
    )
    data.pop(f"{row}bulk")  # unchecked
    github = row_of(data, "github")
    data[f"{github}action"] = "allow"
    data["policy-steps"] = "remind after 15m"
    response = client.post(f"/admin/runtime/agent/{shipper.pk}/change/", data)
    assert response.status_code == HTTPStatus.FOUND, errors(response)
    shipper.refresh_from_db()
    assert shipper.tool_policy == {
        "deploy/deploy_build": {
            "action": "approve",
            "deciders": "either",
            "approvers": ["admin", "group:sre"],
            "required": 2,
            "risk": "high",
            "editable": True,
            "bulk": False,
        },
        "github": "allow",
    }
    assert shipper.ladder == ladder_parse(
        {
            "steps": ["remind after 15m"],
            "tools": {
                "deploy/deploy_build": [
                    "remind after 5m",
                    "escalate to operators and admins after 1h",
                ]
            },
        }
    )
    # Shown again as it was written.
    data = form_data(page_of(client, shipper))
    row = row_of(data, "deploy/deploy_build")
    assert data[f"{row}approvers"] == "admin, group:sre"
    assert data[f"{row}ladder"] == "remind after 5m; escalate to operators and admins after 1h"
    assert f"{row}bulk" not in data and data[f"{row}editable"] == "on"


@pytest.mark.parametrize(
    ("cells", "message"),
    [
        ({"approvers": "bosses"}, "deploy/deploy_build.approvers.0: 'bosses' is not admin"),
        (
            {"approvers": "caller", "required": "2"},
            "deploy/deploy_build.required: 2 people must approve",
        ),
        ({"ladder": "remind after soon"}, "is not a duration"),
        ({"action": "", "risk": "high"}, "choose a decision"),
    ],
)
def test_an_invalid_policy_in_the_table_is_a_form_error_and_changes_nothing(
    shipper, agents, cells, message
):
    client = tenant_admin_client(agents.a)
    data = form_data(page_of(client, shipper))
    row = row_of(data, "deploy/deploy_build")
    data.update({f"{row}{k}": v for k, v in cells.items()})
    before = Agent.objects.get(pk=shipper.pk)
    response = client.post(f"/admin/runtime/agent/{shipper.pk}/change/", data)
    assert response.status_code == HTTPStatus.OK
    assert message in errors(response)
    after = Agent.objects.get(pk=shipper.pk)
    assert (after.tool_policy, after.ladder, after.updated_at) == (
        before.tool_policy,
        before.ladder,
        before.updated_at,
    )
    assert not AuditEvent.objects.filter(action="policy.changed").exists()


def test_a_new_row_names_a_tool_and_its_ladder_names_one_the_agent_has(shipper, agents):
    client = tenant_admin_client(agents.a)
    data = form_data(page_of(client, shipper))
    blank = row_of(data, "")
    data.update(
        {f"{blank}tool": "nope/x", f"{blank}action": "deny", f"{blank}ladder": "remind after 5m"}
    )
    response = client.post(f"/admin/runtime/agent/{shipper.pk}/change/", data)
    assert response.status_code == HTTPStatus.OK
    assert "ladder.tools.nope/x: this agent has no tool server 'nope'" in errors(response)
    data[f"{blank}tool"] = "not a tool"
    response = client.post(f"/admin/runtime/agent/{shipper.pk}/change/", data)
    assert "a tool is server/tool" in errors(response)
    data.update({f"{blank}tool": "deploy", f"{blank}ladder": ""})
    response = client.post(f"/admin/runtime/agent/{shipper.pk}/change/", data)
    assert response.status_code == HTTPStatus.FOUND, errors(response)
    shipper.refresh_from_db()
    assert shipper.tool_policy == {"deploy/deploy_build": "approve", "deploy": "deny"}


def test_the_json_view_edits_the_same_policy_and_is_checked_the_same(shipper, agents):
    client = tenant_admin_client(agents.a)
    data = form_data(page_of(client, shipper))
    data["policy-json"] = json.dumps(
        {"policy": {"deploy/deploy_build": {"action": "approve", "required": 21}}, "ladder": {}}
    )
    response = client.post(f"/admin/runtime/agent/{shipper.pk}/change/", data)
    assert response.status_code == HTTPStatus.OK
    assert "deploy/deploy_build.required: must be a whole number from 1 to 20" in errors(response)
    data["policy-json"] = "{not json"
    response = client.post(f"/admin/runtime/agent/{shipper.pk}/change/", data)
    assert "JSON:" in errors(response)
    shipper.refresh_from_db()
    assert shipper.tool_policy == {"deploy/deploy_build": "approve"}

    # A key the policy does not know is refused, as in AGENT.md: it would do nothing.
    data["policy-json"] = json.dumps(
        {"policy": {"deploy/deploy_build": {"action": "approve", "note": "x"}}, "ladder": {}}
    )
    response = client.post(f"/admin/runtime/agent/{shipper.pk}/change/", data)
    assert response.status_code == HTTPStatus.OK
    assert "deploy/deploy_build.note: is not a field here (action, deciders" in errors(response)
    shipper.refresh_from_db()
    assert shipper.tool_policy == {"deploy/deploy_build": "approve"}

    stages = [{"approvers": ["operator"]}, {"approvers": ["admin"]}]
    document = {
        "policy": {"deploy/deploy_build": {"action": "approve", "stages": stages}},
        "ladder": {"steps": ["remind after 10m"]},
    }
    data["policy-json"] = json.dumps(document)
    response = client.post(f"/admin/runtime/agent/{shipper.pk}/change/", data)
    assert response.status_code == HTTPStatus.FOUND, errors(response)
    shipper.refresh_from_db()
    assert shipper.tool_policy == document["policy"]
    assert shipper.ladder == ladder_parse(document["ladder"])
    # A key the table has no column for survives an edit in the table.
    data = form_data(page_of(client, shipper))
    data[f"{row_of(data, 'deploy/deploy_build')}risk"] = "high"
    response = client.post(f"/admin/runtime/agent/{shipper.pk}/change/", data)
    assert response.status_code == HTTPStatus.FOUND, errors(response)
    shipper.refresh_from_db()
    assert shipper.tool_policy == {
        "deploy/deploy_build": {"action": "approve", "risk": "high", "stages": stages}
    }


def test_editing_both_the_table_and_the_json_is_refused(shipper, agents):
    client = tenant_admin_client(agents.a)
    data = form_data(page_of(client, shipper))
    data[f"{row_of(data, 'deploy/deploy_build')}action"] = "deny"
    data["policy-json"] = json.dumps({"policy": {"deploy/deploy_build": "allow"}})
    response = client.post(f"/admin/runtime/agent/{shipper.pk}/change/", data)
    assert response.status_code == HTTPStatus.OK
    assert "both the table and the JSON" in errors(response)
    shipper.refresh_from_db()
    assert shipper.tool_policy == {"deploy/deploy_build": "approve"}


def test_a_post_without_the_table_never_empties_the_policy(shipper, agents):
    client = tenant_admin_client(agents.a)
    data = {
        k: v for k, v in form_data(page_of(client, shipper)).items() if not k.startswith("policy")
    }
    for extra in ({}, {"policy-total": "0"}, {"policy-total": "0", "policy-json": "{}"}):
        response = client.post(f"/admin/runtime/agent/{shipper.pk}/change/", {**data, **extra})
        assert response.status_code == HTTPStatus.OK
        shipper.refresh_from_db()
        assert shipper.tool_policy == {"deploy/deploy_build": "approve"}


@pytest.mark.parametrize(
    "steps",
    [
        ["remind after 15m"],
        ["escalate to admins after 1h"],
        ["escalate to operators and admins after 2h, widen to admins"],
        ["remind after 5m", "expire after 1d"],
    ],
)
def test_a_stored_step_is_shown_as_the_sentence_it_was_parsed_from(steps):
    stored = ladder_parse(steps)["steps"]
    assert ladder_parse([step_sentence(s) for s in stored])["steps"] == stored


def test_the_history_names_the_policy_only_when_it_changed(shipper, agents):
    from django.contrib.admin.models import LogEntry

    client = tenant_admin_client(agents.a)
    data = form_data(page_of(client, shipper))
    data["description"] = "Ships builds."
    assert client.post(f"/admin/runtime/agent/{shipper.pk}/change/", data).status_code == 302
    data = form_data(page_of(client, shipper))
    data[f"{row_of(data, 'deploy/deploy_build')}risk"] = "high"
    assert client.post(f"/admin/runtime/agent/{shipper.pk}/change/", data).status_code == 302
    first, second = LogEntry.objects.order_by("pk")
    assert "Description" in first.get_change_message()
    assert "policy" not in first.get_change_message().lower()
    assert "Tool policy and ladders" in second.get_change_message()
    assert AuditEvent.objects.filter(action="policy.changed").count() == 1
