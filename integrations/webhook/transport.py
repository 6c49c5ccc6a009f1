"""Webhooks signed with Standard Webhooks (``webhook-id``, ``webhook-timestamp``,
``webhook-signature``) with the channel's own secret, shown once when it is made or rotated:
a JSON event, ``interaction.<event>`` (opened, reminder, escalation, test, and what became of
the item: decided, expired, voided, canceled, approval_recorded)."""

import base64
import json
import secrets
from datetime import datetime

from connections.crypto import InvalidToken, secret_decrypt, secret_encrypt
from connections.outbound import webhook_headers
from integrations.hooks import HookTransport, channel_url, url_post
from notifications.models import Channel, Delivery
from notifications.transports import ChannelFields, SendFailed

# The webhook event's type for each follow-up (interaction.<type>).
WEBHOOK_TYPES = {Delivery.Event.RECORDED: "approval_recorded"}


def webhook_event(content: dict, now) -> dict:
    """The JSON event a signed webhook receives: ``interaction.<event>``."""
    event = content["event"]
    data = {k: v for k, v in content.items() if k not in ("event", "title")}
    return {
        "type": f"interaction.{WEBHOOK_TYPES.get(event, event)}",
        "timestamp": now.isoformat(),
        "data": data,
    }


def signing_secret_new() -> str:
    return "whsec_" + base64.b64encode(secrets.token_bytes(24)).decode()


class WebhookTransport(HookTransport):
    command_name = "webhook"
    signs = True

    def send(self, delivery: Delivery, content: dict, now: datetime) -> dict:
        # Signed at the wall clock: receivers check the timestamp against theirs.
        body = json.dumps(webhook_event(content, now), sort_keys=True).encode()
        try:
            secret = secret_decrypt(delivery.channel.signing_secret_encrypted)
        except InvalidToken:
            raise SendFailed(
                "the signing secret cannot be read; make a new one", final=True
            ) from None
        headers = {
            "Content-Type": "application/json",
            **webhook_headers(secret, delivery.webhook_id, body.decode(), now),
            "User-Agent": "Countersign-Notify/1",
        }
        url_post(channel_url(delivery.channel), body, headers)
        return {}

    def store(self, *, channel: Channel, given: ChannelFields) -> str:
        super().store(channel=channel, given=given)
        return "" if channel.signing_secret_encrypted else self.secret_set(channel=channel)

    def secret_set(self, *, channel: Channel) -> str:
        secret = signing_secret_new()
        channel.signing_secret_encrypted = secret_encrypt(secret)
        return secret
