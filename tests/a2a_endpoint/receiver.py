"""A real HTTP webhook receiver on loopback for push tests (and bench/push.py).

It verifies every request's Standard Webhooks signature with the tenant's secret and
records what it got; ``script`` lists the status codes to answer with, one per request,
then 200 (a 429 says ``Retry-After: <retry_after>``); ``hold`` (a threading.Event) makes it wait before answering, like a slow server.
"""

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from standardwebhooks.webhooks import Webhook, WebhookVerificationError


class Receiver:
    def __init__(self, secret: str = "", script: list | None = None, path: str = "/hook"):
        self.secret = secret
        self.script = list(script or [])
        self.path = path
        self.hold: threading.Event | None = None
        self.retry_after = "0"
        self.events: list[dict] = []  # verified bodies, in arrival order
        self.requests: list[dict] = []  # every request: headers, status answered
        self.bad_signatures = 0
        self.arrived = 0  # requests read, answered or not
        self.lock = threading.Lock()
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}{self.path}"

    def start(self) -> "Receiver":
        self.thread.start()
        return self

    def stop(self) -> None:
        if self.hold is not None:
            self.hold.set()
        self.server.shutdown()
        self.server.server_close()

    def _handler(self):
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                headers = {k.lower(): v for k, v in self.headers.items()}
                with receiver.lock:
                    receiver.arrived += 1
                if receiver.hold is not None:
                    receiver.hold.wait(30)
                with receiver.lock:
                    status = receiver.script.pop(0) if receiver.script else 200
                    verified = True
                    if receiver.secret:
                        try:
                            Webhook(receiver.secret).verify(body, headers)
                        except WebhookVerificationError:
                            verified = False
                            receiver.bad_signatures += 1
                            status = 401
                    receiver.requests.append({"headers": headers, "status": status})
                    if status == 200 and verified:
                        receiver.events.append(json.loads(body))
                self.send_response(status)
                if status == 429:
                    self.send_header("Retry-After", receiver.retry_after)
                self.send_header("Content-Length", "0")
                self.end_headers()

        return Handler
