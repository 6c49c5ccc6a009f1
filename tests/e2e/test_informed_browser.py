"""Informed decisions in Chromium, at desktop and phone sizes: the summary
on inbox rows; the first item on the first screen of a 390x844 phone; ``a`` shows the
arguments before anything is decided, and the decision carries the hash shown; after a
decision the next item opens."""

from urllib.parse import parse_qs

import pytest

from runtime.decisions.decision_models import Interaction, Receipt
from tests.e2e.test_operator_flows import PHONE, Partner, log_in
from tests.live import wait_until

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

DESKTOP = {"width": 1280, "height": 900}
ITEMS = '#inbox-list li.inbox-item[data-kind="approval"]'


def context_for(browser, size: str):
    if size == "phone":
        return browser.new_context(viewport=PHONE, is_mobile=True, has_touch=True)
    return browser.new_context(viewport=DESKTOP)


def held_deployments(
    partner, stack, page, builds: list[str], last: str = "production"
) -> list[str]:
    """Held deployments of ``builds`` (to staging, the last to ``last``), in the inbox, held
    in that order: each is sent once the one before it waits (the worker may run two turns
    at once, and the inbox lists the newest first)."""
    tasks = []
    for i, build in enumerate(builds):
        env = last if i == len(builds) - 1 else "staging"
        tasks.append(partner.start("deployer", f"deploy build {build} to {env}"))

        def arrived(count=i + 1):
            page.goto(f"{stack.url}/inbox/?kind=approval")
            return page.locator(ITEMS).count() >= count

        wait_until(arrived, 30, interval=0.5, what=f"{i + 1} approvals in the inbox")
    return tasks


@pytest.mark.parametrize("size", ["desktop", "phone"])
def test_the_inbox_shows_each_call_and_the_first_item_is_on_the_first_screen(
    live_stack, demo, browser, artifacts, size
):
    partner = Partner(live_stack, demo)
    context = context_for(browser, size)
    page = context.new_page()
    errors = []
    page.on("console", lambda m: m.type == "error" and errors.append(m.text))
    log_in(page, live_stack, demo)
    held_deployments(partner, live_stack, page, ["2026.12.05-1", "2026.12.05-2"])
    page.goto(f"{live_stack.url}/inbox/")
    rows = page.locator(ITEMS)
    # Newest first: the production deployment, then the staging one, each saying so.
    assert rows.nth(0).locator(".inbox-headline").inner_text() == (
        "Deploy 2026.12.05-2 to production"
    )
    assert rows.nth(1).locator(".inbox-headline").inner_text() == "Deploy 2026.12.05-1 to staging"
    page.screenshot(path=str(artifacts / f"informed-inbox-{size}.png"), full_page=False)
    viewport = PHONE if size == "phone" else DESKTOP
    box = rows.nth(0).bounding_box()
    assert box["y"] >= 0 and box["y"] + box["height"] <= viewport["height"], box
    assert page.evaluate("document.documentElement.scrollWidth") <= viewport["width"]
    filters = page.locator("#inbox-filters")
    if size == "phone":
        # The filters and the bulk bar fold behind one button, and unfold from it.
        assert not filters.is_visible() and not page.locator("#bulk-form").is_visible()
        page.get_by_role("button", name="Search, filters and bulk").click()
        assert filters.is_visible() and page.locator("#bulk-form").is_visible()
        page.screenshot(path=str(artifacts / "informed-inbox-phone-filters.png"))
    else:
        assert filters.is_visible()
    # Search by an argument value.
    page.locator("#filter-q").fill("production")
    page.locator("#inbox-filters").get_by_role("button", name="Filter").click()
    page.wait_for_url("**q=production**")
    assert page.locator(ITEMS).count() == 1
    assert "production" in page.locator(f"{ITEMS} .inbox-headline").inner_text()
    assert errors == []
    context.close()


@pytest.mark.parametrize("size", ["desktop", "phone"])
def test_a_shows_the_arguments_then_a_again_approves_them_and_the_next_item_opens(
    live_stack, demo, browser, artifacts, size
):
    partner = Partner(live_stack, demo)
    context = context_for(browser, size)
    page = context.new_page()
    errors = []
    page.on("console", lambda m: m.type == "error" and errors.append(m.text))
    log_in(page, live_stack, demo)
    # Both to staging: the demo's production deployments need two people (its policy).
    tasks = held_deployments(
        partner, live_stack, page, ["2026.12.06-1", "2026.12.06-2"], last="staging"
    )
    page.goto(f"{live_stack.url}/inbox/?kind=approval")
    page.keyboard.press("j")
    current = page.locator(f"{ITEMS}.current")
    first_id = current.get_attribute("data-id")
    second_id = page.locator(ITEMS).nth(1).get_attribute("data-id")

    # a: the item opens with its arguments and asks; nothing is decided yet.
    page.keyboard.press("a")
    page.wait_for_url(f"**/inbox/{first_id}/**")
    bar = page.locator("#confirm-bar")
    bar.wait_for()
    arguments = page.locator("#arguments")
    assert '"build": "2026.12.06-2"' in arguments.inner_text()
    assert "Deploy 2026.12.06-2 to staging" in bar.inner_text()
    viewport = PHONE if size == "phone" else DESKTOP
    # The arguments and the button that approves them are on the screen together.
    box, button = arguments.bounding_box(), page.locator("#approve").bounding_box()
    assert box["y"] >= 0 and button["y"] + button["height"] <= viewport["height"], (box, button)
    shown = page.locator("#arguments-hash").inner_text()
    page.screenshot(path=str(artifacts / f"informed-confirm-{size}.png"))
    interaction = Interaction.objects.get(public_id=first_id)
    assert interaction.state == Interaction.State.OPEN and not Receipt.objects.exists()

    # Esc cancels; a again asks again; the second a approves, posting the hash shown.
    page.keyboard.press("Escape")
    assert not bar.is_visible()
    page.keyboard.press("a")
    with page.expect_request(lambda r: r.method == "POST" and first_id in r.url) as posted:
        page.keyboard.press("a")
    body = parse_qs(posted.value.post_data)
    assert body["decision"] == ["approve"] and body["shown_hash"] == [shown]

    # On to the next open item, told what was decided.
    page.wait_for_url(f"**/inbox/{second_id}/**")
    page.get_by_text("Approved. (Approve deploy / deploy_build: Deploy 2026.12.06-2").wait_for()
    assert page.get_by_role("link", name="← Back to the inbox").is_visible()
    page.screenshot(path=str(artifacts / f"informed-next-{size}.png"))
    receipt = Receipt.objects.get(interaction_public_id=first_id)
    assert receipt.arguments_hash == shown and receipt.arguments["build"] == "2026.12.06-2"

    # d asks for a reason; Ctrl+Enter denies; nothing is left, back to the inbox.
    page.keyboard.press("d")
    page.keyboard.type("not today")
    page.keyboard.press("Control+Enter")
    page.wait_for_url(f"{live_stack.url}/inbox/?kind=approval")
    page.get_by_text("Nothing else is waiting.").wait_for()
    done = [partner.wait_for_state("deployer", t, "TASK_STATE_COMPLETED") for t in tasks]
    texts = sorted(d["status"]["message"]["parts"][0]["text"] for d in done)
    assert texts[0].startswith("Build 2026.12.06-1 was not deployed to staging: not today")
    assert texts[1] == "Deployed build 2026.12.06-2 to staging."
    assert errors == []
    context.close()
