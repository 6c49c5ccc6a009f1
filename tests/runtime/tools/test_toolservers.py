"""Tenants' tool servers: an MCP server (the ``mcp`` package's FastMCP over streamable HTTP)
and an HTTP server checking Standard Webhooks signatures, both real servers on local ports;
tools discovered in admin, calls held, approved and sent once, errors, credentials from the
tenant's connection (pasted, and OAuth2 renewed with the refresh token), tenant isolation."""

import json
import re
import threading
import time
from datetime import timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs

import pytest
from allauth.socialaccount.models import SocialApp
from django.urls import reverse
from django.utils import timezone
from standardwebhooks.webhooks import Webhook

from connections.crypto import secret_decrypt
from connections.models import App, Connection, ConnectionAuditEvent
from connections.services import connection_connect_oauth, connection_connect_token
from runtime.agents.agent_models import ToolServer
from runtime.decisions.decision_models import Effect
from runtime.decisions.effects import effect_resolve
from runtime.tools.catalog import tool_spec, tools_offered
from tenants.models import User
from tests.core import REPORT_RESULT, decide, open_interaction, run, start, status_text
from tests.mcp_servers import McpStub, mcp_tool_server

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("loopback_allowed")]


# --- an HTTP tool server --------------------------------------------------------------------


class HttpStub:
    """A signed-JSON tool server: verifies every request's Standard Webhooks signature with
    ``secret`` (401 when it does not hold) and records what it was sent."""

    def __init__(self):
        self.secret = ""
        self.requests: list[dict] = []
        self.refused = 0
        stub = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("content-length", 0)))
                try:
                    Webhook(stub.secret).verify(body, dict(self.headers))
                except Exception:
                    stub.refused += 1
                    return self.answer(401, {"error": "bad signature"})
                request = json.loads(body)
                stub.requests.append(request)
                if request.get("method") == "list_tools":
                    return self.answer(
                        200,
                        {
                            "tools": [
                                {
                                    "name": "greet",
                                    "description": "Greets someone.",
                                    "inputSchema": {
                                        "type": "object",
                                        "properties": {"who": {"type": "string"}},
                                        "required": ["who"],
                                    },
                                },
                                {"name": "broken", "description": "Fails.", "inputSchema": {}},
                            ]
                        },
                    )
                if request.get("tool") == "broken":
                    return self.answer(500, {"error": "the database is down"})
                if request.get("tool") == "big":
                    # 2.5 KB of JSON, with characters of two bytes to cut around.
                    return self.answer(200, {"rows": ["é" * 50 for _ in range(24)]})
                if request.get("tool") == "slow":
                    time.sleep(3)
                who = request["arguments"]["who"]
                return self.answer(200, {"greeting": f"hello {who}"})

            def answer(self, status, payload):
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/tools"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def stop(self):
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def http_stub():
    stub = HttpStub()
    yield stub
    stub.stop()


# --- helpers --------------------------------------------------------------------------------


@pytest.fixture
def staff_client(client, db):
    user = User.objects.create_superuser(email="root@example.test", password="pw")
    client.force_login(user)
    return client


def call_step(tool: str, **args) -> dict:
    return {"call": {"server": "calc", "tool": tool, "args": args}}


def refresh_in_admin(staff_client, server: ToolServer):
    """The admin's "Refresh tools" button on the server's change page."""
    url = reverse("admin:runtime_toolserver_refresh", args=[server.pk])
    response = staff_client.post(url, follow=True)
    assert response.status_code == 200
    server.refresh_from_db()
    return response


# --- MCP ------------------------------------------------------------------------------------


def test_mcp_tools_are_discovered_held_approved_and_called_once(
    agents, make_agent, mcp_stub, staff_client
):
    server = mcp_tool_server(agents.a.tenant, mcp_stub.url)
    response = refresh_in_admin(staff_client, server)
    assert "found 4 tool(s)" in response.content.decode()
    assert {t["name"] for t in server.tools} == {"add", "explode", "slow", "retired"}
    add = server.tool_named("add")
    assert add["description"] == "Add two numbers."
    assert add["inputSchema"]["required"] == ["a", "b"]

    make_agent("calcer", [call_step("add", a=2, b=3), *REPORT_RESULT], tools=[{"server": "calc"}])
    task = start(agents.a, "calcer", "add")
    assert task.state == "TASK_STATE_AUTH_REQUIRED"
    assert mcp_stub.calls == []  # held: nothing sent before a person decides
    interaction = open_interaction(task)
    assert interaction.detail["server"] == "calc" and interaction.detail["tool"] == "add"

    decide(interaction, approved=True)
    task = run(task)
    assert task.state == "TASK_STATE_COMPLETED"
    assert status_text(task) == 'ok: {"result": 5}'
    assert mcp_stub.calls == [("add", {"a": 2, "b": 3})]
    effect = Effect.objects.get(task=task)
    assert effect.state == Effect.State.SUCCEEDED and effect.outcome == {"result": {"result": 5}}

    run(task)  # a second run of the finished turn sends nothing again
    assert len(mcp_stub.calls) == 1


def test_discovered_schemas_validate_and_are_offered(agents, make_agent, mcp_stub, staff_client):
    refresh_in_admin(staff_client, mcp_tool_server(agents.a.tenant, mcp_stub.url))
    agent = make_agent(
        "calcer",
        [call_step("add", a="two", b=3), *REPORT_RESULT],
        tools=[{"server": "calc"}],
        tool_policy={"calc": "allow"},
    )
    offered = {(t["server"], t["tool"]): t for t in tools_offered(agent)}
    assert set(offered) == {("calc", t) for t in ("add", "explode", "slow", "retired")}
    assert offered["calc", "add"]["schema"]["properties"]["a"]["type"] == "integer"
    assert offered["calc", "add"]["description"] == "Add two numbers."
    assert tool_spec(agent, "calc", "nope") is None

    task = start(agents.a, "calcer", "add")
    assert status_text(task).startswith("error: invalid arguments at a:")
    assert mcp_stub.calls == [] and not Effect.objects.exists()


def test_one_named_tool_takes_its_schema_from_discovery(agents, make_agent, mcp_stub, staff_client):
    refresh_in_admin(staff_client, mcp_tool_server(agents.a.tenant, mcp_stub.url))
    agent = make_agent(
        "one-tool",
        [call_step("explode", reason="x"), *REPORT_RESULT],
        tools=[{"server": "calc", "tool": "add"}],
        tool_policy={"calc": "allow"},
    )
    assert [(t["server"], t["tool"]) for t in tools_offered(agent)] == [("calc", "add")]
    assert tool_spec(agent, "calc", "add")["schema"]["required"] == ["a", "b"]
    # A tool of the server that AGENT.md does not name is not the agent's to call.
    task = start(agents.a, "one-tool", "go")
    assert status_text(task) == "error: unknown tool calc / explode"
    assert mcp_stub.calls == []


def test_an_mcp_is_error_result_reaches_the_transcript_as_a_tool_error(
    agents, make_agent, mcp_stub, staff_client
):
    refresh_in_admin(staff_client, mcp_tool_server(agents.a.tenant, mcp_stub.url))
    make_agent(
        "exploder",
        [call_step("explode", reason="boom"), *REPORT_RESULT],
        tools=[{"server": "calc"}],
        tool_policy={"calc/explode": "allow"},
    )
    task = start(agents.a, "exploder", "go")
    assert task.state == "TASK_STATE_COMPLETED"
    assert status_text(task).startswith("error: ")
    assert "exploded: boom" in status_text(task)
    result = [e for e in task.transcript if e["type"] == "tool_result"][-1]
    assert result["ok"] is False and "exploded: boom" in result["error"]
    assert Effect.objects.get().state == Effect.State.FAILED
    assert mcp_stub.calls == [("explode", {"reason": "boom"})]


def test_a_server_that_is_gone_is_a_clear_tool_error(agents, make_agent, mcp_stub, staff_client):
    refresh_in_admin(
        staff_client, mcp_tool_server(agents.a.tenant, mcp_stub.url, timeout_seconds=5)
    )
    make_agent(
        "calcer",
        [call_step("add", a=1, b=1), *REPORT_RESULT],
        tools=[{"server": "calc"}],
        tool_policy={"calc": "allow"},
    )
    mcp_stub.stop()
    task = start(agents.a, "calcer", "go")
    assert task.state == "TASK_STATE_COMPLETED"
    # The server by its name, never its URL (the model's context is no place for
    # an internal address).
    text = status_text(task)
    assert text.startswith("error: the tool server calc could not be reached (")
    assert mcp_stub.url not in text and "127.0.0.1" not in text
    assert Effect.objects.get().state == Effect.State.FAILED


def test_a_tool_the_server_stops_offering_fails_clearly_and_is_not_sent(
    agents, make_agent, mcp_stub, staff_client
):
    server = mcp_tool_server(agents.a.tenant, mcp_stub.url)
    refresh_in_admin(staff_client, server)
    make_agent(
        "retirer", [call_step("retired", note="hi"), *REPORT_RESULT], tools=[{"server": "calc"}]
    )
    held = start(agents.a, "retirer", "go")
    assert held.state == "TASK_STATE_AUTH_REQUIRED"

    mcp_stub.mcp.remove_tool("retired")
    refresh_in_admin(staff_client, server)
    assert server.tool_named("retired") is None

    # A new call of it is refused before anything is journalled.
    fresh = start(agents.a, "retirer", "again")
    assert status_text(fresh) == (
        "error: the tool server calc does not offer retired (as of its last discovery)"
    )
    assert Effect.objects.filter(task=fresh).count() == 0
    # The call held before the tool went away is approved, then closed as failed, unsent.
    decide(open_interaction(held), approved=True)
    held = run(held)
    assert status_text(held).startswith("error: the tool server calc does not offer retired")
    assert status_text(held).endswith("not sent")
    assert Effect.objects.get(task=held).state == Effect.State.FAILED
    assert mcp_stub.calls == []


def test_a_deactivated_server_is_not_called(agents, make_agent, mcp_stub, staff_client):
    server = mcp_tool_server(agents.a.tenant, mcp_stub.url)
    refresh_in_admin(staff_client, server)
    make_agent(
        "calcer",
        [call_step("add", a=1, b=2), *REPORT_RESULT],
        tools=[{"server": "calc"}],
        tool_policy={"calc": "allow"},
    )
    ToolServer.objects.filter(pk=server.pk).update(active=False)
    task = start(agents.a, "calcer", "go")
    assert status_text(task) == "error: there is no tool server calc for this tenant"
    assert mcp_stub.calls == []


# --- credentials ----------------------------------------------------------------------------


def test_the_connection_token_is_sent_as_bearer(agents, make_agent, mcp_stub, staff_client):
    app = App.objects.create(slug="calcapp", name="Calc App")
    connection_connect_token(
        tenant=agents.a.tenant, app=app, token="calc-token-123", by=agents.a.admin
    )
    refresh_in_admin(staff_client, mcp_tool_server(agents.a.tenant, mcp_stub.url, app=app))
    make_agent(
        "calcer",
        [call_step("add", a=4, b=4), *REPORT_RESULT],
        tools=[{"server": "calc"}],
        tool_policy={"calc": "allow"},
    )
    mcp_stub.authorizations.clear()
    task = start(agents.a, "calcer", "go")
    assert status_text(task) == 'ok: {"result": 8}'
    assert mcp_stub.authorizations and set(mcp_stub.authorizations) == {"Bearer calc-token-123"}


def test_without_the_connection_the_call_asks_for_it_and_nothing_is_sent(
    agents, make_agent, mcp_stub
):
    app = App.objects.create(slug="calcapp", name="Calc App")
    mcp_tool_server(
        agents.a.tenant,
        mcp_stub.url,
        app=app,
        tools=[{"name": "add", "description": "", "inputSchema": {"type": "object"}}],
    )
    make_agent(
        "calcer",
        [call_step("add", a=4, b=4), *REPORT_RESULT],
        tools=[{"server": "calc"}],
        tool_policy={"calc": "allow"},
    )
    task = start(agents.a, "calcer", "go")
    assert status_text(task) == (
        "error: calcapp is not connected for this tenant; ask for the connection first."
    )
    assert mcp_stub.calls == [] and mcp_stub.authorizations == []
    # The other tenant's connection to the same app does not count.
    connection_connect_token(tenant=agents.b.tenant, app=app, token="theirs", by=agents.b.admin)
    task = start(agents.a, "calcer", "again")
    assert "calcapp is not connected" in status_text(task)
    assert mcp_stub.calls == []


class TokenEndpoint:
    """An OAuth2 token endpoint that grants refresh_token requests for one refresh token."""

    def __init__(self):
        self.grants: list[dict] = []
        endpoint = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_POST(self):
                form = parse_qs(self.rfile.read(int(self.headers["content-length"])).decode())
                grant = {k: v[0] for k, v in form.items()}
                endpoint.grants.append(grant)
                if grant.get("grant_type") == "refresh_token" and grant.get("refresh_token") == (
                    "refresh-1"
                ):
                    status, body = (
                        200,
                        {
                            "access_token": "fresh-access",
                            "refresh_token": "refresh-2",
                            "expires_in": 3600,
                            "token_type": "Bearer",
                        },
                    )
                else:
                    status, body = 400, {"error": "invalid_grant"}
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/token"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()


@pytest.fixture
def token_endpoint():
    endpoint = TokenEndpoint()
    yield endpoint
    endpoint.httpd.shutdown()
    endpoint.httpd.server_close()


def test_an_expired_oauth2_token_is_refreshed_stored_and_audited(
    agents, make_agent, mcp_stub, token_endpoint
):
    social = SocialApp.objects.create(
        provider="openid_connect",
        provider_id="calc",
        name="Calc",
        client_id="client-1",
        secret="client-secret",
        settings={
            "authorize_url": "https://calc.example/authorize",
            "access_token_url": token_endpoint.url,
        },
    )
    app = App.objects.create(slug="calcapp", name="Calc App", method="oauth2", social_app=social)
    connection_connect_oauth(
        tenant=agents.a.tenant,
        app=app,
        access_token="stale-access",
        refresh_token="refresh-1",
        expires_in=60,
        by=agents.a.admin,
    )
    Connection.objects.filter(app=app).update(expires_at=timezone.now() - timedelta(minutes=5))
    mcp_tool_server(
        agents.a.tenant,
        mcp_stub.url,
        app=app,
        tools=[{"name": "add", "description": "", "inputSchema": {"type": "object"}}],
    )
    make_agent(
        "calcer",
        [call_step("add", a=1, b=2), *REPORT_RESULT],
        tools=[{"server": "calc"}],
        tool_policy={"calc": "allow"},
    )
    task = start(agents.a, "calcer", "go")
    assert status_text(task) == 'ok: {"result": 3}'
    assert set(mcp_stub.authorizations) == {"Bearer fresh-access"}
    assert [g["grant_type"] for g in token_endpoint.grants] == ["refresh_token"]
    assert token_endpoint.grants[0]["client_id"] == "client-1"

    connection = Connection.objects.get(app=app)
    assert secret_decrypt(connection.access_token_encrypted) == "fresh-access"
    assert secret_decrypt(connection.refresh_token_encrypted) == "refresh-2"
    assert "fresh-access" not in connection.access_token_encrypted  # stored encrypted
    assert connection.expires_at > timezone.now() + timedelta(minutes=50)
    audit = ConnectionAuditEvent.objects.filter(tenant=agents.a.tenant, app=app).first()
    assert (audit.actor, audit.method) == ("system:token-refresh", "refresh")

    # The next call uses the stored token: no second refresh.
    start(agents.a, "calcer", "again")
    assert len(token_endpoint.grants) == 1


def test_a_refresh_the_provider_refuses_is_a_clear_error_without_the_token(
    agents, make_agent, mcp_stub, token_endpoint
):
    social = SocialApp.objects.create(
        provider="openid_connect",
        provider_id="calc",
        name="Calc",
        client_id="client-1",
        secret="client-secret",
        settings={
            "authorize_url": "https://calc.example/authorize",
            "access_token_url": token_endpoint.url,
        },
    )
    app = App.objects.create(slug="calcapp", name="Calc App", method="oauth2", social_app=social)
    connection_connect_oauth(
        tenant=agents.a.tenant,
        app=app,
        access_token="stale-access",
        refresh_token="revoked-refresh",
        expires_in=60,
        by=agents.a.admin,
    )
    Connection.objects.filter(app=app).update(expires_at=timezone.now() - timedelta(minutes=5))
    mcp_tool_server(
        agents.a.tenant,
        mcp_stub.url,
        app=app,
        tools=[{"name": "add", "description": "", "inputSchema": {"type": "object"}}],
    )
    make_agent(
        "calcer",
        [call_step("add", a=1, b=2), *REPORT_RESULT],
        tools=[{"server": "calc"}],
        tool_policy={"calc": "allow"},
    )
    task = start(agents.a, "calcer", "go")
    text = status_text(task)
    assert text.startswith("error: calcapp is connected but its token has expired")
    assert "ask for the connection again" in text
    assert "revoked-refresh" not in text and "stale-access" not in text
    assert mcp_stub.calls == []


# --- HTTP -----------------------------------------------------------------------------------


def test_an_http_server_is_made_in_admin_signed_discovered_and_called(
    agents, make_agent, http_stub, staff_client
):
    response = staff_client.post(
        reverse("admin:runtime_toolserver_add"),
        {
            "tenant": agents.a.tenant.pk,
            "name": "calc",
            "kind": "http",
            "url": http_stub.url,
            "timeout_seconds": 5,
            "active": "on",
        },
    )
    assert response.status_code == 200, response.content
    page = response.content.decode()
    assert "shown <strong>once</strong>" in page
    secret = re.search(r'value="(whsec_[^"]+)"', page).group(1)
    server = ToolServer.objects.get(tenant=agents.a.tenant, name="calc")
    assert secret not in server.signing_secret_encrypted
    assert secret_decrypt(server.signing_secret_encrypted) == secret
    # The change page never shows it again.
    change = staff_client.get(reverse("admin:runtime_toolserver_change", args=[server.pk]))
    assert change.status_code == 200 and secret not in change.content.decode()

    http_stub.secret = secret
    refresh_in_admin(staff_client, server)
    assert http_stub.refused == 0
    assert [t["name"] for t in server.tools] == ["greet", "broken"]

    make_agent(
        "greeter",
        [{"call": {"server": "calc", "tool": "greet", "args": {"who": "ada"}}}, *REPORT_RESULT],
        tools=[{"server": "calc"}],
        tool_policy={"calc": "allow"},
    )
    task = start(agents.a, "greeter", "go")
    assert status_text(task) == 'ok: {"greeting": "hello ada"}'
    call = http_stub.requests[-1]
    effect = Effect.objects.get(task=task)
    assert call == {
        "method": "call_tool",
        "tool": "greet",
        "arguments": {"who": "ada"},
        "effectId": effect.public_id,
        "subject": agents.a.subject,
        "tenant": "acme",
    }


def test_an_http_error_status_is_a_clear_tool_error(agents, make_agent, http_stub):
    server = ToolServer(
        tenant=agents.a.tenant,
        name="calc",
        kind="http",
        url=http_stub.url,
        tools=[{"name": "broken", "description": "", "inputSchema": {"type": "object"}}],
    )
    http_stub.secret = server.signing_secret_new()
    server.save()
    make_agent(
        "breaker",
        [{"call": {"server": "calc", "tool": "broken", "args": {}}}, *REPORT_RESULT],
        tools=[{"server": "calc"}],
        tool_policy={"calc": "allow"},
    )
    task = start(agents.a, "breaker", "go")
    assert status_text(task) == (
        "error: calc answered the call of broken with HTTP 500: the database is down"
    )
    assert Effect.objects.get().state == Effect.State.FAILED


def test_a_wrong_signing_secret_is_refused_by_the_server(agents, make_agent, http_stub):
    server = ToolServer(
        tenant=agents.a.tenant,
        name="calc",
        kind="http",
        url=http_stub.url,
        tools=[{"name": "greet", "description": "", "inputSchema": {"type": "object"}}],
    )
    server.signing_secret_new()
    server.save()
    http_stub.secret = ToolServer().signing_secret_new()  # the server holds another secret
    make_agent(
        "greeter",
        [{"call": {"server": "calc", "tool": "greet", "args": {"who": "x"}}}, *REPORT_RESULT],
        tools=[{"server": "calc"}],
        tool_policy={"calc": "allow"},
    )
    task = start(agents.a, "greeter", "go")
    assert (
        status_text(task) == "error: calc answered the call of greet with HTTP 401: bad signature"
    )
    assert http_stub.refused == 1 and http_stub.requests == []


# --- the URL guard, tenancy, admin ----------------------------------------------------------


def test_private_addresses_are_refused_unless_allowed(agents, settings, mcp_stub, make_agent):
    settings.PUSH_ALLOW_PRIVATE_HOSTS = False
    server = ToolServer(tenant=agents.a.tenant, name="calc", kind="mcp", url=mcp_stub.url)
    with pytest.raises(Exception, match="not a public address"):
        server.full_clean()
    ToolServer.objects.create(
        tenant=agents.a.tenant,
        name="calc",
        kind="mcp",
        url=mcp_stub.url,
        tools=[{"name": "add", "description": "", "inputSchema": {"type": "object"}}],
    )
    make_agent(
        "calcer",
        [call_step("add", a=1, b=1), *REPORT_RESULT],
        tools=[{"server": "calc"}],
        tool_policy={"calc": "allow"},
    )
    task = start(agents.a, "calcer", "go")
    assert status_text(task).startswith("error: the tool server calc cannot be called: ")
    assert mcp_stub.calls == []


def test_reserved_names_are_refused(agents):
    server = ToolServer(tenant=agents.a.tenant, name="deploy", kind="mcp", url="https://x.example/")
    with pytest.raises(Exception, match="built-in server"):
        server.full_clean()


def test_another_tenants_server_of_the_same_name_is_never_used(
    agents, make_agent, mcp_stub, staff_client
):
    theirs = mcp_tool_server(agents.b.tenant, mcp_stub.url)
    refresh_in_admin(staff_client, theirs)
    agent = make_agent(
        "calcer",
        [call_step("add", a=1, b=1), *REPORT_RESULT],
        tools=[{"server": "calc"}],
        tool_policy={"calc": "allow"},
    )
    assert tools_offered(agent) == []
    task = start(agents.a, "calcer", "go")
    assert status_text(task) == "error: there is no tool server calc for this tenant"
    assert mcp_stub.calls == []

    # With a server of its own, tenant A's calls reach its own server, not B's.
    other = McpStub()
    try:
        refresh_in_admin(staff_client, mcp_tool_server(agents.a.tenant, other.url))
        task = start(agents.a, "calcer", "again")
        assert status_text(task) == 'ok: {"result": 2}'
        assert other.calls == [("add", {"a": 1, "b": 1})] and mcp_stub.calls == []
    finally:
        other.stop()


def test_admin_pages_render_and_the_refresh_action_works(agents, mcp_stub, staff_client):
    server = mcp_tool_server(agents.a.tenant, mcp_stub.url)
    changelist = reverse("admin:runtime_toolserver_changelist")
    assert staff_client.get(changelist).status_code == 200
    response = staff_client.post(
        changelist, {"action": "refresh_tools", "_selected_action": [server.pk]}, follow=True
    )
    assert response.status_code == 200
    assert (
        "Tool server calc: found 4 tool(s): add, explode, slow, retired."
        in response.content.decode()
    )
    page = staff_client.get(reverse("admin:runtime_toolserver_change", args=[server.pk]))
    assert page.status_code == 200
    content = page.content.decode()
    assert "Refresh tools" in content and "Add two numbers." in content
    assert staff_client.get(reverse("admin:runtime_toolserver_add")).status_code == 200


def test_a_refresh_that_fails_keeps_the_cache_and_says_why(agents, mcp_stub, staff_client):
    server = mcp_tool_server(agents.a.tenant, mcp_stub.url, timeout_seconds=5)
    refresh_in_admin(staff_client, server)
    mcp_stub.stop()
    response = refresh_in_admin(staff_client, server)
    assert "could not be reached" in response.content.decode()
    assert len(server.tools) == 4 and "could not be reached" in server.refresh_error


def test_the_refresh_button_takes_only_post(agents, mcp_stub, staff_client):
    server = mcp_tool_server(agents.a.tenant, mcp_stub.url)
    url = reverse("admin:runtime_toolserver_refresh", args=[server.pk])
    assert staff_client.get(url).status_code == 405
    assert ToolServer.objects.get(pk=server.pk).refreshed_at is None


def test_a_name_that_resolves_to_loopback_is_refused_when_connecting(
    agents, settings, mcp_stub, make_agent, caplog
):
    # check_url passes a host name; the guarded async client checks the address it resolves
    # to and connects to nothing.
    settings.PUSH_ALLOW_PRIVATE_HOSTS = False
    ToolServer.objects.create(
        tenant=agents.a.tenant,
        name="calc",
        kind="mcp",
        url=mcp_stub.url.replace("127.0.0.1", "localhost"),
        tools=[{"name": "add", "description": "", "inputSchema": {"type": "object"}}],
    )
    make_agent(
        "calcer",
        [call_step("add", a=1, b=1), *REPORT_RESULT],
        tools=[{"server": "calc"}],
        tool_policy={"calc": "allow"},
    )
    mcp_stub.authorizations.clear()
    task = start(agents.a, "calcer", "go")
    # The model is told the server's name and that its address is refused; the address
    # itself is for the admin, in the log (with the task's id, as every line of a turn).
    text = status_text(task)
    assert text == (
        "error: the tool server calc cannot be called: its address is refused by the "
        "outbound guard (an admin can see why in the log)"
    )
    assert "localhost" not in text and "127.0.0.1" not in text
    logged = [r for r in caplog.records if "localhost resolves only to refused" in r.getMessage()]
    assert logged and logged[0].task_id == task.public_id
    assert mcp_stub.authorizations == [] and mcp_stub.calls == []


def test_an_mcp_call_that_takes_too_long_is_a_timeout_error(
    agents, make_agent, mcp_stub, staff_client
):
    refresh_in_admin(
        staff_client, mcp_tool_server(agents.a.tenant, mcp_stub.url, timeout_seconds=1)
    )
    make_agent(
        "sleeper",
        [call_step("slow", seconds=2), *REPORT_RESULT],
        tools=[{"server": "calc"}],
        tool_policy={"calc": "allow"},
    )
    task = start(agents.a, "sleeper", "go")
    # The call was sent and no answer came: it may have run, so its outcome is
    # uncertain (effects/v1) and an operator resolves it, as after a crash.
    assert task.state == "TASK_STATE_WORKING"
    assert status_text(task) == "The outcome of calc / slow was lost; an operator is checking."
    effect = Effect.objects.get()
    assert effect.state == Effect.State.UNCERTAIN
    assert effect.outcome == {
        "error": "calc did not answer the call of slow within 1s; it may have acted"
    }
    effect_resolve(
        tenant=agents.a.tenant,
        effect_id=effect.public_id,
        resolution="happened",
        result="done",
        by="user:operator@acme.test",
    )
    task = run(task)
    assert (task.state, status_text(task)) == ("TASK_STATE_COMPLETED", "ok: done")


def test_a_policy_timeout_overrides_the_servers_and_an_idempotent_tool_just_fails(
    agents, make_agent, mcp_stub, staff_client
):
    refresh_in_admin(
        staff_client, mcp_tool_server(agents.a.tenant, mcp_stub.url, timeout_seconds=30)
    )
    make_agent(
        "sleeper",
        [call_step("slow", seconds=5), *REPORT_RESULT],
        tools=[{"server": "calc", "idempotent": True}],
        tool_policy={"calc/slow": {"action": "allow", "timeout": "1s"}},
    )
    task = start(agents.a, "sleeper", "go")
    # The policy's 1s, not the server's 30s; a tool that may be called again is failed (the
    # model may call it again), not left uncertain.
    assert status_text(task) == (
        "error: calc did not answer the call of slow within 1s; it may have acted"
    )
    assert Effect.objects.get().state == Effect.State.FAILED


def test_an_http_call_that_takes_too_long_is_a_timeout_error(agents, make_agent, http_stub):
    server = ToolServer(
        tenant=agents.a.tenant,
        name="calc",
        kind="http",
        url=http_stub.url,
        timeout_seconds=1,
        tools=[{"name": "slow", "description": "", "inputSchema": {"type": "object"}}],
    )
    http_stub.secret = server.signing_secret_new()
    server.save()
    make_agent(
        "sleeper",
        [{"call": {"server": "calc", "tool": "slow", "args": {}}}, *REPORT_RESULT],
        tools=[{"server": "calc"}],
        tool_policy={"calc": "allow"},
    )
    task = start(agents.a, "sleeper", "go")
    assert task.state == "TASK_STATE_WORKING"
    effect = Effect.objects.get()
    assert effect.state == Effect.State.UNCERTAIN
    assert effect.outcome["error"] == (
        "calc did not answer the call of slow within 1s; it may have acted"
    )


def test_a_result_over_the_limit_is_cut_for_the_model_and_kept_whole_as_a_task_file(
    agents, make_agent, http_stub
):
    from runtime.kernel.task_models import TaskFile
    from runtime.kernel.task_selectors import task_file_for_caller

    server = ToolServer(
        tenant=agents.a.tenant,
        name="calc",
        kind="http",
        url=http_stub.url,
        tools=[{"name": "big", "description": "", "inputSchema": {"type": "object"}}],
    )
    http_stub.secret = server.signing_secret_new()
    server.save()
    agent = make_agent(
        "reader",
        [{"call": {"server": "calc", "tool": "big", "args": {}}}, *REPORT_RESULT],
        tools=[{"server": "calc"}],
        tool_policy={"calc": "allow"},
    )
    agent.model = {**agent.model, "limits": {"tool_result_bytes": 1024}}
    agent.save(update_fields=["model"])
    task = start(agents.a, "reader", "go")
    assert task.state == "TASK_STATE_COMPLETED"
    whole = {"rows": ["é" * 50 for _ in range(24)]}
    stored = TaskFile.objects.get(task=task)
    assert stored.role == TaskFile.Role.TOOL_RESULT
    assert json.loads(bytes(stored.content)) == whole
    # What the model was sent: the first 1024 bytes (cut between characters), and why.
    shown = [e for e in task.transcript if e["type"] == "tool_result"][0]["result"]
    assert shown["cut"] is True and shown["fileId"] == stored.public_id
    assert shown["bytes"] == stored.size > 1024
    assert len(shown["partial"].encode()) in (1023, 1024)
    assert "over this agent's limit of 1024 (loop.limits.tool_result_bytes)" in shown["note"]
    assert status_text(task).startswith("ok: {")
    effect = Effect.objects.get(task=task)
    assert effect.outcome["resultFile"] == stored.public_id
    assert effect.outcome["result"] == shown  # the journal keeps no 2 MB copy either
    # Never the caller's to download: it is not one of its files.
    assert (
        task_file_for_caller(
            tenant=agents.a.tenant,
            agent_slug="reader",
            task_id=task.public_id,
            subject=agents.a.subject,
            file_id=stored.public_id,
        )
        is None
    )


def test_rotating_the_signing_secret_shows_the_new_one_once(agents, staff_client, http_stub):
    server = ToolServer(tenant=agents.a.tenant, name="calc", kind="http", url=http_stub.url)
    old = server.signing_secret_new()
    server.save()
    response = staff_client.post(
        reverse("admin:runtime_toolserver_changelist"),
        {"action": "rotate_signing_secret", "_selected_action": [server.pk]},
    )
    assert response.status_code == 200 and "no-store" in response["Cache-Control"]
    new = re.search(r'value="(whsec_[^"]+)"', response.content.decode()).group(1)
    server.refresh_from_db()
    assert new != old and secret_decrypt(server.signing_secret_encrypted) == new
