"""Tenants' tool servers (runtime.agents.agent_models.ToolServer) behind runtime.tools.catalog' ToolServer protocol.

``mcp``: a Model Context Protocol server over streamable HTTP, through the official ``mcp``
package: ``list_tools`` discovers (each tool with its annotations), ``call_tool`` calls. ``http``: a URL that takes JSON posts
signed with Standard Webhooks (docs/reference/tool-servers.md documents both requests). Every
request goes through the outbound guard (connections.outbound), with the tenant's connection to the
server's app as its bearer token. No token ever enters an error, a log line or a result.

The worker is synchronous: each call runs the async MCP client to completion on an event loop
of its own (``run_async``), and no ORM query runs inside it.
"""

import json
import logging
import threading
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import httpx
from django.conf import settings
from django.utils import timezone

from connections.crypto import InvalidToken, secret_decrypt
from connections.oauth import OAuthError, connection_access_token
from connections.outbound import (
    OutboundRefused,
    check_url,
    guarded_async_client,
    guarded_client,
    webhook_headers,
)
from connections.outbound_limits import ResponseTooLarge
from runtime.agents.agent_models import ToolServer
from runtime.tools.catalog import HINTS
from runtime.tools.demo_servers import SERVERS
from runtime.tools.protocol import CallContext, ToolError, ToolOutcomeLost
from runtime.tools.protocol import ToolServer as CallableServer
from runtime.tools.schema_refs import remote_ref, remote_ref_message

logger = logging.getLogger(__name__)

# The most of a server's own error text the model is shown.
ERROR_TEXT_MAX = 500
# Discovered tools are cached as given, within reason.
TOOLS_MAX = 200
DESCRIPTION_MAX = 2000


class DiscoveryError(Exception):
    """Why a refresh found no tools; the message is safe to show in admin."""


def run_async(make: Callable[[], Awaitable[Any]]) -> Any:
    """Run a coroutine to completion from synchronous code: on this thread when it has no event
    loop running, else on a thread of its own (a worker pool that runs an asyncio loop)."""
    try:
        import asyncio

        asyncio.get_running_loop()
    except RuntimeError:
        return anyio.run(make)
    box: dict[str, Any] = {}

    def target():
        try:
            box["value"] = anyio.run(make)
        except BaseException as exc:  # handed back to the caller's thread
            box["error"] = exc

    thread = threading.Thread(target=target, name="toolserver-call")
    thread.start()
    thread.join()
    if "error" in box:
        raise box["error"]
    return box.get("value")


def leaf_errors(exc: BaseException) -> list[BaseException]:
    """The exceptions inside (nested) exception groups, which anyio task groups raise."""
    if isinstance(exc, BaseExceptionGroup):
        return [leaf for inner in exc.exceptions for leaf in leaf_errors(inner)]
    return [exc]


def bearer_token(server: ToolServer) -> str | None:
    """The tenant's token for the server's app; ToolError when the app is not connected (so
    that the model asks for the connection with request_connection)."""
    app = server.app
    if app is None:
        return None
    try:
        token = connection_access_token(tenant=server.tenant, app=app)
    except OAuthError as exc:
        raise ToolError(
            f"{app.slug} is connected but its token has expired and could not be renewed "
            f"({exc}); ask for the connection again."
        ) from None
    if not token:
        raise ToolError(
            f"{app.slug} is not connected for this tenant; ask for the connection first."
        )
    return token


def refused(name: str, exc: OutboundRefused) -> ToolError:
    """The outbound guard refused the server's address: the model is told that, by the
    server's name; the address (an internal host, an IP) is only logged, for the admin."""
    logger.warning("the tool server %s cannot be called: %s", name, exc)
    return ToolError(
        f"the tool server {name} cannot be called: its address is refused by the outbound "
        "guard (an admin can see why in the log)"
    )


def too_large(name: str, what: str, error: ResponseTooLarge) -> ToolError:
    """The server answered more than its caller reads (TOOL_RESULT_MAX_BYTES for a call,
    TOOL_LIST_MAX_BYTES for a discovery): reading stopped there. It answered, so the call is
    not lost: it failed, and the model (or the admin) is told why."""
    return ToolError(f"{name} answered {what} with more than {error.limit} bytes (not read)")


def checked_url(server: ToolServer) -> str:
    try:
        check_url(server.url, ["*"])
    except OutboundRefused as exc:
        raise refused(server.name, exc) from None
    return server.url


def clean_hints(raw: Any) -> dict:
    """A tool's MCP annotations as kept: the four hints that are true or false, and a title
    (runtime.policy.rules maps them to the tenant's default policy)."""
    if not isinstance(raw, dict):
        return {}
    hints = {name: raw[name] for name in HINTS if isinstance(raw.get(name), bool)}
    title = raw.get("title")
    if isinstance(title, str) and title.strip():
        hints["title"] = title.strip()[:200]
    return hints


def clean_tools(raw: Any) -> list[dict]:
    """Discovered tools as cached: [{name, description, inputSchema, annotations}], names
    unique (``annotations`` only for a tool that has some)."""
    if not isinstance(raw, list):
        raise DiscoveryError("the server's tool list is not a list")
    tools, seen = [], set()
    for item in raw[:TOOLS_MAX]:
        if not isinstance(item, dict):
            continue
        name = item.get("name")
        if not isinstance(name, str) or not name or len(name) > 100 or name in seen:
            continue
        schema = item.get("inputSchema")
        description = item.get("description")
        found = remote_ref(schema) if isinstance(schema, dict) else None
        if found is not None:
            # Never fetched, at a call or here: the whole refresh is refused, naming the field.
            where = ".".join(map(str, ["inputSchema", *found[0]]))
            raise DiscoveryError(f"the tool {name}: {where}: {remote_ref_message(found[1])}")
        seen.add(name)
        tool = {
            "name": name,
            "description": description[:DESCRIPTION_MAX] if isinstance(description, str) else "",
            "inputSchema": schema if isinstance(schema, dict) else {"type": "object"},
        }
        hints = clean_hints(item.get("annotations"))
        if hints:
            tool["annotations"] = hints
        tools.append(tool)
    return tools


def _resource_link(content) -> dict:
    """A ``resource_link`` content item as the model gets it: where the resource is and what."""
    link = {"type": "resource_link", "uri": str(content.uri), "name": content.name}
    for key in ("title", "mimeType", "description", "size"):
        value = getattr(content, key, None)
        if value is not None:
            link[key] = value[:DESCRIPTION_MAX] if isinstance(value, str) else value
    return link


def _embedded_resource(content) -> dict:
    """An embedded resource as the model gets it: its URI, a name (the URI's last part: an
    embedded resource has none of its own), its MIME type, and its text; a binary one's
    contents are named by size, not inlined (the model reads text)."""
    resource = content.resource
    uri = str(resource.uri)
    name = uri.rstrip("/").rsplit("/", 1)[-1] or uri
    embedded: dict[str, Any] = {"type": "resource", "uri": uri, "name": name}
    if resource.mimeType:
        embedded["mimeType"] = resource.mimeType
    text = getattr(resource, "text", None)
    if isinstance(text, str):
        embedded["text"] = text
    else:
        blob = getattr(resource, "blob", "") or ""
        embedded["bytes"] = len(blob) * 3 // 4 - blob[-2:].count("=")
    return embedded


def result_mapped(result) -> dict:
    """A ``tools/call`` result that is no error, as the model gets it
    (docs/reference/tool-servers.md):
    its structuredContent, or ``{"text": ...}``; resource links and embedded resources under
    ``resources`` with their URI, name and MIME type; other content (images, audio) named in
    ``content``, not inlined."""
    texts, resources, others = [], [], []
    for content in result.content:
        kind = getattr(content, "type", "")
        if kind == "text":
            texts.append(content.text)
        elif kind == "resource_link":
            resources.append(_resource_link(content))
        elif kind == "resource":
            resources.append(_embedded_resource(content))
        else:
            mime = getattr(content, "mimeType", None)
            others.append({"type": kind, **({"mimeType": mime} if mime else {})})
    if isinstance(result.structuredContent, dict):
        mapped: dict[str, Any] = dict(result.structuredContent)
        if resources and "resources" in mapped:
            # The tool's own "resources" stays as it said it; the content's go beside it.
            mapped = {"structuredContent": mapped}
    else:
        mapped = {"text": "\n".join(texts)}
        if others:
            mapped["content"] = others  # images, audio: named, not inlined
    if resources:
        mapped["resources"] = resources
    return mapped


# --- MCP ------------------------------------------------------------------------------------


def mcp_failure(
    exc: BaseException, *, server: ToolServer, what: str, timeout: float, sent: bool
) -> ToolError:
    """What a failed MCP request tells the model (ToolOutcomeLost when it went out and no
    answer came in time: the server may have acted); anyio's task groups wrap what failed in
    ExceptionGroups."""
    from mcp.shared.exceptions import McpError

    name = server.name
    leaves = leaf_errors(exc)
    for leaf in leaves:
        if isinstance(leaf, ToolError):
            return leaf
    for leaf in leaves:
        if isinstance(leaf, ResponseTooLarge):
            return too_large(name, what, leaf)
    for leaf in leaves:
        if isinstance(leaf, McpError):
            message = str(leaf.error.message)[:ERROR_TEXT_MAX]
            return ToolError(f"{name} refused {what}: {message}")
    for leaf in leaves:
        if isinstance(leaf, TimeoutError | httpx.TimeoutException):
            late = f"{name} did not answer {what} within {timeout:g}s"
            if sent:
                return ToolOutcomeLost(f"{late}; it may have acted")
            return ToolError(late)
        if isinstance(leaf, OutboundRefused):
            return refused(name, leaf)
        if isinstance(leaf, httpx.HTTPStatusError):
            return ToolError(f"{name} answered {what} with HTTP {leaf.response.status_code}")
    # The type names only: an exception's text may quote a request, headers included.
    kinds = ", ".join(sorted({type(leaf).__name__ for leaf in leaves}))
    logger.warning("MCP server %s of %s failed (%s)", name, server.tenant_id, kinds)
    return ToolError(f"the tool server {name} could not be reached ({kinds})")


async def elicitation_unasked(context, params):
    """A session of its own (discovery) declares elicitation, as a turn's sessions do
    (runtime.tools.mcp_sessions), so that a server offers it the tools a turn may call (the
    reference ``everything`` server lists its elicitation tools only to a client that
    declares it); nobody is there to ask, so a request is cancelled."""
    from mcp.types import ElicitResult

    return ElicitResult(action="cancel")


class McpToolServer:
    """A tenant's MCP server (streamable HTTP)."""

    def __init__(self, row: ToolServer):
        self.row = row

    async def session_run(self, token: str | None, work, timeout: float, max_bytes: int):
        from mcp import ClientSession
        from mcp.client.streamable_http import streamable_http_client

        headers = {"Authorization": f"Bearer {token}"} if token else None
        overflow: list[ResponseTooLarge] = []
        with anyio.fail_after(timeout), anyio.CancelScope() as scope:

            def stop(error: ResponseTooLarge) -> None:
                # mcp logs a reply it could not read and waits on for the answer: stop now.
                overflow.append(error)
                scope.cancel()

            async with (
                guarded_async_client(
                    timeout=httpx.Timeout(timeout),
                    headers=headers,
                    max_connections=4,
                    max_response_bytes=max_bytes,
                    on_too_large=stop,
                ) as http_client,
                streamable_http_client(self.row.url, http_client=http_client) as (read, write, *_),
                ClientSession(read, write, elicitation_callback=elicitation_unasked) as session,
            ):
                await session.initialize()
                return await work(session)
        raise overflow[0]

    def run(
        self,
        work,
        what: str,
        timeout: float | None = None,
        sent: list | None = None,
        max_bytes: int | None = None,
    ):
        """Run ``work(session)`` in a session of its own (discovery); failures of the
        connection become ToolError. ``sent``: set by ``work`` once its request has gone out,
        after which a timeout means the outcome is lost (ToolOutcomeLost), not that nothing
        was done."""
        checked_url(self.row)
        token = bearer_token(self.row)
        timeout = float(timeout or self.row.timeout_seconds)
        max_bytes = max_bytes or settings.TOOL_RESULT_MAX_BYTES
        try:
            return run_async(lambda: self.session_run(token, work, timeout, max_bytes))
        except ToolError:
            raise
        except Exception as exc:  # anyio's task groups wrap what failed in ExceptionGroups
            raise mcp_failure(
                exc, server=self.row, what=what, timeout=timeout, sent=bool(sent)
            ) from None

    def discover(self) -> list[dict]:
        async def work(session):
            listed: list[dict] = []
            cursor = None
            for _ in range(20):  # pages; a server that pages forever is cut off
                result = await session.list_tools(cursor) if cursor else await session.list_tools()
                listed.extend(t.model_dump(mode="json", by_alias=True) for t in result.tools)
                cursor = result.nextCursor
                if not cursor:
                    break
            return listed

        try:
            return clean_tools(self.run(work, "tools/list", max_bytes=settings.TOOL_LIST_MAX_BYTES))
        except ToolError as exc:
            raise DiscoveryError(str(exc)) from None

    def call(self, tool: str, arguments: dict, ctx: CallContext):
        """``tools/call``. In a turn the call goes out on the run's session with this server
        (``ctx.sessions``, runtime.tools.mcp_sessions), and may come back as the server's
        question to a person (elicitation) while it stays open; else in a session of its own."""
        if ctx.sessions is not None:
            timeout = float(ctx.timeout or self.row.timeout_seconds)
            return ctx.sessions.call(self, tool, arguments, timeout=timeout)
        sent: list = []

        async def work(session):
            sent.append(True)  # past initialize: the call itself goes out now
            return await session.call_tool(tool, arguments)

        return call_result(self.run(work, f"the call of {tool}", timeout=ctx.timeout, sent=sent))


def call_result(result) -> dict:
    """A ``tools/call`` result as the model gets it: an ``isError`` result is a ToolError
    with its text."""
    if result.isError:
        texts = [c.text for c in result.content if getattr(c, "type", "") == "text"]
        text = "\n".join(texts).strip() or "the tool reported an error"
        raise ToolError(text[:ERROR_TEXT_MAX])
    return result_mapped(result)


# --- HTTP -----------------------------------------------------------------------------------


class HttpToolServer:
    """A tenant's HTTP tool server: signed JSON posts (docs/reference/tool-servers.md)."""

    def __init__(self, row: ToolServer):
        self.row = row

    def signing_secret(self) -> str:
        try:
            return secret_decrypt(self.row.signing_secret_encrypted)
        except (InvalidToken, ValueError):
            raise ToolError(
                f"the tool server {self.row.name} has no usable signing secret; "
                "an admin must rotate it"
            ) from None

    def post(
        self,
        body: dict,
        message_id: str,
        what: str,
        timeout: float | None = None,
        max_bytes: int | None = None,
    ) -> Any:
        url = checked_url(self.row)
        token = bearer_token(self.row)
        data = json.dumps(body, separators=(",", ":"), sort_keys=True)
        headers = {
            "Content-Type": "application/json",
            "User-Agent": "Countersign-Tools/1",
            **webhook_headers(self.signing_secret(), message_id, data),
        }
        if token:
            headers["Authorization"] = f"Bearer {token}"
        name, timeout = self.row.name, float(timeout or self.row.timeout_seconds)
        try:
            with guarded_client(
                timeout=timeout,
                max_connections=1,
                max_response_bytes=max_bytes or settings.TOOL_RESULT_MAX_BYTES,
            ) as client:
                response = client.post(url, content=data.encode(), headers=headers)
        except ResponseTooLarge as exc:
            raise too_large(name, what, exc) from None
        except (httpx.ConnectTimeout, httpx.PoolTimeout):
            # Never sent: the connection was not made.
            raise ToolError(f"{name} could not be reached within {timeout:g}s") from None
        except httpx.TimeoutException:
            # Sent (or being sent), and no answer in time: the server may have acted.
            raise ToolOutcomeLost(
                f"{name} did not answer {what} within {timeout:g}s; it may have acted"
            ) from None
        except OutboundRefused as exc:
            raise refused(name, exc) from None
        except httpx.HTTPError as exc:
            raise ToolError(
                f"the tool server {name} could not be reached ({type(exc).__name__})"
            ) from None
        try:
            answer = response.json()
        except ValueError:
            answer = None
        if not 200 <= response.status_code < 300:
            detail = answer.get("error") if isinstance(answer, dict) else None
            said = f": {str(detail)[:ERROR_TEXT_MAX]}" if detail else ""
            raise ToolError(f"{name} answered {what} with HTTP {response.status_code}{said}")
        if answer is None:
            raise ToolError(f"{name} answered {what} with a body that is not JSON")
        return answer

    def discover(self) -> list[dict]:
        try:
            answer = self.post(
                {"method": "list_tools"},
                f"msg_{uuid.uuid4().hex}",
                "list_tools",
                max_bytes=settings.TOOL_LIST_MAX_BYTES,
            )
        except ToolError as exc:
            raise DiscoveryError(str(exc)) from None
        if not isinstance(answer, dict):
            raise DiscoveryError("the server's answer to list_tools is not a JSON object")
        return clean_tools(answer.get("tools"))

    def call(self, tool: str, arguments: dict, ctx: CallContext) -> dict:
        body = {
            "method": "call_tool",
            "tool": tool,
            "arguments": arguments,
            "effectId": ctx.effect_id,
            "subject": ctx.subject,
            "tenant": getattr(ctx.tenant, "slug", ""),
        }
        # The effect id is the webhook id: a resent idempotent call carries the same one, so
        # the server can tell a retry from a new call.
        answer = self.post(body, ctx.effect_id, f"the call of {tool}", timeout=ctx.timeout)
        return answer if isinstance(answer, dict) else {"result": answer}


def remote_server(row: ToolServer) -> McpToolServer | HttpToolServer:
    return McpToolServer(row) if row.kind == ToolServer.Kind.MCP else HttpToolServer(row)


def tool_server_refresh(*, server: ToolServer) -> list[dict]:
    """Discover the server's tools and cache them on its row (refreshed_at); on failure keep
    the cache, record the error and raise DiscoveryError. No row is locked during discovery."""
    try:
        tools = remote_server(server).discover()
    except DiscoveryError as exc:
        ToolServer.objects.filter(pk=server.pk).update(refresh_error=str(exc)[:ERROR_TEXT_MAX])
        server.refresh_error = str(exc)[:ERROR_TEXT_MAX]
        raise
    now = timezone.now()
    ToolServer.objects.filter(pk=server.pk).update(tools=tools, refreshed_at=now, refresh_error="")
    server.tools, server.refreshed_at, server.refresh_error = tools, now, ""
    return tools


class GateServer:
    """An approval gate's calls (runtime.turn.gate): the gate runs nothing, its caller runs
    the call once it is approved; "sending" it is handing back what was approved. In the
    worker's process, with no network I/O (runtime.turn.calls sends it in the same block)."""

    in_process = True

    def call(self, tool: str, arguments: dict, ctx: CallContext) -> dict:
        return {"approved": True, "arguments": arguments}


GATE_SERVER = GateServer()


def server_for(tenant, name: str) -> CallableServer | None:
    """The server ``name`` as this tenant's agents reach it: a demo server (runtime.tools.catalog.
    SERVERS), else the tenant's own active tool server of that name; never another tenant's."""
    if name in SERVERS:
        return SERVERS[name]
    row = (
        ToolServer.objects.filter(tenant=tenant, name=name, active=True)
        .select_related("tenant", "app")
        .first()
    )
    return remote_server(row) if row is not None else None
