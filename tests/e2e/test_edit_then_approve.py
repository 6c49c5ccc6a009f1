"""Edit then approve in a real browser: an operator changes a held deploy's
arguments in the form made from the tool's schema, a value the schema refuses is a form error,
and the call goes out with the edited arguments."""

import json

import pytest

from runtime.agents.agent_models import Agent, DemoRecord
from runtime.decisions.decision_models import Effect, Receipt
from tests.e2e.test_operator_flows import Partner, log_in

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


def test_operator_edits_a_held_deploy_then_approves_it(live_stack, demo, browser, artifacts):
    Agent.objects.filter(tenant__slug="demo", slug="deployer").update(
        tool_policy={"deploy/deploy_build": {"action": "approve", "editable": True}}
    )
    partner = Partner(live_stack, demo)
    context = browser.new_context(viewport={"width": 1280, "height": 1000})
    page = context.new_page()
    log_in(page, live_stack, demo)
    task_id = partner.start("deployer", "deploy build 2026.12.01-1 to staging")
    item = page.locator('#inbox-list a[id^="item-eff_"]').first
    item.wait_for(timeout=20000)
    item.click()
    page.get_by_text("Edit the arguments, then approve").click()

    # The raw JSON fallback, with a value the schema refuses: a form error, nothing sent.
    page.get_by_role("textbox", name="Raw JSON").fill(
        json.dumps({"build": "x", "environment": "moon"})
    )
    page.get_by_label("the raw JSON").check()
    page.get_by_role("button", name="Approve with these arguments").click()
    page.get_by_text("do not fit the tool's schema").wait_for()
    effect = Effect.objects.get(task__public_id=task_id)
    assert effect.state == Effect.State.HELD
    assert effect.arguments["environment"] == "staging"
    page.screenshot(path=str(artifacts / "edit-then-approve-error.png"), full_page=True)

    # The generated fields: a new build, and production from the schema's enum.
    page.get_by_label("build", exact=True).fill("2026.12.01-2")
    page.get_by_label("environment", exact=True).select_option("production")
    page.get_by_label("the fields above").check()
    page.screenshot(path=str(artifacts / "edit-then-approve-form.png"), full_page=True)
    page.get_by_role("button", name="Approve with these arguments").click()
    page.get_by_text("Approved with the edited arguments.").wait_for()

    partner.wait_for_state("deployer", task_id, "TASK_STATE_COMPLETED")
    record = DemoRecord.objects.get(effect_id=effect.public_id)
    assert record.data == {"build": "2026.12.01-2", "environment": "production"}
    receipt = Receipt.objects.get(effect_public_id=effect.public_id)
    assert receipt.edited and receipt.arguments_hash != receipt.sent_arguments_hash
    # The receipt is on the decision page (approved, the operator moved on to the next item).
    page.goto(f"{live_stack.url}/inbox/{effect.public_id}/")
    page.locator(f"#receipt-{receipt.public_id}").wait_for()
    page.screenshot(path=str(artifacts / "edit-then-approve-receipt.png"), full_page=True)
    context.close()
