"""The inbox read at a glance, in Chromium at a desktop's 1280x800 and a phone's 390x844:
each row's headline is the held call's summary (agent and tool beside it, smaller), its
risk a badge with its colour (``risk: high``, two people), the first item on the first
screen, the shortcuts' help in a dialog where it was asked for, and the tab counts kept
with the list as it changes."""

import pytest

from runtime.agents.agent_models import Agent
from tests.e2e.test_operator_flows import PHONE, Partner, log_in
from tests.live import wait_until

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

VIEWPORTS = {"desktop": {"width": 1280, "height": 800}, "phone": PHONE}
ITEMS = '#inbox-list li.inbox-item[data-kind="approval"]'


def risky_staging(demo_tenant: str = "demo") -> None:
    """The demo deployer's staging deployments marked ``risk: high`` (production's need two
    people already)."""
    agent = Agent.objects.get(tenant__slug=demo_tenant, slug="deployer")
    rules = agent.tool_policy["deploy/deploy_build"]
    rules[-1] = {**rules[-1], "risk": "high"}
    agent.save()


def hold(partner, stack, page, text: str, count: int) -> str:
    task = partner.start("deployer", text)

    def arrived():
        page.goto(f"{stack.url}/inbox/?kind=approval")
        return page.locator(ITEMS).count() >= count

    wait_until(arrived, 30, interval=0.5, what=f"{count} approvals in the inbox")
    return task


@pytest.mark.parametrize("size", ["desktop", "phone"])
def test_the_inbox_reads_at_a_glance(live_stack, demo, browser, artifacts, size):
    viewport = VIEWPORTS[size]
    risky_staging()
    partner = Partner(live_stack, demo)
    if size == "phone":
        context = browser.new_context(viewport=viewport, is_mobile=True, has_touch=True)
    else:
        context = browser.new_context(viewport=viewport)
    page = context.new_page()
    errors = []
    page.on("console", lambda m: m.type == "error" and errors.append(m.text))
    log_in(page, live_stack, demo)
    hold(partner, live_stack, page, "deploy build 2026.12.07-1 to production", 1)
    hold(partner, live_stack, page, "deploy build 2026.12.07-2 to staging", 2)
    page.goto(f"{live_stack.url}/inbox/")
    rows = page.locator(ITEMS)

    # The summary is the headline; agent and tool are secondary; the risk is a badge.
    first, second = rows.nth(0), rows.nth(1)
    assert first.locator(".inbox-headline").inner_text() == "Deploy 2026.12.07-2 to staging"
    assert second.locator(".inbox-headline").inner_text() == "Deploy 2026.12.07-1 to production"
    assert "deployer" in first.locator(".inbox-meta").inner_text()
    assert "deploy / deploy_build" in first.locator(".inbox-meta").inner_text()
    assert first.locator(".badge.risk-high").inner_text() == "risk: high"
    assert second.locator(".badge.two-person").inner_text() == "2 people"
    assert first.locator(".badge.two-person").count() == 0
    assert second.locator(".badge.risk-high").count() == 0
    colours = first.evaluate(
        "row => [getComputedStyle(row).borderLeftColor,"
        " getComputedStyle(row.querySelector('.badge.risk-high')).backgroundColor]"
    )
    assert colours[0] == colours[1] != "rgba(0, 0, 0, 0)", colours

    # The first item wholly on the first screen, in its upper part: room below it for the
    # next ones (a header that took half the screen pushed it to ~520 px of a laptop's 800).
    page.screenshot(path=str(artifacts / f"inbox-glance-{size}.png"))
    box = first.bounding_box()
    assert 0 <= box["y"] and box["y"] + box["height"] <= viewport["height"], box
    assert box["y"] < viewport["height"] * 0.4, box

    if size == "desktop":
        # The shortcuts' help: a dialog, open where it was asked for.
        page.get_by_role("button", name="Keyboard shortcuts").click()
        dialog = page.locator("dialog#keyboard-help")
        dialog.wait_for()
        assert dialog.evaluate("d => d.open") is True
        shown = dialog.bounding_box()
        assert 0 <= shown["y"] and shown["y"] + shown["height"] <= viewport["height"], shown
        page.screenshot(path=str(artifacts / "inbox-glance-shortcuts.png"))
        page.keyboard.press("Escape")
        assert dialog.evaluate("d => d.open") is False

    # The tab counts follow the list, with no reload.
    all_open = page.locator('[data-kind-count="all"]')
    approvals = page.locator('[data-kind-count="approval"]')
    assert (all_open.inner_text(), approvals.inner_text()) == ("2", "2")
    page.evaluate("window.__noReload = true")
    partner.start("deployer", "deploy build 2026.12.07-3 to staging")
    page.locator(f'{ITEMS} .inbox-headline:text("Deploy 2026.12.07-3 to staging")').wait_for(
        timeout=20000
    )
    wait_until(lambda: all_open.inner_text() == "3", 10, what="the count of all open items")
    assert approvals.inner_text() == "3"
    assert page.evaluate("window.__noReload") is True
    assert errors == []
    context.close()
