"""The MCP gateway's ASGI face, off Django's middleware stack as the A2A endpoint is
(config/asgi.py): ``/mcp/<tenant>/<gateway>/`` authenticated by bearer token, then served by
the ``mcp`` package's Streamable HTTP session manager (stateful: a client session keeps its
upstream sessions), one for the process, run by the process's lifespan.

A session belongs to the gateway and the token that opened it: the session manager answers a
request for it with any other token, or at another gateway's path, as for an unknown session
(404), which is what MCP says a client must then do (open a new one)."""

import contextlib
import json
import re
from typing import Any

from django.conf import settings
from django.http.request import split_domain_port, validate_host

from mcp_gateway.identity import gateway_caller
from mcp_gateway.server import CALLER, make_server

PATH = re.compile(r"/mcp/(?P<tenant>[-a-zA-Z0-9_]+)/(?P<gateway>[-a-zA-Z0-9_]+)/?")
UNAUTHORIZED = json.dumps(
    {
        "jsonrpc": "2.0",
        "id": None,
        "error": {
            "code": -32001,
            "message": "A bearer token of this gateway's tenant that may call it is required.",
        },
    }
).encode()


def gateway_request(scope) -> bool:
    return scope["type"] == "http" and scope["path"].startswith("/mcp/")


class McpGateway:
    """The ASGI app for /mcp/; ``start`` and ``stop`` at the process's start and stop."""

    def __init__(self) -> None:
        self.manager: Any = None  # the mcp package's StreamableHTTPSessionManager, once started
        self._stack: contextlib.AsyncExitStack | None = None

    async def start(self) -> None:
        from mcp.server.streamable_http_manager import StreamableHTTPSessionManager

        self.manager = StreamableHTTPSessionManager(app=make_server())
        self._stack = contextlib.AsyncExitStack()
        await self._stack.enter_async_context(self.manager.run())

    async def stop(self) -> None:
        if self._stack is not None:
            await self._stack.aclose()
        self._stack = self.manager = None

    async def __call__(self, scope, receive, send) -> None:
        match = PATH.fullmatch(scope["path"])
        if match is None:
            await _plain(send, 404, b"Not found")
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        host, _port = split_domain_port(headers.get("host", ""))
        if not validate_host(host, settings.ALLOWED_HOSTS):
            await _plain(send, 400, b"Bad request: the host is not allowed")
            return
        caller = await gateway_caller(
            headers.get("authorization"), match["tenant"], match["gateway"]
        )
        if caller is None:
            await send(
                {
                    "type": "http.response.start",
                    "status": 401,
                    "headers": [
                        (b"content-type", b"application/json"),
                        (b"www-authenticate", b'Bearer realm="countersign"'),
                    ],
                }
            )
            await send({"type": "http.response.body", "body": UNAUTHORIZED})
            return
        if self.manager is None:
            await _plain(send, 503, b"The MCP gateway is starting")
            return
        from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser
        from mcp.server.auth.provider import AccessToken

        client_id, subject = caller.owner
        user = AuthenticatedUser(
            AccessToken(token="", client_id=client_id, scopes=[], subject=subject)
        )
        await self.manager.handle_request({**scope, "user": user, CALLER: caller}, receive, send)


async def _plain(send, status: int, body: bytes) -> None:
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [(b"content-type", b"text/plain; charset=utf-8")],
        }
    )
    await send({"type": "http.response.body", "body": body})
