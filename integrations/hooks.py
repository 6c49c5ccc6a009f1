"""What the mediums that post to a URL of the channel's share (a Slack-compatible or Teams
incoming webhook, a signed webhook): the URL checked when it is set, kept encrypted (it is
a credential: a Slack hook's URL is its secret) with a hint to show, and each request sent
through the guarded client (connections.outbound: no private address unless allowed).

A receiver's 400, 401, 403, 404 or 410, or a URL refused, is given up at once; any other
failure is tried again (notifications.services)."""

import json

import httpx
from django.conf import settings

from connections.crypto import InvalidToken, secret_decrypt, secret_encrypt
from connections.outbound import OutboundRefused, check_url, guarded_client
from notifications.models import Channel, Delivery
from notifications.transports import ChannelError, ChannelFields, SendFailed, Transport


def url_hint(url: str) -> str:
    host = url.split("//", 1)[-1].split("/", 1)[0].rsplit("@", 1)[-1]
    return f"{url.split('//', 1)[0]}//{host}/…"


def url_post(url: str, body: bytes, headers: dict) -> None:
    """POST ``body``; raises SendFailed saying why it was not taken."""
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


def channel_url(channel: Channel) -> str:
    try:
        return secret_decrypt(channel.url_encrypted)
    except InvalidToken:
        raise SendFailed("the URL cannot be read; set the channel again", final=True) from None


class HookTransport(Transport):
    """A medium that posts JSON to the channel's URL."""

    fields = ("url",)
    fields_title = "Where it posts: the URL"

    def check(self, *, tenant, channel: Channel | None, given: ChannelFields) -> None:
        if given.url:
            try:
                check_url(given.url, ["*"])
            except OutboundRefused as exc:
                raise ChannelError(f"the URL cannot be used: {exc}", field="url") from None
        elif channel is None or not channel.url_encrypted:
            raise ChannelError("this channel needs a URL", field="url")

    def store(self, *, channel: Channel, given: ChannelFields) -> str:
        if given.url:
            channel.url_encrypted = secret_encrypt(given.url)
            channel.url_hint = url_hint(given.url)
        return ""

    def post_json(self, delivery: Delivery, message: dict) -> dict:
        body = json.dumps(message).encode()
        url_post(channel_url(delivery.channel), body, {"Content-Type": "application/json"})
        return {}
