"""A stub OAuth2 provider for the connections suite (fixtures in conftest.py)."""

import base64
import hashlib
import json
import secrets
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlencode, urlsplit


class StubProvider:
    """A real OAuth2 authorization server on 127.0.0.1: discovery, authorize, token."""

    client_id = "stub-client"
    client_secret = "stub-secret"

    def __init__(self):
        self.codes: dict[str, dict] = {}
        self.token_requests: list[dict] = []
        self.issued_tokens: list[str] = []
        self.refuse_tokens = False
        self.expires_in: object = 3600
        # The clients it knows (id -> secret): the platform's, and any a test adds (a
        # tenant's own OAuth app).
        self.clients: dict[str, str] = {self.client_id: self.client_secret}
        # Whether the client-credentials grant is allowed (the "check" of an OAuth app).
        self.client_credentials = True
        # A careless provider: its refusal of a client repeats the secret it was sent.
        self.echo_secret = False
        stub = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):  # keep the test output clean
                pass

            def _json(self, status: int, body: dict) -> None:
                payload = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def do_GET(self):
                url = urlsplit(self.path)
                if url.path == "/.well-known/openid-configuration":
                    return self._json(
                        200,
                        {
                            "issuer": stub.base_url,
                            "authorization_endpoint": f"{stub.base_url}/authorize",
                            "token_endpoint": f"{stub.base_url}/token",
                            "token_endpoint_auth_methods_supported": ["client_secret_post"],
                        },
                    )
                if url.path == "/authorize":
                    query = {k: v[0] for k, v in parse_qs(url.query).items()}
                    if (
                        query.get("client_id") not in stub.clients
                        or query.get("response_type") != "code"
                        or query.get("code_challenge_method") != "S256"
                    ):
                        return self._json(400, {"error": "invalid_request"})
                    code = secrets.token_urlsafe(16)
                    stub.codes[code] = query
                    self.send_response(302)
                    target = urlencode({"code": code, "state": query["state"]})
                    self.send_header("Location", f"{query['redirect_uri']}?{target}")
                    self.end_headers()
                    return None
                return self._json(404, {"error": "not_found"})

            def do_POST(self):
                length = int(self.headers.get("Content-Length", 0))
                form = {k: v[0] for k, v in parse_qs(self.rfile.read(length).decode()).items()}
                stub.token_requests.append(form)
                if urlsplit(self.path).path != "/token":
                    return self._json(404, {"error": "not_found"})
                if stub.refuse_tokens:
                    return self._json(400, {"error": "invalid_grant"})
                client_id = form.get("client_id", "")
                known = client_id in stub.clients
                if not known or stub.clients[client_id] != form.get("client_secret"):
                    refused = {"error": "invalid_client"}
                    if stub.echo_secret:
                        refused["error_description"] = f"wrong secret {form.get('client_secret')}"
                    return self._json(401, refused)
                if form.get("grant_type") == "refresh_token":
                    if stub.refresh_tokens.pop(form.get("refresh_token", ""), None) != client_id:
                        return self._json(400, {"error": "invalid_grant"})
                    return self._json(200, stub.tokens_for(client_id, ""))
                if form.get("grant_type") == "client_credentials":
                    if not stub.client_credentials:
                        return self._json(400, {"error": "unauthorized_client"})
                    return self._json(200, {"access_token": "cc", "token_type": "Bearer"})
                asked = stub.codes.pop(form.get("code", ""), None)
                verifier = form.get("code_verifier", "")
                challenge = (
                    base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest())
                    .rstrip(b"=")
                    .decode()
                )
                if (
                    asked is None
                    or form.get("grant_type") != "authorization_code"
                    or form.get("client_id") != asked["client_id"]
                    or form.get("redirect_uri") != asked["redirect_uri"]
                    or challenge != asked["code_challenge"]
                ):
                    return self._json(400, {"error": "invalid_grant"})
                return self._json(200, stub.tokens_for(client_id, asked.get("scope", "")))

        # Refresh tokens issued (token -> the client it was issued to), each usable once.
        self.refresh_tokens: dict[str, str] = {}
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.base_url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(
            target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )

    def tokens_for(self, client_id: str, scope: str) -> dict:
        access_token = f"stub-access-{secrets.token_urlsafe(12)}"
        refresh_token = f"stub-refresh-{secrets.token_urlsafe(12)}"
        self.issued_tokens.append(access_token)
        self.refresh_tokens[refresh_token] = client_id
        return {
            "access_token": access_token,
            "refresh_token": refresh_token,
            "token_type": "Bearer",
            "expires_in": self.expires_in,
            "scope": scope,
        }

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.server.shutdown()
        self.server.server_close()
        self.thread.join()
