"""The demo tenant's admin in a real browser: logs in, changes the
deployer's policy for deploy_build from approve to deny in the policy table, and the next call
of that tool is denied; nowhere does Django admin show the other tenant."""

import json

import pytest

from runtime.agents.agent_models import Agent
from runtime.decisions.decision_models import Effect
from tenants.models import Membership
from tests.e2e.test_operator_flows import Partner

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


def test_the_demo_admin_denies_a_tool_in_the_policy_table_and_sees_no_other_tenant(
    live_stack, demo, browser, artifacts
):
    base = live_stack.url
    admin = demo["logins"]["admin"]
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    page = context.new_page()
    page.goto(f"{base}/admin/login/")
    page.get_by_label("E-mail address").fill(admin["email"])
    page.get_by_label("Password").fill(admin["password"])
    page.get_by_role("button", name="Log in").click()
    page.locator("#admin-scope").get_by_text("Demo Co").wait_for()
    page.screenshot(path=str(artifacts / "tenant-admin-index.png"), full_page=True)

    # Every list a tenant admin has: the demo tenant's rows, nothing of Other Inc.
    for path in (
        "/admin/",
        "/admin/tenants/tenant/",
        "/admin/tenants/membership/",
        "/admin/tenants/apitoken/",
        "/admin/runtime/agent/",
        "/admin/runtime/task/",
        "/admin/runtime/auditevent/",
        "/admin/notifications/channel/",
    ):
        response = page.goto(f"{base}{path}")
        assert response.status == 200, path
        text = page.content()
        assert "Other Inc" not in text and "other.test" not in text, path
    # A crafted id of the other tenant's member is a 404, as a missing one.
    theirs = Membership.objects.get(user__email="operator@other.test")
    response = page.goto(f"{base}/admin/tenants/membership/{theirs.pk}/change/")
    assert response.status == 404

    deployer = Agent.objects.get(tenant__slug="demo", slug="deployer")
    # The demo's entry is conditional (production needs two people): its rules are edited as
    # rows below its row. Made a plain approve, the row has its decision to change.
    page.goto(f"{base}/admin/runtime/agent/{deployer.pk}/change/")
    page.get_by_text("Conditional: 2 rules, tried in order").wait_for()
    Agent.objects.filter(pk=deployer.pk).update(
        tool_policy={
            "deploy/deploy_build": {"action": "approve", "title": "Deploy {build} to {environment}"}
        }
    )
    page.goto(f"{base}/admin/runtime/agent/{deployer.pk}/change/")
    decision = page.get_by_label("decision for deploy/deploy_build")
    assert decision.input_value() == "approve"
    decision.select_option("deny")
    page.screenshot(path=str(artifacts / "tenant-admin-policy.png"), full_page=True)
    page.get_by_role("button", name="Save", exact=True).click()
    page.get_by_text("was changed successfully").wait_for()
    deployer.refresh_from_db()
    # The entry's other keys (the demo's title) stay as they were.
    assert deployer.tool_policy["deploy/deploy_build"] == {
        "action": "deny",
        "title": "Deploy {build} to {environment}",
    }

    # The next call of the tool is denied: the task completes, nothing waits for a person.
    partner = Partner(live_stack, demo)
    task_id = partner.start("deployer", "deploy build 2026.12.24-1 to staging")
    done = partner.wait_for_state("deployer", task_id, "TASK_STATE_COMPLETED")
    assert "was not deployed" in done["status"]["message"]["parts"][0]["text"]
    assert Effect.objects.get(task__public_id=task_id).state == Effect.State.DENIED

    # The JSON view is one click away and says the same.
    page.goto(f"{base}/admin/runtime/agent/{deployer.pk}/change/")
    page.get_by_text("JSON (as AGENT.md's").click()
    shown = json.loads(page.get_by_label("policy and ladder as JSON").input_value())
    assert shown["policy"]["deploy/deploy_build"]["action"] == "deny"
    page.screenshot(path=str(artifacts / "tenant-admin-policy-json.png"), full_page=True)
    context.close()
