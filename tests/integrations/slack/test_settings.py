"""Setting up the tenant's Slack app: on the settings page, in Django admin
(scoped to the tenant admin's tenant), its secrets stored encrypted and never shown."""

import json

import pytest
from django.test import Client

from connections.crypto import secret_decrypt
from integrations.models import SlackApp
from notifications.models import Channel
from tests.admin_pages import tenant_admin_client
from tests.integrations.slack.standin import BOT_TOKEN, SIGNING_SECRET

pytestmark = pytest.mark.django_db
PAGE = "/settings/notifications/slack"


def test_the_admin_sets_up_the_app_and_sees_the_request_url_and_manifest(world, settings):
    settings.PUBLIC_BASE_URL = "https://countersign.example"
    admin = world.a.client_for(world.a.admin)
    page = admin.get(PAGE).content.decode()
    url = "https://countersign.example/integrations/slack/acme/interactions"
    assert url in page and "users:read.email" in page and "chat:write" in page
    manifest = json.loads(
        page.split('<pre id="manifest">')[1].split("</pre>")[0].replace("&quot;", '"')
    )
    assert manifest["settings"]["interactivity"] == {"is_enabled": True, "request_url": url}

    response = admin.post(PAGE, {"bot_token": BOT_TOKEN, "signing_secret": SIGNING_SECRET})
    assert response.status_code == 302
    app = SlackApp.objects.get(tenant=world.a.tenant)
    assert secret_decrypt(app.bot_token_encrypted) == BOT_TOKEN
    assert secret_decrypt(app.signing_secret_encrypted) == SIGNING_SECRET
    assert BOT_TOKEN not in app.bot_token_encrypted + app.signing_secret_encrypted
    again = (
        admin.get(PAGE).content.decode() + admin.get("/settings/notifications/").content.decode()
    )
    assert BOT_TOKEN not in again and SIGNING_SECRET not in again and app.bot_token_hint in again
    # Empty fields keep what is stored.
    assert admin.post(PAGE, {"bot_token": "", "signing_secret": ""}).status_code == 302
    assert secret_decrypt(SlackApp.objects.get().bot_token_encrypted) == BOT_TOKEN

    # A channel of the app: its Slack channel's ID.
    new = "/settings/notifications/channels/new"
    form = {"name": "deploys", "kind": "slack_app", "enabled": "on", "slack_channel": "#deploys"}
    refused = admin.post(new, form)
    assert refused.status_code == 400 and "channel&#x27;s ID" in refused.content.decode()
    assert admin.post(new, {**form, "slack_channel": "C0DEPLOY"}).status_code == 302
    assert Channel.objects.get().slack_channel == "C0DEPLOY"

    assert admin.post(f"{PAGE}/remove").status_code == 302
    assert not SlackApp.objects.exists()


@pytest.mark.parametrize(
    "form, problem",
    [
        ({"bot_token": "xoxp-a-user-token-123", "signing_secret": SIGNING_SECRET}, "xoxb-"),
        ({"bot_token": BOT_TOKEN, "signing_secret": "not a secret!"}, "letters and digits"),
        ({"bot_token": BOT_TOKEN, "signing_secret": ""}, "needs both"),
    ],
)
def test_bad_credentials_are_form_errors_that_save_nothing(world, form, problem):
    admin = world.a.client_for(world.a.admin)
    response = admin.post(PAGE, form)
    assert response.status_code == 400 and problem in response.content.decode()
    assert not SlackApp.objects.exists()


def test_only_the_tenants_admins_and_with_csrf(world):
    assert world.a.client_for(world.a.operator).get(PAGE).status_code == 403
    assert world.a.client_for(world.a.operator).post(PAGE, {}).status_code == 403
    assert Client().get(PAGE).status_code == 302  # to the login
    strict = Client(enforce_csrf_checks=True)
    strict.force_login(world.a.admin)
    form = {"bot_token": BOT_TOKEN, "signing_secret": SIGNING_SECRET}
    assert strict.post(PAGE, form).status_code == 403
    # Another tenant's admin sets their own app, never acme's.
    world.b.client_for(world.b.admin).post(PAGE, form)
    assert list(SlackApp.objects.values_list("tenant__slug", flat=True)) == ["globex"]


def test_a_tenant_admin_sets_the_app_in_django_admin_for_their_tenant_only(world):
    client = tenant_admin_client(world.a)
    add = "/admin/integrations/slackapp/add/"
    refused = client.post(add, {"bot_token": "nope", "signing_secret": SIGNING_SECRET})
    assert refused.status_code == 200 and "xoxb-" in refused.content.decode()
    response = client.post(add, {"bot_token": BOT_TOKEN, "signing_secret": SIGNING_SECRET})
    assert response.status_code == 302, response.content.decode()[:3000]
    app = SlackApp.objects.get()
    assert app.tenant == world.a.tenant and secret_decrypt(app.bot_token_encrypted) == BOT_TOKEN
    page = client.get(f"/admin/integrations/slackapp/{app.pk}/change/").content.decode()
    assert BOT_TOKEN not in page and SIGNING_SECRET not in page
    assert "/integrations/slack/acme/interactions" in page
    other = tenant_admin_client(world.b)
    assert other.get(f"/admin/integrations/slackapp/{app.pk}/change/").status_code == 404


def test_an_app_level_token_turns_on_socket_mode_on_the_page_and_from_a_shell(world):
    from io import StringIO

    from django.core.management import call_command

    from tests.integrations.slack.standin import APP_TOKEN

    admin = world.a.client_for(world.a.admin)
    refused = admin.post(
        PAGE, {"bot_token": BOT_TOKEN, "signing_secret": SIGNING_SECRET, "app_token": "xoxb-1-2-3"}
    )
    assert refused.status_code == 400 and "xapp-" in refused.content.decode()
    assert not SlackApp.objects.exists()
    saved = admin.post(
        PAGE, {"bot_token": BOT_TOKEN, "signing_secret": SIGNING_SECRET, "app_token": APP_TOKEN}
    )
    assert saved.status_code == 302
    app = SlackApp.objects.get()
    assert secret_decrypt(app.app_token_encrypted) == APP_TOKEN
    page = admin.get(PAGE).content.decode() + admin.get("/settings/notifications/").content.decode()
    assert APP_TOKEN not in page and app.app_token_hint in page and "Socket Mode" in page
    manifest = json.loads(
        admin.get(PAGE).content.decode().split('<pre id="manifest">')[1].split("</pre>")[0]
        .replace("&quot;", '"')
    )  # fmt: skip
    assert manifest["settings"]["socket_mode_enabled"] is True
    # Taken away on the page: the Request URL again.
    assert admin.post(PAGE, {"app_token_remove": "on"}).status_code == 302
    assert SlackApp.objects.get().app_token_encrypted == ""

    out = StringIO()
    call_command(
        "channels", "add", "slack", "--tenant", "acme", "--app-token", APP_TOKEN,
        "--channel", "C0DEPLOY", stdout=out,
    )  # fmt: skip
    assert "Socket Mode" in out.getvalue() and "/interactions" not in out.getvalue()
    assert secret_decrypt(SlackApp.objects.get().app_token_encrypted) == APP_TOKEN
    listing = StringIO()
    call_command("channels", "list", "--tenant", "acme", stdout=listing)
    assert "Socket Mode" in listing.getvalue() and APP_TOKEN not in listing.getvalue()
