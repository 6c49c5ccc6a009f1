"""The demo's AI summaries in Chromium: the demo tenant has them on, the deployer's scripted
model writes one in the worker after its call is held, and the item's page shows it
labelled "summary written by a model" after the arguments, the inbox row a short one."""

import pytest

from tenants.models import Tenant
from tests.e2e.test_operator_flows import Partner, log_in
from tests.live import wait_until

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

SAID = "Deploys build 2026.12.09-1 to staging, as the caller asked."


def test_the_demo_shows_a_labelled_summary_beside_the_arguments(
    live_stack, demo, browser, artifacts
):
    # The demo fixture turns them off for the tests that script a model; seed_demo's "on" back.
    Tenant.objects.filter(slug=demo["tenant"]).update(ai_summaries=True)
    partner = Partner(live_stack, demo)
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    log_in(page, live_stack, demo)
    partner.start("deployer", "deploy build 2026.12.09-1 to staging")
    row = page.locator('#inbox-list li.inbox-item[data-kind="approval"]').first

    def summarised():
        page.goto(f"{live_stack.url}/inbox/?kind=approval")
        return row.locator("[data-model-summary]").count() == 1

    # Written by the worker after the call was held: the item is there before it.
    wait_until(summarised, 60, interval=0.5, what="the summary in the inbox row")
    assert row.locator("[data-model-summary]").inner_text() == (
        f"Summary written by a model: {SAID}"
    )
    row.locator(".inbox-headline").click()
    summary = page.locator("#model-summary")
    summary.wait_for(timeout=20000)
    assert summary.locator(".model-summary-label").inner_text() == (
        "Summary written by a model (scripted); check it against the arguments:"
    )
    assert summary.locator(".model-summary-text").inner_text() == SAID
    assert summary.get_attribute("data-flagged") is None
    # After the arguments, never in their place.
    arguments = page.locator("#arguments").bounding_box()
    assert arguments["y"] + arguments["height"] <= summary.bounding_box()["y"]
    assert "2026.12.09-1" in page.locator("#arguments").inner_text()
    page.screenshot(path=str(artifacts / "call-summary.png"), full_page=True)
