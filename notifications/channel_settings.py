"""A tenant's notification channels as its admins set them (the settings page, Django admin,
``manage.py channels``): checked, saved with their secrets encrypted, rotated, deleted. What
each kind needs (an e-mail's recipients, a URL, the Slack app) is its medium's to check and
store (notifications.transports)."""

from django.db import transaction

from notifications.models import Channel
from notifications.transports import ChannelError, ChannelFields, transport_for
from tenants.models import Membership

__all__ = ["ChannelError", "channel_check", "channel_delete", "channel_save"]


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
    given = ChannelFields(list(email_roles), list(email_addresses), url, slack_channel)
    transport_for(kind).check(tenant=tenant, channel=channel, given=given)


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
    member_email: str = "",
) -> tuple[Channel, str]:
    """Create or change a channel; returns it and a new signing secret ("" if none was made).
    ``member_email``: whose own channel it is (a member of the tenant; "": the team's)."""
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
    member = None
    if member_email:
        member = Membership.objects.filter(tenant=tenant, user__email__iexact=member_email).first()
        if member is None:
            raise ChannelError(f"no member of this tenant has the e-mail address {member_email}")
    channel = channel or Channel(tenant=tenant, kind=kind)
    channel.member = member
    given = ChannelFields(list(email_roles), list(email_addresses), url, slack_channel)
    new_secret = transport_for(kind).store(channel=channel, given=given)
    channel.name = name
    channel.enabled = enabled
    channel.email_roles = list(email_roles)
    channel.email_addresses = list(email_addresses)
    channel.kinds = list(kinds)
    channel.agents = list(agents)
    channel.tools = list(tools)
    channel.omit_arguments = omit_arguments
    channel.save()
    return channel, new_secret


@transaction.atomic
def channel_secret_rotate(*, channel: Channel) -> str:
    """A new signing secret for a channel whose medium signs its requests (a webhook);
    returned once, stored encrypted."""
    secret = transport_for(channel.kind).secret_set(channel=channel)
    channel.save(update_fields=["signing_secret_encrypted", "updated_at"])
    return secret


@transaction.atomic
def channel_delete(*, channel: Channel) -> None:
    channel.delete()
