"""A channel in Django admin as a tenant's admin makes it: the form shows the chosen medium's
fields only (the others are neither checked nor kept), errors sit next to their field, and
"Send a test" sends one now through the medium (a real receiver on loopback, Django's mail
backend, the Slack stand-in) and says what it answered, audited as ``channel.tested``."""

import re
import socket
from http import HTTPStatus

import pytest

from integrations.slack.settings import slack_app_save
from notifications.channel_settings import channel_save
from notifications.models import Channel, Delivery
from runtime.kernel.task_models import AuditEvent
from tests.admin_pages import tenant_admin_client
from tests.integrations.slack.standin import BOT_TOKEN, SIGNING_SECRET, SlackStandIn

pytestmark = pytest.mark.django_db
ADD = "/admin/notifications/channel/add/"


def page_messages(response) -> list[str]:
    return [str(m) for m in response.context["messages"]] if response.context else []


def field_errors(html: str, field: str) -> list[str]:
    """The errors Django admin shows in the row of ``field``."""
    row = re.search(
        rf'<div class="form-row[^"]*field-{field}[^"]*">(.*?)</div>\s*</div>', html, re.S
    )
    return re.findall(r"<li>(.*?)</li>", row.group(1)) if row else []


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def admin_a(world):
    return tenant_admin_client(world.a)


def test_the_add_form_has_a_section_per_medium_and_a_channels_page_only_its_own(admin_a, world):
    html = admin_a.get(ADD).content.decode()
    # Without JavaScript every section shows, each saying which kinds it is for.
    assert 'class="module aligned channel-medium medium-email"' in html
    assert 'class="module aligned channel-medium medium-slack_app"' in html
    assert "channel-medium medium-slack medium-teams medium-webhook" in html
    assert "admin-console.js" in html
    mail, _ = channel_save(tenant=world.a.tenant, name="mail", kind="email", email_roles=["admin"])
    page = admin_a.get(f"/admin/notifications/channel/{mail.pk}/change/").content.decode()
    assert 'name="email_roles"' in page and 'name="email_addresses"' in page
    assert 'name="url"' not in page and 'name="slack_channel"' not in page
    assert 'name="kind"' not in page  # chosen when it was made
    assert "Send a test" in page


def test_only_the_chosen_mediums_fields_are_checked_and_kept(admin_a, world, settings):
    settings.PUSH_ALLOW_PRIVATE_HOSTS = False
    response = admin_a.post(
        ADD,
        {
            "name": "mail",
            "kind": "email",
            "enabled": "on",
            "email_roles": ["operator"],
            "email_addresses": "ops@acme.test",
            # Typed into other mediums' sections (a page without JavaScript shows them):
            "url": "http://10.0.0.1/not-checked",
            "slack_channel": "not a channel id",
        },
    )
    assert response.status_code == HTTPStatus.FOUND, field_errors(response.content.decode(), "url")
    mail = Channel.objects.get(name="mail")
    assert (mail.email_roles, mail.email_addresses) == (["operator"], ["ops@acme.test"])
    assert (mail.url_encrypted, mail.url_hint, mail.slack_channel) == ("", "", "")
    assert mail.tenant == world.a.tenant

    response = admin_a.post(
        ADD,
        {
            "name": "hook",
            "kind": "teams",
            "email_roles": ["admin"],
            "email_addresses": "not an address",
            "url": "https://teams.example/webhook/x",
        },
    )
    assert response.status_code == HTTPStatus.FOUND
    hook = Channel.objects.get(name="hook")
    assert (hook.email_roles, hook.email_addresses, hook.url_hint) == (
        [],
        [],
        "https://teams.example/…",
    )


@pytest.mark.parametrize(
    "form, field, error",
    [
        ({"kind": "webhook", "url": "http://10.0.0.1/x"}, "url", "the URL cannot be used"),
        ({"kind": "slack", "url": ""}, "url", "this channel needs a URL"),
        ({"kind": "email"}, "email_roles", "needs roles or addresses"),
        ({"kind": "email", "email_addresses": "nope"}, "email_addresses", "not an e-mail"),
        ({"kind": "slack_app", "slack_channel": "C0123"}, "slack_channel", "Slack app first"),
    ],
)
def test_an_error_is_shown_next_to_its_field_and_nothing_is_saved(admin_a, form, field, error):
    response = admin_a.post(ADD, {"name": "bad", **form})
    assert response.status_code == HTTPStatus.OK
    errors = field_errors(response.content.decode(), field)
    assert any(error in e for e in errors), (field, errors)
    assert not Channel.objects.exists()


def test_send_a_test_through_a_webhook_reaches_the_receiver_and_is_audited(
    admin_a, world, notify, receivers
):
    receiver = receivers()
    channel, secret = channel_save(
        tenant=world.a.tenant, name="signed", kind="webhook", url=receiver.url
    )
    receiver.secret = secret
    response = admin_a.post(f"/admin/notifications/channel/{channel.pk}/send-test/", follow=True)
    assert response.status_code == HTTPStatus.OK
    assert "Sent a test through signed." in page_messages(response)
    assert [event["type"] for event in receiver.events] == ["interaction.test"]
    assert receiver.bad_signatures == 0
    delivery = Delivery.objects.get(channel=channel)
    assert (delivery.event, delivery.state, delivery.attempts) == ("test", "delivered", 1)
    audit = AuditEvent.objects.get(tenant=world.a.tenant, action="channel.tested")
    assert audit.actor == world.a.admin.subject and audit.via == "admin"
    assert audit.detail == {
        "channel": channel.public_id,
        "name": "signed",
        "kind": "webhook",
        "sent": True,
        "error": "",
    }
    # A GET sends nothing.
    assert admin_a.get(f"/admin/notifications/channel/{channel.pk}/send-test/").status_code == 405


def test_a_test_the_receiver_refuses_says_why_once_and_is_never_retried(
    admin_a, world, notify, receivers
):
    receiver = receivers(script=[500])
    refused, _ = channel_save(tenant=world.a.tenant, name="refused", kind="slack", url=receiver.url)
    gone, _ = channel_save(
        tenant=world.a.tenant,
        name="gone",
        kind="teams",
        url=f"http://127.0.0.1:{closed_port()}/hook",
    )
    response = admin_a.post(
        "/admin/notifications/channel/",
        {"action": "send_test", "_selected_action": [refused.pk, gone.pk]},
        follow=True,
    )
    assert response.status_code == HTTPStatus.OK
    shown = page_messages(response)
    assert "The test through refused failed: HTTP 500" in shown
    assert any(m.startswith("The test through gone failed: network:") for m in shown), shown
    assert receiver.arrived == 1
    assert set(Delivery.objects.values_list("state", "attempts")) == {("failed", 1)}
    outcomes = AuditEvent.objects.filter(action="channel.tested").values_list("detail", flat=True)
    assert sorted((d["name"], d["sent"]) for d in outcomes) == [("gone", False), ("refused", False)]


def test_send_a_test_by_email_and_through_the_slack_app(
    admin_a, world, notify, settings, mailoutbox
):
    mail, _ = channel_save(
        tenant=world.a.tenant, name="mail", kind="email", email_addresses=["ops@acme.test"]
    )
    standin = SlackStandIn().start()
    try:
        settings.SLACK_API_URL = standin.url
        slack_app_save(tenant=world.a.tenant, bot_token=BOT_TOKEN, signing_secret=SIGNING_SECRET)
        slack, _ = channel_save(
            tenant=world.a.tenant, name="slack", kind="slack_app", slack_channel="C0DEPLOYS"
        )
        response = admin_a.post(
            "/admin/notifications/channel/",
            {"action": "send_test", "_selected_action": [mail.pk, slack.pk]},
            follow=True,
        )
        posted = standin.called("chat.postMessage")
    finally:
        standin.stop()
    assert {"Sent a test through mail.", "Sent a test through slack."} <= set(
        page_messages(response)
    )
    assert [m.to for m in mailoutbox] == [["ops@acme.test"]]
    assert [body["channel"] for body in posted] == ["C0DEPLOYS"]


def test_another_tenants_channel_is_never_tested(admin_a, world, notify, receivers):
    receiver = receivers()
    theirs, _ = channel_save(tenant=world.b.tenant, name="theirs", kind="slack", url=receiver.url)
    response = admin_a.post(f"/admin/notifications/channel/{theirs.pk}/send-test/")
    assert response.status_code == HTTPStatus.NOT_FOUND
    # The change list's action runs on the tenant's own channels only.
    admin_a.post(
        "/admin/notifications/channel/", {"action": "send_test", "_selected_action": [theirs.pk]}
    )
    assert receiver.arrived == 0
    assert not Delivery.objects.exists()
    assert not AuditEvent.objects.filter(action="channel.tested").exists()


def test_a_channel_made_changed_and_deleted_in_admin_is_audited_never_with_its_url(admin_a, world):
    admin_a.post(
        ADD, {"name": "hook", "kind": "slack", "url": "https://hooks.slack.example/T/B/first"}
    )
    channel = Channel.objects.get(name="hook")
    admin_a.post(
        f"/admin/notifications/channel/{channel.pk}/change/",
        {"name": "hook two", "url": "https://hooks.slack.example/T/B/second", "kinds": []},
    )
    admin_a.post(f"/admin/notifications/channel/{channel.pk}/delete/", {"post": "yes"})
    assert not Channel.objects.exists()
    rows = list(
        AuditEvent.objects.filter(tenant=world.a.tenant, action__startswith="channel.").order_by(
            "id"
        )
    )
    assert [(r.action, r.actor, r.via) for r in rows] == [
        ("channel.created", world.a.admin.subject, "admin"),
        ("channel.changed", world.a.admin.subject, "admin"),
        ("channel.deleted", world.a.admin.subject, "admin"),
    ]
    assert rows[1].detail["changed"] == ["name", "url"]
    assert not any("first" in str(r.detail) or "second" in str(r.detail) for r in rows)


def test_a_channel_made_from_a_shell_is_audited_as_the_shells(world):
    from io import StringIO

    from django.core.management import call_command

    call_command(
        "channels",
        "add",
        "email",
        "--tenant",
        world.a.tenant.slug,
        "--name",
        "mail",
        "--roles",
        "admin",
        stdout=StringIO(),
    )
    row = AuditEvent.objects.get(tenant=world.a.tenant, action="channel.created")
    assert row.via == "shell" and row.actor.startswith("shell")


def test_the_action_sends_at_most_three_tests_at_once_and_says_so(
    admin_a, world, notify, mailoutbox
):
    made = [
        channel_save(
            tenant=world.a.tenant, name=f"mail {n}", kind="email", email_addresses=["a@acme.test"]
        )[0]
        for n in range(4)
    ]
    response = admin_a.post(
        "/admin/notifications/channel/",
        {"action": "send_test", "_selected_action": [c.pk for c in made]},
        follow=True,
    )
    assert len(mailoutbox) == 3
    assert "Sent 3 tests; choose fewer channels." in page_messages(response)


def test_a_members_own_channel_keeps_its_member_when_changed_in_admin(admin_a, world):
    channel, _ = channel_save(
        tenant=world.a.tenant,
        name="mine",
        kind="email",
        email_roles=["admin"],
        member_email=world.a.operator.email,
    )
    page = admin_a.get(f"/admin/notifications/channel/{channel.pk}/change/").content.decode()
    assert f'value="{world.a.operator.email}"' in page
    response = admin_a.post(
        f"/admin/notifications/channel/{channel.pk}/change/",
        {"name": "mine, renamed", "email_roles": ["admin"], "member": world.a.operator.email},
    )
    assert response.status_code == HTTPStatus.FOUND
    channel.refresh_from_db()
    assert channel.name == "mine, renamed" and channel.member.user == world.a.operator
    # Another tenant's member is refused next to the field.
    response = admin_a.post(
        f"/admin/notifications/channel/{channel.pk}/change/",
        {"name": "mine", "email_roles": ["admin"], "member": world.b.operator.email},
    )
    assert response.status_code == HTTPStatus.OK
    assert field_errors(response.content.decode(), "member") == [
        f"No member of {world.a.tenant.slug} has this e-mail address."
    ]
    channel.refresh_from_db()
    assert channel.name == "mine, renamed"
