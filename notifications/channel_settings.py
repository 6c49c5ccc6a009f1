"""A tenant's notification channels as its admins set them (the settings page, Django admin,
``manage.py channels``): checked, saved with their secrets encrypted, rotated, deleted."""

import base64
import re
import secrets

from django.db import transaction

from connections.crypto import secret_encrypt
from connections.outbound import OutboundRefused, check_url
from integrations.models import SlackApp
from notifications.models import Channel

# A Slack channel's ID (public C…, private G…, or a direct message D…), as its details show.
SLACK_CHANNEL = re.compile(r"^[CGD][A-Z0-9]{2,39}$")
URL_KINDS = (Channel.Kind.SLACK, Channel.Kind.TEAMS, Channel.Kind.WEBHOOK)


class ChannelError(ValueError):
    """A channel's settings cannot be saved; the message says why (never a secret)."""


def _url_hint(url: str) -> str:
    host = url.split("//", 1)[-1].split("/", 1)[0].rsplit("@", 1)[-1]
    return f"{url.split('//', 1)[0]}//{host}/…"


def signing_secret_new() -> str:
    return "whsec_" + base64.b64encode(secrets.token_bytes(24)).decode()


def channel_check(
    *,
    tenant,
    channel: Channel | None,
    name: str,
    kind: str,
    email_roles,
    email_addresses,
    url: str,
    slack_channel: str = "",
) -> None:
    """Raise ChannelError saying why these settings cannot be saved (no network I/O)."""
    if kind not in Channel.Kind.values:
        raise ChannelError("unknown channel kind")
    if channel is not None and channel.kind != kind:
        raise ChannelError("a channel's kind cannot change; make a new channel")
    others = Channel.objects.filter(tenant=tenant, name=name)
    if channel is not None:
        others = others.exclude(pk=channel.pk)
    if others.exists():
        raise ChannelError("another channel has this name")
    if kind == Channel.Kind.EMAIL:
        if not email_roles and not email_addresses:
            raise ChannelError("an e-mail channel needs roles or addresses")
    elif kind == Channel.Kind.SLACK_APP:
        if not SlackApp.objects.filter(tenant=tenant).exists():
            raise ChannelError(
                "set up the tenant's Slack app first (its bot token and signing secret)"
            )
        if not SLACK_CHANNEL.match(slack_channel or ""):
            raise ChannelError(
                "give the Slack channel's ID (C0123…: the channel's details in Slack show it), "
                "not its name"
            )
    elif url:
        try:
            check_url(url, ["*"])
        except OutboundRefused as exc:
            raise ChannelError(f"the URL cannot be used: {exc}") from None
    elif channel is None or not channel.url_encrypted:
        raise ChannelError("this channel needs a URL")


@transaction.atomic
def channel_save(
    *,
    tenant,
    channel: Channel | None = None,
    name: str,
    kind: str,
    enabled: bool = True,
    email_roles=(),
    email_addresses=(),
    url: str = "",
    slack_channel: str = "",
    kinds=(),
    agents=(),
    tools=(),
    omit_arguments: bool = False,
) -> tuple[Channel, str]:
    """Create or change a channel; returns it and a new signing secret ("" if none was made)."""
    channel_check(
        tenant=tenant,
        channel=channel,
        name=name,
        kind=kind,
        email_roles=email_roles,
        email_addresses=email_addresses,
        url=url,
        slack_channel=slack_channel,
    )
    new_secret = ""
    channel = channel or Channel(tenant=tenant, kind=kind)
    if kind in URL_KINDS and url:
        channel.url_encrypted = secret_encrypt(url)
        channel.url_hint = _url_hint(url)
    if kind == Channel.Kind.WEBHOOK and not channel.signing_secret_encrypted:
        new_secret = signing_secret_new()
        channel.signing_secret_encrypted = secret_encrypt(new_secret)
    channel.name = name
    channel.enabled = enabled
    channel.email_roles = list(email_roles)
    channel.email_addresses = list(email_addresses)
    channel.slack_channel = slack_channel if kind == Channel.Kind.SLACK_APP else ""
    channel.kinds = list(kinds)
    channel.agents = list(agents)
    channel.tools = list(tools)
    channel.omit_arguments = omit_arguments
    channel.save()
    return channel, new_secret


@transaction.atomic
def channel_secret_rotate(*, channel: Channel) -> str:
    """A new signing secret for a webhook channel; returned once, stored encrypted."""
    if channel.kind != Channel.Kind.WEBHOOK:
        raise ChannelError("only webhook channels sign their requests")
    secret = signing_secret_new()
    channel.signing_secret_encrypted = secret_encrypt(secret)
    channel.save(update_fields=["signing_secret_encrypted", "updated_at"])
    return secret


@transaction.atomic
def channel_delete(*, channel: Channel) -> None:
    channel.delete()
