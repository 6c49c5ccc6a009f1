"""The demo tenant's admin, in a real browser at a desktop's and a phone's size, sets the
tenant's default expiry and reminders (one ladder sentence, with a wrong one first: the
error is next to the field), an audit retention, and the tenant's own OAuth app for Google
Drive (its issuer a real OAuth stand-in on 127.0.0.1), then runs "check" on it: passed with
the right secret, failed in words with a wrong one."""

import uuid

import pytest

from connections.models import TenantApp
from runtime.kernel.task_models import AuditEvent
from tenants.models import Membership, Tenant
from tests.connections.oauth_stub import StubProvider

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

SIZES = {"desktop": {"width": 1280, "height": 900}, "phone": {"width": 390, "height": 844}}
CHECK = "Check the selected OAuth apps at their providers"


def log_in(page, base, login) -> None:
    page.goto(f"{base}/admin/login/")
    page.get_by_label("E-mail address").fill(login["email"])
    page.get_by_label("Password").fill(login["password"])
    page.get_by_role("button", name="Log in").click()
    page.locator("#admin-scope").get_by_text("Demo Co").wait_for()


# Both sizes in one test: the live server caches content type ids, which the database flush
# between transactional tests renumbers.
def test_a_tenant_admin_sets_the_default_ladder_and_an_oauth_app_and_checks_it(
    live_stack, demo, browser, artifacts
):
    base = live_stack.url
    admin = demo["logins"]["admin"]
    tenant = Tenant.objects.get(pk=Membership.objects.get(user__email=admin["email"]).tenant_id)
    with StubProvider() as provider:
        for size, viewport in SIZES.items():
            hours = 20 if size == "desktop" else 22
            client_id = f"demo-{size}-{uuid.uuid4().hex[:6]}"
            provider.clients[client_id] = "the-right-secret"
            context = browser.new_context(viewport=viewport, is_mobile=size == "phone")
            page = context.new_page()
            errors: list[str] = []
            page.on("console", lambda m, errors=errors: m.type == "error" and errors.append(m.text))
            log_in(page, base, admin)

            page.goto(f"{base}/admin/tenants/tenant/{tenant.pk}/change/")
            ladder = page.get_by_label("Default expiry and reminders")
            ladder.fill("remind after 1h; expire after 2h; remind after 3h")
            page.get_by_role("button", name="Save", exact=True).click()
            said = page.locator(".form-row.field-default_ladder .errorlist")
            said.get_by_text("no step can follow expire").wait_for()
            ladder = page.get_by_label("Default expiry and reminders")
            ladder.fill(
                f"remind after 1h; escalate to admins after 4h; warn 30m before expiry; "
                f"expire after {hours}h, then deny"
            )
            page.get_by_label("Keep the audit for (days)").fill("100")
            page.get_by_role("button", name="Save", exact=True).click()
            page.locator(".form-row.field-audit_retention_days .errorlist").get_by_text(
                "at least 180 days"
            ).wait_for()
            page.get_by_label("Keep the audit for (days)").fill("400")
            page.screenshot(path=str(artifacts / f"tenant-settings-{size}.png"), full_page=True)
            page.get_by_role("button", name="Save", exact=True).click()
            page.get_by_text("was changed successfully").wait_for()
            tenant.refresh_from_db()
            assert tenant.default_expiry["after"] == f"{hours}h"
            assert tenant.audit_retention_days == 400

            page.goto(f"{base}/admin/connections/tenantapp/add/")
            page.get_by_label("App").select_option(label="Google Drive")
            page.get_by_label("Client id").fill(client_id)
            page.get_by_label("Client secret").fill("a-wrong-secret")
            page.get_by_label("Server URL").fill(provider.base_url)
            page.get_by_role("button", name="Save", exact=True).click()
            page.get_by_text("was added successfully").wait_for()
            row = TenantApp.objects.get(tenant=tenant, client_id=client_id)
            assert "a-wrong-secret" not in page.content()

            page.locator(f'input[name="_selected_action"][value="{row.pk}"]').check()
            page.locator('select[name="action"]').select_option(label=CHECK)
            page.locator('button[name="index"]').click()
            page.get_by_text("Google Drive: failed. The provider refused the client id").wait_for()

            page.goto(f"{base}/admin/connections/tenantapp/{row.pk}/change/")
            page.get_by_label("Client secret").fill("the-right-secret")
            page.get_by_role("button", name="Save", exact=True).click()
            page.get_by_text("was changed successfully").wait_for()
            page.locator(f'input[name="_selected_action"][value="{row.pk}"]').check()
            page.locator('select[name="action"]').select_option(label=CHECK)
            page.locator('button[name="index"]').click()
            page.get_by_text("Google Drive: passed.").wait_for()
            page.screenshot(path=str(artifacts / f"tenant-oauth-app-{size}.png"), full_page=True)

            # The connections page offers the tenant's own app.
            page.goto(f"{base}/connections/")
            page.get_by_role("button", name="Connect with Google Drive").wait_for()
            assert (
                "Not set up yet"
                not in page.locator("section", has_text="Google Drive").inner_text()
            )
            assert errors == []
            context.close()
            TenantApp.objects.filter(pk=row.pk).delete()
    actions = set(AuditEvent.objects.filter(tenant=tenant).values_list("action", flat=True))
    assert {"tenant.settings_changed", "oauth_app.set"} <= actions
