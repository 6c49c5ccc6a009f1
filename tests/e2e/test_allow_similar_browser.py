"""'Approve and allow similar calls' in Chromium: the operator approves a
held deployment and makes a rule from the form generated from the tool's schema; a matching
call then runs without a pause, a non-matching one waits; the rule is revoked on the rules
page."""

import pytest

from tests.e2e.test_operator_flows import Partner, log_in
from tests.live import wait_until

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


def test_approve_and_allow_similar_calls_then_revoke(live_stack, demo, browser, artifacts):
    partner = Partner(live_stack, demo)
    context = browser.new_context(viewport={"width": 1280, "height": 1000})
    page = context.new_page()
    errors = []
    page.on("console", lambda m: m.type == "error" and errors.append(m.text))
    log_in(page, live_stack, demo)

    first = partner.start("deployer", "deploy build rel-1 to staging")
    partner.wait_for_state("deployer", first, "TASK_STATE_AUTH_REQUIRED")

    def opened():
        page.goto(f"{live_stack.url}/inbox/?kind=approval")
        return page.locator("#inbox-list li.inbox-item").count() == 1

    wait_until(opened, 30, interval=0.5, what="the held deployment in the inbox")
    page.locator("#inbox-list li.inbox-item a").first.click()
    page.get_by_text("Approve and allow similar calls").first.click()  # opens the details
    form = page.locator("#allow-similar-form")
    # The form has a row per top-level field of the schema, with the held call's values.
    assert form.get_by_label("Value of build").input_value() == "rel-1"
    assert form.get_by_label("Value of environment").input_value() == "staging"
    form.locator('select[name="rule-op_build"]').select_option("prefix")
    form.get_by_label("Value of build").fill("rel-")
    form.get_by_label("For how long").select_option("8h")
    page.screenshot(path=str(artifacts / "allow-similar-form.png"), full_page=True)
    form.get_by_role("button", name="Approve and allow similar calls").click()
    page.get_by_text("similar calls are allowed by rule").wait_for()
    page.screenshot(path=str(artifacts / "allow-similar-made.png"), full_page=True)
    partner.wait_for_state("deployer", first, "TASK_STATE_COMPLETED")

    # A matching call completes without ever waiting; one that does not match waits.
    matching = partner.start("deployer", "deploy build rel-2 to staging")
    done = partner.wait_for_state("deployer", matching, "TASK_STATE_COMPLETED")
    assert "Deployed build rel-2" in done["status"]["message"]["parts"][0]["text"]
    other = partner.start("deployer", "deploy build dev-7 to staging")
    partner.wait_for_state("deployer", other, "TASK_STATE_AUTH_REQUIRED")

    page.goto(f"{live_stack.url}/rules/")
    row = page.locator("#rules tbody tr").first
    assert row.get_attribute("data-state") == "active"
    assert "build starts with rel-" in row.inner_text()
    assert "environment = staging" in row.inner_text()
    page.screenshot(path=str(artifacts / "rules-page.png"), full_page=True)
    row.get_by_role("button", name="Revoke").click()
    page.get_by_text("revoked: its calls are held again").wait_for()
    assert page.locator("#rules tbody tr").first.get_attribute("data-state") == "revoked"

    again = partner.start("deployer", "deploy build rel-3 to staging")
    partner.wait_for_state("deployer", again, "TASK_STATE_AUTH_REQUIRED")
    page.goto(f"{live_stack.url}/audit/")
    audit = page.locator("main").inner_text()
    assert "allowed_by_rule" in audit and "rule_created" in audit and "rule_revoked" in audit
    assert errors == []
    context.close()
