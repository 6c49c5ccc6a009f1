"""One source of truth for an agent's policy: the database, once the agent exists. A file
(load_agents, the demo seed) updates a policy only while it is the one a file last loaded;
edited since in Django admin, the agent is refused with a readable diff unless --replace is
given. Every change, from any path, writes policy.changed with the old and new versions and
a diff; the agent's page shows where its policy came from and its history, and restores an
earlier version in one step."""

from http import HTTPStatus
from io import StringIO

import pytest
from django.core.management import call_command

from runtime.agents.agent_models import Agent, PolicyVersion
from runtime.agents.demo import AGENTS_DIR, seed_demo_agents
from runtime.decisions.receipts import policy_version
from runtime.kernel.task_models import AuditEvent
from tests.admin_pages import form_data, tenant_admin_client
from tests.core import load_agents

pytestmark = pytest.mark.django_db

HELPER = """---
name: helper
description: Helps.
version: 1.2.0
skills:
  - id: help
    name: Help
    description: Helps with anything.
tools:
  - server: deploy
    tool: deploy_build
    description: Deploys a build.
    schema:
      type: object
      properties:
        build: {type: string}
        environment: {type: string}
policy:
  deploy/deploy_build: approve
model:
  provider: scripted
  script:
    - steps:
        - reply: "Hi."
---
Be helpful.
"""


def policy_changes(world):
    return list(
        AuditEvent.objects.filter(tenant=world.a.tenant, action="policy.changed").order_by("pk")
    )


def helper(world) -> Agent:
    return Agent.objects.get(tenant=world.a.tenant, slug="helper")


def admin_sets(client, agent: Agent, action: str, tool: str = "deploy/deploy_build") -> None:
    """The tenant admin changes a tool's decision in the policy table."""
    page = client.get(f"/admin/runtime/agent/{agent.pk}/change/").content.decode()
    data = form_data(page)
    prefix = next(
        name[: -len("tool")]
        for name, value in data.items()
        if name.startswith("policy-") and name.endswith("-tool") and value == tool
    )
    data[f"{prefix}action"] = action
    response = client.post(f"/admin/runtime/agent/{agent.pk}/change/", data)
    assert response.status_code == HTTPStatus.FOUND, response.content.decode()[-3000:]


@pytest.fixture
def loaded(world, tmp_path):
    (tmp_path / "helper.md").write_text(HELPER)
    assert "1 created" in load_agents(tmp_path)
    return tmp_path


def test_a_file_change_applies_to_a_policy_nobody_edited_and_is_audited(world, loaded):
    assert policy_changes(world) == []  # the creation is the agent's first version, no change
    (loaded / "helper.md").write_text(HELPER.replace("deploy_build: approve", "deploy_build: deny"))
    out = load_agents(loaded)
    assert "1 updated" in out and "refused" not in out
    assert helper(world).tool_policy == {"deploy/deploy_build": "deny"}
    [event] = policy_changes(world)
    assert event.via == "load_agents" and event.actor.startswith("shell")
    assert event.detail["source"] == "file"
    assert event.detail["version"] == policy_version(helper(world))
    assert "-  deploy/deploy_build: approve" in event.detail["diff"]
    assert "+  deploy/deploy_build: deny" in event.detail["diff"]


def test_load_agents_after_an_admin_edit_refuses_with_a_diff_and_changes_nothing(world, loaded):
    client = tenant_admin_client(world.a)
    admin_sets(client, helper(world), "deny")
    edited = helper(world)
    assert edited.tool_policy == {"deploy/deploy_build": "deny"}
    events, versions = len(policy_changes(world)), PolicyVersion.objects.count()
    # The file changes something else too: nothing of the agent is taken from it.
    (loaded / "helper.md").write_text(HELPER.replace("Helps.", "Helps a lot."))
    out = load_agents(loaded)
    assert "refused   acme/helper" in out
    assert "1 refused (policy edited since loaded; kept, --replace to overwrite)" in out
    assert "-  deploy/deploy_build: deny" in out and "+  deploy/deploy_build: approve" in out
    assert f"edited in admin by {world.a.admin.subject}" in out
    after = helper(world)
    assert after.tool_policy == edited.tool_policy and after.description == "Helps."
    assert len(policy_changes(world)) == events and PolicyVersion.objects.count() == versions
    # Again: still refused (the edit is not forgotten by a refusal).
    assert "1 refused" in load_agents(loaded)


def test_load_agents_with_replace_applies_the_file_and_audits_it(world, loaded):
    admin_sets(tenant_admin_client(world.a), helper(world), "deny")
    out = StringIO()
    call_command("load_agents", str(loaded), "--tenant", "acme", "--replace", stdout=out)
    assert "replaced  acme/helper" in out.getvalue()
    assert "1 replaced (edited policy overwritten: --replace)" in out.getvalue()
    assert helper(world).tool_policy == {"deploy/deploy_build": "approve"}
    admin_change, replaced = policy_changes(world)
    assert admin_change.detail["source"] == "admin" and replaced.detail["source"] == "file"
    assert replaced.detail["previous_version"] == admin_change.detail["version"]
    assert "+  deploy/deploy_build: approve" in replaced.detail["diff"]
    # The file's policy is the loaded one again: the next change of the file applies.
    (loaded / "helper.md").write_text(
        HELPER.replace("deploy_build: approve", "deploy_build: allow")
    )
    assert "1 updated" in load_agents(loaded)


def test_the_demo_seed_never_overwrites_an_edited_demo_agent(world, agents, caplog):
    coder = Agent.objects.get(tenant=world.a.tenant, slug="coder")
    admin_sets(tenant_admin_client(world.a), coder, "deny", tool="github/create_pull_request")
    edited = Agent.objects.get(pk=coder.pk)
    assert edited.tool_policy["github/create_pull_request"]["action"] == "deny"
    events = len(policy_changes(world))

    kept: list[str] = []
    seed_demo_agents(tenant=world.a.tenant, kept=kept)
    # Only the edited agent is kept; the others, unedited, are loaded as before.
    assert kept == ["coder"]
    assert "demo agent coder kept its policy" in caplog.text
    assert Agent.objects.get(pk=coder.pk).tool_policy == edited.tool_policy
    assert len(policy_changes(world)) == events
    # `manage.py seed_demo` (what `make run` does) says so too, and keeps it.
    out = StringIO()
    call_command("load_agents", str(AGENTS_DIR), "--tenant", "acme", stdout=out)
    assert "1 refused" in out.getvalue()
    assert Agent.objects.get(pk=coder.pk).tool_policy == edited.tool_policy


def test_the_agent_page_shows_where_the_policy_came_from_and_restores_a_version(world, loaded):
    client = tenant_admin_client(world.a)
    agent = helper(world)
    page = client.get(f"/admin/runtime/agent/{agent.pk}/change/").content.decode()
    assert "loaded from " in page and "helper.md (version 1.2.0)" in page
    admin_sets(client, agent, "deny")
    page = client.get(f"/admin/runtime/agent/{agent.pk}/change/").content.decode()
    assert f"edited in admin by {world.a.admin.subject}" in page
    assert "+  deploy/deploy_build: deny" in page.replace("&#x27;", "'")
    first = PolicyVersion.objects.filter(agent=agent).order_by("created_at", "pk").first()
    assert first.source == "file"
    restore = f"/admin/runtime/agent/{agent.pk}/policy-restore/{first.pk}/"
    assert f'formaction="{restore}"' in page
    assert client.get(restore).status_code == HTTPStatus.METHOD_NOT_ALLOWED
    response = client.post(restore)
    assert response.status_code == HTTPStatus.FOUND
    assert helper(world).tool_policy == {"deploy/deploy_build": "approve"}
    restored = policy_changes(world)[-1]
    assert restored.detail["source"] == "restore" and restored.via == "admin"
    assert restored.actor == world.a.admin.subject
    assert "+  deploy/deploy_build: approve" in restored.detail["diff"]
    page = client.get(f"/admin/runtime/agent/{agent.pk}/change/").content.decode()
    assert f"restored ({first.version[:12]}) in admin by {world.a.admin.subject}" in page
    # Restored to the file's version: the file finds its own policy there.
    assert "1 unchanged" in load_agents(loaded)


def test_another_tenants_agent_or_version_cannot_be_restored(world, loaded, tmp_path):
    agent = helper(world)
    (tmp_path / "helper.md").write_text(HELPER)
    load_agents(tmp_path, tenant="globex")
    theirs = Agent.objects.get(tenant=world.b.tenant, slug="helper")
    their_version = PolicyVersion.objects.get(agent=theirs)
    client = tenant_admin_client(world.a)
    for url in (
        f"/admin/runtime/agent/{theirs.pk}/policy-restore/{their_version.pk}/",
        f"/admin/runtime/agent/{agent.pk}/policy-restore/{their_version.pk}/",
        f"/admin/runtime/agent/{agent.pk}/policy-restore/999999/",
    ):
        assert client.post(url).status_code == HTTPStatus.NOT_FOUND
    # A viewer (no admin) reaches none of it.
    viewer = world.a.client_for(world.a.viewer)
    mine = PolicyVersion.objects.get(agent=agent)
    response = viewer.post(f"/admin/runtime/agent/{agent.pk}/policy-restore/{mine.pk}/")
    assert response.status_code in (HTTPStatus.FOUND, HTTPStatus.FORBIDDEN)
    assert policy_changes(world) == []
