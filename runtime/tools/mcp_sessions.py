"""The MCP sessions of one run of a turn: one session per tool server,
opened by the run's first call of it, reused by every call the run makes to it, and closed
when the run stops (the turn finished, paused, failed or lost its lease). A session never
outlives its run: a paused turn resumes later, maybe in another worker, and opens its
sessions anew. A stateful server (a browser, a shell, a transaction) keeps its state
between the calls of one run.

MCP's client is async and the worker is not: a run's sessions live on an event loop of their
own, in a thread started by the run's first MCP call (anyio's blocking portal), and the
run's thread hands each call over and waits for what comes back. No ORM query runs on that
loop: the bearer token is read on the run's thread as a session opens.

Elicitation: every session declares it. A server's ``elicitation/create`` during a call comes
back to the run's thread as the call's outcome so far, an ``Elicitation``, while the call
stays open: the turn asks a person (runtime.turn.elicitation) and hands the answer back with
``Elicitation.answer``, which then waits for the call's next outcome. A request made outside
a call of the run, past ELICITATIONS_PER_CALL, or still unanswered when the run stops, is
answered ``cancel`` (in the last case before the session ends, so that the server hears it).
"""

import concurrent.futures
import logging
import math
import queue
from contextlib import ExitStack
from dataclasses import dataclass, field
from typing import Any

import anyio
import httpx
from anyio.from_thread import start_blocking_portal
from django.conf import settings

from connections.outbound import guarded_async_client
from connections.outbound_limits import ResponseTooLarge
from runtime.agents.agent_models import ToolServer
from runtime.tools.protocol import ToolAsks, ToolError, ToolOutcomeLost
from runtime.tools.servers import bearer_token, call_result, checked_url, mcp_failure, too_large

logger = logging.getLogger(__name__)

# How long a session may take to close (its DELETE) before it is cut off.
CLOSE_SECONDS = 5.0
# How many questions a server may ask during one call; past them it is told ``cancel``.
ELICITATIONS_PER_CALL = 10
CANCEL: dict[str, Any] = {"action": "cancel"}


class SessionGone(Exception):
    """The server answered a call with 404 for the session: it no longer knows it."""


class ToolSessions:
    """The MCP sessions of one run, by tool server (its row and URL: a server whose URL an
    admin changed mid-run gets a new session). A context manager: leaving it closes them."""

    def __init__(self) -> None:
        self._stack = ExitStack()
        self._portal: Any = None
        self._sessions: dict[tuple, McpSession] = {}

    def __enter__(self) -> "ToolSessions":
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

    def call(self, server, tool: str, arguments: dict, *, timeout: float):
        """``tools/call`` on the run's session with ``server`` (a McpToolServer), opened
        first when the run has none: the result as the model gets it, or an Elicitation."""
        checked_url(server.row)  # the outbound guard, at every call: its settings may change
        what = f"the call of {tool}"
        session = self._session(server.row, what)
        try:
            return session.call(tool, arguments, timeout)
        except SessionGone:
            # The server no longer knows the session (it restarted, or let it expire): the
            # call reached no session and did nothing, and MCP says to start a new one.
            self.drop(session)
        try:
            return self._session(server.row, what).call(tool, arguments, timeout)
        except SessionGone:
            raise ToolError(f"{server.row.name} refused {what}: its session ended") from None

    def _session(self, row: ToolServer, what: str) -> "McpSession":
        key = (row.pk, row.url)
        session = self._sessions.get(key)
        if session is not None and session.alive():
            return session
        if session is not None:
            self.drop(session)  # its connection went: a new one
        session = McpSession(self, row, bearer_token(row))
        session.open(what)
        self._sessions[key] = session
        return session

    def portal(self):
        if self._portal is None:
            self._portal = self._stack.enter_context(start_blocking_portal(name="mcp-sessions"))
        return self._portal

    def drop(self, session: "McpSession") -> None:
        """Close one session and forget it (its connection failed, or a call timed out and
        left it in a state nobody knows): the run's next call of that server opens another."""
        self._sessions = {k: s for k, s in self._sessions.items() if s is not session}
        session.close()

    def close(self) -> None:
        """Close every session (a question still open is answered ``cancel`` first), then
        the event loop; what does not close within CLOSE_SECONDS is cut off."""
        sessions, self._sessions = list(self._sessions.values()), {}
        for session in sessions:
            session.close()
        portal, self._portal = self._portal, None
        if portal is not None:
            try:
                portal.call(portal.stop, True)
            except RuntimeError:
                pass  # stopped already
        self._stack.close()


class McpSession:
    """One open session with a tool server, held open by a task on the run's event loop."""

    def __init__(self, sessions: ToolSessions, row: ToolServer, token: str | None) -> None:
        self.sessions = sessions
        self.row = row
        self.token = token
        self.client: Any = None  # mcp.ClientSession, used on the loop only
        self.host: Any = None  # the future of the task that holds the session open
        self.call_open: Call | None = None
        self.overflow: ResponseTooLarge | None = None  # a reply cut at its byte cap
        self._closing: Any = None  # an anyio.Event, made on the loop

    def open(self, what: str) -> None:
        timeout = float(self.row.timeout_seconds)
        try:
            self.host, self.client = self.sessions.portal().start_task(self._hold, timeout)
        except Exception as exc:
            raise mcp_failure(
                exc, server=self.row, what=what, timeout=timeout, sent=False
            ) from None

    async def _hold(self, timeout: float, *, task_status) -> None:
        from mcp import ClientSession
        from mcp.client.streamable_http import streamable_http_client

        self._closing = anyio.Event()
        headers = {"Authorization": f"Bearer {self.token}"} if self.token else None
        # No read timeout and no total deadline on the session's requests: a call's answer
        # may wait for a person (an elicitation), its GET stream lasts as long as the run,
        # and the run bounds each wait itself (Call.next: the call's timeout, the
        # question's), cancelling the call and dropping the session when one runs out.
        async with (
            guarded_async_client(
                timeout=httpx.Timeout(timeout, read=None),
                deadline=math.inf,
                headers=headers,
                max_connections=4,
                max_response_bytes=settings.TOOL_RESULT_MAX_BYTES,
                on_too_large=self._too_large,
            ) as http_client,
            streamable_http_client(self.row.url, http_client=http_client) as (read, write, *_),
            ClientSession(read, write, elicitation_callback=self._elicited) as client,
        ):
            with anyio.fail_after(timeout):
                await client.initialize()
            task_status.started(client)
            await self._closing.wait()

    def _too_large(self, error: ResponseTooLarge) -> None:
        """A reply passed TOOL_RESULT_MAX_BYTES (on the loop, from the transport, whose error
        mcp only logs): the call in flight ends now, failed with that."""
        self.overflow = error
        call = self.call_open
        if call is not None and call.future is not None:
            call.future.cancel()

    def alive(self) -> bool:
        return self.host is not None and not self.host.done()

    def call(self, tool: str, arguments: dict, timeout: float):
        call = self.call_open = Call(session=self, tool=tool, timeout=timeout)
        try:
            call.future = self.sessions.portal().start_task_soon(
                self.client.call_tool, tool, arguments
            )
        except RuntimeError:
            self.call_open = None
            raise ToolError(f"the tool server {self.row.name} could not be reached") from None
        call.future.add_done_callback(lambda _: call.events.put(("done", None)))
        return call.next()

    async def _elicited(self, context, params):
        """The server's ``elicitation/create`` (on the loop): handed to the run's thread as
        the open call's outcome so far; the answer it gives back goes to the server."""
        from mcp.types import ElicitResult

        call = self.call_open
        if call is None or call.asked >= ELICITATIONS_PER_CALL:
            return ElicitResult(**CANCEL)  # nobody of this run is there to ask
        call.asked += 1
        reply = Reply(given=anyio.Event())
        call.pending = reply
        call.events.put(
            (
                "asks",
                Elicitation(
                    call=call,
                    reply=reply,
                    message=str(getattr(params, "message", "") or ""),
                    mode=str(getattr(params, "mode", "form") or "form"),
                    schema=getattr(params, "requestedSchema", None) or {},
                    url=str(getattr(params, "url", "") or ""),
                ),
            )
        )
        await reply.given.wait()
        try:
            return ElicitResult(**reply.result)
        except ValueError:
            return ElicitResult(**CANCEL)

    def close(self) -> None:
        # From now on a question of the server is answered cancel at once (_elicited).
        call, self.call_open = self.call_open, None
        if call is not None and call.pending is not None:
            call.pending.give(self.sessions, CANCEL)
            # The answer goes out as a POST of its own, while ending the session sends its
            # DELETE and then cancels the transport's tasks: an answer slower than that (a
            # busy process, a new connection) is cut off, or reaches a session the server
            # has ended, and the server never hears "cancel". The call ends once the server
            # has the answer: wait for that first, CLOSE_SECONDS at most.
            if self.alive() and call.future is not None:
                concurrent.futures.wait([call.future], timeout=CLOSE_SECONDS)
        if not self.alive():
            return
        try:
            self.sessions.portal().call(self._closing.set)
            self.host.result(timeout=CLOSE_SECONDS)
        except Exception as exc:  # closing never fails the run: the session is gone either way
            logger.info("the MCP session with %s closed uncleanly (%s)", self.row.name, exc)


@dataclass(eq=False)
class Reply:
    """The answer to one elicitation, given from the run's thread to the waiting request."""

    given: Any  # anyio.Event
    result: dict = field(default_factory=lambda: dict(CANCEL))

    def give(self, sessions: ToolSessions, result: dict) -> None:
        def _set() -> None:
            self.result = result
            self.given.set()

        try:
            sessions.portal().call(_set)
        except RuntimeError:
            pass  # the loop is gone, and the request with it


@dataclass(eq=False)
class Call:
    """A call in flight: what the loop tells the run's thread of it (its end, a question)."""

    session: McpSession
    tool: str
    timeout: float
    events: queue.Queue = field(default_factory=queue.Queue)
    future: Any = None
    asked: int = 0
    pending: Reply | None = None

    def next(self):
        """Wait for the call's next outcome: its result as the model gets it, the server's
        question (an Elicitation), ToolOutcomeLost when nothing came within the timeout
        (the request went out), or ToolError."""
        session, row = self.session, self.session.row
        what = f"the call of {self.tool}"
        try:
            kind, asked = self.events.get(timeout=self.timeout)
        except queue.Empty:
            self.future.cancel()
            session.call_open = None
            session.sessions.drop(session)  # in a state nobody knows: the next call opens anew
            raise ToolOutcomeLost(
                f"{row.name} did not answer {what} within {self.timeout:g}s; it may have acted"
            ) from None
        if kind == "asks":
            return asked
        session.call_open = None
        if session.overflow is not None:
            error, session.overflow = session.overflow, None
            session.sessions.drop(session)  # a reply cut short: its state is nobody's guess
            raise too_large(row.name, what, error)
        if self.future.cancelled():
            raise ToolError(f"the tool server {row.name} could not be reached")
        failure = self.future.exception()
        if failure is None:
            return call_result(self.future.result())
        if _session_unknown(failure) and self.asked == 0:
            raise SessionGone()
        if _connection_closed(failure):
            # The session's connection went under the call: say what it died of.
            failure = _failure_of(session.host) or failure
        if not session.alive():
            session.sessions.drop(session)
        raise mcp_failure(failure, server=row, what=what, timeout=self.timeout, sent=True)


def _failure_of(host) -> BaseException | None:
    """What the task that held a session open ended with (None: it did not end in time)."""
    try:
        return host.exception(timeout=CLOSE_SECONDS)
    except Exception:  # cancelled, or still running
        return None


def _session_unknown(exc: BaseException) -> bool:
    """The client's error for a request answered 404 (an unknown session)."""
    from mcp.shared.exceptions import McpError

    return (
        isinstance(exc, McpError)
        and exc.error.code == 32600
        and exc.error.message == "Session terminated"
    )


def _connection_closed(exc: BaseException) -> bool:
    from mcp.shared.exceptions import McpError
    from mcp.types import CONNECTION_CLOSED

    return isinstance(exc, McpError) and exc.error.code == CONNECTION_CLOSED


@dataclass(eq=False)
class Elicitation(ToolAsks):
    """A server's question during a call still open (runtime.tools.protocol.ToolAsks)."""

    call: Call
    reply: Reply
    message: str
    mode: str
    schema: dict
    url: str

    def answer(self, result: dict):
        """Give the person's answer (MCP's ElicitResult) to the server; then the call's next
        outcome, as ``ToolSessions.call`` returns it."""
        self.call.pending = None
        self.reply.give(self.call.session.sessions, result)
        return self.call.next()
