"""In Chromium: the REST API's explorer (/api/docs/) shows every operation of the served schema,
under the site's Content-Security-Policy (no violation), fetching nothing from another host,
and its "Try it out" answers for real with an operator token."""

import pytest

from tests.e2e.test_csp_browser import REPORT_VIOLATIONS

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


def test_the_explorer_renders_the_schema_from_static_files_and_calls_the_api(
    live_stack, demo, browser
):
    context = browser.new_context()
    context.add_init_script(REPORT_VIOLATIONS)
    page = context.new_page()
    requested, console = [], []
    page.on("request", lambda request: requested.append(request.url))
    page.on("console", lambda message: console.append(message.text))
    response = page.goto(f"{live_stack.url}/api/docs/")
    assert "script-src 'self'" in response.headers["content-security-policy"]
    page.get_by_text("Countersign operator API").first.wait_for(timeout=15000)
    for operation in ("interactions_answer", "groups_answer", "tasks_cancel", "whoami"):
        page.locator(f'[id^="operations-"][id$="-{operation}"]').wait_for(timeout=10000)
    # Authorize with the demo's operator token, then call whoami from the page.
    page.locator(".auth-wrapper .authorize").click()
    bearer = page.locator(".auth-container").filter(has_text="bearerToken")
    bearer.locator("input").fill(demo["operator_token"])
    bearer.locator("button.authorize").click()
    bearer.get_by_text("Logout").wait_for()
    page.locator(".dialog-ux .close-modal").click()
    whoami = page.locator('[id$="-whoami"]')
    whoami.locator(".opblock-summary").click()
    whoami.locator("button.try-out__btn").click()
    whoami.locator("button.execute").click()
    answered = whoami.locator(".live-responses-table").get_by_text("program:demo-operator")
    answered.first.wait_for(timeout=10000)
    assert page.evaluate("window.__cspViolations") == []
    assert not [text for text in console if "Content Security Policy" in text], console
    assert requested and all(url.startswith(live_stack.url) for url in requested), requested
    context.close()
