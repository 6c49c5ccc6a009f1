import gc
import os
import resource

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")

# The most open files a web process asks for when its hard limit is unlimited (Linux's default
# fs.nr_open, which no process may exceed).
OPEN_FILES_CAP = 1 << 20


def open_files_limit_raise() -> int:
    """Raise this process's soft limit on open files to its hard limit; return the new limit.

    Each waiting caller (a blocking SendMessage, a stream) holds a socket and nothing else, so
    the open-files limit is what bounds how many one web process can hold. The soft limit is
    often 1,024 (systemd's default for services, many shells') while the hard limit is far
    higher: a process may raise its own soft limit up to the hard one, as servers do.
    """
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = OPEN_FILES_CAP if hard == resource.RLIM_INFINITY else hard
    if soft != resource.RLIM_INFINITY and soft < target:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
        except (ValueError, OSError):
            return soft
        return target
    return soft


open_files_limit_raise()

django_application = get_asgi_application()

# Imported once Django is set up (get_asgi_application above).
from a2a_endpoint.lean import LeanA2AHandler  # noqa: E402
from approvals.lean_api import LeanApiHandler, lean_api_request  # noqa: E402
from mcp_gateway.lean import McpGateway, gateway_request  # noqa: E402

# The A2A endpoint and cards skip the middleware stack (a2a_endpoint.lean); the rest of
# /a2a/ (file downloads) falls back to Django.
a2a_application = LeanA2AHandler(fallback=django_application.handle)
# Token-authenticated REST calls skip the middleware that only sessions use (approvals.lean_api).
api_application = LeanApiHandler()
# MCP clients' gateways (mcp_gateway.lean): the mcp package's session manager, started by the
# lifespan below.
mcp_application = McpGateway()


async def application(scope, receive, send):
    """Django, except that A2A requests skip the per-request thread (ThreadSensitiveContext)
    and the middleware stack, and token-authenticated /api/v1/ requests the middleware that
    only browser sessions use.

    A blocking SendMessage waits for its task for up to A2A_WAIT_MS. Under Django's default
    each request keeps a thread of its own for its synchronous work, idle during that wait;
    the A2A view runs its database calls on a small shared pool instead
    (a2a_endpoint.asyncdb.db), so a thousand waiters hold no thousand threads.
    """
    if scope["type"] == "http" and scope["path"].startswith("/a2a/"):
        await a2a_application(scope, receive, send)
        return
    if gateway_request(scope):
        await mcp_application(scope, receive, send)
        return
    if lean_api_request(scope):
        await api_application(scope, receive, send)
        return
    if scope["type"] == "lifespan":
        await lifespan(receive, send)
        return
    await django_application(scope, receive, send)


def gc_freeze() -> None:
    """Leave what the process has made by now (Django, the apps, the URLconf: some 200,000
    objects that live as long as the process) out of every later garbage collection.

    A full collection walks every object the process holds, and it runs on the event loop:
    with those objects in it, each took 0.25-0.5 s during a burst of 2,000 blocking sends,
    and every caller woken meanwhile waited for it (bench/waiters.py).
    """
    from django.urls import get_resolver

    get_resolver().url_patterns  # noqa: B018 - loaded now, to be frozen with the rest
    gc.collect()
    gc.freeze()


async def lifespan(receive, send) -> None:
    """ASGI's start and stop of the process (Django's handler answers HTTP only).

    At start the process begins listening for task changes (runtime.kernel.wakeups): a burst of
    blocking sends in its first moments then finds the listener connected, and each waits
    without first reading the state of the task it has just made (announcements_mark). It
    makes the A2A endpoint's intake (one semaphore for the process, on this event loop:
    a2a_endpoint.methods.intake_open) and opens its async pool (a2a_endpoint.asyncdb).
    """
    from a2a_endpoint.asyncdb import pool_open
    from a2a_endpoint.methods import intake_open
    from runtime.kernel.wakeups import listen_start

    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            listen_start()
            intake_open()
            await pool_open()
            await mcp_application.start()
            gc_freeze()
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            await mcp_application.stop()
            await send({"type": "lifespan.shutdown.complete"})
            return
