"""The HTTP+JSON binding (A2A 1.0 §11) on each agent's URL: one method layer, two envelopes.

A route (``POST {agent}/message:send``, ``GET {agent}/tasks/{id}``, ...) names the method and
the params that the JSON-RPC binding reads from its envelope; from there on a request takes
the same path as a JSON-RPC one: the same identity (bearer token, tenant, agent), the same
A2A-Version and A2A-Extensions headers, the same handlers (a2a_endpoint.methods through
jsonrpc.dispatch) and streams (a2a_endpoint.streams, each event a bare StreamResponse), and
the same domain errors, written as google.rpc.Status bodies with A2A §5.4's HTTP statuses
(errors.status_body). The JSON-RPC view is untouched: its URL is matched first.
"""

import logging
import re
from urllib.parse import parse_qsl

from django.conf import settings
from django.core.exceptions import RequestDataTooBig
from django.http import HttpResponse
from django.views.decorators.csrf import csrf_exempt

from a2a_endpoint import errors, inputs
from a2a_endpoint.identity import Caller, identify
from a2a_endpoint.jsonrpc import (
    dispatch,
    extensions_activated,
    json_body,
    json_bytes,
    version_check,
)
from a2a_endpoint.observe import a2a_error, a2a_method, a2a_observed
from a2a_endpoint.streams import stream_open
from config.logging import bind
from runtime.kernel.errors import RuntimeFault

logger = logging.getLogger(__name__)

# The binding's paths, after the agent's URL (§11.3). A task or config id is one path segment
# without ':' (the verb's separator).
_ID = r"(?P<id>[^/:]+)"
ROUTES = [
    ("POST", re.compile(r"/message:send"), "SendMessage"),
    ("POST", re.compile(r"/message:stream"), "SendStreamingMessage"),
    ("GET", re.compile(r"/tasks"), "ListTasks"),
    ("GET", re.compile(rf"/tasks/{_ID}"), "GetTask"),
    ("POST", re.compile(rf"/tasks/{_ID}:cancel"), "CancelTask"),
    ("POST", re.compile(rf"/tasks/{_ID}:subscribe"), "SubscribeToTask"),
    # §11.3.2 names POST; a GET (as an EventSource sends it) is served the same stream.
    ("GET", re.compile(rf"/tasks/{_ID}:subscribe"), "SubscribeToTask"),
    (
        "POST",
        re.compile(rf"/tasks/{_ID}/pushNotificationConfigs"),
        "CreateTaskPushNotificationConfig",
    ),
    (
        "GET",
        re.compile(rf"/tasks/{_ID}/pushNotificationConfigs"),
        "ListTaskPushNotificationConfigs",
    ),
    (
        "GET",
        re.compile(rf"/tasks/{_ID}/pushNotificationConfigs/(?P<config>[^/]+)"),
        "GetTaskPushNotificationConfig",
    ),
    (
        "DELETE",
        re.compile(rf"/tasks/{_ID}/pushNotificationConfigs/(?P<config>[^/]+)"),
        "DeleteTaskPushNotificationConfig",
    ),
    ("GET", re.compile(r"/extendedAgentCard"), "GetExtendedAgentCard"),
]
# What a2a_endpoint.lean and the URLconf send here: any of the paths above.
PATHS = (
    r"/(?:message:(?:send|stream)|extendedAgentCard"
    r"|tasks(?:/[^/:]+(?::cancel|:subscribe|/pushNotificationConfigs(?:/[^/]+)?)?)?)"
)
STREAMING = {"SendStreamingMessage", "SubscribeToTask"}

# Query parameters (§11.5) of the GET methods, by type: what ProtoJSON would read from JSON.
_INTEGERS = {"historyLength", "pageSize"}
_BOOLEANS = {"includeArtifacts"}
_STATES = {"status"}


def _route(http_method: str, path: str) -> tuple[str, dict]:
    """The method a request names and its path parameters; an unknown path or verb is a
    NOT_FOUND (unknown method) or the verb the path allows."""
    allowed = []
    for verb, pattern, method in ROUTES:
        found = pattern.fullmatch(path)
        if found is None:
            continue
        if verb == http_method:
            return method, {k: v for k, v in found.groupdict().items() if v is not None}
        allowed.append(verb)
    if allowed:
        raise errors.RpcError(
            -32601,
            f"{http_method} is not allowed here; use {' or '.join(sorted(set(allowed)))}.",
            "METHOD_NOT_ALLOWED",
            metadata={"allow": ", ".join(sorted(set(allowed)))},
            http_status=405,
        )
    raise errors.method_not_found(f"{http_method} {path}")


def _query(request) -> dict:
    """The query string as params (§11.5): camelCase names, numbers and booleans as text,
    a state as its enum name or its lowercase name (``working``, ``input-required``)."""
    params: dict = {}
    for key, value in parse_qsl(request.META.get("QUERY_STRING", ""), keep_blank_values=True):
        if key == "A2A-Version":  # a service parameter (§3.6.1), not a field
            continue
        if key in _INTEGERS:
            if not re.fullmatch(r"-?\d{1,10}", value):
                raise errors.invalid_params(key, "must be an integer")
            params[key] = int(value)
        elif key in _BOOLEANS:
            if value not in ("true", "false"):
                raise errors.invalid_params(key, "must be true or false")
            params[key] = value == "true"
        elif key in _STATES and value and not value.startswith("TASK_STATE_"):
            params[key] = "TASK_STATE_" + value.upper().replace("-", "_")
        else:
            params[key] = value
    inputs.params_check(params)
    return params


def _has_body(request) -> bool:
    length = request.META.get("CONTENT_LENGTH") or ""
    if length not in ("", "0"):
        return True
    try:
        return bool(request.body)
    except RequestDataTooBig:
        return True  # json_body says it is too big


def _params(request, method: str, path_params: dict) -> dict:
    if request.method in ("GET", "DELETE"):
        params = _query(request)
    elif _has_body(request):
        params = json_body(request)
        if not isinstance(params, dict):
            raise errors.invalid_params("body", "must be a JSON object")
    else:
        params = {}  # a POST without a body (CancelTask, SubscribeToTask)
    task_id = path_params.get("id")
    if task_id is not None:
        inputs.value_check(task_id, "id")
        if method in ("GetTask", "CancelTask", "SubscribeToTask"):
            params["id"] = task_id
        else:  # the push config methods name the task taskId, and the config id
            params["taskId"] = task_id
            if "config" in path_params:
                inputs.value_check(path_params["config"], "configId")
                params["id"] = path_params["config"]
    return params


def _json(body, status: int = 200, activated: frozenset = frozenset()) -> HttpResponse:
    response = HttpResponse(json_bytes(body), status=status, content_type="application/json")
    if activated:
        response["A2A-Extensions"] = ", ".join(sorted(activated))
    return response


def _error(error: errors.RpcError, activated: frozenset = frozenset()) -> HttpResponse:
    a2a_error(error.code)
    status, body = errors.status_body(error)
    response = _json(body, status, activated)
    if status == 401:
        response["WWW-Authenticate"] = 'Bearer realm="countersign"'
    if status == 405:
        response["Allow"] = error.metadata.get("allow", "")
    return response


@csrf_exempt
@a2a_observed
async def endpoint(request, tenant: str, agent: str, route: str = ""):
    activated: frozenset[str] = frozenset()
    try:
        found, subject = await identify(request, tenant, agent)
        bind(tenant=tenant, subject=subject)
        method, path_params = _route(request.method, route)
        a2a_method(method)
        # A2A-Version as the JSON-RPC binding reads it: 1.0, or VersionNotSupported (a
        # missing version is 0.3, whose REST paths were not these, §3.6.2).
        version_check(request)
        activated = extensions_activated(request)
        caller = Caller(
            found,
            subject,
            activated,
            lambda: settings.PUBLIC_BASE_URL or f"{request.scheme}://{request.get_host()}",
            address=request.META.get("REMOTE_ADDR") or "",
        )
        params = _params(request, method, path_params)
        if method in STREAMING:
            return await stream_open(caller, None, method, params, envelope=False)
        return _json(await dispatch(caller, method, params), activated=activated)
    except errors.RpcError as exc:
        return _error(exc, activated)
    except RuntimeFault as exc:
        return _error(errors.from_domain(exc), activated)
    except RecursionError:
        logger.warning("A2A request recursed too deeply", exc_info=True)
        return _error(inputs.too_deep(), activated)
    except Exception:
        logger.exception("A2A request failed")
        return _error(errors.RpcError(-32603, "Internal error", "INTERNAL"), activated)
