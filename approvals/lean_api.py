"""Token-authenticated REST calls (/api/v1/ with an ``Authorization`` header) on a shorter
middleware stack, in one hop to a thread (config/asgi.py).

Under ASGI, Django runs each synchronous middleware (WhiteNoise, sessions, CSRF, auth,
allauth, messages) and the request_started/request_finished signals as hops between the
event loop and a thread it starts for each request: an operator program's decision
(``POST /api/v1/interactions/<id>/answer``) spent about half of its CPU around the view,
before the decision was even read (bench/decisions.py measures it). A call that presents
an ``Authorization`` header is authenticated by its token and by nothing else: DRF's
BearerTokenAuthentication answers it (or refuses it, 401) before session authentication is
asked, so the session, its CSRF check, the logged-in user, allauth's and the tenant
switcher's state and the messages are never read. Static files are not under /api/v1/.

Here such a request is read on the event loop, then resolved, run through the middleware
that still apply (``LEAN_API_SKIPPED`` leaves out the ones above; any other, present or
future, stays) and answered by its view in one call on the shared database threads
(a2a_endpoint.asyncdb.db), which gives the connection back as the request's end would.
A request without the header (a person's browser session) goes through the whole stack.
"""

from django.conf import settings
from django.core import signals
from django.core.exceptions import RequestAborted
from django.core.handlers.asgi import ASGIHandler, get_script_prefix
from django.core.handlers.exception import convert_exception_to_response
from django.urls import set_script_prefix
from django.utils.module_loading import import_string

from a2a_endpoint.asyncdb import db

API_PREFIX = "/api/v1/"

# What a token-authenticated API call does not use (see the module's docstring).
LEAN_API_SKIPPED = frozenset(
    {
        "whitenoise.middleware.WhiteNoiseMiddleware",
        "django.contrib.sessions.middleware.SessionMiddleware",
        "django.middleware.csrf.CsrfViewMiddleware",
        "django.contrib.auth.middleware.AuthenticationMiddleware",
        "allauth.account.middleware.AccountMiddleware",
        "django.contrib.messages.middleware.MessageMiddleware",
        "tenants.middleware.CurrentTenantMiddleware",
    }
)


def lean_api_request(scope) -> bool:
    """An HTTP request to /api/v1/ that carries an Authorization header."""
    return (
        scope["type"] == "http"
        and scope["path"].startswith(API_PREFIX)
        and not scope.get("root_path")
        and any(name == b"authorization" for name, _ in scope.get("headers", ()))
    )


def lean_api_middleware() -> list[str]:
    return [path for path in settings.MIDDLEWARE if path not in LEAN_API_SKIPPED]


class LeanApiHandler(ASGIHandler):
    """ASGI for token-authenticated /api/v1/ requests (``lean_api_request``)."""

    def load_middleware(self, is_async=False):
        # BaseHandler.load_middleware's synchronous chain over lean_api_middleware(): the
        # whole request runs on one thread, so no middleware needs an async adapter.
        self._view_middleware: list = []
        self._template_response_middleware: list = []
        self._exception_middleware: list = []
        # Django's own (private) innermost handler, which its type stubs leave out.
        handler = convert_exception_to_response(self._get_response)  # type: ignore[attr-defined]
        for path in reversed(lean_api_middleware()):
            middleware = import_string(path)(handler)
            if hasattr(middleware, "process_view"):
                self._view_middleware.insert(0, middleware.process_view)
            if hasattr(middleware, "process_template_response"):
                self._template_response_middleware.append(middleware.process_template_response)
            if hasattr(middleware, "process_exception"):
                self._exception_middleware.append(middleware.process_exception)
            handler = convert_exception_to_response(middleware)
        self._middleware_chain = handler

    async def __call__(self, scope, receive, send):
        try:
            body_file = await self.read_body(receive)
        except RequestAborted:
            return
        try:
            set_script_prefix(get_script_prefix(scope))
            created = self.create_request(scope, body_file)
            if created[0] is None:  # the request refused, with its error response
                await self.send_response(created[1], send)
                return
            response = await db(self.respond, created[0])
            await self.send_response(response, send)
            if response.streaming:
                await db(response.close)
        finally:
            body_file.close()

    def respond(self, request):
        """The request's whole synchronous life on this thread: started, answered, finished."""
        signals.request_started.send(sender=self.__class__, scope=request.scope)
        response = self.get_response(request)
        # As ASGIHandler.handle marks it (Django's stubs leave the attribute out).
        response._handler_class = self.__class__  # type: ignore[attr-defined]
        if not response.streaming:
            # Sends request_finished (the connection goes back, as at a request's end); a
            # streamed body is closed once it was sent.
            response.close()
        return response
