"""E-mail channels: one message per recipient (nobody sees who else was told), plain text and
HTML, with the one-time Approve and Deny links of each recipient who may decide the item.

An opening goes to the channel's addresses and to the members of its roles (an escalation's
roles instead, when it names some), as each member chose (e-mail off, or a digest:
notifications.digests); a follow-up goes to those its openings mailed, with new links for
those who may still decide a voided or two-person item."""

from datetime import datetime

from django.conf import settings
from django.core.mail import EmailMultiAlternatives, get_connection
from django.utils import timezone

from integrations.email.content import email_bodies, email_subject
from integrations.email.links import email_link_mint
from notifications.content import FOLLOW_UPS, OPENINGS
from notifications.digests import digest_hold
from notifications.models import Channel, Delivery
from notifications.routing import people_told
from notifications.transports import ChannelError, ChannelFields, SendFailed, Transport
from runtime.decisions.approvers import Decider
from runtime.decisions.decision_models import Interaction
from runtime.decisions.facts import decision_facts
from tenants.models import Membership

# Follow-ups that still ask for a decision: those who may decide get links again.
ASKING = (Delivery.Event.VOIDED, Delivery.Event.RECORDED)


def _members(delivery: Delivery):
    return Membership.objects.filter(
        tenant_id=delivery.tenant_id, user__is_active=True
    ).select_related("user", "notification_preference")


def _opening_recipients(delivery: Delivery, content: dict) -> dict[str, Membership | None]:
    """Addresses to mail now, each with its member (None: an address of the list that is no
    member's); members who chose a digest get their item held for it instead."""
    channel = delivery.channel
    roles = delivery.roles or channel.email_roles
    members = {m.user.email.lower(): m for m in _members(delivery)}
    now = timezone.now()
    now_to: dict[str, Membership | None] = {
        address: members.get(address.lower())
        for address in channel.email_addresses
        if not (members.get(address.lower()) and members[address.lower()].away_at(now))
    }
    # Out of office: an away member is told nothing; their delegate (a member who may
    # decide) is told instead, as if the role reached them too (the rule of every medium:
    # notifications.routing).
    by_pk = {m.pk: m for m in members.values()}
    reached = people_told([m for m in members.values() if m.role in roles], everyone=by_pk, now=now)
    for membership in reached:
        preference = getattr(membership, "notification_preference", None)
        if delivery.event == Delivery.Event.TEST or preference is None:
            now_to[membership.user.email] = membership
        elif not preference.email_enabled:
            continue
        elif preference.digest_minutes:
            digest_hold(delivery=delivery, user=membership.user, content=content)
        else:
            now_to[membership.user.email] = membership
    return now_to


def _told(delivery: Delivery) -> dict[str, Membership | None]:
    """Who this channel's openings of the item mailed: a follow-up tells the same people."""
    if delivery.interaction_id is None:  # every opening and follow-up names its item
        return {}
    told: set[str] = set()
    for recipients in Delivery.objects.filter(
        channel_id=delivery.channel_id,
        interaction_id=delivery.interaction_id,
        follow_up__isnull=True,
        event__in=OPENINGS,
        state=Delivery.State.DELIVERED,
    ).values_list("recipients", flat=True):
        told.update(recipients or ())
    members = {m.user.email.lower(): m for m in _members(delivery)}
    return {address: members.get(address.lower()) for address in told}


def _links(interaction: Interaction | None, membership: Membership | None, address: str):
    """The member's one-time Approve and Deny links, when they may decide the approval."""
    if interaction is None or membership is None:
        return None
    if interaction.kind != Interaction.Kind.APPROVAL or interaction.state != "open":
        return None
    facts = decision_facts(
        interaction=interaction, decider=Decider.of_member(membership), with_receipts=False
    )
    if not facts.may_decide or facts.approved_already:
        return None
    return email_link_mint(interaction=interaction, membership=membership, email=address)


def send_email(delivery: Delivery, content: dict) -> dict:
    follow_up = delivery.event in FOLLOW_UPS
    recipients = _told(delivery) if follow_up else _opening_recipients(delivery, content)
    if not recipients:
        return {"recipients": []}
    asking = not follow_up or delivery.event in ASKING
    subject = email_subject(content)
    messages = []
    # One message per recipient: nobody sees who else was told, and links are each one's.
    for address in sorted(recipients):
        links = _links(delivery.interaction, recipients[address], address) if asking else None
        text, html = email_bodies(content, links)
        message = EmailMultiAlternatives(subject, text, to=[address])
        message.attach_alternative(html, "text/html")
        messages.append(message)
    try:
        get_connection(timeout=settings.NOTIFY_TIMEOUT_SECONDS).send_messages(messages)
    except Exception as exc:  # noqa: BLE001 - any mail failure is an attempt to retry
        raise SendFailed(f"mail: {type(exc).__name__}") from None
    return {"recipients": sorted(recipients)}


class EmailTransport(Transport):
    command_name = "email"
    fields = ("email_roles", "email_addresses")
    fields_title = "E-mail: who gets it"

    def send(self, delivery: Delivery, content: dict, now: datetime) -> dict:
        return send_email(delivery, content)

    def check(self, *, tenant, channel: Channel | None, given: ChannelFields) -> None:
        if not given.email_roles and not given.email_addresses:
            raise ChannelError("an e-mail channel needs roles or addresses", field="email_roles")

    def where(self, channel: Channel) -> str:
        return ", ".join(channel.email_roles + channel.email_addresses)
