"""A receiver of Countersign's signed webhooks, in Python with nothing but its standard library.

Countersign signs every webhook it sends with Standard Webhooks: a notification channel of
kind "webhook" (interaction.opened, .decided, ...) with the channel's secret, an A2A push
config's deliveries with the tenant's push secret. Check the signature before you trust a
body:

    WEBHOOK_SECRET='whsec_...' python3 webhook_receiver.py 8080

It answers 204 to a delivery whose signature holds and whose timestamp is within five minutes
of now, and prints its event as one JSON line; anything else gets 401 and is not read further.
A delivery is sent again, with the same webhook-id, when an answer is lost: the second copy is
answered 204 and not handled twice.
"""

import base64
import hashlib
import hmac
import json
import os
import sys
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

TOLERANCE_SECONDS = 5 * 60


class Refused(Exception):
    pass


def verify(secret: str, headers, body: bytes) -> dict:
    """The event, if the headers sign exactly this body with the secret; else Refused."""
    msg_id = headers.get("webhook-id") or ""
    timestamp = headers.get("webhook-timestamp") or ""
    signatures = headers.get("webhook-signature") or ""
    if not (msg_id and timestamp.isdigit() and signatures):
        raise Refused("the webhook-id, webhook-timestamp and webhook-signature headers")
    if abs(time.time() - int(timestamp)) > TOLERANCE_SECONDS:
        raise Refused("a timestamp more than five minutes from now (a replay?)")
    key = base64.b64decode(secret.removeprefix("whsec_"))
    signed = msg_id.encode() + b"." + timestamp.encode() + b"." + body
    expected = base64.b64encode(hmac.new(key, signed, hashlib.sha256).digest()).decode()
    # During a secret's rotation a delivery carries a signature for each secret, space-separated.
    for signature in signatures.split():
        version, _, value = signature.partition(",")
        if version == "v1" and hmac.compare_digest(value, expected):
            return json.loads(body)
    raise Refused("no signature matches this body")


class Receiver(BaseHTTPRequestHandler):
    secret = os.environ.get("WEBHOOK_SECRET", "")
    seen: set[str] = set()

    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        try:
            event = verify(self.secret, self.headers, body)
        except Refused as refused:
            print(f"refused: {refused}", file=sys.stderr, flush=True)
            return self.answer(401)
        msg_id = self.headers["webhook-id"]
        if msg_id not in self.seen:
            self.seen.add(msg_id)
            print(json.dumps({"id": msg_id, "event": event}), flush=True)
        self.answer(204)

    def answer(self, status: int):
        self.send_response(status)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args):
        pass


if __name__ == "__main__":
    if not Receiver.secret.startswith("whsec_"):
        sys.exit("set WEBHOOK_SECRET to the whsec_... secret Countersign showed you")
    port = int(sys.argv[1]) if len(sys.argv) > 1 else 8080
    host = os.environ.get("HOST", "127.0.0.1")
    server = ThreadingHTTPServer((host, port), Receiver)
    print(f"listening on http://{host}:{server.server_port}/", file=sys.stderr, flush=True)
    server.serve_forever()
