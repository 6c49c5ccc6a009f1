"""The A2A endpoint and its agent cards off Django's middleware stack (config/asgi.py).

The endpoint authenticates by bearer token and needs no session, CSRF token, user, messages
or static files. Under ASGI each synchronous middleware (WhiteNoise, sessions, CSRF, ...) and
each of the request_started/request_finished signals is a hop to a thread and back, on one
thread shared by all requests: a GetTask spent its time in those hops, not in SQL. Here a
request is read, resolved and answered on the event loop; the view's queries are its only
hops (a2a_endpoint.asyncdb.db).

What the stack did that still matters is kept: the host is checked against ALLOWED_HOSTS
(CommonMiddleware), SECURE_SSL_REDIRECT redirects (SecurityMiddleware), and the security
headers (SecurityMiddleware, the CSP, X-Frame-Options) are set on every response by the same
middleware classes. Anything else under /a2a/ (file downloads, unknown paths) goes through the
whole stack.
"""

import asyncio
import logging
import re

from asgiref.sync import sync_to_async
from django.conf import settings
from django.core.exceptions import RequestAborted
from django.core.handlers.asgi import ASGIHandler
from django.core.handlers.exception import response_for_exception
from django.http import HttpResponse, HttpResponseBase
from django.middleware.clickjacking import XFrameOptionsMiddleware
from django.middleware.security import SecurityMiddleware
from django.urls import Resolver404, ResolverMatch, get_resolver

from a2a_endpoint import rest, views
from config.csp import ContentSecurityPolicyMiddleware

logger = logging.getLogger(__name__)

LEAN_VIEWS = frozenset({views.endpoint, views.card, rest.endpoint})
# The endpoint's and the card's URLs (a2a_endpoint.urls; <slug:...> is [-a-zA-Z0-9_]+),
# matched without walking the whole URLconf; what does not match is resolved by Django.
FAST_PATHS = re.compile(
    r"/a2a/(?P<tenant>[-a-zA-Z0-9_]+)/(?P<agent>[-a-zA-Z0-9_]+)"
    r"(?:(?P<slash>/)|(?P<card>/\.well-known/agent-card\.json))?"
)
# The HTTP+JSON binding's paths (a2a_endpoint.rest), tried only when the above did not match:
# the JSON-RPC endpoint's requests cost what they did.
REST_PATHS = re.compile(
    r"/a2a/(?P<tenant>[-a-zA-Z0-9_]+)/(?P<agent>[-a-zA-Z0-9_]+)(?P<route>" + rest.PATHS + ")"
)


def _no_view(request):  # the middleware below are used for their hooks only
    raise AssertionError("not called")


class StreamStalled(Exception):
    """A stream's write waited too long for its client to read."""


def _write_bounded(send, seconds: float):
    async def bounded(message):
        try:
            await asyncio.wait_for(send(message), seconds)
        except TimeoutError:
            raise StreamStalled from None

    return bounded


def _connection_abort(send) -> None:
    """Drop the connection with what is still buffered for it. Closing it would wait for the
    client to read that first, which this one never does; ASGI has no abort, so this reaches
    the server's transport where it can (uvicorn's ``send`` is its request cycle's method),
    and otherwise the server closes the connection once the response ends unfinished."""
    transport = getattr(getattr(send, "__self__", None), "transport", None)
    if transport is not None and hasattr(transport, "abort"):
        transport.abort()


# How long a request runs before its client's disconnect is watched for (until_disconnect).
DISCONNECT_WATCH_AFTER_SECONDS = 0.05


async def until_disconnect(answer, receive) -> None:
    """Run ``answer`` (the response's coroutine) in this task; a client that goes away cancels
    it, as Django's handler does (a blocking SendMessage stops waiting, a stream ends).

    Django runs the response and a listener for the disconnect as two tasks and waits for
    the first to end: two tasks and a wait for every request, 15% of a GetTask's CPU. Most
    requests end in a few milliseconds, long before a disconnect would matter, so the
    listener starts only once the request has run for DISCONNECT_WATCH_AFTER_SECONDS: a
    blocking send that waits, a stream. It then cancels this task when the client goes."""
    current = asyncio.current_task()
    assert current is not None
    listener: asyncio.Task | None = None
    gone = False

    async def listen() -> None:
        nonlocal gone
        message = await receive()
        if message["type"] == "http.disconnect":
            gone = True
            current.cancel()

    def watch() -> None:
        nonlocal listener
        listener = asyncio.create_task(listen())

    timer = asyncio.get_running_loop().call_later(DISCONNECT_WATCH_AFTER_SECONDS, watch)
    try:
        await answer
    except RequestAborted:
        pass
    except asyncio.CancelledError:
        if not gone:
            raise  # the server's own cancellation (shutdown): not ours to keep
        current.uncancel()
    finally:
        timer.cancel()
        if listener is not None:
            listener.cancel()


class LeanA2AHandler(ASGIHandler):
    """ASGI for the endpoint and the cards; ``fallback`` (Django's handler) serves the rest."""

    def __init__(self, fallback):
        super().__init__()
        self.fallback = fallback
        self.security = SecurityMiddleware(_no_view)
        self.response_hooks = (
            self.security,
            ContentSecurityPolicyMiddleware(_no_view),
            XFrameOptionsMiddleware(_no_view),
        )

    def load_middleware(self, is_async=False):
        # No middleware chain: __call__ calls the view itself.
        self._view_middleware = []
        self._template_response_middleware = []
        self._exception_middleware = []
        self._middleware_chain = None

    async def __call__(self, scope, receive, send):
        match = None
        if scope["type"] == "http" and not scope.get("root_path"):
            match = self.fast_resolve(scope["path"])
        if match is None or match.func not in LEAN_VIEWS:
            await self.fallback(scope, receive, send)
            return
        try:
            body_file = await self.read_body(receive)
        except RequestAborted:
            return
        try:
            created = self.create_request(scope, body_file)
            if created[0] is None:  # the request refused, with its error response
                await self.send_response(created[1], send)
                return
            request = created[0]
            request.resolver_match = match
            await until_disconnect(self.respond(request, match, send), receive)
        finally:
            body_file.close()

    @staticmethod
    def fast_resolve(path: str) -> ResolverMatch | None:
        found = FAST_PATHS.fullmatch(path)
        if found is None:
            if (route := REST_PATHS.fullmatch(path)) is not None:
                return ResolverMatch(
                    rest.endpoint, (), route.groupdict(), url_name="rest", app_names=["a2a"]
                )
            try:
                return get_resolver().resolve(path)
            except Resolver404:
                return None
        kwargs = {"tenant": found["tenant"], "agent": found["agent"]}
        if found["card"]:
            return ResolverMatch(views.card, (), kwargs, url_name="card", app_names=["a2a"])
        return ResolverMatch(views.endpoint, (), kwargs, url_name="endpoint", app_names=["a2a"])

    async def respond(self, request, match, send) -> None:
        response: HttpResponseBase | None = self.security.process_request(request)  # SSL redirect
        if response is None:
            try:
                request.get_host()  # ALLOWED_HOSTS (DisallowedHost: 400), as CommonMiddleware
                response = await match.func(request, *match.args, **match.kwargs)
            except Exception as exc:
                # The views answer their own errors; this is Django's answer to the rest.
                response = await sync_to_async(response_for_exception)(request, exc)
        for hook in self.response_hooks:
            # Django's stubs type the hooks for a whole response; Django runs them on streams
            # too, as here.
            response = hook.process_response(request, response)  # type: ignore[arg-type]
        if isinstance(response, HttpResponse):  # not a stream
            if not response.has_header("Content-Length"):
                response.headers["Content-Length"] = str(len(response.content))
            await self.send_response(response, send)
            return
        # A stream's client must read: a write that waits A2A_STREAM_WRITE_TIMEOUT_SECONDS
        # for it (the socket's buffers are full) ends the stream and drops the connection,
        # so that a client that never reads holds neither the frame it was sent nor a slot.
        seconds = settings.A2A_STREAM_WRITE_TIMEOUT_SECONDS
        try:
            # Ending it closes the stream's generator, which gives its slot back.
            await self.send_response(response, _write_bounded(send, seconds))
        except StreamStalled:
            logger.warning("A2A stream dropped: its client read nothing for %ss", seconds)
            _connection_abort(send)
