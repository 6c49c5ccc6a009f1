"""Sending one delivery through its channel: e-mail (one message per recipient, with their
one-time decision links), the tenant's Slack app (integrations.slack_delivery), a
Slack-compatible or Teams incoming webhook, or a signed webhook. Each returns the Delivery
fields to keep (who was mailed, which Slack message was posted) or raises SendFailed."""

import json
from datetime import datetime

import httpx
from django.conf import settings
from django.core.mail import EmailMultiAlternatives, get_connection

from connections.crypto import InvalidToken, secret_decrypt
from connections.outbound import OutboundRefused, check_url, guarded_client, webhook_headers
from integrations.email_links import email_link_mint
from integrations.slack_api import SlackFailed
from integrations.slack_delivery import slack_app_send
from notifications.content import (
    FOLLOW_UPS,
    email_bodies,
    email_subject,
    slack_webhook_message,
    teams_card,
    webhook_event,
)
from notifications.models import Channel, Delivery, DigestItem
from runtime.decisions.approvers import Decider
from runtime.decisions.decision_models import Interaction
from runtime.decisions.facts import decision_facts
from tenants.models import Membership

# The openings of an item, whose recipients its follow-ups tell.
OPENINGS = (Delivery.Event.OPENED, Delivery.Event.REMINDER, Delivery.Event.ESCALATION)
# Follow-ups that still ask for a decision: those who may decide get links again.
ASKING = (Delivery.Event.VOIDED, Delivery.Event.RECORDED)


class SendFailed(Exception):
    def __init__(self, message: str, *, status: int | None = None, final: bool = False):
        super().__init__(message)
        self.status = status
        self.final = final


# --- e-mail ---------------------------------------------------------------------------------


def _members(delivery: Delivery):
    return Membership.objects.filter(
        tenant_id=delivery.tenant_id, user__is_active=True
    ).select_related("user", "notification_preference")


def _opening_recipients(delivery: Delivery, content: dict) -> dict[str, Membership | None]:
    """Addresses to mail now, each with its member (None: an address of the list that is no
    member's); members who chose a digest get a DigestItem instead."""
    channel = delivery.channel
    roles = delivery.roles or channel.email_roles
    members = {m.user.email.lower(): m for m in _members(delivery)}
    now_to: dict[str, Membership | None] = {
        address: members.get(address.lower()) for address in channel.email_addresses
    }
    for membership in members.values():
        if membership.role not in roles:
            continue
        preference = getattr(membership, "notification_preference", None)
        if delivery.event == Delivery.Event.TEST or preference is None:
            now_to[membership.user.email] = membership
        elif not preference.email_enabled:
            continue
        elif preference.digest_minutes:
            DigestItem.objects.get_or_create(
                tenant_id=delivery.tenant_id,
                user=membership.user,
                interaction=delivery.interaction,
                event=delivery.event,
                line=digest_line(content),
            )
        else:
            now_to[membership.user.email] = membership
    return now_to


def digest_line(content: dict) -> str:
    """An item in a digest: its title (with the summary), its link, and the arguments unless
    the channel omits them, within the 500 characters a line keeps."""
    line = f"{content['title']} {content['url']}"
    if "arguments" in content:
        arguments = json.dumps(content["arguments"], sort_keys=True, ensure_ascii=False)
        line += f"\n  arguments: {arguments}"
    return line if len(line) <= 500 else line[:499] + "…"


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


# --- HTTP -----------------------------------------------------------------------------------


def _post(url: str, body: bytes, headers: dict) -> None:
    try:
        check_url(url, ["*"])
    except OutboundRefused as exc:
        raise SendFailed(f"refused: {exc}", final=True) from None
    try:
        with guarded_client(timeout=settings.NOTIFY_TIMEOUT_SECONDS, max_connections=1) as client:
            response = client.post(url, content=body, headers=headers)
    except OutboundRefused as exc:
        raise SendFailed(f"refused: {exc}", final=True) from None
    except httpx.HTTPError as exc:
        raise SendFailed(f"network: {type(exc).__name__}") from None
    if response.status_code >= 300:
        final = response.status_code in (400, 401, 403, 404, 410)
        raise SendFailed(f"HTTP {response.status_code}", status=response.status_code, final=final)


def _channel_url(channel: Channel) -> str:
    try:
        return secret_decrypt(channel.url_encrypted)
    except InvalidToken:
        raise SendFailed("the URL cannot be read; set the channel again", final=True) from None


def _json_post(delivery: Delivery, message: dict) -> dict:
    body = json.dumps(message).encode()
    _post(_channel_url(delivery.channel), body, {"Content-Type": "application/json"})
    return {}


def send_webhook(delivery: Delivery, content: dict, now: datetime) -> dict:
    body = json.dumps(webhook_event(content, now), sort_keys=True).encode()
    try:
        secret = secret_decrypt(delivery.channel.signing_secret_encrypted)
    except InvalidToken:
        raise SendFailed("the signing secret cannot be read; make a new one", final=True) from None
    headers = {
        "Content-Type": "application/json",
        **webhook_headers(secret, delivery.webhook_id, body.decode(), now),
        "User-Agent": "Countersign-Notify/1",
    }
    _post(_channel_url(delivery.channel), body, headers)
    return {}


def delivery_deliver(delivery: Delivery, content: dict, now: datetime) -> dict:
    """Send ``delivery`` through its channel; the Delivery fields to keep."""
    kind = delivery.channel.kind
    if kind == Channel.Kind.EMAIL:
        return send_email(delivery, content)
    if kind == Channel.Kind.SLACK_APP:
        try:
            return slack_app_send(delivery, content)
        except SlackFailed as exc:
            raise SendFailed(str(exc), status=exc.status, final=exc.final) from None
    if kind == Channel.Kind.SLACK:
        return _json_post(delivery, slack_webhook_message(content))
    if kind == Channel.Kind.TEAMS:
        return _json_post(delivery, teams_card(content))
    # Signed at the wall clock: receivers check the timestamp against theirs.
    return send_webhook(delivery, content, now)
