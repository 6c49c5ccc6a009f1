"""MCP servers for the tests, built with the official ``mcp`` package (FastMCP over streamable
HTTP) on a free local port, each in a thread of its own (LocalMcp): McpStub, stateless, records
its calls and each request's Authorization header; StatefulMcp, with sessions and SSE, records
each ``initialize`` (one per session), each session's end (its DELETE), and what every
elicitation came back with, so that tests count sessions and read what a person's answer told
the server. ``mcp_tool_server`` makes a tenant's row for one of them."""

import json
import socket
import threading
import time

import anyio
import uvicorn
from mcp.server.fastmcp import Context, FastMCP

from runtime.agents.agent_models import ToolServer
from runtime.tools.servers import tool_server_refresh

# What the booking tool asks a person (MCP's restricted schema: strings with a format,
# numbers with bounds, booleans, a single and a multiple choice).
BOOKING_FORM = {
    "type": "object",
    "properties": {
        "date": {"type": "string", "format": "date", "title": "Date", "description": "The day"},
        "guests": {"type": "integer", "title": "Guests", "minimum": 1, "maximum": 12},
        "seating": {
            "type": "string",
            "title": "Seating",
            "oneOf": [{"const": "in", "title": "Inside"}, {"const": "out", "title": "Outside"}],
            "default": "in",
        },
        "vegetarian": {"type": "boolean", "title": "Vegetarian menu", "default": False},
        "extras": {
            "type": "array",
            "title": "Extras",
            "items": {"type": "string", "enum": ["cake", "flowers", "music"]},
        },
    },
    "required": ["date", "guests"],
}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(condition, what: str, seconds: float = 15.0):
    deadline = time.monotonic() + seconds
    while not (found := condition()):
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)
    return found


class LocalMcp:
    """An ASGI app served by uvicorn on a free local port, in a thread of its own (``serve``);
    ``url``: its MCP endpoint."""

    def serve(self, app) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}/mcp"
        config = uvicorn.Config(app, host="127.0.0.1", port=self.port, log_level="warning")
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, daemon=True)
        self.thread.start()
        wait_for(lambda: self.server.started, "the MCP server to start")

    def stop(self):
        self.server.should_exit = True
        self.thread.join(10)


def mcp_tool_server(
    tenant, url: str, name: str = "calc", *, discover: bool = False, **fields
) -> ToolServer:
    """The tenant's MCP tool server ``name`` at ``url``, checked and saved; its tools
    discovered when ``discover`` says so."""
    server = ToolServer(tenant=tenant, name=name, kind="mcp", url=url, **fields)
    server.full_clean()
    server.save()
    if discover:
        tool_server_refresh(server=server)
    return server


class McpStub(LocalMcp):
    """A stateless FastMCP server that records its tool calls and the Authorization header
    of every request."""

    def __init__(self):
        self.calls: list[tuple[str, dict]] = []
        self.authorizations: list[str] = []
        self.mcp = FastMCP("stub", stateless_http=True, json_response=True)

        @self.mcp.tool(description="Add two numbers.")
        def add(a: int, b: int) -> int:
            self.calls.append(("add", {"a": a, "b": b}))
            return a + b

        @self.mcp.tool(description="Always fails.")
        def explode(reason: str) -> str:
            self.calls.append(("explode", {"reason": reason}))
            raise ValueError(f"exploded: {reason}")

        @self.mcp.tool(description="Takes its time.")
        async def slow(seconds: float) -> str:
            self.calls.append(("slow", {"seconds": seconds}))
            await anyio.sleep(seconds)
            return "done"

        @self.mcp.tool(description="Goes away later.")
        def retired(note: str) -> str:
            self.calls.append(("retired", {"note": note}))
            return note

        inner = self.mcp.streamable_http_app()

        async def app(scope, receive, send):
            if scope["type"] == "http":
                headers = dict(scope["headers"])
                self.authorizations.append(headers.get(b"authorization", b"").decode())
            await inner(scope, receive, send)

        self.serve(app)


class StatefulMcp(LocalMcp):
    """Tools: ``counter`` (counts its calls in each session: a stateful server), ``forget``
    (forgets every session, as a server that restarted), ``add``,
    ``book`` (asks a person for the booking's details, then says what it got), ``confirm``
    (asks twice in one call), ``open_page`` (asks a person to open a page, URL mode)."""

    def __init__(self):
        self.initializes = 0
        self.session_ends = 0
        self.elicited: list[dict] = []  # what each elicitation came back with
        self.counts: dict[int, int] = {}
        # A slow network for the client's answers (to elicitations): when set, an answer
        # reaches the server once a session's end (a DELETE) that came after it has, or
        # after these seconds.
        self.slow_answers: float | None = None
        self._ended = None  # an anyio.Event, made on the server's loop
        mcp = FastMCP("stateful")  # sessions, and answers as SSE streams

        @mcp.tool(description="Counts its calls in this session.")
        def counter(ctx: Context) -> int:
            key = id(ctx.session)
            self.counts[key] = self.counts.get(key, 0) + 1
            return self.counts[key]

        @mcp.tool(description="Forgets every session, as a server that restarted.")
        def forget() -> str:
            # Its sessions' ids now answer 404 (the manager's own "Session not found").
            mcp.session_manager._server_instances.clear()
            return "forgotten"

        @mcp.tool(description="Add two numbers.")
        def add(a: int, b: int) -> int:
            return a + b

        @mcp.tool(description="Books a table; asks for the details.")
        async def book(place: str, ctx: Context) -> dict:
            answer = await ctx.session.elicit_form(
                f"Booking at {place}: which day, and for how many?",
                BOOKING_FORM,
                related_request_id=ctx.request_id,
            )
            got = {"action": answer.action, "content": answer.content}
            self.elicited.append(got)
            return {"received": got}

        @mcp.tool(description="Asks twice.")
        async def confirm(ctx: Context) -> dict:
            got = []
            for question in ("Sure?", "Really sure?"):
                answer = await ctx.session.elicit_form(
                    question,
                    {"type": "object", "properties": {"ok": {"type": "boolean"}}},
                    related_request_id=ctx.request_id,
                )
                got.append({"action": answer.action, "content": answer.content})
                self.elicited.append(got[-1])
            return {"received": got}

        @mcp.tool(description="Asks a person to open a page.")
        async def open_page(ctx: Context) -> dict:
            answer = await ctx.session.elicit_url(
                "Sign in to the bank to go on.",
                "https://bank.example.test/consent?id=7",
                "el-7",
                related_request_id=ctx.request_id,
            )
            got = {"action": answer.action}
            self.elicited.append(got)
            return {"received": got}

        inner = mcp.streamable_http_app()

        async def app(scope, receive, send):
            if scope["type"] == "http" and scope["method"] == "DELETE":
                self.session_ends += 1
                await inner(scope, receive, send)
                if self._ended is not None:
                    self._ended.set()
                return
            if scope["type"] != "http" or scope["method"] != "POST":
                return await inner(scope, receive, send)
            # Read the body to count initializations, then hand it on as it came.
            messages, more = [], True
            while more:
                message = await receive()
                messages.append(message)
                more = message.get("more_body", False)
            body = b"".join(m.get("body", b"") for m in messages)
            try:
                message = json.loads(body)
                if message.get("method") == "initialize":
                    self.initializes += 1
                answer = "method" not in message and "result" in message
            except (ValueError, AttributeError):
                answer = False
            if answer and self.slow_answers:
                self._ended = ended = anyio.Event()  # the next session end from now
                with anyio.move_on_after(self.slow_answers):
                    await ended.wait()

            async def replay():
                return messages.pop(0) if messages else await receive()

            await inner(scope, replay, send)

        self.serve(app)
