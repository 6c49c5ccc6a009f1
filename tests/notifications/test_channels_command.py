"""`manage.py channels` (the Slack app's set-up too): channels kept as code."""

from io import StringIO

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from connections.crypto import secret_decrypt
from integrations.models import SlackApp
from notifications.models import Channel, Delivery
from tests.integrations.slack.standin import BOT_TOKEN, SIGNING_SECRET

pytestmark = pytest.mark.django_db


def channels(*args) -> tuple[str, str]:
    out, err = StringIO(), StringIO()
    call_command("channels", *args, stdout=out, stderr=err)
    return out.getvalue(), err.getvalue()


def test_add_slack_sets_up_the_app_and_prints_the_request_url_on_its_own_line(world, settings):
    settings.PUBLIC_BASE_URL = "https://countersign.example"
    out, _ = channels(
        "add",
        "slack",
        "--tenant",
        "acme",
        "--bot-token",
        BOT_TOKEN,
        "--signing-secret",
        SIGNING_SECRET,
        "--channel",
        "C0DEPLOY",
        "--tools",
        "deploy",
    )
    assert "https://countersign.example/integrations/slack/acme/interactions" in out.splitlines()
    app = SlackApp.objects.get(tenant=world.a.tenant)
    assert secret_decrypt(app.bot_token_encrypted) == BOT_TOKEN
    assert BOT_TOKEN not in app.bot_token_encrypted and SIGNING_SECRET not in out
    channel = Channel.objects.get()
    assert (channel.kind, channel.slack_channel, channel.tools) == (
        "slack_app",
        "C0DEPLOY",
        ["deploy"],
    )
    # Again with the same name: changed, the app kept (its secrets need not be given again).
    out, _ = channels(
        "add", "slack", "--tenant", "acme", "--channel", "C0OTHER", "--omit-arguments"
    )
    assert out.startswith("Changed channel slack (slack)")
    channel.refresh_from_db()
    assert (channel.slack_channel, channel.omit_arguments) == ("C0OTHER", True)
    listed, _ = channels("list", "--tenant", "acme")
    assert "C0OTHER" in listed and "[arguments omitted]" in listed and BOT_TOKEN not in listed
    manifest, _ = channels("slack-manifest", "--tenant", "acme")
    assert '"users:read.email"' in manifest and "/integrations/slack/acme/interactions" in manifest


def test_add_each_kind_with_filters_then_test_and_remove(world, settings):
    settings.PUSH_ALLOW_PRIVATE_HOSTS = False
    out, _ = channels(
        "add",
        "email",
        "--tenant",
        "acme",
        "--name",
        "ops",
        "--roles",
        "operator,admin",
        "--addresses",
        "oncall@acme.test",
        "--kinds",
        "approval",
        "--agents",
        "deployer",
    )
    assert out == "Added channel ops (email) in acme.\n"
    secret, err = channels(
        "add", "webhook", "--tenant", "acme", "--name", "pager", "--url", "https://hooks.example/x"
    )
    assert secret.strip().startswith("whsec_") and "shown this once" in err
    assert (
        secret_decrypt(Channel.objects.get(name="pager").signing_secret_encrypted) == secret.strip()
    )
    channels(
        "add",
        "slack-webhook",
        "--tenant",
        "acme",
        "--name",
        "chat",
        "--url",
        "https://hooks.example/s",
    )
    channels(
        "add", "teams", "--tenant", "acme", "--name", "teams", "--url", "https://hooks.example/t"
    )
    kinds = dict(Channel.objects.values_list("name", "kind"))
    assert kinds == {"ops": "email", "pager": "webhook", "chat": "slack", "teams": "teams"}
    ops = Channel.objects.get(name="ops")
    assert (ops.email_roles, ops.email_addresses, ops.kinds, ops.agents) == (
        ["operator", "admin"],
        ["oncall@acme.test"],
        ["approval"],
        ["deployer"],
    )
    listed, _ = channels("list", "--tenant", "acme")
    assert "https://hooks.example/…" in listed and "hooks.example/x" not in listed
    out, _ = channels("test", "pager", "--tenant", "acme")
    assert "queued" in out and Delivery.objects.filter(event="test").count() == 1
    channels("remove", ops.public_id, "--tenant", "acme")
    assert not Channel.objects.filter(name="ops").exists()
    assert not Channel.objects.filter(tenant=world.b.tenant).exists()


@pytest.mark.parametrize(
    "args, problem",
    [
        (["add", "email", "--tenant", "nope"], "No tenant 'nope'"),
        (["add", "email", "--tenant", "acme"], "needs roles or addresses"),
        (["add", "email", "--tenant", "acme", "--addresses", "not-an-address"], "not an e-mail"),
        (["add", "email", "--tenant", "acme", "--roles", "owner"], "owner is not one of"),
        (["add", "webhook", "--tenant", "acme"], "needs a URL"),
        (["add", "webhook", "--tenant", "acme", "--url", "http://127.0.0.1/x"], "cannot be used"),
        (["add", "slack", "--tenant", "acme", "--channel", "C0X"], "set up the tenant's Slack app"),
        (
            ["add", "slack", "--tenant", "acme", "--bot-token", "xoxp-user", "--channel", "C0X"],
            "Bot User OAuth Token",
        ),
        (["add", "email", "--tenant", "acme", "--roles", "admin", "--tools", "a b/c/d"], "not"),
        (["remove", "ghost", "--tenant", "acme"], "No channel 'ghost'"),
        (["test", "ghost", "--tenant", "globex"], "No channel 'ghost'"),
    ],
)
def test_bad_arguments_are_clear_errors_that_change_nothing(world, args, problem):
    with pytest.raises(CommandError, match=problem):
        channels(*args)
    assert not Channel.objects.exists() and not SlackApp.objects.exists()


def test_slack_with_a_channel_name_instead_of_an_id_is_refused(world):
    with pytest.raises(CommandError, match="Slack channel's ID"):
        channels(
            "add",
            "slack",
            "--tenant",
            "acme",
            "--bot-token",
            BOT_TOKEN,
            "--signing-secret",
            SIGNING_SECRET,
            "--channel",
            "#deploys",
        )
    assert not Channel.objects.exists() and not SlackApp.objects.exists()


def test_a_kind_never_changes_under_a_name(world):
    channels("add", "email", "--tenant", "acme", "--name", "ops", "--roles", "admin")
    with pytest.raises(CommandError, match="kind cannot change"):
        channels(
            "add", "webhook", "--tenant", "acme", "--name", "ops", "--url", "https://h.example/"
        )


def test_re_adding_a_members_own_channel_keeps_its_member_unless_told(world):
    """A shell that re-adds a channel changes only what it names: a member's own channel stays
    theirs (the settings page and admin keep it too) until ``--member`` says otherwise."""
    email = world.a.operator.email
    channels("add", "email", "--tenant", "acme", "--name", "mine", "--roles", "admin")
    out, _ = channels(
        "add", "email", "--tenant", "acme", "--name", "mine", "--roles", "admin", "--member", email
    )
    assert out.startswith("Changed channel mine")
    assert Channel.objects.get().member.user == world.a.operator
    channels("add", "email", "--tenant", "acme", "--name", "mine", "--roles", "operator")
    channel = Channel.objects.get()
    assert (channel.email_roles, channel.member.user) == (["operator"], world.a.operator)
    assert f"[own: {email}]" in channels("list", "--tenant", "acme")[0]
    # Another tenant's member is refused and changes nothing; "" makes it the team's again.
    with pytest.raises(CommandError, match="no member of this tenant"):
        channels(
            "add",
            "email",
            "--tenant",
            "acme",
            "--name",
            "mine",
            "--roles",
            "admin",
            "--member",
            world.b.operator.email,
        )
    assert Channel.objects.get().member.user == world.a.operator
    channels(
        "add", "email", "--tenant", "acme", "--name", "mine", "--roles", "admin", "--member", ""
    )
    assert Channel.objects.get().member is None
