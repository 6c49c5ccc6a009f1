"""A token in Django admin chooses the agents and MCP gateways it may call from a list of the
tenant's own (never another tenant's), and the new token is shown once, with a copy button;
Countersign keeps only its hash."""

import re
from http import HTTPStatus

import pytest
from django.test import Client

from runtime.agents.agent_models import Agent
from runtime.kernel.task_models import AuditEvent
from tenants.models import ApiToken, User
from tenants.tokens import authenticate_bearer
from tests.admin_pages import read_form, tenant_admin_client

pytestmark = pytest.mark.django_db
ADD = "/admin/tenants/apitoken/add/"


def offered(html: str) -> dict[str, str]:
    """The agent checkboxes of the page: value -> its label's text."""
    found = re.findall(
        r'<label for="(id_agent_slugs_[\d_]+)"><input type="checkbox" name="agent_slugs" '
        r'value="([^"]*)"[^>]*>\s*([^<]*)</label>',
        html,
    )
    return {value: text.strip() for _, value, text in found}


@pytest.fixture
def b_only(agents):
    return Agent.objects.create(tenant=agents.b.tenant, slug="globex-only", name="Globex only")


def test_a_tenant_admin_chooses_from_their_own_agents_and_gateways(agents, b_only):
    client = tenant_admin_client(agents.a)
    html = client.get(ADD).content.decode()
    choices = offered(html)
    own = set(Agent.objects.filter(tenant=agents.a.tenant).values_list("slug", flat=True))
    assert set(choices) == own and "globex-only" not in choices
    gateway = next(a for a in Agent.objects.filter(tenant=agents.a.tenant) if a.is_gateway)
    # Agents and MCP gateways in groups of their own.
    agents_at, gateways_at = (
        html.index("<label>Agents</label>"),
        html.index("<label>MCP gateways</label>"),
    )
    assert agents_at < html.index('value="deployer"') < gateways_at
    assert gateways_at < html.index(f'value="{gateway.slug}"')

    response = client.post(
        ADD,
        {
            "kind": "partner",
            "subject": "partner:initech",
            "name": "initech",
            "agent_slugs": ["deployer", gateway.slug],
        },
    )
    assert response.status_code == HTTPStatus.OK and "Token created" in response.content.decode()
    token = ApiToken.objects.get(subject="partner:initech")
    assert token.tenant == agents.a.tenant and not token.all_agents
    assert sorted(token.agent_slugs) == sorted(["deployer", gateway.slug])
    assert token.may_call("deployer") and not token.may_call("support")

    # The change page ticks them; saving it as it is keeps them.
    page = client.get(f"/admin/tenants/apitoken/{token.pk}/change/").content.decode()
    assert sorted(read_form(page).values["agent_slugs"]) == sorted(["deployer", gateway.slug])


def test_another_tenants_agent_cannot_be_chosen(agents, b_only):
    client = tenant_admin_client(agents.a)
    response = client.post(
        ADD,
        {"kind": "partner", "subject": "partner:x", "name": "x", "agent_slugs": ["globex-only"]},
    )
    assert response.status_code == HTTPStatus.OK
    assert "is not one of the available choices" in response.content.decode()
    assert not ApiToken.objects.filter(subject="partner:x").exists()


def test_no_agent_and_not_all_agents_is_an_error_next_to_the_list(agents):
    client = tenant_admin_client(agents.a)
    response = client.post(ADD, {"kind": "partner", "subject": "partner:x", "name": "x"})
    html = response.content.decode()
    assert "Choose at least one agent, or allow all agents." in html
    assert not ApiToken.objects.filter(subject="partner:x").exists()


def test_platform_staff_see_each_tenants_agents_and_a_stranger_is_refused(agents, b_only):
    root = User.objects.create_superuser(email="root@countersign.test", password="x")
    client = Client()
    client.force_login(root)
    html = client.get(ADD).content.decode()
    assert f"<label>{agents.a.tenant.slug}: Agents</label>" in html
    assert f"<label>{agents.b.tenant.slug}: Agents</label>" in html
    response = client.post(
        ADD,
        {
            "tenant": agents.a.tenant.pk,
            "kind": "partner",
            "subject": "partner:x",
            "name": "x",
            "agent_slugs": ["globex-only"],
        },
    )
    assert f"Not an agent of {agents.a.tenant.slug}: globex-only." in response.content.decode()
    assert not ApiToken.objects.filter(subject="partner:x").exists()


def test_a_slug_with_no_agent_now_is_kept_unless_unticked(agents):
    token = ApiToken.objects.get(tenant=agents.a.tenant)
    ApiToken.objects.filter(pk=token.pk).update(all_agents=False, agent_slugs=["retired"])
    client = tenant_admin_client(agents.a)
    page = client.get(f"/admin/tenants/apitoken/{token.pk}/change/").content.decode()
    assert offered(page)["retired"] == "retired" and "No such agent now" in page
    data = read_form(page).values
    assert data["agent_slugs"] == ["retired"]
    response = client.post(
        f"/admin/tenants/apitoken/{token.pk}/change/",
        {"name": "renamed", "agent_slugs": ["retired", "support"]},
    )
    assert response.status_code == HTTPStatus.FOUND
    token.refresh_from_db()
    assert (token.name, token.agent_slugs) == ("renamed", ["retired", "support"])


def test_the_new_token_is_shown_once_with_a_copy_button(agents):
    client = tenant_admin_client(agents.a)
    response = client.post(
        ADD, {"kind": "partner", "subject": "partner:once", "name": "once", "all_agents": "on"}
    )
    html = response.content.decode()
    assert "no-store" in response["Cache-Control"]
    assert 'data-copy="plaintext"' in html and "admin-console.js" in html
    plaintext = re.search(r'id="plaintext" type="text" readonly value="([^"]+)"', html).group(1)
    token = ApiToken.objects.get(subject="partner:once")
    assert authenticate_bearer(f"Bearer {plaintext}").token == token
    assert token.token_hash != plaintext and plaintext not in str(
        ApiToken.objects.filter(pk=token.pk).values().get()
    )
    for url in ("/admin/tenants/apitoken/", f"/admin/tenants/apitoken/{token.pk}/change/"):
        assert plaintext.split("_", 2)[2] not in client.get(url).content.decode()


def test_made_changed_and_revoked_in_admin_each_audited_never_with_the_secret(agents):
    client = tenant_admin_client(agents.a)
    response = client.post(
        ADD,
        {"kind": "partner", "subject": "partner:audited", "name": "a", "agent_slugs": ["coder"]},
    )
    plaintext = re.search(
        r'id="plaintext" type="text" readonly value="([^"]+)"', response.content.decode()
    ).group(1)
    token = ApiToken.objects.get(subject="partner:audited")
    client.post(
        f"/admin/tenants/apitoken/{token.pk}/change/",
        {"name": "a", "agent_slugs": ["coder", "deployer"]},
    )
    client.post(
        "/admin/tenants/apitoken/",
        {"action": "revoke", "_selected_action": [token.pk], "index": 0},
    )
    rows = list(
        AuditEvent.objects.filter(tenant=agents.a.tenant, action__startswith="token.").order_by(
            "id"
        )
    )
    assert [(r.action, r.actor, r.via) for r in rows] == [
        ("token.created", agents.a.admin.subject, "admin"),
        ("token.changed", agents.a.admin.subject, "admin"),
        ("token.revoked", agents.a.admin.subject, "admin"),
    ]
    assert rows[0].detail["token"] == f"cs_{token.prefix}_…"
    assert rows[0].detail["agent_slugs"] == ["coder"] and rows[0].detail["kind"] == "partner"
    assert rows[1].detail["changed"] == {"agent_slugs": [["coder"], ["coder", "deployer"]]}
    secret = plaintext.split("_", 2)[2]
    assert not any(secret in str(r.detail) or token.token_hash in str(r.detail) for r in rows)
