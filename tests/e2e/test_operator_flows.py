"""An operator in a real browser: held deploys and a connection request, end to end."""

import uuid

import httpx
import pytest

from tests.live import wait_until

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

PHONE = {"width": 390, "height": 844}


class Partner:
    """The partner agent's side: A2A 1.0 JSON-RPC with the demo token."""

    def __init__(self, stack, demo):
        self.base = stack.url
        self.headers = {"Authorization": f"Bearer {demo['token']}", "A2A-Version": "1.0"}

    def rpc(self, agent: str, method: str, params: dict) -> dict:
        response = httpx.post(
            f"{self.base}/a2a/demo/{agent}",
            json={"jsonrpc": "2.0", "id": str(uuid.uuid4()), "method": method, "params": params},
            headers=self.headers,
            timeout=30,
        )
        body = response.json()
        assert "result" in body, body
        return body["result"]

    def start(self, agent: str, text: str) -> str:
        result = self.rpc(
            agent,
            "SendMessage",
            {
                "message": {
                    "messageId": str(uuid.uuid4()),
                    "role": "ROLE_USER",
                    "parts": [{"text": text}],
                },
                "configuration": {"returnImmediately": True},
            },
        )
        return result["task"]["id"]

    def task(self, agent: str, task_id: str) -> dict:
        return self.rpc(agent, "GetTask", {"id": task_id})

    def wait_for_state(self, agent: str, task_id: str, state: str) -> dict:
        return wait_until(
            lambda: (t := self.task(agent, task_id))["status"]["state"] == state and t,
            30,
            interval=0.3,
            what=f"{task_id} to be {state}",
        )


def log_in(page, stack, demo):
    page.goto(f"{stack.url}/accounts/login/")
    page.get_by_label("Email").fill(demo["logins"]["operator"]["email"])
    page.get_by_label("Password").fill(demo["logins"]["operator"]["password"])
    page.get_by_role("button", name="Sign In").click()
    page.wait_for_url(f"{stack.url}/inbox/")


def approve_next(page, stack, prefix: str, artifacts=None, shot: str = ""):
    """On the open inbox: wait for an item to arrive by the poll, open it, approve it."""
    page.evaluate("window.__noReload = true")
    item = page.locator(f'#inbox-list a[id^="item-{prefix}"]').first
    item.wait_for(timeout=20000)
    # The item came in by the poll: the page was never reloaded.
    assert page.evaluate("window.__noReload") is True
    if artifacts:
        page.screenshot(path=str(artifacts / f"{shot}-inbox.png"), full_page=True)
    item.click()
    page.get_by_role("button", name="Approve").wait_for()
    if artifacts:
        page.screenshot(path=str(artifacts / f"{shot}-detail.png"), full_page=True)
    page.get_by_role("button", name="Approve").click()
    page.get_by_text("Approved.").wait_for()


def test_operator_approves_a_deploy_and_connects_github_for_the_coder(
    live_stack, demo, browser, artifacts
):
    partner = Partner(live_stack, demo)
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    page = context.new_page()
    log_in(page, live_stack, demo)

    # The deployer: its deploy is held; the approval comes into the open inbox by itself.
    task_id = partner.start("deployer", "deploy build 2026.10.06-1 to staging")
    approve_next(page, live_stack, "eff_", artifacts, "deployer")
    done = partner.wait_for_state("deployer", task_id, "TASK_STATE_COMPLETED")
    assert "Deployed build 2026.10.06-1 to staging" in done["status"]["message"]["parts"][0]["text"]

    # The coder: it asks for github first; connecting it answers the request.
    page.goto(f"{live_stack.url}/inbox/")
    task_id = partner.start("coder", "open a pull request on payments-api: fix rounding")
    connection = page.locator('#inbox-list a[id^="item-con_"]').first
    connection.wait_for(timeout=20000)
    connection.click()
    page.get_by_role("link", name="Connect github").click()
    page.get_by_label("Token for GitHub").fill("ghp_" + "e2e" * 12)
    page.get_by_role("button", name="Connect", exact=True).click()
    page.get_by_text("Connected GitHub.").wait_for()

    page.goto(f"{live_stack.url}/inbox/")
    approve_next(page, live_stack, "eff_", artifacts, "coder")
    done = partner.wait_for_state("coder", task_id, "TASK_STATE_COMPLETED")
    assert "Opened pull request" in done["status"]["message"]["parts"][0]["text"]
    context.close()


def test_inbox_and_decision_page_on_a_phone(live_stack, demo, browser, artifacts):
    partner = Partner(live_stack, demo)
    context = browser.new_context(viewport=PHONE, is_mobile=True, has_touch=True)
    page = context.new_page()
    log_in(page, live_stack, demo)
    partner.start("deployer", "deploy build 2026.11.01-3 to production")
    item = page.locator('#inbox-list a[id^="item-eff_"]').first
    item.wait_for(timeout=20000)
    page.screenshot(path=str(artifacts / "phone-inbox.png"), full_page=True)
    # Nothing is wider than the screen.
    assert page.evaluate("document.documentElement.scrollWidth") <= PHONE["width"]
    item.click()
    page.get_by_role("button", name="Deny").wait_for()
    page.screenshot(path=str(artifacts / "phone-detail.png"), full_page=True)
    assert page.evaluate("document.documentElement.scrollWidth") <= PHONE["width"]
    # By keyboard: the reason field, then Approve, then Deny, in that order.
    page.get_by_label("Reason (optional)").focus()
    page.keyboard.type("not on a Friday")
    page.keyboard.press("Tab")
    assert page.evaluate("document.activeElement.textContent") == "Approve"
    page.keyboard.press("Tab")
    assert page.evaluate("document.activeElement.textContent") == "Deny"
    page.keyboard.press("Enter")
    page.get_by_text("Denied.").wait_for()
    context.close()
