"""The gateway's MCP server: the ``mcp`` package's low-level Server, one for the process, its
handlers reading which gateway and caller a request is for from the HTTP request the session
manager hands them (mcp_gateway.lean put it there). Each client session has its own context
(the Server's lifespan runs once per session): its upstream sessions and its tool table.

- ``tools/list``: the gateway's tools (runtime.gateway.gateway_tools);
- ``tools/call``: checked as a hosted agent's call is; an allowed call goes straight upstream
  on the session's upstream session; a held call opens (or joins) its approval
  (runtime.gateway.held_calls) and the request waits for the decision, telling the client who
  is asked and how far the approval is (``notifications/progress``, when it sent a progress
  token); a client that cancels or goes away leaves the approval open;
- resources, prompts and completions: those of the gateway's MCP servers, passed through.
"""

import contextlib
import json
import logging
import math
import time
from dataclasses import dataclass, field
from typing import Any

import anyio
from asgiref.sync import sync_to_async

from a2a_endpoint.asyncdb import db
from config import metrics, tracing
from mcp_gateway.identity import GatewayCaller
from mcp_gateway.upstream import Upstreams, UpstreamUnavailable
from runtime.gateway.gateway_tools import (
    GatewayTool,
    call_check_known,
    gateway_call_check,
    gateway_mcp_servers,
    gateway_tools,
    tool_name,
)
from runtime.gateway.held_calls import (
    CallStatus,
    gateway_call_deliver,
    gateway_call_hold,
    gateway_call_status,
)
from runtime.kernel.task_models import new_key
from runtime.kernel.wakeups import task_watch
from runtime.policy.conditions import jsonb_storable
from runtime.tools.protocol import CallContext, ToolAsks, ToolError
from runtime.tools.servers import server_for

logger = logging.getLogger(__name__)

CALLER = "countersign.gateway_caller"
# How long a waiting call goes without reading its approval again when no change of its task
# is announced (one approval of several changes the task; this is the fallback).
POLL_SECONDS = 2.0
# How long a client session reuses its tool table before reading the gateway again.
TOOLS_SECONDS = 5.0
# The tools of one tools/list page unless the gateway says (AGENT.md gateway.toolsPageSize).
TOOLS_PAGE_SIZE = 100
RECEIPT_META = "countersign/receipt"
APPROVAL_META = "countersign/approval"
STILL_WAITING = "Still waiting for approval; call again to continue (the same call joins it)."


@dataclass(eq=False)
class ClientSession:
    """What the gateway keeps for one client session."""

    upstreams: Upstreams
    tools: dict[str, GatewayTool] = field(default_factory=dict)
    tools_read: float = -math.inf
    tools_of: int | None = None
    # Which upstream server listed a resource, template or prompt: (kind, key) -> its row.
    owners: dict = field(default_factory=dict)


@contextlib.asynccontextmanager
async def session_lifespan(_server):
    async with anyio.create_task_group() as group:
        session = ClientSession(upstreams=Upstreams(group=group))
        try:
            yield session
        finally:
            session.upstreams.close()
            group.cancel_scope.cancel()


def make_server():
    from mcp import types
    from mcp.server.lowlevel import NotificationOptions, Server
    from mcp.shared.exceptions import McpError

    class GatewayServer(Server):
        def create_initialization_options(self, notification_options=None, experimental=None):
            return super().create_initialization_options(
                NotificationOptions(
                    tools_changed=True, resources_changed=True, prompts_changed=True
                ),
                experimental,
            )

    server: Any = GatewayServer("countersign-gateway", lifespan=session_lifespan)

    def context() -> tuple[Any, GatewayCaller, ClientSession]:
        ctx = server.request_context
        caller = ctx.request.scope[CALLER]
        session: ClientSession = ctx.lifespan_context
        session.upstreams.client_session = ctx.session
        session.upstreams.sampling = bool((caller.gateway.model or {}).get("sampling"))
        return ctx, caller, session

    async def tool_table(caller: GatewayCaller, session: ClientSession, fresh: bool = False):
        now = time.monotonic()
        if (
            fresh
            or session.tools_of != caller.gateway.pk
            or now - session.tools_read > TOOLS_SECONDS
        ):
            listed = await db(gateway_tools, caller.gateway)
            session.tools = {tool.name: tool for tool in listed}
            session.tools_read, session.tools_of = now, caller.gateway.pk
        return session.tools

    async def list_tools(req: types.ListToolsRequest):
        _ctx, caller, session = context()
        cursor = req.params.cursor if req.params is not None else None
        size = int((caller.gateway.model or {}).get("toolsPageSize") or TOOLS_PAGE_SIZE)
        try:
            start = _tools_cursor_read(cursor)
        except ValueError:
            raise McpError(
                types.ErrorData(code=types.INVALID_PARAMS, message="unknown cursor")
            ) from None
        # The first page reads the table afresh; the next ones page through the same table.
        tools = await tool_table(caller, session, fresh=start == 0)
        rows = list(tools.values())
        page = rows[start : start + size]
        following = str(start + size) if start + size < len(rows) else None
        return types.ServerResult(
            types.ListToolsResult(
                tools=[types.Tool(**tool.listed()) for tool in page], nextCursor=following
            )
        )

    async def call_tool(req: types.CallToolRequest):
        ctx, caller, session = context()
        # A span per call (config.tracing): a held call's turn starts its own trace, which
        # its task keeps.
        with tracing.span(
            "mcp_gateway tools/call",
            **{"countersign.gateway": caller.gateway.slug, "mcp.tool": req.params.name},
        ):
            return await _call_tool(req, ctx, caller, session)

    async def _call_tool(req: types.CallToolRequest, ctx, caller: GatewayCaller, session):
        name = req.params.name
        arguments = req.params.arguments or {}
        tools = await tool_table(caller, session)
        tool = tools.get(name) or (await tool_table(caller, session, fresh=True)).get(name)
        if tool is None:
            return _counted(caller, "refused", _error(f"unknown tool {name}"))
        # An allowed tool whose policy does not depend on the arguments is checked with the
        # session's tool table alone (its schema, its server): no query on the way upstream.
        check = call_check_known(tool, arguments) or await db(
            gateway_call_check,
            agent=caller.gateway,
            server=tool.server,
            tool=tool.tool,
            arguments=arguments,
        )
        if check.action == "refuse":
            return _counted(caller, "refused", _error(check.error))
        if check.action == "approve" and not jsonb_storable(arguments):
            # Kept with the approval (PostgreSQL's jsonb): refused before anything is opened.
            return _counted(
                caller,
                "refused",
                _error("invalid arguments: they must not hold NUL or lone surrogate characters"),
            )
        if check.action == "allow":
            try:
                result = await _send(caller, session, tool, arguments, check)
            except (ToolError, UpstreamUnavailable) as exc:
                return _counted(caller, "failed", _error(str(exc)))
            return _counted(caller, "allowed", types.ServerResult(result))
        return await _held(ctx, caller, session, tool, arguments)

    async def _send(caller, session, tool: GatewayTool, arguments: dict, check):
        if check.kind == "mcp":
            row = check.row
            client = await session.upstreams.session(row)
            timeout = float(check.timeout or row.timeout_seconds)
            try:
                with anyio.fail_after(timeout):
                    return await client.call_tool(tool.tool, arguments)
            except TimeoutError:
                session.upstreams.drop(row)
                raise ToolError(
                    f"{tool.server} did not answer within {timeout:g}s; it may have acted"
                ) from None
            except Exception as exc:
                session.upstreams.drop(row)
                raise ToolError(f"the call of {tool.name} failed ({type(exc).__name__})") from None
        found = await db(server_for, caller.gateway.tenant, tool.server)
        if found is None:
            raise ToolError(f"there is no tool server {tool.server} for this tenant")
        context = CallContext(
            tenant=caller.gateway.tenant,
            effect_id=new_key("gwc_", 12),
            subject=caller.subject,
            timeout=check.timeout,
        )
        outcome = await sync_to_async(found.call, thread_sensitive=False)(
            tool.tool, arguments, context
        )
        if isinstance(outcome, ToolAsks):
            raise ToolError(f"{tool.server} asked a question outside a held call")
        return _result(outcome)

    def _point_to(ctx, session: ClientSession, interaction_id: str) -> None:
        """Tell the person at a client that declared URL-mode elicitation where the approval
        can be followed (its page; the client opens it or not: nothing waits on the answer)."""
        params = ctx.session.client_params
        elicitation = getattr(getattr(params, "capabilities", None), "elicitation", None)
        if getattr(elicitation, "url", None) is None or ctx.request is None:
            return
        url = f"{str(ctx.request.base_url).rstrip('/')}/inbox/{interaction_id}/"

        async def point() -> None:
            try:
                await ctx.session.elicit_url(
                    message="A person must approve this call; follow the approval here.",
                    url=url,
                    elicitation_id=interaction_id,
                    related_request_id=ctx.request_id,
                )
            except Exception as exc:  # the client declined, or went away: nothing changes
                logger.info("the approval's URL was not shown (%s)", type(exc).__name__)

        session.upstreams.group.start_soon(point)

    async def _held(
        ctx, caller: GatewayCaller, session: ClientSession, tool: GatewayTool, arguments: dict
    ):
        info = getattr(ctx.session.client_params, "clientInfo", None)
        held = await db(
            gateway_call_hold,
            gateway=caller.gateway,
            token_pk=caller.token_pk,
            subject=caller.subject,
            server=tool.server,
            tool=tool.tool,
            arguments=arguments,
            client_name=str(getattr(info, "name", "") or ""),
            client_version=str(getattr(info, "version", "") or ""),
        )
        progress_token = ctx.meta.progressToken if ctx.meta is not None else None
        max_wait = (caller.gateway.model or {}).get("maxWaitSeconds")
        deadline = time.monotonic() + float(max_wait) if max_wait else math.inf
        told, sent = None, 0
        pointed: set[str] = set()
        tenant_id = caller.gateway.tenant_id
        async with contextlib.AsyncExitStack() as stack:
            queue = None
            while True:
                status = await db(gateway_call_status, call_pk=held.pk, tenant_id=tenant_id)
                if status.done:
                    await db(gateway_call_deliver, call_pk=held.pk)
                    return _outcome(caller, status)
                if queue is None and status.task_pk is not None:
                    queue = await stack.enter_async_context(task_watch(status.task_pk))
                if status.interaction_id and status.interaction_id not in pointed:
                    pointed.add(status.interaction_id)
                    _point_to(ctx, session, status.interaction_id)
                text = status.progress_text
                if progress_token is not None and text != told:
                    sent += 1
                    await ctx.session.send_progress_notification(
                        progress_token, sent, message=text, related_request_id=ctx.request_id
                    )
                    told = text
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return _counted(caller, "waiting", _waiting(status))
                with anyio.move_on_after(min(POLL_SECONDS, remaining)):
                    if queue is not None:
                        await queue.get()
                    else:
                        await anyio.sleep(0.05)

    def _waiting(status: CallStatus):
        return types.ServerResult(
            types.CallToolResult(
                content=[types.TextContent(type="text", text=STILL_WAITING)],
                isError=True,
                _meta={APPROVAL_META: {"state": "open", "interactionId": status.interaction_id}},
            )
        )

    def _outcome(caller: GatewayCaller, status: CallStatus):
        meta: dict = {}
        if status.receipt:
            meta[RECEIPT_META] = status.receipt
        if status.ok:
            result = _result(status.result)
            result.meta = meta or None
            return _counted(caller, "approved", types.ServerResult(result))
        outcome = "expired" if "expired" in status.reason else "denied"
        if not status.receipt:
            outcome = "failed"
        return _counted(
            caller,
            outcome,
            types.ServerResult(
                types.CallToolResult(
                    content=[types.TextContent(type="text", text=status.reason or "not run")],
                    isError=True,
                    _meta=meta or None,
                )
            ),
        )

    def _result(value) -> Any:
        if isinstance(value, dict) and set(value) == {"text"}:
            return types.CallToolResult(
                content=[types.TextContent(type="text", text=str(value["text"]))]
            )
        text = json.dumps(value, default=str)
        return types.CallToolResult(
            content=[types.TextContent(type="text", text=text)],
            structuredContent=value if isinstance(value, dict) else None,
        )

    def _error(text: str):
        return types.ServerResult(
            types.CallToolResult(content=[types.TextContent(type="text", text=text)], isError=True)
        )

    def _counted(caller: GatewayCaller, outcome: str, result):
        metrics.MCP_GATEWAY_CALLS.labels(gateway=caller.gateway.slug, outcome=outcome).inc()
        return result

    server.request_handlers[types.ListToolsRequest] = list_tools
    server.request_handlers[types.CallToolRequest] = call_tool
    passthrough_register(server, context)
    return server


# --- resources, prompts, completions --------------------------------------------------------
#
# Those of the gateway's MCP servers, untouched. One server's cursors pass through as they
# are; with several, a cursor names the server it belongs to (``<index>:<cursor>``) and a list
# goes on to the next server when one has no more. A prompt's name is its server's name and
# its own, as a tool's is (runtime.gateway.gateway_tools.tool_name); a resource is read from
# the server that listed it.


def _cursor_split(cursor: str | None, count: int) -> tuple[int, str | None]:
    if count <= 1:
        return 0, cursor
    if not cursor:
        return 0, None
    index, _, rest = cursor.partition(":")
    if not index.isdigit() or int(index) >= count:
        raise ValueError("unknown cursor")
    return int(index), rest or None


def _cursor_join(index: int, cursor: str | None, count: int) -> str | None:
    if count <= 1:
        return cursor
    if cursor:
        return f"{index}:{cursor}"
    return f"{index + 1}:" if index + 1 < count else None


def _tools_cursor_read(cursor: str | None) -> int:
    """Where a tools/list page starts: its cursor is the previous page's nextCursor."""
    if not cursor:
        return 0
    if not cursor.isdigit() or len(cursor) > 9:
        raise ValueError(cursor)
    return int(cursor)


def passthrough_register(server, context) -> None:
    from mcp import types
    from mcp.shared.exceptions import McpError

    async def upstreams():
        _ctx, caller, session = context()
        rows = await db(gateway_mcp_servers, caller.gateway)
        return rows, session

    def invalid(message: str):
        return McpError(types.ErrorData(code=types.INVALID_PARAMS, message=message))

    async def listed(req, method: str, field: str, result_type, rename=None):
        rows, session = await upstreams()
        if not rows:
            return types.ServerResult(result_type(**{field: []}))
        cursor = req.params.cursor if req.params is not None else None
        try:
            index, inner = _cursor_split(cursor, len(rows))
        except ValueError:
            raise invalid("unknown cursor") from None
        row = rows[index]
        client = await session.upstreams.session(row)
        page = (
            await getattr(client, method)(cursor=inner)
            if inner
            else await getattr(client, method)()
        )
        items = list(getattr(page, field))
        if rename is not None:
            items = [rename(row, item) for item in items]
            for item in items:
                session.owners[(field, _owned_key(item))] = row
        else:
            for item in items:
                session.owners[(field, _owned_key(item))] = row
        return types.ServerResult(
            result_type(
                **{field: items}, nextCursor=_cursor_join(index, page.nextCursor, len(rows))
            )
        )

    def prompt_renamed(row, prompt):
        return prompt.model_copy(update={"name": tool_name(row.name, prompt.name)})

    async def list_resources(req: types.ListResourcesRequest):
        return await listed(req, "list_resources", "resources", types.ListResourcesResult)

    async def list_templates(req: types.ListResourceTemplatesRequest):
        return await listed(
            req, "list_resource_templates", "resourceTemplates", types.ListResourceTemplatesResult
        )

    async def list_prompts(req: types.ListPromptsRequest):
        return await listed(
            req, "list_prompts", "prompts", types.ListPromptsResult, rename=prompt_renamed
        )

    async def owner_of(kind: str, key: str):
        rows, session = await upstreams()
        row = session.owners.get((kind, key))
        if row is None and len(rows) == 1:
            row = rows[0]
        if row is None:
            for candidate in rows:
                if key.startswith(tool_name(candidate.name, "")):
                    row = candidate
        return row, session

    async def read_resource(req: types.ReadResourceRequest):
        uri = str(req.params.uri)
        row, session = await owner_of("resources", uri)
        if row is None:
            raise invalid(f"unknown resource {uri}")
        client = await session.upstreams.session(row)
        return types.ServerResult(await client.read_resource(req.params.uri))

    async def get_prompt(req: types.GetPromptRequest):
        name = req.params.name
        row, session = await owner_of("prompts", name)
        prefix = tool_name(row.name, "") if row is not None else ""
        if row is None or not name.startswith(prefix):
            raise invalid(f"unknown prompt {name}")
        client = await session.upstreams.session(row)
        return types.ServerResult(
            await client.get_prompt(name.removeprefix(prefix), req.params.arguments)
        )

    async def complete(req: types.CompleteRequest):
        ref = req.params.ref
        if isinstance(ref, types.PromptReference):
            row, session = await owner_of("prompts", ref.name)
            prefix = tool_name(row.name, "") if row is not None else ""
            if row is None or not ref.name.startswith(prefix):
                raise invalid(f"unknown prompt {ref.name}")
            ref = ref.model_copy(update={"name": ref.name.removeprefix(prefix)})
        else:
            row, session = await owner_of("resourceTemplates", ref.uri)
            if row is None:
                rows, session = await upstreams()
                row = rows[0] if rows else None
            if row is None:
                raise invalid(f"unknown resource template {ref.uri}")
        client = await session.upstreams.session(row)
        argument = req.params.argument
        return types.ServerResult(
            await client.complete(
                ref,
                {"name": argument.name, "value": argument.value},
                context_arguments=req.params.context.arguments if req.params.context else None,
            )
        )

    server.request_handlers[types.ListResourcesRequest] = list_resources
    server.request_handlers[types.ListResourceTemplatesRequest] = list_templates
    server.request_handlers[types.ReadResourceRequest] = read_resource
    server.request_handlers[types.ListPromptsRequest] = list_prompts
    server.request_handlers[types.GetPromptRequest] = get_prompt
    server.request_handlers[types.CompleteRequest] = complete


def _owned_key(item) -> str:
    return str(getattr(item, "uri", None) or getattr(item, "uriTemplate", None) or item.name)
