"""The demo tenant's admin edits the deployer's conditional policy with the row editor in a
real browser, at a desktop's and a phone's size: a condition's value changed, a condition
added with "Add a condition", the rule's required count raised; "Preview" shows which rule
holds a sample call and who would be asked, before anything is saved; saved, the agent's
history shows the change's diff (policy.changed in the audit), and "Restore this version"
brings back the policy it had."""

import re

import pytest

from runtime.agents.agent_models import Agent
from runtime.kernel.task_models import AuditEvent

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

SIZES = {"desktop": {"width": 1280, "height": 900}, "phone": {"width": 390, "height": 844}}
TOOL = "deploy/deploy_build"


# Both sizes in one test: the live server caches content type ids, which the database flush
# between transactional tests renumbers (the admin's log entry of the next save would point
# at a stale one).
def test_a_tenant_admin_edits_a_conditional_rule_previews_saves_and_restores(
    live_stack, demo, browser, artifacts
):
    base = live_stack.url
    admin = demo["logins"]["admin"]
    agent = Agent.objects.get(tenant__slug="demo", slug="deployer")
    original = agent.tool_policy
    first, default = original[TOOL]
    assert first["when"] == [{"field": "environment", "op": "equals", "value": "production"}]
    for size, viewport in SIZES.items():
        context = browser.new_context(viewport=viewport, is_mobile=size == "phone")
        page = context.new_page()
        errors: list[str] = []
        page.on("console", lambda m, errors=errors: m.type == "error" and errors.append(m.text))
        page.goto(f"{base}/admin/login/")
        page.get_by_label("E-mail address").fill(admin["email"])
        page.get_by_label("Password").fill(admin["password"])
        page.get_by_role("button", name="Log in").click()
        page.locator("#admin-scope").get_by_text("Demo Co").wait_for()

        page.goto(f"{base}/admin/runtime/agent/{agent.pk}/change/")
        value = page.get_by_label(f"value of condition 1 of rule 1 for {TOOL}", exact=True)
        assert value.input_value() == "production"
        value.fill("prod")
        required = page.get_by_label(f"required for rule 1 for {TOOL}", exact=True)
        assert required.input_value() == "2"
        required.fill("3")
        rule = page.locator('li.policy-rule[data-prefix="policy-0-r0-"]')
        if size == "phone":  # the rule's rows fit the screen: no sideways scrolling
            box = rule.bounding_box()
            assert box is not None and box["x"] >= 0 and box["x"] + box["width"] <= 390
        rule.get_by_role("button", name="Add a condition").click()
        added = f"of condition 3 of rule 1 for {TOOL}"
        page.get_by_label(f"field {added}", exact=True).select_option("build")
        page.get_by_label(f"operator {added}", exact=True).select_option("prefix")
        page.get_by_label(f"value {added}", exact=True).fill("2026.")

        # The preview reads the draft on the page, unsaved.
        page.get_by_label("tool to preview").select_option(TOOL)
        page.get_by_label("sample arguments").fill(
            '{"build": "2026.12.24-1", "environment": "prod"}'
        )
        page.get_by_role("button", name="Preview").click()
        report = page.locator(".policy-preview-report")
        report.get_by_text("3 different people approve").wait_for()
        said = report.inner_text()
        assert f"{TOOL}, rule 1 of 2" in said and "build starts with 2026." in said
        assert "Deploy 2026.12.24-1 to production" in said
        assert "admin@demo.test" in said
        assert Agent.objects.get(pk=agent.pk).tool_policy == original
        page.screenshot(path=str(artifacts / f"policy-editor-{size}.png"), full_page=True)

        page.get_by_role("button", name="Save and continue editing").click()
        page.get_by_text("was changed successfully").wait_for()
        edited = Agent.objects.get(pk=agent.pk).tool_policy
        assert edited == {
            TOOL: [
                {
                    **first,
                    "when": [
                        {"field": "environment", "op": "equals", "value": "prod"},
                        {"field": "build", "op": "prefix", "value": "2026."},
                    ],
                    "required": 3,
                },
                default,
            ]
        }
        event = AuditEvent.objects.filter(action="policy.changed").latest("pk")
        assert event.detail["source"] == "admin" and "value: prod" in event.detail["diff"]

        # The agent's history: the change and its diff, and the version before it restored.
        history = page.locator(".policy-history li.policy-version")
        history.first.locator("summary", has_text="diff").click()
        diff = history.first.locator("pre").inner_text()
        assert re.search(r"^\+\s+value: prod$", diff, re.M), diff
        assert re.search(r"^-\s+value: production$", diff, re.M), diff
        assert re.search(r"^\+\s+required: 3$", diff, re.M), diff
        page.screenshot(path=str(artifacts / f"policy-history-{size}.png"), full_page=True)
        history.nth(1).get_by_role("button", name="Restore this version").click()
        page.get_by_text("Restored the policy version").wait_for()
        assert Agent.objects.get(pk=agent.pk).tool_policy == original
        restored = AuditEvent.objects.filter(action="policy.changed").latest("pk")
        assert restored.pk != event.pk and "value: production" in restored.detail["diff"]
        assert page.get_by_label(
            f"value of condition 1 of rule 1 for {TOOL}", exact=True
        ).input_value() == ("production")
        assert errors == []
        context.close()
