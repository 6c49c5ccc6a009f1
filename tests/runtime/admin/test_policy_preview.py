"""The policy editor's preview (runtime.admin.policy_preview): for sample arguments, which rule
of the draft on the page (unsaved) holds the call, who of the tenant would be asked and the
title they would see; read by the real policy code, nothing written, CSRF-protected, and
another tenant's agent is a 404."""

import html as htmllib
import json
import re
from http import HTTPStatus

import pytest
from django.test import Client

from runtime.agents.agent_models import Agent, PolicyVersion
from runtime.kernel.task_models import AuditEvent
from tenants.models import ApproverGroup, Membership
from tests.admin_pages import form_data, read_form, tenant_admin_client

pytestmark = pytest.mark.django_db
FETCH = {"HTTP_X_REQUESTED_WITH": "fetch"}


def deployer(side) -> Agent:
    return Agent.objects.get(tenant=side.tenant, slug="deployer")


def draft(client, agent) -> dict:
    response = client.get(f"/admin/runtime/agent/{agent.pk}/change/")
    assert response.status_code == HTTPStatus.OK
    return form_data(response.content.decode())


def preview(client, agent, data: dict, arguments, tool="deploy/deploy_build", **headers):
    body = {**data, "preview-tool": tool, "preview-arguments": json.dumps(arguments)}
    return client.post(
        f"/admin/runtime/agent/{agent.pk}/policy-preview/", body, **(headers or FETCH)
    )


def text(response) -> str:
    return " ".join(htmllib.unescape(re.sub(r"<[^>]+>", " ", response.content.decode())).split())


def writes() -> tuple:
    return (
        AuditEvent.objects.count(),
        PolicyVersion.objects.count(),
        list(Agent.objects.order_by("pk").values_list("tool_policy", "updated_at")),
    )


def test_the_preview_names_the_rule_the_people_and_the_title_of_a_draft(agents):
    agent = deployer(agents.a)
    client = tenant_admin_client(agents.a)
    data = draft(client, agent)
    assert read_form(client.get(f"/admin/runtime/agent/{agent.pk}/change/").content.decode())
    before = writes()

    response = preview(client, agent, data, {"build": "b-7", "environment": "production"})
    assert response.status_code == HTTPStatus.OK
    said = text(response)
    assert "deploy/deploy_build, rule 1 of 2 (Deploy {build} to production)" in said
    assert "when environment = production" in said
    assert "2 different people approve" in said
    assert "Deploy b-7 to production" in said
    assert "admin@acme.test, operator@acme.test" in said
    assert "globex" not in said and "viewer@acme.test" not in said
    assert "<html" not in response.content.decode()  # a fragment, shown in place

    staging = text(preview(client, agent, data, {"build": "b-7", "environment": "staging"}))
    assert "rule 2 of 2 (Deploy {build} to {environment}): the default rule" in staging
    assert "1 person approves" in staging and "Deploy b-7 to staging" in staging

    # The draft, unsaved: three people of group release, and a denied staging.
    group = ApproverGroup.objects.create(tenant=agents.a.tenant, slug="release")
    group.members.add(Membership.objects.get(tenant=agents.a.tenant, user=agents.a.operator))
    data["policy-0-r0-required"] = ""
    data.update(
        {
            "policy-0-r0-s0-title": "Release",
            "policy-0-r0-s0-approvers": "group:release",
            "policy-0-r0-s0-required": "1",
            "policy-0-r0-s1-approvers": "admin",
            "policy-0-r0-s1-required": "1",
            "policy-0-r0-stages-total": "2",
            "policy-0-r1-action": "deny",
        }
    )
    before = writes()
    said = text(preview(client, agent, data, {"build": "b-8", "environment": "production"}))
    assert "in 2 stages, in order" in said
    assert "Release : 1 of members of group release Asked: operator@acme.test" in said
    assert "1 of admins Asked: admin@acme.test" in said
    said = text(preview(client, agent, data, {"build": "b-8", "environment": "staging"}))
    assert "Denied: the call never runs" in said
    assert writes() == before
    assert agent.tool_policy == Agent.objects.get(pk=agent.pk).tool_policy


def test_a_bad_draft_or_bad_arguments_say_why_and_change_nothing(agents):
    agent = deployer(agents.a)
    client = tenant_admin_client(agents.a)
    data = draft(client, agent)
    before = writes()
    response = preview(client, agent, data, None)
    assert response.status_code == HTTPStatus.BAD_REQUEST
    assert "Sample arguments: a JSON object" in text(response)
    body = {**data, "preview-tool": "deploy/deploy_build", "preview-arguments": "{nope"}
    response = client.post(f"/admin/runtime/agent/{agent.pk}/policy-preview/", body, **FETCH)
    assert response.status_code == HTTPStatus.BAD_REQUEST and "not JSON" in text(response)
    data["policy-0-r0-required"] = "99"
    response = preview(client, agent, data, {"environment": "production"})
    assert response.status_code == HTTPStatus.BAD_REQUEST
    assert "The draft policy: deploy/deploy_build.0.required" in text(response)
    assert writes() == before


def test_without_script_the_preview_is_a_page_of_its_own(agents):
    agent = deployer(agents.a)
    client = tenant_admin_client(agents.a)
    response = preview(
        client,
        agent,
        draft(client, agent),
        {"build": "b-1", "environment": "staging"},
        HTTP_ACCEPT="text/html",
    )
    assert response.status_code == HTTPStatus.OK
    page = response.content.decode()
    assert "<html" in page and "Preview a call: deployer" in page
    assert f'href="/admin/runtime/agent/{agent.pk}/change/"' in page


def test_the_preview_is_a_post_with_a_csrf_token_of_the_tenants_admin(agents):
    agent = deployer(agents.a)
    client = tenant_admin_client(agents.a)
    assert client.get(f"/admin/runtime/agent/{agent.pk}/policy-preview/").status_code == 405
    data = draft(client, agent)
    strict = Client(enforce_csrf_checks=True)
    strict.force_login(agents.a.admin)
    response = strict.post(
        f"/admin/runtime/agent/{agent.pk}/policy-preview/",
        {**data, "preview-tool": "deploy/deploy_build", "preview-arguments": "{}"},
    )
    assert response.status_code == HTTPStatus.FORBIDDEN
    # The other tenant's deployer: a 404, as a missing agent, even with a draft of its own.
    theirs = deployer(agents.b)
    response = preview(client, theirs, data, {"environment": "production"})
    assert response.status_code == HTTPStatus.NOT_FOUND
