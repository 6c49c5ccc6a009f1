"""A real agent over HTTP on loopback for the http provider's tests (runtime.llm.http_agent).

It verifies every request's Standard Webhooks signature with the agent's secret (a request
that fails verification is answered 401 and counted) and records what it received. What it
answers comes from ``script``, one entry per request, in order: a dict is answered as JSON
with 200; ``(status, body)`` answers that status with that body (bytes, or a dict as JSON);
``("sleep", seconds)`` waits that long before answering (longer than the client's timeout,
it is a timeout); a callable gets the request document and returns any of these.
"""

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from standardwebhooks.webhooks import Webhook, WebhookVerificationError


class AgentServer:
    def __init__(self, secret: str, script: list | None = None):
        self.secret = secret
        self.script: list[Any] = list(script or [])
        self.requests: list[dict] = []  # verified requests: raw body, document, headers
        self.bad_signatures = 0
        self.released = threading.Event()  # ends every sleep, so that stop() is prompt
        self.lock = threading.Lock()
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/agent"

    @property
    def documents(self) -> list[dict]:
        return [r["document"] for r in self.requests]

    def start(self) -> "AgentServer":
        self.thread.start()
        return self

    def stop(self) -> None:
        self.released.set()
        self.server.shutdown()
        self.server.server_close()

    def answer(self, document: dict) -> tuple[int, bytes, float]:
        with self.lock:
            entry = self.script.pop(0) if self.script else (500, b"the script ran out")
        if callable(entry):
            entry = entry(document)
        if isinstance(entry, dict):
            return 200, json.dumps(entry).encode(), 0.0
        if entry[0] == "sleep":
            return 200, json.dumps({"action": "reply", "text": "late"}).encode(), entry[1]
        status, body = entry
        return status, body if isinstance(body, bytes) else json.dumps(body).encode(), 0.0

    def _handler(self):
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                headers = {k.lower(): v for k, v in self.headers.items()}
                try:
                    Webhook(server.secret).verify(body, headers)
                except WebhookVerificationError:
                    with server.lock:
                        server.bad_signatures += 1
                    self.send_response(401)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                document = json.loads(body)
                with server.lock:
                    server.requests.append({"raw": body, "document": document, "headers": headers})
                status, content, delay = server.answer(document)
                if delay and server.released.wait(delay):
                    return
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(content)))
                    self.end_headers()
                    self.wfile.write(content)
                except OSError:
                    pass  # the client gave up (a timeout)

        return Handler
