"""A local stand-in for Slack's Web API (a real HTTP server on loopback), for the real
``slack_sdk`` WebClient that SLACK_API_URL points at it, and Slack's side of interactivity:
signed ``block_actions`` and ``view_submission`` requests, as Slack sends them, and Socket
Mode's server (a real WebSocket server on loopback, ``SocketModeStandIn``).

It answers the methods the app calls (chat.postMessage, chat.update, chat.postEphemeral,
views.open, users.info, and apps.connections.open with the app-level token) as Slack
documents them, checks the bearer token, and records every call in order.
"""

import json
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlencode, urlparse

from slack_sdk.signature import SignatureVerifier
from websockets.exceptions import ConnectionClosed
from websockets.sync.server import ServerConnection, serve

BOT_TOKEN = "xoxb-1234567890-standin-token"
SIGNING_SECRET = "8f742231b10e8888abcd99yyyzzz85a5"
APP_TOKEN = "xapp-1-A0001-1234567890-standin-app-token"


class SlackStandIn:
    def __init__(self, token: str = BOT_TOKEN, port: int = 0):
        self.token = token
        self.users: dict[str, dict] = {}
        self.calls: list[tuple[str, dict]] = []
        self.messages: dict[str, dict] = {}  # ts -> the message as posted or updated
        self.fail: dict[str, str] = {}  # method -> the error to answer with
        self.app_token = APP_TOKEN
        self.socket: SocketModeStandIn | None = None  # apps.connections.open's server
        self.lock = threading.Lock()
        self._ts = 1_700_000_000
        self.server = ThreadingHTTPServer(("127.0.0.1", port), self._handler())
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/api/"

    def start(self) -> "SlackStandIn":
        self.thread.start()
        return self

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def user(self, user_id: str, email: str, *, confirmed: bool = True, **more) -> None:
        self.users[user_id] = {
            "id": user_id,
            "name": email.split("@")[0],
            "deleted": False,
            "is_bot": False,
            "is_email_confirmed": confirmed,
            "profile": {"email": email, "real_name": email.split("@")[0]},
            **more,
        }

    def called(self, method: str) -> list[dict]:
        with self.lock:
            return [body for name, body in self.calls if name == method]

    def answer(self, method: str, body: dict) -> dict:
        if method in self.fail:
            return {"ok": False, "error": self.fail[method]}
        if method == "chat.postMessage":
            self._ts += 1
            ts = f"{self._ts}.000100"
            self.messages[ts] = body
            return {"ok": True, "channel": body.get("channel"), "ts": ts, "message": body}
        if method == "chat.update":
            if body.get("ts") not in self.messages:
                return {"ok": False, "error": "message_not_found"}
            self.messages[body["ts"]] = body
            return {"ok": True, "channel": body.get("channel"), "ts": body["ts"]}
        if method == "chat.postEphemeral":
            return {"ok": True, "message_ts": f"{self._ts}.000200"}
        if method == "views.open":
            return {"ok": True, "view": {"id": "V0001", **(body.get("view") or {})}}
        if method == "apps.connections.open":
            if self.socket is None:
                return {"ok": False, "error": "access_denied"}
            return {"ok": True, "url": f"{self.socket.url}?ticket={uuid.uuid4()}"}
        if method == "users.info":
            user = self.users.get(body.get("user", ""))
            return {"ok": True, "user": user} if user else {"ok": False, "error": "user_not_found"}
        return {"ok": False, "error": "unknown_method"}

    def _handler(self):
        standin = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def _serve(self, body: dict):
                method = urlparse(self.path).path.rsplit("/", 1)[-1]
                # apps.connections.open takes the app-level token; every other, the bot's.
                token = standin.app_token if method == "apps.connections.open" else standin.token
                if self.headers.get("Authorization") != f"Bearer {token}":
                    answer = {"ok": False, "error": "invalid_auth"}
                else:
                    with standin.lock:
                        standin.calls.append((method, body))
                        answer = standin.answer(method, body)
                raw = json.dumps(answer).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json; charset=utf-8")
                self.send_header("Content-Length", str(len(raw)))
                self.end_headers()
                self.wfile.write(raw)

            def do_GET(self):
                query = parse_qs(urlparse(self.path).query)
                self._serve({k: v[0] for k, v in query.items()})

            def do_POST(self):
                raw = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                kind = self.headers.get("Content-Type", "")
                if "json" in kind:
                    body = json.loads(raw or b"{}")
                else:
                    body = {k: v[0] for k, v in parse_qs(raw.decode()).items()}
                self._serve(body)

        return Handler


# --- Socket Mode's server ---------------------------------------------------------------


class SocketModeStandIn:
    """Slack's Socket Mode server on loopback: the address apps.connections.open gives
    (``ws://``: slack_sdk's built-in client speaks plain WebSocket to any port but 443), a
    ``hello`` on each connection, envelopes sent as Slack sends them, and the acknowledgements
    the app sends back, recorded by envelope id."""

    def __init__(self):
        self.connections: list[ServerConnection] = []
        self.acks: dict[str, dict] = {}
        self.lock = threading.Lock()
        self.server = serve(self._serve, "127.0.0.1", 0)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"ws://127.0.0.1:{self.server.socket.getsockname()[1]}/link/"

    def start(self) -> "SocketModeStandIn":
        self.thread.start()
        return self

    def stop(self) -> None:
        self.server.shutdown()
        self.thread.join(10)

    def _serve(self, websocket: ServerConnection) -> None:
        with self.lock:
            self.connections.append(websocket)
        websocket.send(
            json.dumps(
                {
                    "type": "hello",
                    "num_connections": len(self.connections),
                    "connection_info": {"app_id": "A0001"},
                }
            )
        )
        try:
            for raw in websocket:
                message = json.loads(raw)
                if isinstance(message, dict) and "envelope_id" in message:
                    with self.lock:
                        self.acks[message["envelope_id"]] = message
        except ConnectionClosed:
            pass
        finally:
            with self.lock:
                self.connections.remove(websocket)

    def connected(self) -> int:
        with self.lock:
            return len(self.connections)

    def send(self, payload: dict, kind: str = "interactive") -> str:
        """An envelope carrying ``payload`` to the app's newest connection; its id."""
        envelope_id = str(uuid.uuid4())
        with self.lock:
            websocket = self.connections[-1]
        websocket.send(
            json.dumps(
                {
                    "envelope_id": envelope_id,
                    "type": kind,
                    "payload": payload,
                    "accepts_response_payload": kind == "interactive",
                    "retry_attempt": 0,
                    "retry_reason": "",
                }
            )
        )
        return envelope_id

    def ack(self, envelope_id: str) -> dict | None:
        with self.lock:
            return self.acks.get(envelope_id)


# --- Slack's side of interactivity --------------------------------------------------------


def signed(payload: dict, *, secret: str = SIGNING_SECRET, at: float | None = None) -> dict:
    """The body and headers of Slack's request carrying ``payload``, signed as Slack signs."""
    body = urlencode({"payload": json.dumps(payload)})
    timestamp = str(int(at if at is not None else time.time()))
    signature = SignatureVerifier(secret).generate_signature(timestamp=timestamp, body=body)
    return {
        "data": body,
        "content_type": "application/x-www-form-urlencoded",
        "HTTP_X_SLACK_REQUEST_TIMESTAMP": timestamp,
        "HTTP_X_SLACK_SIGNATURE": signature,
    }


def button(message: dict, action_id: str) -> dict:
    """The button ``action_id`` of a posted message's actions."""
    for block in message.get("blocks", []):
        for element in block.get("elements", []) if block.get("type") == "actions" else []:
            if element.get("action_id") == action_id:
                return element
    raise AssertionError(f"no button {action_id} in the message")


def click(message: dict, action_id: str, *, user: str, channel: str = "C0DEPLOY", ts: str = ""):
    """The ``block_actions`` payload of ``user`` clicking a button of a posted message."""
    element = button(message, action_id)
    return {
        "type": "block_actions",
        "user": {"id": user, "team_id": "T0001"},
        "team": {"id": "T0001"},
        "channel": {"id": channel},
        "container": {"type": "message", "message_ts": ts, "channel_id": channel},
        "trigger_id": "1337.42.abcdef",
        "response_url": "https://hooks.slack.invalid/actions/T0001/1/x",
        "actions": [
            {
                "type": "button",
                "action_id": action_id,
                "block_id": "decide",
                "value": element.get("value", ""),
                "action_ts": str(time.time()),
            }
        ],
    }


def submission(view: dict, *, user: str, values: dict) -> dict:
    """The ``view_submission`` payload of ``user`` submitting a modal the app opened."""
    return {
        "type": "view_submission",
        "user": {"id": user, "team_id": "T0001"},
        "team": {"id": "T0001"},
        "view": {
            "id": "V0001",
            "callback_id": view["callback_id"],
            "private_metadata": view.get("private_metadata", ""),
            "state": {"values": values},
        },
    }
