"""The demo tenant's admin in a real browser, at a desktop's and a phone's size: makes a
channel choosing its medium and sees only that medium's fields, sends a test to a receiver on
loopback and reads the success message; makes a token choosing an agent from the list, sees
it once with a copy button, and never again.

The two sizes are two tests on one live server, each saving in Django admin: the second
saves after the flush that renumbered the content types (tests/live_asgi.py)."""

import re
import uuid

import pytest

from tenants.models import ApiToken, Membership
from tenants.tokens import authenticate_bearer
from tests.a2a_endpoint.receiver import Receiver
from tests.live import LiveStack

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

SIZES = {"desktop": {"width": 1280, "height": 900}, "phone": {"width": 390, "height": 844}}


@pytest.fixture(scope="module")
def console_stack(django_db_setup, django_db_blocker, tmp_path_factory):
    """A web server of its own that may post to loopback (the receiver): the tests' shared
    stack refuses private addresses, as production does. "Send a test" sends from the web
    process, so no worker is needed."""
    with django_db_blocker.unblock():
        stack = LiveStack(
            tmp_path_factory.mktemp("console"),
            extra_env={
                "PUSH_ALLOW_PRIVATE_HOSTS": "true",
                "CELERY_QUEUE": f"test-console-{uuid.uuid4().hex[:8]}",
            },
        )
        stack.start_web()
    yield stack
    stack.stop()


@pytest.fixture
def console(transactional_db, console_stack):
    yield console_stack
    console_stack.quiesce()


@pytest.fixture
def receiver():
    started = Receiver().start()
    yield started
    started.stop()


@pytest.mark.parametrize("size", SIZES)
def test_a_tenant_admin_makes_a_channel_tests_it_and_makes_a_token(
    console, demo, browser, artifacts, receiver, size
):
    base = console.url
    admin = demo["logins"]["admin"]
    tenant = Membership.objects.get(user__email=admin["email"]).tenant
    context = browser.new_context(viewport=SIZES[size], is_mobile=size == "phone")
    context.grant_permissions(["clipboard-read", "clipboard-write"], origin=base)
    page = context.new_page()
    errors: list[str] = []
    page.on("console", lambda m: m.type == "error" and errors.append(m.text))
    page.goto(f"{base}/admin/login/")
    page.get_by_label("E-mail address").fill(admin["email"])
    page.get_by_label("Password").fill(admin["password"])
    page.get_by_role("button", name="Log in").click()
    page.locator("#admin-scope").get_by_text(tenant.name).wait_for()

    # A channel: choosing the medium shows its fields only.
    page.goto(f"{base}/admin/notifications/channel/add/")
    page.locator("#id_name").fill(f"ops hook {size}")
    kind = page.locator("#id_kind")
    kind.select_option("email")
    assert page.locator("fieldset.medium-email").is_visible()
    assert page.locator("fieldset.medium-slack").is_hidden()
    assert page.locator("fieldset.medium-slack_app").is_hidden()
    kind.select_option("slack")
    assert page.locator("fieldset.medium-email").is_hidden()
    url = page.locator("#id_url")
    assert url.is_visible()
    url.fill(receiver.url)
    page.screenshot(path=str(artifacts / f"console-channel-add-{size}.png"), full_page=True)
    page.get_by_role("button", name="Save and continue editing").click()
    page.get_by_text("was added successfully").wait_for()
    # Its page: its own medium's section, and the test button.
    assert page.locator("fieldset.channel-medium").count() == 1
    assert page.locator("#id_email_roles").count() == 0
    page.get_by_role("button", name="Send a test").click()
    page.get_by_text(f"Sent a test through ops hook {size}.").wait_for()
    page.screenshot(path=str(artifacts / f"console-channel-tested-{size}.png"), full_page=True)
    assert receiver.arrived == 1 and len(receiver.events) == 1

    # A token for one agent, chosen from the tenant's list.
    page.goto(f"{base}/admin/tenants/apitoken/add/")
    page.locator("#id_kind").select_option("partner")
    page.locator("#id_subject").fill(f"partner:console-{size}")
    page.locator("#id_name").fill(f"console {size}")
    page.locator("#id_all_agents").uncheck()
    page.locator('input[name="agent_slugs"][value="deployer"]').check()
    page.screenshot(path=str(artifacts / f"console-token-add-{size}.png"), full_page=True)
    page.get_by_role("button", name="Save", exact=True).click()
    page.get_by_role("heading", name="Token created").wait_for()
    plaintext = page.locator("#plaintext").input_value()
    assert re.fullmatch(r"cs_[A-Za-z0-9]{12}_[A-Za-z0-9_-]{43}", plaintext)
    page.get_by_role("button", name="Copy").click()
    page.locator("#plaintext-status").get_by_text(re.compile("Copied|Selected")).wait_for()
    if page.locator("#plaintext-status").inner_text() == "Copied.":
        assert page.evaluate("navigator.clipboard.readText()") == plaintext
    page.screenshot(path=str(artifacts / f"console-token-created-{size}.png"), full_page=True)
    token = ApiToken.objects.get(subject=f"partner:console-{size}")
    assert token.agent_slugs == ["deployer"] and not token.all_agents
    assert authenticate_bearer(f"Bearer {plaintext}").token == token

    # Never again: not on its page, not on the list.
    secret = plaintext.split("_", 2)[2]
    for path in (f"/admin/tenants/apitoken/{token.pk}/change/", "/admin/tenants/apitoken/"):
        page.goto(f"{base}{path}")
        assert secret not in page.content()
    assert errors == []
    context.close()
