"""Setting up a tenant's Slack app: its bot token and signing secret (stored encrypted), the
interactivity Request URL Slack sends clicks to, and the app's manifest to paste into
Slack's "Create an app → From a manifest"."""

import re

from django.db import transaction
from django.urls import reverse

from connections.crypto import secret_encrypt
from integrations.slack.models import SlackApp
from notifications.content import base_url

# The Web API scopes the app uses: post and update messages (and messages only the clicker
# sees), and read who clicked with their confirmed e-mail address.
SCOPES = ("chat:write", "users:read", "users:read.email")
_BOT_TOKEN = re.compile(r"^xoxb-[A-Za-z0-9-]{10,250}$")
_SIGNING_SECRET = re.compile(r"^[A-Za-z0-9]{16,128}$")


class SlackAppError(ValueError):
    """The Slack app's settings cannot be saved; the message says why (never a secret)."""


def request_url(tenant) -> str:
    """The interactivity Request URL of the tenant's Slack app."""
    return base_url() + reverse("integrations:slack_interactions", args=[tenant.slug])


def slack_manifest(tenant) -> dict:
    """The app manifest for Slack's "From a manifest" (JSON): the bot, its scopes and the
    tenant's interactivity Request URL."""
    return {
        "display_information": {
            "name": "Countersign",
            "description": f"Approve and deny {tenant.name}'s agents' held calls.",
        },
        "features": {"bot_user": {"display_name": "Countersign", "always_online": False}},
        "oauth_config": {"scopes": {"bot": list(SCOPES)}},
        "settings": {
            "interactivity": {"is_enabled": True, "request_url": request_url(tenant)},
            "org_deploy_enabled": False,
            "socket_mode_enabled": False,
            "token_rotation_enabled": False,
        },
    }


def _hint(token: str) -> str:
    return f"{token[:5]}…{token[-4:]}"


def slack_app_check(*, tenant, bot_token: str = "", signing_secret: str = "") -> None:
    """Raise SlackAppError saying why these settings cannot be saved (no network I/O)."""
    bot_token, signing_secret = bot_token.strip(), signing_secret.strip()
    if bot_token and not _BOT_TOKEN.match(bot_token):
        raise SlackAppError(
            "the bot token is the app's Bot User OAuth Token, xoxb-… (OAuth & Permissions)"
        )
    if signing_secret and not _SIGNING_SECRET.match(signing_secret):
        raise SlackAppError(
            "the signing secret is the app's Signing Secret (Basic Information → App "
            "Credentials): letters and digits"
        )
    if (not bot_token or not signing_secret) and not SlackApp.objects.filter(
        tenant=tenant
    ).exists():
        raise SlackAppError("a new Slack app needs both its bot token and its signing secret")


@transaction.atomic
def slack_app_save(*, tenant, bot_token: str = "", signing_secret: str = "") -> SlackApp:
    """Create or change the tenant's Slack app; an empty value keeps the one stored (both
    are needed to create it). Raises SlackAppError."""
    bot_token, signing_secret = bot_token.strip(), signing_secret.strip()
    slack_app_check(tenant=tenant, bot_token=bot_token, signing_secret=signing_secret)
    app = SlackApp.objects.select_for_update().filter(tenant=tenant).first() or SlackApp(
        tenant=tenant
    )
    if bot_token:
        app.bot_token_encrypted = secret_encrypt(bot_token)
        app.bot_token_hint = _hint(bot_token)
    if signing_secret:
        app.signing_secret_encrypted = secret_encrypt(signing_secret)
    app.save()
    return app


@transaction.atomic
def slack_app_delete(*, tenant) -> bool:
    """Remove the tenant's Slack app (its channels stay, and fail until it is set again)."""
    deleted, _ = SlackApp.objects.filter(tenant=tenant).delete()
    return bool(deleted)
