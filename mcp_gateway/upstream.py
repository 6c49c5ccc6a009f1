"""The upstream MCP sessions of one client session: one per tenant MCP server, opened by the
client session's first call of it, reused by its later calls and closed with it. Each is held
open by a task of the client session's own task group (anyio: a session's context is entered
and left by the same task)."""

import logging
import math
from dataclasses import dataclass, field
from typing import Any

import anyio
import httpx
from django.conf import settings

from a2a_endpoint.asyncdb import db
from connections.outbound import guarded_async_client
from runtime.tools.servers import bearer_token, checked_url, tool_server_refresh

logger = logging.getLogger(__name__)


class UpstreamUnavailable(Exception):
    """The upstream server could not be reached (its message is for the client)."""


@dataclass(eq=False)
class Upstream:
    client: Any  # mcp.ClientSession
    closing: anyio.Event
    done: anyio.Event


@dataclass(eq=False)
class Upstreams:
    """A client session's upstream sessions, by tool server (row and URL)."""

    group: Any  # the client session's anyio task group
    sampling: bool = False
    client_session: Any = None  # the client's ServerSession, for what upstream asks of it
    _open: dict = field(default_factory=dict)
    _lock: anyio.Lock = field(default_factory=anyio.Lock)

    async def session(self, row) -> Any:
        """The open ``mcp.ClientSession`` with the tool server ``row``."""
        key = (row.pk, row.url)
        async with self._lock:
            found = self._open.get(key)
            if found is not None and not found.done.is_set():
                return found.client
            token = await db(_token_of, row)
            upstream = Upstream(client=None, closing=anyio.Event(), done=anyio.Event())
            try:
                upstream.client = await self.group.start(self._hold, row, token, upstream)
            except Exception as exc:
                raise UpstreamUnavailable(
                    f"the tool server {row.name} could not be reached ({type(exc).__name__})"
                ) from None
            self._open[key] = upstream
            return upstream.client

    def drop(self, row) -> None:
        upstream = self._open.pop((row.pk, row.url), None)
        if upstream is not None:
            upstream.closing.set()

    def close(self) -> None:
        for upstream in self._open.values():
            upstream.closing.set()
        self._open.clear()

    async def _hold(self, row, token: str | None, upstream: Upstream, *, task_status) -> None:
        from mcp import ClientSession
        from mcp.client.streamable_http import streamable_http_client

        headers = {"Authorization": f"Bearer {token}"} if token else None
        timeout = float(row.timeout_seconds)
        started = False
        try:
            async with (
                guarded_async_client(
                    timeout=httpx.Timeout(timeout, read=None),
                    deadline=math.inf,
                    headers=headers,
                    max_connections=8,
                    max_response_bytes=settings.TOOL_RESULT_MAX_BYTES,
                ) as http_client,
                streamable_http_client(row.url, http_client=http_client) as (read, write, *_),
                ClientSession(
                    read,
                    write,
                    elicitation_callback=self._elicited,
                    sampling_callback=self._sampled if self.sampling else None,
                    message_handler=lambda message: self._notified(row, message),
                ) as client,
            ):
                with anyio.fail_after(timeout):
                    await client.initialize()
                task_status.started(client)
                started = True
                await upstream.closing.wait()
        except Exception as exc:
            if not started:
                raise
            logger.info("the upstream session with %s ended (%s)", row.name, type(exc).__name__)
        finally:
            upstream.done.set()

    async def _notified(self, row, message) -> None:
        """An upstream server's notification: a changed list of tools, resources or prompts
        is told to the client (its tools discovered again first: the gateway lists them from
        the server's last discovery)."""
        from mcp import types

        root = getattr(message, "root", None)
        session = self.client_session
        if session is None or root is None:
            return
        try:
            if isinstance(root, types.ToolListChangedNotification):
                await db(_rediscover, row)
                await session.send_tool_list_changed()
            elif isinstance(root, types.ResourceListChangedNotification):
                await session.send_resource_list_changed()
            elif isinstance(root, types.PromptListChangedNotification):
                await session.send_prompt_list_changed()
        except Exception as exc:  # the client gone, the discovery failed: nothing to tell
            logger.info("a list change of %s was not passed on (%s)", row.name, exc)

    async def _elicited(self, context, params):
        """An upstream server's question during a call: asked of the client, whose answer
        goes back upstream (a client that declared no elicitation is never asked)."""
        from mcp.types import ElicitResult

        session = self.client_session
        if session is None or not _client_elicits(session):
            return ElicitResult(action="cancel")
        from mcp.types import ElicitRequest, ServerRequest

        try:
            return await session.send_request(
                ServerRequest(ElicitRequest(params=params)), ElicitResult
            )
        except Exception:
            return ElicitResult(action="cancel")

    async def _sampled(self, context, params):
        """An upstream server's sampling request, passed to the client (``sampling: true``)."""
        from mcp.types import CreateMessageRequest, CreateMessageResult, ServerRequest

        return await self.client_session.send_request(
            ServerRequest(CreateMessageRequest(params=params)), CreateMessageResult
        )


def _client_elicits(session) -> bool:
    params = getattr(session, "client_params", None)
    capabilities = getattr(params, "capabilities", None)
    return getattr(capabilities, "elicitation", None) is not None


def _rediscover(row) -> None:
    from runtime.agents.agent_models import ToolServer

    fresh = ToolServer.objects.filter(pk=row.pk, tenant_id=row.tenant_id, active=True).first()
    if fresh is not None:
        tool_server_refresh(server=fresh)


def _token_of(row) -> str | None:
    checked_url(row)  # the outbound guard, at every session: its settings may change
    return bearer_token(row)
