"""A tenant's notification channels as its admins set them (the settings page, Django admin,
``manage.py channels``): checked, saved with their secrets encrypted, rotated, deleted. What
each kind needs (an e-mail's recipients, a URL, the Slack app) is its medium's to check and
store (notifications.transports); a channel keeps only its own medium's fields. A test sent
from Django admin goes at once, its outcome audited."""

import uuid

from django.db import transaction

from notifications.models import Channel, Delivery
from notifications.services import delivery_send
from notifications.transports import ChannelError, ChannelFields, fields_of, transport_for
from runtime.kernel.audit import audit_record
from tenants.models import Membership

__all__ = [
    "ChannelError",
    "channel_check",
    "channel_delete",
    "channel_save",
    "channel_test_send",
]


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
        raise ChannelError("unknown channel kind", field="kind")
    if channel is not None and channel.kind != kind:
        raise ChannelError("a channel's kind cannot change; make a new channel", field="kind")
    others = Channel.objects.filter(tenant=tenant, name=name)
    if channel is not None:
        others = others.exclude(pk=channel.pk)
    if others.exists():
        raise ChannelError("another channel has this name", field="name")
    given = ChannelFields(list(email_roles), list(email_addresses), url, slack_channel)
    given = fields_of(kind, given)
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
    actor: str = "",
    via: str = "admin",
) -> tuple[Channel, str]:
    """Create or change a channel; returns it and a new signing secret ("" if none was made).
    ``member_email``: whose own channel it is (a member of the tenant; "": the team's). With
    ``actor`` (a person, a shell), audited as ``channel.created`` or ``channel.changed``
    naming the settings that changed (a URL as "url", never its value)."""
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
    before = {name: getattr(channel, name) for name in AUDITED} if channel else None
    channel = channel or Channel(tenant=tenant, kind=kind)
    channel.member = member
    given = fields_of(
        kind, ChannelFields(list(email_roles), list(email_addresses), url, slack_channel)
    )
    new_secret = transport_for(kind).store(channel=channel, given=given)
    channel.name = name
    channel.enabled = enabled
    channel.email_roles = given.email_roles
    channel.email_addresses = given.email_addresses
    channel.kinds = list(kinds)
    channel.agents = list(agents)
    channel.tools = list(tools)
    channel.omit_arguments = omit_arguments
    channel.save()
    if actor and before is None:
        _audited(channel, actor, via, "channel.created", {})
    elif actor and before is not None:
        changed = [
            name.removesuffix("_id") for name in AUDITED if getattr(channel, name) != before[name]
        ]
        if given.url:
            changed.append("url")
        if changed:
            _audited(channel, actor, via, "channel.changed", {"changed": changed})
    return channel, new_secret


# The settings of a channel its audit rows name when they change (its secrets never).
AUDITED = (
    "name",
    "enabled",
    "email_roles",
    "email_addresses",
    "slack_channel",
    "kinds",
    "agents",
    "tools",
    "omit_arguments",
    "member_id",
)


def _audited(channel: Channel, actor: str, via: str, action: str, detail: dict) -> None:
    audit_record(
        tenant_id=channel.tenant_id,
        actor=actor,
        action=action,
        via=via,
        detail={"channel": channel.public_id, "name": channel.name, "kind": channel.kind, **detail},
    )


@transaction.atomic
def channel_secret_rotate(*, channel: Channel, actor: str = "", via: str = "page") -> str:
    """A new signing secret for a channel whose medium signs its requests (a webhook);
    returned once, stored encrypted."""
    secret = transport_for(channel.kind).secret_set(channel=channel)
    channel.save(update_fields=["signing_secret_encrypted", "updated_at"])
    if actor:
        _audited(channel, actor, via, "channel.secret_rotated", {})
    return secret


@transaction.atomic
def channel_delete(*, channel: Channel, actor: str = "", via: str = "admin") -> None:
    if actor:
        _audited(channel, actor, via, "channel.deleted", {})
    channel.delete()


def channel_test_send(*, channel: Channel, actor: str, via: str = "admin") -> str:
    """Send a test notification through the channel now and return the medium's error, or ""
    when it was taken. Django admin's "Send a test" waits for the answer, so the admin reads
    it at once: one attempt, bounded by NOTIFY_TIMEOUT_SECONDS, never retried later (a test
    that failed is given up). Audited as ``channel.tested`` with the outcome."""
    delivery = Delivery.objects.create(
        tenant_id=channel.tenant_id,
        channel=channel,
        event=Delivery.Event.TEST,
        webhook_id=f"msg_{uuid.uuid4().hex}",
    )
    delivery_send(delivery_pk=delivery.pk)
    delivery.refresh_from_db(fields=["state", "attempts", "last_error"])
    if delivery.state == Delivery.State.PENDING and delivery.attempts:
        Delivery.objects.filter(pk=delivery.pk).update(state=Delivery.State.FAILED)
    if delivery.state == Delivery.State.DELIVERED:
        error = ""
    elif delivery.attempts:
        error = delivery.last_error or "not sent"
    else:  # the worker's sweep claimed it first: it sends it
        error = "not sent yet: the worker is sending it (see Notification deliveries)"
    audit_record(
        tenant_id=channel.tenant_id,
        actor=actor,
        action="channel.tested",
        via=via,
        detail={
            "channel": channel.public_id,
            "name": channel.name,
            "kind": channel.kind,
            "sent": not error,
            "error": error,
        },
    )
    return error
