"""No remote ``$ref`` ever: a tool's schema refers only to itself. A
reference outside it is refused where the schema is taken in (AGENT.md, Django admin, a tool
server's discovery), naming the field; one stored before that is never fetched: the call is
a clear tool error, the turn goes on, and nothing holds the task while a server takes its time.
A loopback server records every fetch: it never sees one."""

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from runtime.admin.agent_admin import AgentForm
from runtime.agents.agent_models import Agent, ToolServer
from runtime.agents.agentfile import AgentFileError, parse_agent_file
from runtime.decisions.decision_models import Effect
from runtime.kernel.task_models import TaskState
from runtime.tools.catalog import validate_arguments
from runtime.tools.schema_refs import remote_ref
from runtime.tools.servers import DiscoveryError, tool_server_refresh
from tests.core import REPORT_RESULT, start, status_text
from tests.hostile import HostileServer

pytestmark = pytest.mark.django_db


class FetchRecorder:
    """Serves a schema to whoever asks, slowly (5 s, as the probe's slow $ref), and counts
    the asks."""

    def __init__(self):
        self.fetches: list[str] = []
        recorder = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_GET(self):
                recorder.fetches.append(self.path)
                threading.Event().wait(5)
                body = json.dumps({"type": "string", "secret": "from the inside"}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/schema.json"

    def stop(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def recorder():
    found = FetchRecorder()
    yield found
    found.stop()


def remote_schema(ref: str) -> dict:
    return {"type": "object", "properties": {"target": {"$ref": ref}}}


@pytest.mark.parametrize("kind", ["http", "file", "urn"])
def test_validation_never_fetches_a_reference_outside_the_schema(recorder, tmp_path, kind):
    secret = tmp_path / "secret.json"
    secret.write_text('{"type": "string", "inside": "a file of the server"}')
    ref = {"http": recorder.url, "file": secret.as_uri(), "urn": "urn:example:schema"}[kind]
    problem = validate_arguments(remote_schema(ref), {"target": "x"})
    assert problem == (
        f"the tool's schema cannot be used: its reference {ref!r} does not resolve "
        "(only references inside the schema are followed)"
    )
    assert recorder.fetches == []
    assert "a file of the server" not in problem


def test_references_inside_the_schema_still_work():
    schema = {
        "type": "object",
        "properties": {
            "n": {"$ref": "#/$defs/count"},
            "who": {"$ref": "urn:example:who"},
        },
        "$defs": {
            "count": {"type": "integer"},
            "who": {"$id": "urn:example:who", "type": "string"},
        },
    }
    assert remote_ref(schema) is None
    assert validate_arguments(schema, {"n": 1, "who": "ada"}) is None
    assert (
        validate_arguments(schema, {"n": "x"})
        == "invalid arguments at n: 'x' is not of type 'integer'"
    )
    assert (
        validate_arguments(schema, {"who": 3})
        == "invalid arguments at who: 3 is not of type 'string'"
    )


def test_a_reference_that_loops_is_a_clear_error():
    schema = {"$defs": {"a": {"$ref": "#/$defs/a"}}, "$ref": "#/$defs/a"}
    assert validate_arguments(schema, {}) == "the tool's schema cannot be used: its references loop"


AGENT_WITH_REMOTE_REF = """---
name: fetcher
description: Has a tool whose schema points elsewhere.
tools:
  - server: deploy
    tool: deploy_build
    schema:
      type: object
      properties:
        build:
          $ref: "{ref}"
---
"""


@pytest.mark.parametrize(
    "ref", ["http://127.0.0.1:9/x.json", "file:///etc/passwd", "other.json#/a"]
)
def test_an_agent_file_with_a_remote_ref_is_refused_naming_the_field(tmp_path, recorder, ref):
    path = tmp_path / "fetcher.md"
    path.write_text(AGENT_WITH_REMOTE_REF.replace("{ref}", ref))
    with pytest.raises(AgentFileError) as caught:
        parse_agent_file(path)
    assert (caught.value.line, caught.value.field) == (11, "tools.0.schema.properties.build.$ref")
    assert caught.value.message == (
        f"{ref!r} points outside the schema: only references inside it (#/...) are followed, "
        "nothing is fetched"
    )


def test_admin_refuses_a_tool_schema_with_a_remote_ref(agents):
    agent = Agent.objects.get(tenant=agents.a.tenant, slug="deployer")
    form = AgentForm(instance=agent)
    form.cleaned_data = {
        "tools": [
            {
                "server": "deploy",
                "tool": "deploy_build",
                "schema": remote_schema("https://x.test/s"),
            }
        ]
    }
    with pytest.raises(
        Exception, match=r"0\.schema\.properties\.target\.\$ref: 'https://x\.test/s' points outside"
    ):
        form.clean_tools()


def test_a_tool_server_offering_a_remote_ref_fails_its_refresh_naming_the_tool_and_field(
    agents, settings, recorder
):
    settings.PUSH_ALLOW_PRIVATE_HOSTS = True
    tools = {
        "tools": [
            {"name": "fine", "inputSchema": {"type": "object"}},
            {"name": "fetcher", "inputSchema": remote_schema(recorder.url)},
        ]
    }
    body = json.dumps(tools).encode()
    head = (
        f"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
    ).encode()
    with HostileServer(head, lambda: iter([body])) as server:
        row = ToolServer(tenant=agents.a.tenant, name="calc", kind="http", url=server.url)
        row.signing_secret_new()
        row.save()
        with pytest.raises(DiscoveryError) as caught:
            tool_server_refresh(server=row)
    assert str(caught.value) == (
        f"the tool fetcher: inputSchema.properties.target.$ref: {recorder.url!r} points outside "
        "the schema: only references inside it (#/...) are followed, nothing is fetched"
    )
    row.refresh_from_db()
    assert row.tools == [] and row.refresh_error == str(caught.value)
    assert recorder.fetches == []


def test_a_stored_schema_with_a_remote_ref_is_a_tool_error_and_the_turn_goes_on(
    agents, make_agent, recorder
):
    """As a schema cached before the load-time checks: the call is refused before it is sent,
    the model is told why, nothing is fetched (so no task's lock waits on the slow server)."""
    agent = make_agent(
        "fetcher",
        [
            {"call": {"server": "deploy", "tool": "deploy_build", "args": {"target": "b"}}},
            *REPORT_RESULT,
        ],
        tools=[{"server": "deploy", "tool": "deploy_build", "schema": {"type": "object"}}],
        tool_policy={"deploy/deploy_build": "allow"},
    )
    Agent.objects.filter(pk=agent.pk).update(
        tools=[{"server": "deploy", "tool": "deploy_build", "schema": remote_schema(recorder.url)}]
    )
    task = start(agents.a, "fetcher", "go")
    assert task.state == TaskState.COMPLETED
    assert status_text(task) == (
        f"error: the tool's schema cannot be used: its reference {recorder.url!r} does not "
        "resolve (only references inside the schema are followed)"
    )
    assert not Effect.objects.filter(task=task).exists()  # never sent
    assert recorder.fetches == []
