"""MCP tool annotations and resources, with a real MCP server built
with the official ``mcp`` package (FastMCP over streamable HTTP on a local port): each
discovered tool keeps its annotations; the tenant's default maps them to a policy (read-only
runs, the rest waits for a person), shown in admin and overridden per tool by the agent's
policy; resource links and embedded resources reach the model with their URI, name and MIME
type."""

import base64

import pytest
from mcp.server.fastmcp import FastMCP
from mcp.types import (
    BlobResourceContents,
    EmbeddedResource,
    ResourceLink,
    TextContent,
    TextResourceContents,
    ToolAnnotations,
)

from runtime.agents.agent_models import AnnotationPolicy, ToolServer
from runtime.decisions.decision_models import Effect
from runtime.kernel.task_models import AuditEvent, TaskState
from runtime.policy.rules import hint_kind, policy_rule_for
from runtime.tools.servers import tool_server_refresh
from tests.admin_pages import tenant_admin_client
from tests.core import REPORT_RESULT, decide, open_interaction, run, send, tool_results
from tests.mcp_servers import LocalMcp, mcp_tool_server

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("loopback_allowed")]


class FilesStub(LocalMcp):
    """A files server: tools annotated as the reference filesystem server annotates its own,
    one without annotations, and one answering with resources."""

    def __init__(self):
        self.calls: list[str] = []
        mcp = FastMCP("files", stateless_http=True, json_response=True)

        @mcp.tool(annotations=ToolAnnotations(readOnlyHint=True, openWorldHint=False))
        def read_file(path: str) -> str:
            self.calls.append("read_file")
            return f"contents of {path}"

        @mcp.tool(annotations=ToolAnnotations(readOnlyHint=False, destructiveHint=False))
        def create_directory(path: str) -> str:
            self.calls.append("create_directory")
            return f"made {path}"

        @mcp.tool(
            annotations=ToolAnnotations(
                title="Delete a file", destructiveHint=True, idempotentHint=True
            )
        )
        def delete_file(path: str) -> str:
            self.calls.append("delete_file")
            return f"deleted {path}"

        @mcp.tool()
        def touch(path: str) -> str:
            self.calls.append("touch")
            return f"touched {path}"

        @mcp.tool(annotations=ToolAnnotations(readOnlyHint=True))
        def find(pattern: str):
            self.calls.append("find")
            return [
                TextContent(type="text", text=f"2 files match {pattern}"),
                ResourceLink(
                    type="resource_link",
                    uri="file:///srv/report.pdf",
                    name="report.pdf",
                    title="The quarterly report",
                    mimeType="application/pdf",
                    size=1234,
                ),
                EmbeddedResource(
                    type="resource",
                    resource=TextResourceContents(
                        uri="file:///srv/notes.md", mimeType="text/markdown", text="# Notes"
                    ),
                ),
                EmbeddedResource(
                    type="resource",
                    resource=BlobResourceContents(
                        uri="file:///srv/logo.png",
                        mimeType="image/png",
                        blob=base64.b64encode(b"\x89PNG....").decode(),
                    ),
                ),
            ]

        self.serve(mcp.streamable_http_app())


@pytest.fixture
def files():
    stub = FilesStub()
    yield stub
    stub.stop()


@pytest.fixture
def fs_server(agents, files):
    return mcp_tool_server(agents.a.tenant, files.url, "fs", discover=True)


def caller(make_agent, tool, policy=None, **args):
    return make_agent(
        "files",
        [
            {"call": {"server": "fs", "tool": tool, "args": args or {"path": "/srv/a"}}},
            *REPORT_RESULT,
        ],
        tools=[{"server": "fs"}],
        tool_policy=policy or {},
    )


def test_discovered_tools_keep_their_annotations(fs_server):
    tools = {t["name"]: t for t in fs_server.tools}
    assert tools["read_file"]["annotations"] == {"readOnlyHint": True, "openWorldHint": False}
    assert tools["delete_file"]["annotations"] == {
        "destructiveHint": True,
        "idempotentHint": True,
        "title": "Delete a file",
    }
    assert "annotations" not in tools["touch"]
    kinds = {name: hint_kind(t.get("annotations")) for name, t in tools.items()}
    assert kinds == {
        "read_file": "read_only",
        "create_directory": "additive",
        "delete_file": "destructive",
        "touch": "unknown",
        "find": "read_only",
    }


@pytest.mark.parametrize(
    ("tool", "state", "held_by"),
    [
        ("read_file", TaskState.COMPLETED, ""),  # read-only: allow
        ("create_directory", TaskState.AUTH_REQUIRED, "additive tools (by the tool&#x27;s"),
        ("delete_file", TaskState.AUTH_REQUIRED, "destructive tools (by the tool&#x27;s"),
        ("touch", TaskState.AUTH_REQUIRED, "tools without annotations<"),  # approve, all three
    ],
)
def test_the_annotations_make_the_default_policy(
    agents, make_agent, files, fs_server, tool, state, held_by
):
    caller(make_agent, tool)
    task = run(send(agents.a, "files"))
    assert task.state == state
    assert files.calls == ([tool] if state == TaskState.COMPLETED else [])
    if state == TaskState.AUTH_REQUIRED:
        held = open_interaction(task)
        assert held.request["policyRule"]["source"] == "annotations"
        # The decision page says which default held it, in a sentence.
        page = agents.a.client_for(agents.a.operator).get(f"/inbox/{held.public_id}/")
        assert f'<dd id="held-by">the tenant&#x27;s default for {held_by}' in (
            page.content.decode()
        )
        decide(held, approved=True)
        assert run(task).state == TaskState.COMPLETED
        assert files.calls == [tool]
    else:
        assert Effect.objects.get(task=task).approved_by == "policy"


def test_the_tenants_default_is_its_own_and_an_agents_entry_wins(
    agents, make_agent, files, fs_server
):
    AnnotationPolicy.objects.create(
        tenant=agents.a.tenant, read_only="approve", additive="allow", unknown="deny"
    )
    agent = caller(make_agent, "create_directory")
    assert run(send(agents.a, "files")).state == TaskState.COMPLETED
    assert policy_rule_for(agent, "fs", "read_file", {}).action == "approve"
    caller(make_agent, "touch")
    touched = run(send(agents.a, "files"))
    assert touched.state == TaskState.COMPLETED
    assert tool_results(touched)[0]["error"] == "tool.denied" and files.calls == [
        "create_directory"
    ]
    # The agent's policy overrides the default per tool (and per server).
    caller(make_agent, "touch", policy={"fs/touch": "allow"})
    assert run(send(agents.a, "files")).state == TaskState.COMPLETED
    caller(make_agent, "create_directory", policy={"fs": "approve"})
    assert run(send(agents.a, "files")).state == TaskState.AUTH_REQUIRED
    # Another tenant's default is not this one's: tenant B has none, so read-only runs.
    b_server = ToolServer.objects.create(
        tenant=agents.b.tenant, name="fs", kind="mcp", url=files.url
    )
    tool_server_refresh(server=b_server)
    make_agent(
        "files",
        [{"call": {"server": "fs", "tool": "read_file", "args": {"path": "/x"}}}],
        tenant=agents.b.tenant,
        tools=[{"server": "fs"}],
    )
    assert run(send(agents.b, "files")).state == TaskState.COMPLETED


def test_resource_links_and_embedded_resources_reach_the_model(
    agents, make_agent, files, fs_server
):
    caller(make_agent, "find", pattern="*.md")
    task = run(send(agents.a, "files"))
    assert task.state == TaskState.COMPLETED
    result = tool_results(task)[0]["result"]
    assert result["text"] == "2 files match *.md"
    assert result["resources"] == [
        {
            "type": "resource_link",
            "uri": "file:///srv/report.pdf",
            "name": "report.pdf",
            "title": "The quarterly report",
            "mimeType": "application/pdf",
            "size": 1234,
        },
        {
            "type": "resource",
            "uri": "file:///srv/notes.md",
            "name": "notes.md",
            "mimeType": "text/markdown",
            "text": "# Notes",
        },
        {
            "type": "resource",
            "uri": "file:///srv/logo.png",
            "name": "logo.png",
            "mimeType": "image/png",
            "bytes": 8,
        },
    ]


def test_admin_shows_the_annotations_and_the_tenants_default(agents, fs_server):
    client = tenant_admin_client(agents.a)
    page = client.get(f"/admin/runtime/toolserver/{fs_server.pk}/change/").content.decode()
    assert "<td><code>read_file</code></td><td>readOnlyHint, openWorldHint: false</td>" in page
    assert "<td>read-only</td><td>allow</td>" in page
    assert (
        "<td><code>touch</code></td><td>none</td><td>without annotations</td><td>approve</td>"
        in (page)
    )

    response = client.post(
        "/admin/runtime/annotationpolicy/add/",
        {
            "read_only": "approve",
            "additive": "approve",
            "destructive": "deny",
            "unknown": "approve",
        },
    )
    assert response.status_code == 302
    row = AnnotationPolicy.objects.get()
    assert (row.tenant, row.destructive) == (agents.a.tenant, "deny")
    event = AuditEvent.objects.get(action="annotation_policy.changed")
    assert event.detail["destructive"] == "deny" and event.tenant_id == agents.a.tenant.pk
    page = client.get(f"/admin/runtime/toolserver/{fs_server.pk}/change/").content.decode()
    assert "<td>destructive</td><td>deny</td>" in page
    # One row per tenant: the add page of a second leads to the first, changing nothing.
    again = client.post(
        "/admin/runtime/annotationpolicy/add/",
        {"read_only": "allow", "additive": "allow", "destructive": "allow", "unknown": "allow"},
    )
    assert again.status_code == 302
    assert again["Location"] == f"/admin/runtime/annotationpolicy/{row.pk}/change/"
    assert AnnotationPolicy.objects.count() == 1
    assert AnnotationPolicy.objects.get().destructive == "deny"
    # Another tenant's row is a 404 to this tenant's admin.
    theirs = AnnotationPolicy.objects.create(tenant=agents.b.tenant)
    assert client.get(f"/admin/runtime/annotationpolicy/{theirs.pk}/change/").status_code == 404
