"""Out of office and Extend in a real browser: the operator opens My profile from
the account menu, sets "away until" with a delegate, sees it said, and comes back; then
extends a held deploy's deadline by an hour from its page."""

from datetime import timedelta

import pytest
from django.utils import timezone

from runtime.decisions.decision_models import Interaction
from tenants.models import Membership
from tests.e2e.test_operator_flows import Partner, log_in

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


def test_an_operator_sets_their_away_and_extends_an_item(live_stack, demo, browser, artifacts):
    context = browser.new_context(viewport={"width": 1280, "height": 1000})
    page = context.new_page()
    log_in(page, live_stack, demo)
    operator = Membership.objects.get(
        tenant__slug=demo["tenant"], user__email=demo["logins"]["operator"]["email"]
    )

    page.locator("details.account summary").click()
    page.get_by_role("link", name="My profile").click()
    page.wait_for_url(f"{live_stack.url}/me/")
    zone = operator.tenant.zone
    until = (timezone.now() + timedelta(days=3)).astimezone(zone).strftime("%Y-%m-%dT%H:%M")
    page.get_by_label("Until").fill(until)
    page.get_by_label("Delegate (optional)").select_option(
        label=f"{demo['logins']['admin']['email']} (Admin)"
    )
    page.get_by_role("button", name="Set my out of office").click()
    page.locator("#away-status").get_by_text("You are away").wait_for()
    page.screenshot(path=str(artifacts / "profile-away.png"), full_page=True)
    operator.refresh_from_db()
    assert operator.away_at() and operator.delegate.user.email == demo["logins"]["admin"]["email"]
    page.get_by_role("button", name="I'm back").click()
    page.get_by_text("Welcome back").wait_for()
    operator.refresh_from_db()
    assert operator.away_until is None

    task_id = Partner(live_stack, demo).start("deployer", "deploy build 2026.12.04-9 to staging")
    page.goto(f"{live_stack.url}/inbox/")
    item = page.locator('#inbox-list a[id^="item-eff_"]').first
    item.wait_for(timeout=20000)
    item.click()
    held = Interaction.objects.get(task__public_id=task_id, state="open")
    deadline = held.expires_at
    page.get_by_label("Extend the deadline by").select_option("1h")
    page.get_by_role("button", name="Extend", exact=True).click()
    page.get_by_text("Extended by 1 hour").wait_for()
    page.screenshot(path=str(artifacts / "item-extended.png"), full_page=True)
    held.refresh_from_db()
    assert held.expires_at == deadline + timedelta(hours=1)
    context.close()
