"""Slack's Web API for a tenant's Slack app, through the official ``slack_sdk`` (WebClient).

``SLACK_API_URL`` (Slack's own by default) is the platform's setting, never a tenant's: an
admin cannot aim these calls, or the bot token they carry, at another address, so they do not
go through connections.outbound's guard. Each call is bounded by SLACK_TIMEOUT_SECONDS (the
modal's by SLACK_MODAL_TIMEOUT_SECONDS: it runs while Slack waits for the click's answer).
"""

import http.client
import logging

from django.conf import settings
from slack_sdk import WebClient
from slack_sdk.errors import SlackApiError, SlackClientError

from connections.crypto import InvalidToken, secret_decrypt
from integrations.slack.models import SlackApp

logger = logging.getLogger(__name__)

# Errors that the same call will meet again: the delivery is given up at once, saying why.
FINAL_ERRORS = frozenset(
    {
        "account_inactive",
        "cant_update_message",
        "channel_not_found",
        "ekm_access_denied",
        "invalid_arguments",
        "invalid_auth",
        "invalid_blocks",
        "is_archived",
        "message_not_found",
        "missing_scope",
        "msg_too_long",
        "no_permission",
        "not_authed",
        "not_in_channel",
        "restricted_action",
        "team_access_not_granted",
        "token_revoked",
        "user_not_found",
        "user_not_in_channel",
    }
)


class SlackFailed(Exception):
    """A Web API call failed; ``final``: trying again will not help (a wrong token, a
    channel the bot is not in). The message names Slack's error, never a secret."""

    def __init__(self, message: str, *, status: int | None = None, final: bool = False):
        super().__init__(message)
        self.status = status
        self.final = final


def slack_client(app: SlackApp, *, timeout: int | None = None) -> WebClient:
    try:
        token = secret_decrypt(app.bot_token_encrypted)
    except InvalidToken:
        raise SlackFailed("the Slack bot token cannot be read; set it again", final=True) from None
    return WebClient(
        token=token,
        base_url=settings.SLACK_API_URL,
        timeout=timeout or settings.SLACK_TIMEOUT_SECONDS,
    )


def slack_call(app: SlackApp, method: str, *, timeout: int | None = None, **arguments) -> dict:
    """Call a Web API method (``chat_postMessage``, ``users_info``, …); its answer's data."""
    client = slack_client(app, timeout=timeout)
    try:
        response = getattr(client, method)(**arguments)
    except SlackApiError as exc:
        error = str((exc.response.data or {}).get("error", "")) if exc.response else ""
        status = exc.response.status_code if exc.response else None
        raise SlackFailed(
            f"slack {method}: {error or status}", status=status, final=error in FINAL_ERRORS
        ) from None
    except (SlackClientError, OSError, http.client.HTTPException, ValueError) as exc:
        # Network trouble (a timeout, a refused connection, a reply that is not JSON).
        raise SlackFailed(f"slack {method}: {type(exc).__name__}") from None
    return response.data if isinstance(response.data, dict) else {}
