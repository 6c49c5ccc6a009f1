"""The A2A 1.0 JSON-RPC endpoint and agent cards.

Edges translate, the core decides: the endpoint checks identity, reads the envelope
(a2a_endpoint.jsonrpc), runs one method (a2a_endpoint.methods) and writes the wire back; every
domain error becomes a JSON-RPC error here, in one place (errors.from_domain). The view is
async: a blocking SendMessage waits for a wake-up without holding a thread or a database
connection (a2a_endpoint.asyncdb).
"""

import logging

from django.conf import settings
from django.http import HttpResponse, HttpResponseNotModified, JsonResponse
from django.utils.http import http_date
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_GET

from a2a_endpoint import dialect03, errors, inputs
from a2a_endpoint.card import agent_card, card_etag
from a2a_endpoint.identity import Caller, identify
from a2a_endpoint.jsonrpc import (
    STREAMING_METHODS,
    body_read,
    dispatch,
    extensions_activated,
    json_bytes,
    rpc_response,
    version_check,
)
from a2a_endpoint.observe import a2a_error, a2a_method, a2a_observed
from a2a_endpoint.streams import stream_open
from config.logging import bind
from runtime.decisions.signing import jwks as signing_jwks
from runtime.kernel.errors import RuntimeFault

logger = logging.getLogger(__name__)


@csrf_exempt
@a2a_observed
async def endpoint(request, tenant: str, agent: str):
    if request.method != "POST":
        response = JsonResponse(
            {
                "error": "POST JSON-RPC 2.0 requests here; the agent card is at .well-known/agent-card.json"
            },
            status=405,
        )
        response["Allow"] = "POST"
        return response
    request_id = None
    activated: frozenset[str] = frozenset()
    # The 0.3 dialect (a2a_endpoint.dialect03) is chosen per request, once the method is known.
    legacy = False

    def reply(body: dict, status: int = 200):
        if not legacy:
            return rpc_response(body, status=status, activated=activated)
        return rpc_response(
            dialect03.error_out(body),
            status=status,
            activated=activated,
            extra_headers=dialect03.response_headers(activated),
        )

    try:
        found, subject = await identify(request, tenant, agent)
        bind(tenant=tenant, subject=subject)
        activated = extensions_activated(request)
        request_id, envelope = body_read(request)
        a2a_method(envelope["method"])
        legacy = dialect03.selected(request, envelope["method"])
        if legacy:
            activated = dialect03.extensions_activated(request)
        else:
            version_check(request)
        caller = Caller(
            found,
            subject,
            activated,
            lambda: settings.PUBLIC_BASE_URL or f"{request.scheme}://{request.get_host()}",
            address=request.META.get("REMOTE_ADDR") or "",
        )
        if legacy:
            caller.dialect = "0.3"
        method, params = envelope["method"], envelope.get("params")
        if legacy and method in dialect03.STREAMING_METHODS:
            return await dialect03.stream(caller, request_id, method, params)
        if not legacy and method in STREAMING_METHODS:
            return await stream_open(caller, request_id, method, params)
        run = dialect03.dispatch if legacy else dispatch
        result = await run(caller, method, envelope.get("params", {}))
        return reply({"jsonrpc": "2.0", "id": request_id, "result": result})
    except errors.RpcError as exc:
        a2a_error(exc.code)
        return reply(exc.body(request_id), exc.http_status)
    except RuntimeFault as exc:
        error = errors.from_domain(exc)
        a2a_error(error.code)
        return reply(error.body(request_id))
    except RecursionError:
        # Only input nests this deeply (inputs.json_read stops deep bodies before parsing;
        # this catches whatever recursed on them later), so it is the caller's error.
        logger.warning("A2A request recursed too deeply", exc_info=True)
        error = inputs.too_deep()
        a2a_error(error.code)
        return reply(error.body(request_id))
    except Exception:
        logger.exception("A2A request failed")
        a2a_error(-32603)
        return reply(errors.RpcError(-32603, "Internal error", "INTERNAL").body(request_id))


@require_GET
async def card(request, tenant: str, agent: str, legacy: bool = False):
    """The agent card: A2A 1.0; the 0.x shape for callers that ask for it (A2A-Version: 0.3
    or 0.2.x) and at 0.2.5's path, .well-known/agent.json (a2a_endpoint.dialect03)."""
    try:
        # Read fresh: a card (and its ETag) shows the agent as it is now; the JSON-RPC
        # endpoint, the hot path, reads both from the per-process caches (identity).
        found, _subject = await identify(request, tenant, agent, fresh=True)
    except errors.RpcError as exc:
        return rpc_response(exc.body(None), status=exc.http_status)
    body = agent_card(request, found, legacy=legacy or dialect03.card_wanted(request))
    etag = card_etag(body)
    if request.headers.get("If-None-Match") == etag:
        return HttpResponseNotModified(headers={"ETag": etag})
    response = HttpResponse(json_bytes(body), content_type="application/json")
    response["ETag"] = etag
    response["Last-Modified"] = http_date(found.updated_at.timestamp())
    response["Cache-Control"] = f"{'public' if found.public else 'private'}, max-age=300"
    # The 0.3 fields depend on the version asked for, and on credentials (card_wanted).
    response["Vary"] = "A2A-Version, Authorization"
    return response


@require_GET
def jwks(request):
    """The public keys that sign receipts (RFC 7517), rotated ones included: no credentials,
    cacheable; a caller meeting a ``kid`` it has not seen fetches it again."""
    response = JsonResponse(signing_jwks())
    response["Cache-Control"] = "public, max-age=300"
    response["Access-Control-Allow-Origin"] = "*"
    return response
