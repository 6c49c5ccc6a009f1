"""Development's outbox in Chromium: an invitation's link followed from the outbox, and a
link of an HTML part (shown in a sandboxed frame) opening in the window itself."""

import uuid

import pytest
from django.core.mail import EmailMultiAlternatives
from django.core.management import call_command

from tests.e2e.test_operator_flows import log_in

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


def test_the_outbox_shows_mail_whose_links_work_in_a_browser(
    live_stack, demo, browser, artifacts, settings
):
    # What the live server does in development, done here: mail kept in its VAR_DIR, links
    # at the address it listens on.
    settings.EMAIL_BACKEND = "config.outbox.OutboxBackend"
    settings.LISTEN_URL = live_stack.url
    settings.PUBLIC_BASE_URL = settings.NOTIFY_BASE_URL = ""
    settings.ALLOWED_HOSTS = ["127.0.0.1"]
    call_command("members", "invite", "newcomer@demo.test", "--tenant", "demo")
    subject = f"An HTML message {uuid.uuid4().hex[:8]}"  # the outbox outlives a test run
    message = EmailMultiAlternatives(subject, "Open: the inbox", to=["operator@demo.test"])
    message.attach_alternative(
        f'<p style="color:#1f5fbf">Open <a href="{live_stack.url}/inbox/">the inbox</a></p>',
        "text/html",
    )
    message.send()

    context = browser.new_context(viewport={"width": 1280, "height": 800})
    page = context.new_page()
    errors = []
    page.on("console", lambda m: m.type == "error" and errors.append(m.text))
    log_in(page, live_stack, demo)
    page.goto(f"{live_stack.url}/dev/outbox/")
    page.get_by_role("link", name=subject).click()
    # Once the page and its frame have loaded, as a reader would click: runs that clicked
    # at once now and then stayed on this page (a race in the browser, not reproduced since).
    page.wait_for_load_state("load")
    frame = page.frame_locator("iframe.mail-html")
    frame.get_by_role("link", name="the inbox").click()
    page.wait_for_url(f"{live_stack.url}/inbox/")

    page.goto(f"{live_stack.url}/dev/outbox/")
    # Newest first: this run's invitation.
    page.get_by_role("link", name="You are invited to Demo Co on Countersign").first.click()
    page.screenshot(path=str(artifacts / "outbox-invitation.png"), full_page=True)
    link = page.locator('pre.mail-text a[href^="http"]')
    assert link.get_attribute("href").startswith(f"{live_stack.url}/accounts/invitation/")
    # The newcomer's own browser follows it.
    newcomer = browser.new_context().new_page()
    newcomer.goto(link.get_attribute("href"))
    newcomer.get_by_label("New password", exact=True).fill("a long new passphrase")
    newcomer.get_by_label("New password confirmation").fill("a long new passphrase")
    newcomer.get_by_role("button", name="Set my password").click()
    newcomer.get_by_text("Welcome to Demo Co.").wait_for()
    newcomer.screenshot(path=str(artifacts / "outbox-invitation-accepted.png"), full_page=True)
    assert errors == []
    context.close()
