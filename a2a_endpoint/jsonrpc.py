"""The JSON-RPC 2.0 envelope of the A2A endpoint: the body, the headers, the dispatch.

Edges translate, the core decides: this module reads and checks the envelope (content type,
size, JSON-RPC fields, A2A version, extensions) and writes the response; the handlers are in
a2a_endpoint.methods.
"""

import json

import orjson
from django.conf import settings
from django.core.exceptions import RequestDataTooBig
from django.http import HttpResponse

from a2a_endpoint import errors, inputs
from a2a_endpoint.identity import Caller
from a2a_endpoint.methods import HANDLERS
from runtime.kernel import extensions as ext

JSON_TYPES = {"application/json", "application/a2a+json"}
STREAMING_METHODS = {"SendStreamingMessage", "SubscribeToTask"}


IMPLEMENTED = frozenset(ext.IMPLEMENTED)


def extensions_activated(request) -> frozenset:
    """The extensions the caller asked for (A2A-Extensions) that this server implements."""
    header = request.headers.get("A2A-Extensions")
    if not header:
        return frozenset()
    return frozenset(uri.strip() for uri in header.split(",")) & IMPLEMENTED


def version_check(request) -> None:
    """Refuse any A2A version but 1.0 (VersionNotSupportedError)."""
    version = (
        request.headers.get("A2A-Version", "").strip() or request.GET.get("A2A-Version", "").strip()
    )
    # A2A §3.6: no version means 0.3, which this endpoint does not serve; patch is ignored.
    parts = version.split(".")
    if len(parts) < 2 or parts[0] != "1" or parts[1] != "0":
        raise errors.version_not_supported(version)


def _fragment_value(value):
    # The standard library cannot write an orjson.Fragment (JSON as stored, wire.stored_task_wire):
    # it writes the value the fragment's JSON is.
    if isinstance(value, orjson.Fragment):
        return json.loads(orjson.dumps(value))
    raise TypeError(f"{type(value).__name__} is not JSON serializable")


def json_bytes(body) -> bytes:
    """``body`` as JSON: orjson, or the standard library for what orjson refuses (an integer
    beyond 64 bits or a lone surrogate in a caller's data, echoed back)."""
    try:
        return orjson.dumps(body)
    except (orjson.JSONEncodeError, TypeError):
        return json.dumps(body, default=_fragment_value).encode()


def json_response(body, *, status: int = 200) -> HttpResponse:
    return HttpResponse(json_bytes(body), status=status, content_type="application/json")


def rpc_response(
    body: dict, *, status: int = 200, activated: frozenset = frozenset(), extra_headers=None
) -> HttpResponse:
    """The HTTP response for a JSON-RPC body, with A2A-Extensions and WWW-Authenticate."""
    response = json_response(body, status=status)
    if activated:
        response["A2A-Extensions"] = ", ".join(sorted(activated))
    if status == 401:
        response["WWW-Authenticate"] = 'Bearer realm="countersign"'
        if body.get("error", {}).get("data", [{}])[0].get("metadata", {}).get("reason") not in (
            None,
            "missing",
        ):
            response["WWW-Authenticate"] += ', error="invalid_token"'
    for key, value in (extra_headers or {}).items():
        response[key] = value
    return response


def _too_big() -> errors.RpcError:
    return errors.invalid_request(
        f"the body is larger than {settings.A2A_MAX_BODY_BYTES} bytes", http_status=413
    )


def json_body(request):
    """The request's JSON body (application/json, at most A2A_MAX_BODY_BYTES), parsed, or raise
    an RpcError; the HTTP+JSON binding reads its bodies with it too (a2a_endpoint.rest)."""
    content_type = request.content_type.lower() if request.content_type else ""
    if content_type not in JSON_TYPES:
        raise errors.content_type_not_supported(content_type)
    length = request.META.get("CONTENT_LENGTH") or "0"
    if length.isdigit() and int(length) > settings.A2A_MAX_BODY_BYTES:
        raise _too_big()
    try:
        raw = request.body
    except RequestDataTooBig:
        raise _too_big() from None
    if len(raw) > settings.A2A_MAX_BODY_BYTES:
        raise _too_big()
    return inputs.json_read(raw)


def body_read(request) -> tuple[str | int | None, dict]:
    """Return (request id, envelope) or raise an RpcError."""
    envelope = json_body(request)
    if not isinstance(envelope, dict):
        raise errors.invalid_request(
            "the body must be one JSON-RPC request object (batches are not supported)"
        )
    request_id = envelope.get("id")
    if isinstance(request_id, bool) or not isinstance(request_id, str | int | type(None)):
        raise errors.invalid_request("id must be a string or a number")
    # The id comes back in the response, and in the log: text that JSON or UTF-8 cannot carry
    # is refused like a wrong type.
    inputs.value_check(request_id, "id")
    if envelope.get("jsonrpc") != "2.0":
        raise errors.invalid_request('jsonrpc must be "2.0"')
    if not isinstance(envelope.get("method"), str):
        raise errors.invalid_request("method must be a string")
    if "id" not in envelope:
        raise errors.invalid_request("id is required (notifications are not supported)")
    return request_id, envelope


async def dispatch(caller: Caller, method: str, params):
    """Run the handler of ``method`` (a2a_endpoint.methods.HANDLERS) and return its result."""
    # The streaming methods answer with a stream (a2a_endpoint.streams.stream_open, from the
    # view); they never reach this dispatch.
    if method in STREAMING_METHODS:
        raise errors.invalid_request(f"{method} is answered with a stream, not a result")
    if method == "GetExtendedAgentCard":
        raise errors.unsupported(
            "This agent has no extended agent card (extendedAgentCard: false)."
        )
    handler = HANDLERS.get(method)
    if handler is None:
        raise errors.method_not_found(method)
    if params is None:
        params = {}
    if not isinstance(params, dict):
        raise errors.invalid_params("params", "must be an object")
    inputs.params_check(params)
    return await handler(caller, params)
