"""The notification settings page: tenant-scoped, admins only for channels, CSRF, bad input."""

import pytest
from django.test import Client

from connections.crypto import secret_decrypt
from notifications.models import Channel, Delivery, Preference

pytestmark = pytest.mark.django_db

NEW = "/settings/notifications/channels/new"


def webhook_form(**extra) -> dict:
    return {
        "name": "pager",
        "kind": "webhook",
        "enabled": "on",
        "url": "https://hooks.example/x",
        **extra,
    }


def test_an_admin_adds_a_webhook_channel_and_sees_its_secret_once(world):
    admin = world.a.client_for(world.a.admin)
    response = admin.post(NEW, webhook_form(kinds=["approval"], tools="deploy/deploy_build"))
    assert response.status_code == 200
    channel = Channel.objects.get()
    secret = secret_decrypt(channel.signing_secret_encrypted)
    assert secret.startswith("whsec_") and secret in response.content.decode()
    # Stored encrypted; never shown again.
    assert "hooks.example/x" not in channel.url_encrypted
    assert secret_decrypt(channel.url_encrypted) == "https://hooks.example/x"
    assert (channel.tenant, channel.kinds, channel.tools) == (
        world.a.tenant,
        ["approval"],
        ["deploy/deploy_build"],
    )
    assert not channel.omit_arguments  # summaries and arguments go by default
    again = admin.get(f"/settings/notifications/channels/{channel.public_id}/")
    assert secret not in again.content.decode() and "hooks.example/x" not in again.content.decode()
    listing = admin.get("/settings/notifications/").content.decode()
    assert "pager" in listing and secret not in listing


def test_editing_a_channel_keeps_its_url_when_none_is_given(world):
    admin = world.a.client_for(world.a.admin)
    admin.post(NEW, webhook_form())
    channel = Channel.objects.get()
    response = admin.post(
        f"/settings/notifications/channels/{channel.public_id}/",
        {"name": "pager 2", "kind": "webhook", "agents": "deployer"},
    )
    assert response.status_code == 302
    channel.refresh_from_db()
    assert (channel.name, channel.enabled, channel.agents) == ("pager 2", False, ["deployer"])
    assert secret_decrypt(channel.url_encrypted) == "https://hooks.example/x"


@pytest.mark.parametrize(
    "form, problem",
    [
        (webhook_form(url="ftp://hooks.example/x"), "cannot be used"),
        (webhook_form(url="http://127.0.0.1/x"), "cannot be used"),
        (webhook_form(url=""), "needs a URL"),
        ({"name": "m", "kind": "email"}, "needs roles or addresses"),
        ({"name": "m", "kind": "email", "email_addresses": "not-an-address"}, "not an e-mail"),
        (webhook_form(tools="deploy/x/y"), "is not"),
        (webhook_form(kind="sms"), "valid choice"),
        (webhook_form(name="  "), "name"),
    ],
)
def test_bad_input_gets_a_clear_error_and_changes_nothing(world, form, problem):
    response = world.a.client_for(world.a.admin).post(NEW, form)
    assert response.status_code == 400
    assert problem in response.content.decode()
    assert not Channel.objects.exists()


@pytest.mark.parametrize("role", ["operator", "viewer"])
def test_only_admins_change_channels(world, role):
    Channel.objects.create(
        tenant=world.a.tenant, name="x", kind="email", email_addresses=["a@a.test"]
    )
    channel = Channel.objects.get()
    client = world.a.client_for(getattr(world.a, role))
    assert client.get("/settings/notifications/").status_code == 200
    base = f"/settings/notifications/channels/{channel.public_id}"
    assert client.post(NEW, webhook_form()).status_code == 403
    assert client.get(NEW).status_code == 403
    assert (
        client.post(
            f"{base}/", {"name": "y", "kind": "email", "email_roles": ["admin"]}
        ).status_code
        == 403
    )
    assert client.post(f"{base}/test").status_code == 403
    assert client.post(f"{base}/delete").status_code == 403
    assert Channel.objects.get().name == "x" and not Delivery.objects.exists()


def test_another_tenants_channel_answers_404(world):
    Channel.objects.create(
        tenant=world.a.tenant, name="x", kind="email", email_addresses=["a@a.test"]
    )
    channel = Channel.objects.get()
    other = world.b.client_for(world.b.admin)
    base = f"/settings/notifications/channels/{channel.public_id}"
    assert other.get(f"{base}/").status_code == 404
    assert (
        other.post(f"{base}/", {"name": "y", "kind": "email", "email_roles": ["admin"]}).status_code
        == 404
    )
    assert other.post(f"{base}/test").status_code == 404
    assert other.post(f"{base}/rotate").status_code == 404
    assert other.post(f"{base}/delete").status_code == 404
    listing = other.get("/settings/notifications/")
    assert list(listing.context["channels"]) == []
    assert Channel.objects.get().name == "x" and not Delivery.objects.exists()


def test_posts_need_the_csrf_token(world):
    client = Client(enforce_csrf_checks=True)
    client.force_login(world.a.admin)
    assert client.post(NEW, webhook_form()).status_code == 403
    assert client.post("/settings/notifications/me", {"digest_minutes": "5"}).status_code == 403
    assert not Channel.objects.exists() and not Preference.objects.exists()
    page = client.get(NEW)
    token = page.cookies["csrftoken"].value
    response = client.post(NEW, {**webhook_form(), "csrfmiddlewaretoken": token})
    assert response.status_code == 200 and Channel.objects.count() == 1


def test_the_test_button_queues_a_test_delivery(world, settings):
    settings.EMAIL_BACKEND = "django.core.mail.backends.locmem.EmailBackend"
    Channel.objects.create(
        tenant=world.a.tenant, name="x", kind="email", email_addresses=["a@a.test"]
    )
    channel = Channel.objects.get()
    client = world.a.client_for(world.a.admin)
    response = client.post(f"/settings/notifications/channels/{channel.public_id}/test")
    assert response.status_code == 302
    delivery = Delivery.objects.get()
    assert (delivery.channel, delivery.event, delivery.interaction) == (channel, "test", None)


def test_a_test_sends_through_the_channel(world, notify, django_capture_on_commit_callbacks):
    from django.core import mail

    Channel.objects.create(tenant=world.a.tenant, name="x", kind="email", email_roles=["viewer"])
    channel = Channel.objects.get()
    client = world.a.client_for(world.a.admin)
    with django_capture_on_commit_callbacks(execute=True):
        client.post(f"/settings/notifications/channels/{channel.public_id}/test")
    assert [m.to for m in mail.outbox] == [["viewer@acme.test"]]
    assert "Test notification" in mail.outbox[0].subject
    assert "delivered" in client.get("/settings/notifications/").content.decode()


def test_rotating_shows_a_new_secret_once(world):
    admin = world.a.client_for(world.a.admin)
    admin.post(NEW, webhook_form())
    channel = Channel.objects.get()
    old = secret_decrypt(channel.signing_secret_encrypted)
    response = admin.post(f"/settings/notifications/channels/{channel.public_id}/rotate")
    channel.refresh_from_db()
    new = secret_decrypt(channel.signing_secret_encrypted)
    assert new != old and new in response.content.decode()


def test_each_member_sets_their_own_preferences(world):
    viewer = world.a.client_for(world.a.viewer)
    response = viewer.post("/settings/notifications/me", {"digest_minutes": "15"})
    assert response.status_code == 302
    preference = Preference.objects.get()
    assert preference.membership.user == world.a.viewer
    assert (preference.email_enabled, preference.digest_minutes) == (False, 15)
    bad = viewer.post("/settings/notifications/me", {"email_enabled": "on", "digest_minutes": "-1"})
    assert bad.status_code == 400
    preference.refresh_from_db()
    assert (preference.email_enabled, preference.digest_minutes) == (False, 15)


def test_the_settings_page_needs_a_login(client):
    response = client.get("/settings/notifications/")
    assert response.status_code == 302 and "/accounts/login/" in response["Location"]
