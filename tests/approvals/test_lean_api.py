"""Token-authenticated REST calls skip the middleware that only browser sessions use
(approvals.lean_api, config/asgi.py) and answer as the whole stack does; a session's calls still
go through the whole stack, CSRF check included."""

import asyncio
import json
import urllib.error
import urllib.request
from http import HTTPStatus

import pytest
from django.test import Client
from django.urls import get_resolver
from rest_framework.views import APIView

from approvals.lean_api import lean_api_middleware, lean_api_request
from config import asgi
from runtime.decisions.decision_models import Interaction
from tests.live import wait_until

# The requests are answered on another thread (a2a_endpoint.asyncdb.db): the rows they read
# must be committed.
pytestmark = pytest.mark.django_db(transaction=True)


def asgi_call(app, method: str, path: str, *, body=b"", headers=(), host=b"testserver"):
    """(status, headers as a dict of lists, body) of one request to an ASGI app, in process."""
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": method,
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "root_path": "",
        "headers": [(b"host", host), (b"content-length", str(len(body)).encode()), *headers],
        "client": ("127.0.0.1", 50000),
        "server": ("testserver", 80),
    }
    sent = []

    async def run():
        requests = [{"type": "http.request", "body": body, "more_body": False}]

        async def receive():
            if requests:
                return requests.pop()
            await asyncio.Event().wait()  # the client stays connected

        async def send(message):
            sent.append(message)

        await app(scope, receive, send)

    asyncio.run(run())
    start = next(m for m in sent if m["type"] == "http.response.start")
    found: dict[str, list[str]] = {}
    for name, value in start["headers"]:
        found.setdefault(name.decode().lower(), []).append(value.decode())
    content = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
    return start["status"], found, content


def bearer(token: str) -> tuple:
    return ((b"authorization", f"Bearer {token}".encode()),)


JSON = ((b"content-type", b"application/json"),)


def test_the_lean_stack_keeps_every_middleware_but_the_sessions_ones():
    kept = lean_api_middleware()
    for skipped in (
        "django.contrib.sessions.middleware.SessionMiddleware",
        "django.middleware.csrf.CsrfViewMiddleware",
        "django.contrib.auth.middleware.AuthenticationMiddleware",
    ):
        assert skipped not in kept
    for needed in (
        "django.middleware.security.SecurityMiddleware",
        "config.csp.ContentSecurityPolicyMiddleware",
        "django.middleware.common.CommonMiddleware",
        "django.middleware.clickjacking.XFrameOptionsMiddleware",
    ):
        assert needed in kept


def test_only_api_calls_with_an_authorization_header_take_the_lean_stack():
    def scope(path, headers):
        return {"type": "http", "path": path, "headers": headers}

    auth = [(b"authorization", b"Bearer x")]
    assert lean_api_request(scope("/api/v1/interactions", auth))
    assert not lean_api_request(scope("/api/v1/interactions", [(b"cookie", b"sessionid=x")]))
    assert not lean_api_request(scope("/inbox/", auth))
    assert not lean_api_request(scope("/api/schema", auth))


def test_every_api_v1_view_is_a_rest_framework_view():
    # The lean stack sets no request.user or session: only DRF views, which authenticate the
    # token themselves, may be under /api/v1/.
    def walk(patterns, prefix=""):
        for pattern in patterns:
            route = prefix + str(pattern.pattern)
            if hasattr(pattern, "url_patterns"):
                yield from walk(pattern.url_patterns, route)
            else:
                yield route, pattern.callback

    api = [(route, view) for route, view in walk(get_resolver().url_patterns) if "api/v1/" in route]
    assert len(api) >= 6
    for route, view in api:
        assert issubclass(getattr(view, "cls", object), APIView), route


def test_a_token_decision_takes_the_lean_stack_with_the_stacks_headers(agents, monkeypatch):
    approval = agents.a.extra["make"].approval()
    lean = []
    respond = asgi.api_application.respond
    monkeypatch.setattr(
        asgi.api_application, "respond", lambda request: lean.append(request) or respond(request)
    )
    status, headers, content = asgi_call(
        asgi.application,
        "POST",
        f"/api/v1/interactions/{approval.public_id}/answer",
        body=b'{"approved": true}',
        headers=bearer(agents.a.extra["operator_token"]) + JSON,
    )
    assert status == HTTPStatus.OK, content
    assert len(lean) == 1
    body = json.loads(content)
    assert body["state"] == "answered" and body["answeredBy"] == "program:acme-ops"
    approval.refresh_from_db()
    assert approval.state == Interaction.State.ANSWERED
    # What SecurityMiddleware, the CSP and XFrameOptionsMiddleware set; no session, no cookie.
    assert headers["x-content-type-options"] == ["nosniff"]
    assert headers["x-frame-options"] == ["DENY"]
    assert headers["content-security-policy"] and headers["referrer-policy"]
    assert "set-cookie" not in headers


@pytest.mark.parametrize(
    ("method", "path", "body", "auth", "host", "status"),
    [
        ("GET", "/api/v1/interactions", b"", "operator", b"testserver", 200),
        ("GET", "/api/v1/interactions", b"", "partner", b"testserver", 403),
        ("GET", "/api/v1/interactions", b"", "cs_bogus", b"testserver", 401),
        ("GET", "/api/v1/interactions", b"", "operator", b"evil.example", 400),
        ("GET", "/api/v1/nothing-here", b"", "operator", b"testserver", 404),
        ("POST", "/api/v1/interactions/eff_nope/answer", b"{}", "operator", b"testserver", 404),
        ("POST", "/api/v1/interactions/{id}/answer", b"not json", "operator", b"testserver", 400),
        ("POST", "/api/v1/interactions/{id}/answer", b'{"value": 1}', "b", b"testserver", 404),
        ("GET", "/api/v1/whoami", b"", "operator", b"testserver", 200),
    ],
)
def test_the_lean_stack_answers_as_the_whole_stack(agents, method, path, body, auth, host, status):
    approval = agents.a.extra["make"].approval()
    token = {
        "operator": agents.a.extra["operator_token"],
        "b": agents.b.extra["operator_token"],
        "partner": agents.a.token,
    }.get(auth, auth)
    path = path.replace("{id}", approval.public_id)
    call = dict(body=body, headers=bearer(token) + JSON, host=host)
    lean = asgi_call(asgi.api_application, method, path, **call)
    whole = asgi_call(asgi.django_application, method, path, **call)
    assert lean[0] == whole[0] == status, (lean, whole)
    if whole[1].get("content-type", [""])[0].startswith("application/json"):
        assert json.loads(lean[2]) == json.loads(whole[2])
    for header in ("content-type", "www-authenticate", "x-frame-options", "allow"):
        assert lean[1].get(header) == whole[1].get(header), header
    approval.refresh_from_db()
    assert approval.state == Interaction.State.OPEN


def test_a_session_decision_still_needs_its_csrf_token(agents):
    approval = agents.a.extra["make"].approval()
    client = Client(enforce_csrf_checks=True)
    client.force_login(agents.a.operator)
    cookie = f"sessionid={client.cookies['sessionid'].value}".encode()
    status, _, _ = asgi_call(
        asgi.application,
        "POST",
        f"/api/v1/interactions/{approval.public_id}/answer",
        body=b'{"approved": true}',
        headers=((b"cookie", cookie),) + JSON,
    )
    assert status == HTTPStatus.FORBIDDEN
    approval.refresh_from_db()
    assert approval.state == Interaction.State.OPEN


# --- against the live stack (uvicorn in another process, the database threads of production) --


def live(method: str, url: str, token: str, body: dict | None = None):
    """(status, headers, JSON body) of a request to the live server."""
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(url, data=data, method=method)
    request.add_header("Authorization", f"Bearer {token}")
    request.add_header("A2A-Version", "1.0")
    if data is not None:
        request.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, response.headers, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, exc.headers, json.loads(exc.read())


def test_a_token_decision_on_the_live_server_resumes_the_turn(live_stack, demo):
    deployer = f"{live_stack.url}{demo['agents']['deployer']}"
    message = {
        "messageId": "lean-api-live-1",
        "role": "ROLE_USER",
        "parts": [{"text": "deploy build 2026.10.06-1 to staging"}],
    }
    send = {"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {"message": message}}
    _, _, sent = live("POST", deployer, demo["token"], send)
    task = sent["result"]["task"]
    assert task["status"]["state"] == "TASK_STATE_AUTH_REQUIRED"
    api = f"{live_stack.url}/api/v1/interactions"
    _, _, listed = live("GET", f"{api}?state=open&agent=deployer", demo["operator_token"])
    (interaction,) = [row for row in listed["results"] if row["taskId"] == task["id"]]

    status, headers, body = live(
        "POST", f"{api}/{interaction['id']}/answer", demo["operator_token"], {"approved": True}
    )

    assert status == HTTPStatus.OK, body
    assert body["state"] == "answered" and body["answeredVia"] == "rest"
    assert headers["X-Frame-Options"] == "DENY" and headers["Content-Security-Policy"]
    assert "Set-Cookie" not in headers
    get = {"jsonrpc": "2.0", "id": 2, "method": "GetTask", "params": {"id": task["id"]}}
    done = wait_until(
        lambda: (
            live("POST", deployer, demo["token"], get)[2]["result"]["status"]["state"]
            == "TASK_STATE_COMPLETED"
        ),
        30,
        what="the resumed turn",
    )
    assert done
    # A refusal over the lean stack is DRF's, as on the whole stack.
    status, headers, body = live("GET", api, demo["token"])  # a partner token
    assert status == HTTPStatus.FORBIDDEN and "partner token" in body["detail"]
