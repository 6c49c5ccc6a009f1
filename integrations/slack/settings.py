"""Setting up a tenant's Slack app: its bot token and signing secret (stored encrypted), the
interactivity Request URL Slack sends clicks to (or, with an app-level token, Socket Mode:
clicks come over a connection the worker opens, integrations.slack.socket_mode), and the
app's manifest to paste into Slack's "Create an app → From a manifest"."""

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
_APP_TOKEN = re.compile(r"^xapp-[A-Za-z0-9-]{10,250}$")


class SlackAppError(ValueError):
    """The Slack app's settings cannot be saved; the message says why (never a secret)."""


def request_url(tenant) -> str:
    """The interactivity Request URL of the tenant's Slack app."""
    return base_url() + reverse("integrations:slack_interactions", args=[tenant.slug])


def slack_manifest(tenant) -> dict:
    """The app manifest for Slack's "From a manifest" (JSON): the bot, its scopes and the
    tenant's interactivity Request URL; or Socket Mode, where clicks need no public URL, when
    the tenant's app has an app-level token or the site has no HTTPS address (a laptop's
    http://127.0.0.1:8000: Slack sends clicks only to an HTTPS Request URL)."""
    url = request_url(tenant)
    socket_mode = not url.startswith("https://") or (
        SlackApp.objects.filter(tenant=tenant).exclude(app_token_encrypted="").exists()
    )
    interactivity: dict = {"is_enabled": True}
    if not socket_mode:
        interactivity["request_url"] = url
    return {
        "display_information": {
            "name": "Countersign",
            "description": f"Approve and deny {tenant.name}'s agents' held calls.",
        },
        "features": {"bot_user": {"display_name": "Countersign", "always_online": False}},
        "oauth_config": {"scopes": {"bot": list(SCOPES)}},
        "settings": {
            "interactivity": interactivity,
            "org_deploy_enabled": False,
            "socket_mode_enabled": socket_mode,
            "token_rotation_enabled": False,
        },
    }


def _hint(token: str) -> str:
    return f"{token[:5]}…{token[-4:]}"


def slack_app_check(
    *, tenant, bot_token: str = "", signing_secret: str = "", app_token: str = ""
) -> None:
    """Raise SlackAppError saying why these settings cannot be saved (no network I/O)."""
    bot_token, signing_secret, app_token = (
        bot_token.strip(),
        signing_secret.strip(),
        app_token.strip(),
    )
    if bot_token and not _BOT_TOKEN.match(bot_token):
        raise SlackAppError(
            "the bot token is the app's Bot User OAuth Token, xoxb-… (OAuth & Permissions)"
        )
    if signing_secret and not _SIGNING_SECRET.match(signing_secret):
        raise SlackAppError(
            "the signing secret is the app's Signing Secret (Basic Information → App "
            "Credentials): letters and digits"
        )
    if app_token and not _APP_TOKEN.match(app_token):
        raise SlackAppError(
            "the app-level token is xapp-… (Basic Information → App-Level Tokens, with the "
            "connections:write scope)"
        )
    if (not bot_token or not signing_secret) and not SlackApp.objects.filter(
        tenant=tenant
    ).exists():
        raise SlackAppError("a new Slack app needs both its bot token and its signing secret")


@transaction.atomic
def slack_app_save(
    *,
    tenant,
    bot_token: str = "",
    signing_secret: str = "",
    app_token: str = "",
    app_token_remove: bool = False,
) -> SlackApp:
    """Create or change the tenant's Slack app; an empty value keeps the one stored (the bot
    token and the signing secret are needed to create it; the app-level token, for Socket
    Mode, is optional and ``app_token_remove`` takes it away). Raises SlackAppError."""
    bot_token, signing_secret, app_token = (
        bot_token.strip(),
        signing_secret.strip(),
        app_token.strip(),
    )
    if app_token and app_token_remove:
        raise SlackAppError("give an app-level token or remove it, not both")
    slack_app_check(
        tenant=tenant, bot_token=bot_token, signing_secret=signing_secret, app_token=app_token
    )
    app = SlackApp.objects.select_for_update().filter(tenant=tenant).first() or SlackApp(
        tenant=tenant
    )
    if bot_token:
        app.bot_token_encrypted = secret_encrypt(bot_token)
        app.bot_token_hint = _hint(bot_token)
    if signing_secret:
        app.signing_secret_encrypted = secret_encrypt(signing_secret)
    if app_token:
        app.app_token_encrypted = secret_encrypt(app_token)
        app.app_token_hint = _hint(app_token)
    elif app_token_remove:
        app.app_token_encrypted, app.app_token_hint = "", ""
    app.save()
    return app


@transaction.atomic
def slack_app_delete(*, tenant) -> bool:
    """Remove the tenant's Slack app (its channels stay, and fail until it is set again)."""
    deleted, _ = SlackApp.objects.filter(tenant=tenant).delete()
    return bool(deleted)
