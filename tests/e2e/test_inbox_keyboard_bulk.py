"""The inbox by keyboard and in bulk, in Chromium."""

import pytest

from tests.e2e.test_operator_flows import Partner, log_in
from tests.live import wait_until

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

ITEMS = '#inbox-list li.inbox-item[data-kind="approval"]'


def wait_for_items(page, stack, count: int):
    def enough():
        page.goto(f"{stack.url}/inbox/?kind=approval")
        return page.locator(ITEMS).count() >= count

    wait_until(enough, 30, interval=0.5, what=f"{count} approvals in the inbox")


def test_keyboard_open_and_approve_then_bulk_deny(live_stack, demo, browser, artifacts):
    partner = Partner(live_stack, demo)
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    page = context.new_page()
    errors = []
    page.on("console", lambda m: m.type == "error" and errors.append(m.text))
    log_in(page, live_stack, demo)
    tasks = [partner.start("deployer", f"deploy build 2026.12.0{i}-1 to staging") for i in range(3)]
    wait_for_items(page, live_stack, 3)

    # ? shows the help; j selects the first item; o opens it.
    page.keyboard.press("?")
    assert page.locator("#keyboard-help").is_visible()
    page.screenshot(path=str(artifacts / "keyboard-help.png"), full_page=True)
    page.keyboard.press("?")
    assert not page.locator("#keyboard-help").is_visible()
    page.keyboard.press("j")
    first = page.locator(f"{ITEMS}.current")
    assert first.count() == 1
    first_url = first.get_attribute("data-url")
    page.screenshot(path=str(artifacts / "keyboard-selected.png"), full_page=True)
    page.keyboard.press("o")
    page.wait_for_url(f"{live_stack.url}{first_url}")
    page.get_by_role("button", name="Approve").wait_for()

    # Back in the inbox: j then a opens the selected item asking to approve it (never blind
    # from the list); a again approves it.
    page.goto(f"{live_stack.url}/inbox/?kind=approval")
    page.keyboard.press("j")
    page.keyboard.press("j")
    second_url = page.locator(f"{ITEMS}.current").get_attribute("data-url")
    page.keyboard.press("a")
    page.wait_for_url(f"{live_stack.url}{second_url}")
    page.locator("#confirm-bar").wait_for()
    page.keyboard.press("a")
    page.get_by_text("Approved.").wait_for()
    page.screenshot(path=str(artifacts / "keyboard-approved.png"), full_page=True)

    # Bulk deny the other two, with one reason.
    page.goto(f"{live_stack.url}/inbox/?kind=approval")
    assert page.locator(ITEMS).count() == 2
    for box in page.locator(f"{ITEMS} input[type=checkbox]").all():
        box.check()
    page.get_by_label("Reason (for every selected item)").fill("change freeze")
    page.screenshot(path=str(artifacts / "bulk-selected.png"), full_page=True)
    page.get_by_role("button", name="Deny selected").click()
    page.locator("#bulk-summary").wait_for()
    assert page.locator('tr[data-outcome="decided"]').count() == 2
    # The outcomes are counted in words, never as their keys.
    assert page.locator("#bulk-summary").inner_text().strip() == "Denied: 2"
    page.screenshot(path=str(artifacts / "bulk-denied.png"), full_page=True)

    finals = [partner.wait_for_state("deployer", t, "TASK_STATE_COMPLETED") for t in tasks]
    texts = [f["status"]["message"]["parts"][0]["text"] for f in finals]
    assert sum("Deployed build" in t for t in texts) == 1, texts
    page.goto(f"{live_stack.url}/inbox/?state=decided&kind=approval")
    assert page.locator("#inbox-list li.inbox-item").count() == 3
    assert errors == []
    context.close()
