"""In Chromium: the pages work under their Content-Security-Policy, and
the browser reports no violation (an inline script or handler it refused to run)."""

import pytest

from tenants.models import Membership, Tenant, User
from tests.e2e.test_operator_flows import log_in

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

REPORT_VIOLATIONS = """
window.__cspViolations = [];
document.addEventListener("securitypolicyviolation", function (event) {
  window.__cspViolations.push(event.violatedDirective + " " + event.blockedURI);
});
"""


def test_pages_run_under_the_csp_and_the_tenant_switcher_still_switches(live_stack, demo, browser):
    operator = User.objects.get(email=demo["logins"]["operator"]["email"])
    other = Tenant.objects.create(slug="initech", name="Initech")
    Membership.objects.create(tenant=other, user=operator, role="viewer")
    context = browser.new_context()
    context.add_init_script(REPORT_VIOLATIONS)
    page = context.new_page()
    console = []
    page.on("console", lambda message: console.append(message.text))
    log_in(page, live_stack, demo)
    response = page.goto(f"{live_stack.url}/inbox/")
    assert "script-src 'self'" in response.headers["content-security-policy"]
    # The switcher has no button with JavaScript on: static/countersign.js submits on change.
    page.get_by_label("Tenant").select_option("initech")
    page.get_by_text("Now working in Initech.").wait_for(timeout=10000)
    for path in ("/inbox/", "/tasks/", "/audit/", "/connections/"):
        page.goto(f"{live_stack.url}{path}")
        assert page.evaluate("window.__cspViolations") == [], path
    assert not [text for text in console if "Content Security Policy" in text], console
    context.close()
