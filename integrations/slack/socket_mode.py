"""Socket Mode: the clicks of a tenant's Slack app that has an app-level token (``xapp-…``)
come over a WebSocket connection that the Celery worker opens to Slack, instead of to a
public HTTPS Request URL, so that Slack's buttons work on a laptop or behind a firewall.

Each worker process (unless SLACK_SOCKET_MODE is off) holds one connection per such app,
with slack_sdk's built-in SocketModeClient (it asks ``apps.connections.open`` at
SLACK_API_URL for the address, keeps the connection alive and opens a new one when Slack
says so), and looks every SLACK_SOCKET_SYNC_SECONDS for apps whose token was set, changed
or removed. Slack gives each envelope to one of an app's connections (up to 10 per app), so
several workers share the clicks; one given twice is decided once by the flow (decided
already).

An envelope is authentic by the connection it came over, opened with the tenant's own
app-level token (there is no signature to check, as there is over HTTP): its payload is
taken as the Request URL takes a verified one (integrations.slack.interactivity), for the
app whose connection it is, and acknowledged with what the Request URL would have
answered. One whose decision could not be queued is not acknowledged: Slack tells the
clicker it failed, and nothing is decided.
"""

import hashlib
import logging
import threading
from functools import partial

from django.conf import settings
from django.db import close_old_connections, connection
from slack_sdk import WebClient
from slack_sdk.errors import SlackApiError, SlackClientError
from slack_sdk.socket_mode.builtin import SocketModeClient
from slack_sdk.socket_mode.request import SocketModeRequest
from slack_sdk.socket_mode.response import SocketModeResponse

from connections.crypto import InvalidToken, secret_decrypt
from integrations.slack.interactivity import SlackUnqueued, slack_payload_take
from integrations.slack.models import SlackApp

logger = logging.getLogger(__name__)


def envelope_take(app_id: int, client, request: SocketModeRequest) -> None:
    """One envelope of the app ``app_id``'s connection: an interactive payload is taken as
    the Request URL takes it, and acknowledged (with the answer's body, a modal's errors);
    anything else is acknowledged and left alone."""
    close_old_connections()
    try:
        answer = None
        if request.type == "interactive" and isinstance(request.payload, dict):
            app = (
                SlackApp.objects.select_related("tenant")
                .filter(pk=app_id, tenant__active=True)
                .exclude(app_token_encrypted="")
                .first()
            )
            if app is None:
                return  # removed meanwhile: its connection is closing, nothing is its now
            answer = slack_payload_take(app, request.payload)
    except SlackUnqueued:
        return
    finally:
        connection.close()  # this thread's own connection, back to the pool
    client.send_socket_mode_response(
        SocketModeResponse(envelope_id=request.envelope_id, payload=answer)
    )


class SocketModeConnections:
    """This process's Socket Mode connections, one per Slack app with an app-level token."""

    def __init__(self):
        self.clients: dict[int, tuple[str, SocketModeClient]] = {}  # app pk: (token's hash, client)
        self.stopping = threading.Event()
        self.thread: threading.Thread | None = None

    def start(self) -> None:
        self.thread = threading.Thread(target=self._run, name="slack-socket-mode", daemon=True)
        self.thread.start()

    def stop(self) -> None:
        self.stopping.set()
        for pk in list(self.clients):
            self._close(pk)

    def _run(self) -> None:
        while not self.stopping.is_set():
            try:
                self.sync()
            except Exception:  # noqa: BLE001 - a database away for a moment: look again later
                logger.warning("could not look for Slack apps to connect", exc_info=True)
            self.stopping.wait(settings.SLACK_SOCKET_SYNC_SECONDS)

    def sync(self) -> None:
        """Open a connection for each app with an app-level token that has none (or whose
        token changed), close those of apps that lost theirs."""
        close_old_connections()
        try:
            wanted = {}
            rows = SlackApp.objects.filter(tenant__active=True).exclude(app_token_encrypted="")
            for app in rows.only("pk", "app_token_encrypted"):
                try:
                    wanted[app.pk] = secret_decrypt(app.app_token_encrypted)
                except InvalidToken:
                    logger.warning("the app-level token of Slack app %s cannot be read", app.pk)
        finally:
            connection.close()
        for pk, (digest, _) in list(self.clients.items()):
            if pk not in wanted or _digest(wanted[pk]) != digest:
                self._close(pk)
        for pk, token in wanted.items():
            if pk not in self.clients and not self.stopping.is_set():
                self._open(pk, token)

    def _open(self, pk: int, token: str) -> None:
        client = SocketModeClient(
            app_token=token,
            web_client=WebClient(
                base_url=settings.SLACK_API_URL, timeout=settings.SLACK_TIMEOUT_SECONDS
            ),
            logger=logging.getLogger("integrations.slack.socket_mode.client"),
        )
        client.socket_mode_request_listeners.append(partial(envelope_take, pk))
        try:
            client.connect()
        except (SlackApiError, SlackClientError, OSError, ValueError) as exc:
            # A revoked token, Slack away: said once per look, tried again at the next.
            logger.warning("Slack app %s: no Socket Mode connection (%s)", pk, _why(exc))
            client.close()
            return
        self.clients[pk] = (_digest(token), client)
        logger.info("Slack app %s: Socket Mode connected", pk)

    def _close(self, pk: int) -> None:
        _, client = self.clients.pop(pk)
        client.close()
        logger.info("Slack app %s: Socket Mode connection closed", pk)


def _digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def _why(exc: Exception) -> str:
    if isinstance(exc, SlackApiError) and exc.response is not None:
        return str((exc.response.data or {}).get("error", "")) or type(exc).__name__
    return type(exc).__name__


# The worker's (integrations.apps starts it when the worker is ready).
CONNECTIONS = SocketModeConnections()


def socket_mode_start(**_signal) -> None:
    if settings.SLACK_SOCKET_MODE and CONNECTIONS.thread is None:
        CONNECTIONS.start()


def socket_mode_stop(**_signal) -> None:
    CONNECTIONS.stop()
