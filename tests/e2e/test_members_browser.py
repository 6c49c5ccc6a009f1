"""The demo tenant's admin invites a member from Django admin's "Add member" form in a real
browser, at a desktop's and a phone's size: e-mail, role and an approver group, saved; the
members list says the invitation is pending, and the invitation e-mail is in development's
outbox, with a link the newcomer follows to set a password."""

import uuid

import pytest

from tenants.models import ApproverGroup, Membership

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

SIZES = {"desktop": {"width": 1280, "height": 900}, "phone": {"width": 390, "height": 844}}


# Both sizes in one test, one after the other, for one demo set-up. (Two tests would do as
# well: the live server forgets the content type ids a flush renumbers, tests/live_asgi.py.)
def test_a_tenant_admin_invites_a_member_from_the_add_form_and_the_invitation_is_sent(
    live_stack, demo, browser, artifacts
):
    base = live_stack.url
    admin = demo["logins"]["admin"]
    tenant_id = Membership.objects.get(user__email=admin["email"]).tenant_id
    for size, viewport in SIZES.items():
        group = ApproverGroup.objects.create(
            tenant_id=tenant_id, slug=f"release-{size}", name="Release managers"
        )
        # The outbox outlives a test run: this run's newcomer has an address of their own.
        email = f"newcomer-{size}-{uuid.uuid4().hex[:6]}@demo.test"
        context = browser.new_context(viewport=viewport, is_mobile=size == "phone")
        page = context.new_page()
        errors: list[str] = []
        page.on("console", lambda m, errors=errors: m.type == "error" and errors.append(m.text))
        page.goto(f"{base}/admin/login/")
        page.get_by_label("E-mail address").fill(admin["email"])
        page.get_by_label("Password").fill(admin["password"])
        page.get_by_role("button", name="Log in").click()
        page.locator("#admin-scope").get_by_text("Demo Co").wait_for()

        page.goto(f"{base}/admin/tenants/membership/add/")
        page.get_by_label("E-mail address").fill(email)
        page.get_by_label("Role").select_option("viewer")
        page.get_by_label(f"group:{group.slug}").check()
        assert page.get_by_label("Send the invitation now").is_checked()
        page.screenshot(path=str(artifacts / f"members-add-{size}.png"), full_page=True)
        page.get_by_role("button", name="Save", exact=True).click()
        page.get_by_text(f"Sent an invitation to {email}.").wait_for()

        membership = Membership.objects.get(user__email=email)
        assert membership.role == "viewer" and list(membership.approver_groups.all()) == [group]
        page.goto(f"{base}/admin/tenants/membership/?q={email}")
        row = page.locator("#result_list tbody tr", has_text=email)
        assert "pending: sent" in row.inner_text()
        page.screenshot(path=str(artifacts / f"members-list-{size}.png"), full_page=True)

        # The invitation e-mail, as development keeps it.
        page.goto(f"{base}/dev/outbox/")
        page.locator("tr", has_text=email).get_by_role("link").first.click()
        text = page.locator("pre.mail-text").inner_text()
        assert "admin@demo.test invited you to Demo Co (demo)" in text and "as a viewer" in text
        link = page.locator('pre.mail-text a[href^="http"]').first.get_attribute("href")
        assert link.startswith(f"{base}/accounts/invitation/")
        page.screenshot(path=str(artifacts / f"members-invitation-{size}.png"), full_page=True)

        newcomer = browser.new_context(viewport=viewport).new_page()
        newcomer.goto(link)
        newcomer.get_by_label("New password", exact=True).fill("a long new passphrase")
        newcomer.get_by_label("New password confirmation").fill("a long new passphrase")
        newcomer.get_by_role("button", name="Set my password").click()
        newcomer.get_by_text("Welcome to Demo Co.").wait_for()
        newcomer.context.close()
        assert errors == []
        context.close()
