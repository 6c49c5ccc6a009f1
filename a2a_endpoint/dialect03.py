"""The A2A 0.3 (and 0.2.5) dialect on the 1.0 endpoint: one translation layer at the edge.

A request is in this dialect when it says ``A2A-Version: 0.3`` (or 0.2.x), or says no version
and names a slash-named method (``message/send``); PascalCase methods stay 1.0 (selected()).
Its params are rewritten into the 1.0 shapes that a2a_endpoint.methods already handles, and
the 1.0 results, stream events and errors are rewritten into the 0.3 shapes: ``kind`` on parts,
messages, tasks and events, lowercase hyphenated states, ``{kind: "file", file: {...}}`` parts,
``configuration.blocking``, the nested push config. The core (runtime) never sees 0.3.

The 0.x hosts this dialect serves (the Wildo host speaks 0.2.5) set its rules where they and
1.0's interrupted states differ: a pause is ``input-required`` and ends a direct stream; a
direct send (a blocking message/send, a
message/stream, that starts a turn) hands out no task unless its answer is a Task
(runtime.kernel.task_models.Task.direct), and a client that leaves a direct stream before it holds
the reply or the task aborts its turn; a missing messageId is minted and a part's missing
``kind`` is inferred.

Sources: a2aproject/A2A at tag v0.3.0 (docs/specification.md, specification/json/a2a.json);
the differences are listed in the A2A repository's docs/whats-new-v1.md. Where 0.3 left something
open, this follows the a2a-sdk's 0.3 compatibility layer (a2a/compat/v0_3/conversions.py):
a data part whose value is not an object travels as ``{"value": ...}`` with
``metadata.data_part_compat: true``.
"""

import uuid
from typing import Any

from a2a_endpoint import errors, inputs, methods, streams
from a2a_endpoint.identity import Caller
from a2a_endpoint.wire03 import (
    ROLES_IN,
    event_out,
    message_out,
    task_out,
)
from runtime.kernel import extensions as ext
from runtime.kernel.errors import TaskNotFound
from runtime.kernel.task_models import INTERRUPTED_STATES, TERMINAL_STATES

# The versions this dialect answers for (A2A §3.6.2: Major.Minor, the patch is ignored).
VERSIONS = {("0", "3"), ("0", "2")}
# What the card says to 0.3 clients (0.3 cards carry a full version string).
CARD_PROTOCOL_VERSION = "0.3.0"

STREAMING_METHODS = {"message/stream", "tasks/resubscribe"}
# A 0.x stream closes at either pause, both spelled input-required with ``final: true`` (0.x
# hosts take an approval pause as a stream's terminal frame); a subscriber to a task already
# paused still waits past the Task it is sent first (a2a_endpoint.streams).
CLOSING_STATES = TERMINAL_STATES | INTERRUPTED_STATES


def requested_version(request) -> str:
    return (
        request.headers.get("A2A-Version", "").strip() or request.GET.get("A2A-Version", "").strip()
    )


def card_wanted(request) -> bool:
    """Whether a card request gets the 0.3 fields beside the 1.0 ones: it says A2A-Version
    0.3 or 0.2.x, or it says no version and carries credentials.

    A2A §3.6.2 reads a missing version as 0.3, and the a2a-sdk 0.3's default
    ``ClientFactory.connect(url)`` fetches the card with no version and cannot read a card
    without ``url``. The conformance kit fetches the same URL with no version (and no
    credentials) and refuses any field a strict 1.0 card does not have. The narrowest rule
    that serves both: an anonymous request without a version gets the strict 1.0 card
    (discovery, validators, the kit); one with credentials is a partner's client, read as
    0.3, and gets the 1.0 card plus the 0.3 fields, which every 1.0 reader ignores (A2A
    §5.7: unknown fields SHOULD be ignored). A private agent's card always needs credentials,
    so a 0.3 client of any private agent connects by default; a 0.3 client of a public agent
    without a token sends A2A-Version: 0.3 or reads .well-known/agent.json."""
    version = requested_version(request)
    if version:
        return tuple(version.split(".")[:2]) in VERSIONS
    return "Authorization" in request.headers


def selected(request, method: str) -> bool:
    """Whether this request speaks 0.3: a slash-named method with no A2A-Version (A2A §3.6.2:
    a missing version is read as 0.3) or with 0.3 / 0.2.x. A PascalCase method is 1.0 whatever
    the header says, so that 0.3 with a 1.0 method name is -32009 (as the a2a-sdk answers)."""
    if "/" not in method:
        return False
    version = requested_version(request)
    return not version or tuple(version.split(".")[:2]) in VERSIONS


def extensions_activated(request) -> frozenset:
    """The extensions asked for in A2A-Extensions or 0.3's X-A2A-Extensions that we implement."""
    raw = ",".join(request.headers.get(name, "") for name in ("A2A-Extensions", "X-A2A-Extensions"))
    requested = {uri.strip() for uri in raw.split(",") if uri.strip()}
    return frozenset(requested & set(ext.IMPLEMENTED))


def response_headers(activated: frozenset) -> dict:
    """0.3 clients read the activated extensions from X-A2A-Extensions."""
    return {"X-A2A-Extensions": ", ".join(sorted(activated))} if activated else {}


# --- errors -----------------------------------------------------------------------------------

# 1.0 codes without a 0.3 counterpart. ExtensionSupportRequired (-32008) is new in 1.0: to a
# 0.3 client it is a request it must change, an invalid request. VersionNotSupported (-32009)
# never reaches this dialect.
ERROR_CODES_OUT = {-32008: -32600}


def error_out(body: dict) -> dict:
    """A 1.0 JSON-RPC error body in 0.3's terms. -32001..-32007 mean the same in both
    (-32007 is 0.3's AuthenticatedExtendedCardNotConfigured); ``data`` is free-form in 0.3, so
    the 1.0 ErrorInfo array stays as it is."""
    error = body.get("error")
    if not error or error.get("code") not in ERROR_CODES_OUT:
        return body
    return {**body, "error": {**error, "code": ERROR_CODES_OUT[error["code"]]}}


def extended_card_not_configured() -> errors.RpcError:
    # 0.3's agent/getAuthenticatedExtendedCard answers -32007 when the card does not offer
    # one (supportsAuthenticatedExtendedCard: false).
    return errors.RpcError(
        -32007,
        "This agent has no authenticated extended card (supportsAuthenticatedExtendedCard: false).",
        "EXTENDED_AGENT_CARD_NOT_CONFIGURED",
    )


# --- requests: 0.3 -> 1.0 ---------------------------------------------------------------------


def _object(value, field: str) -> dict:
    if not isinstance(value, dict):
        raise errors.invalid_params(field, "must be an object")
    return value


def part_in(raw, field: str) -> dict:
    """A 0.3 part ({kind: text|file|data, ...}) as a 1.0 part."""
    raw = _object(raw, field)
    kind = raw.get("kind")
    if kind is None:
        # Some 0.x clients leave ``kind`` out; a part that holds exactly one of the three
        # contents can only be that kind. Two or none stay ambiguous: refused.
        present = [k for k in ("text", "file", "data") if k in raw]
        if len(present) == 1:
            kind = present[0]
    metadata = raw.get("metadata")
    out: dict[str, Any] = {}
    if kind == "text":
        if not isinstance(raw.get("text"), str):
            raise errors.invalid_params(f"{field}.text", "must be a string")
        out["text"] = raw["text"]
    elif kind == "data":
        # An object; in the compatibility form below, any JSON value.
        data: Any = _object(raw.get("data"), f"{field}.data")
        if isinstance(metadata, dict) and metadata.get("data_part_compat"):
            # The a2a-sdk's 0.3 form of a 1.0 data part that is not an object.
            data = data.get("value")
            metadata = {k: v for k, v in metadata.items() if k != "data_part_compat"} or None
        out["data"] = data
    elif kind == "file":
        file = _object(raw.get("file"), f"{field}.file")
        if ("bytes" in file) == ("uri" in file):
            raise errors.invalid_params(f"{field}.file", "needs exactly one of bytes or uri")
        key, target = ("bytes", "raw") if "bytes" in file else ("uri", "url")
        if not isinstance(file[key], str):
            raise errors.invalid_params(f"{field}.file.{key}", "must be a string")
        out[target] = file[key]
        for name, target in (("mimeType", "mediaType"), ("name", "filename")):
            if file.get(name) is not None:
                out[target] = file[name]
    else:
        raise errors.invalid_params(f"{field}.kind", 'must be "text", "file" or "data"')
    if metadata is not None:
        out["metadata"] = metadata
    return out


def message_in(raw, field: str = "message") -> dict:
    """A 0.3 message ({kind: "message", role: "user", parts: [...]}) as a 1.0 message."""
    raw = _object(raw, field)
    if raw.get("kind", "message") != "message":
        raise errors.invalid_params(f"{field}.kind", 'must be "message"')
    if raw.get("role") != "user":
        # The only role a client sends (the 1.0 core refuses ROLE_AGENT the same way).
        raise errors.invalid_params(f"{field}.role", 'must be "user"')
    out = {k: v for k, v in raw.items() if k not in ("kind", "role", "parts")}
    out["role"] = ROLES_IN["user"]
    if out.get("messageId") is None:
        # Older 0.x hosts send no messageId; this dialect mints one. The messageId is the
        # idempotency key (a retry with the same id is answered once), so such a message has
        # no retry protection: each copy is a new message.
        out["messageId"] = f"minted-{uuid.uuid4()}"
    parts = raw.get("parts")
    if parts is not None:
        if not isinstance(parts, list):
            raise errors.invalid_params(f"{field}.parts", "must be a list of parts")
        out["parts"] = [part_in(p, f"{field}.parts[{i}]") for i, p in enumerate(parts)]
    return out


def push_config_in(raw, field: str) -> dict:
    """A 0.3 PushNotificationConfig ({id, url, token, authentication: {schemes, credentials}})
    as the flat 1.0 fields. One Authorization header is sent, so the first scheme is used."""
    raw = _object(raw, field)
    out = {k: raw[k] for k in ("id", "url", "token") if raw.get(k) is not None}
    auth = raw.get("authentication")
    if auth is not None:
        auth = _object(auth, f"{field}.authentication")
        schemes = auth.get("schemes")
        if (
            not isinstance(schemes, list)
            or not schemes
            or not all(isinstance(s, str) for s in schemes)
        ):
            raise errors.invalid_params(
                f"{field}.authentication.schemes", "must be a non-empty list of scheme names"
            )
        out["authentication"] = {"scheme": schemes[0]}
        if auth.get("credentials") is not None:
            out["authentication"]["credentials"] = auth["credentials"]
    return out


def send_params_in(params: dict) -> tuple[dict, bool]:
    """message/send params as SendMessage params, and whether the caller blocks."""
    out: dict[str, Any] = {}
    if "message" in params:
        out["message"] = message_in(params["message"])
    if params.get("metadata") is not None:
        out["metadata"] = params["metadata"]
    configuration = params.get("configuration")
    if configuration is None:
        return out, True  # 0.3's default is blocking, as 1.0's
    configuration = _object(configuration, "configuration")
    blocking = configuration.get("blocking")
    if blocking is None:
        blocking = True
    if not isinstance(blocking, bool):
        raise errors.invalid_params("configuration.blocking", "must be true or false")
    core: dict[str, Any] = {"returnImmediately": not blocking}
    for key in ("acceptedOutputModes", "historyLength"):
        if configuration.get(key) is not None:
            core[key] = configuration[key]
    if configuration.get("pushNotificationConfig") is not None:
        core["taskPushNotificationConfig"] = push_config_in(
            configuration["pushNotificationConfig"], "configuration.pushNotificationConfig"
        )
    out["configuration"] = core
    return out, blocking


# --- results: 1.0 -> 0.3 (the shapes are a2a_endpoint.wire03's) ---------------------------


def push_config_out(config: dict) -> dict:
    """A 1.0 TaskPushNotificationConfig as 0.3's {taskId, pushNotificationConfig}."""
    inner = {k: config[k] for k in ("id", "url", "token") if k in config}
    if "authentication" in config:
        inner["authentication"] = {"schemes": [config["authentication"]["scheme"]]}
    return {"taskId": config["taskId"], "pushNotificationConfig": inner}


# --- methods ----------------------------------------------------------------------------------


def _pick(params: dict, *keys: str) -> dict:
    return {k: params[k] for k in keys if k in params}


async def message_send(caller: Caller, params: dict):
    core, blocking = send_params_in(params)
    # A 0.x blocking message/send that starts a turn is a direct send: a turn that
    # completes answers with the reply Message, and no task is created for it (Task.direct:
    # no task method finds it). A pause, a failure, artifacts (a Message cannot carry them),
    # the wait limit and a non-blocking send answer with the Task, and so does a message
    # continuing a task the caller already holds.
    direct = blocking and not core.get("message", {}).get("taskId")
    result = await methods.send_message(caller, core, direct=direct)
    if "message" in result:
        return message_out(result["message"])
    return task_out(result["task"])


async def tasks_get(caller: Caller, params: dict):
    return task_out(await methods.get_task(caller, _pick(params, "id", "historyLength")))


async def tasks_cancel(caller: Caller, params: dict):
    return task_out(await methods.cancel_task(caller, _pick(params, "id")))


async def push_config_set(caller: Caller, params: dict):
    if params.get("pushNotificationConfig") is None:
        raise errors.invalid_params("pushNotificationConfig", "is required")
    core = {
        **_pick(params, "taskId"),
        **push_config_in(params["pushNotificationConfig"], "pushNotificationConfig"),
    }
    return push_config_out(await methods.create_push_config(caller, core))


async def push_config_get(caller: Caller, params: dict):
    config_id = params.get("pushNotificationConfigId")
    if config_id is None:
        # 0.2.5 named only the task ({id}): its first config, as the a2a-sdk answers.
        configs = await methods.list_push_configs(
            caller, {"taskId": params.get("id"), "pageSize": 1}
        )
        if not configs["configs"]:
            raise TaskNotFound(
                f"Task {params.get('id')} has no push notification config.",
                taskId=params.get("id"),
            )
        return push_config_out(configs["configs"][0])
    core = {"taskId": params.get("id"), "id": config_id}
    return push_config_out(await methods.get_push_config(caller, core))


async def push_config_list(caller: Caller, params: dict):
    # 0.3 answers with the whole list (no pages): read the 1.0 pages through.
    out: list[dict] = []
    token = ""
    while True:
        page = await methods.list_push_configs(
            caller, {"taskId": params.get("id"), "pageToken": token}
        )
        out.extend(push_config_out(c) for c in page["configs"])
        token = page["nextPageToken"]
        if not token:
            return out


async def push_config_delete(caller: Caller, params: dict):
    if params.get("pushNotificationConfigId") is None:
        raise errors.invalid_params("pushNotificationConfigId", "is required")
    await methods.delete_push_config(
        caller, {"taskId": params.get("id"), "id": params["pushNotificationConfigId"]}
    )
    return None


HANDLERS = {
    "message/send": message_send,
    "tasks/get": tasks_get,
    "tasks/cancel": tasks_cancel,
    "tasks/pushNotificationConfig/set": push_config_set,
    "tasks/pushNotificationConfig/get": push_config_get,
    "tasks/pushNotificationConfig/list": push_config_list,
    "tasks/pushNotificationConfig/delete": push_config_delete,
}


def _params(params) -> dict:
    if params is None:
        params = {}
    if not isinstance(params, dict):
        raise errors.invalid_params("params", "must be an object")
    inputs.params_check(params)
    return params


async def stream(caller: Caller, request_id, method: str, params):
    """message/stream and tasks/resubscribe: the 1.0 streams (a2a_endpoint.streams) with
    each event written in 0.3's shape (event_out). Errors before the stream starts are
    raised, and answered as a plain JSON-RPC error."""
    params = _params(params)
    if method == "message/stream":
        # blocking means nothing to a stream; the rest is message/send's.
        core, _blocking = send_params_in(params)
        core.get("configuration", {}).pop("returnImmediately", None)
        # A 0.x message/stream that starts a turn is a direct stream (the reply Message,
        # no task, unless the model's live text makes it the task's stream; a client that
        # leaves before it holds the reply or the task aborts the turn); one that answers a
        # task it names streams that task's events, as 1.0 does, to the next pause.
        direct = not core.get("message", {}).get("taskId")
        response = await streams.stream_open(
            caller,
            request_id,
            "SendStreamingMessage",
            core,
            translate=event_out,
            closing=CLOSING_STATES,
            direct=direct,
        )
    elif method == "tasks/resubscribe":
        response = await streams.stream_open(
            caller,
            request_id,
            "SubscribeToTask",
            _pick(params, "id"),
            translate=event_out,
            closing=CLOSING_STATES,
        )
    else:
        raise errors.method_not_found(method)
    for key, value in response_headers(caller.activated).items():
        response[key] = value
    return response


async def dispatch(caller: Caller, method: str, params):
    """Run the 0.3 method ``method`` and return its 0.3 result."""
    if method in STREAMING_METHODS:
        # Answered with a stream by the view (stream()), never with a result.
        raise errors.invalid_request(f"{method} is answered with a stream, not a result")
    if method == "agent/getAuthenticatedExtendedCard":
        raise extended_card_not_configured()
    handler = HANDLERS.get(method)
    if handler is None:
        raise errors.method_not_found(method)
    return await handler(caller, _params(params))


# --- the agent card ---------------------------------------------------------------------------


def card_fields(card: dict, url: str, *, public: bool, legacy: bool = False) -> dict:
    """The 1.0 card with the 0.3 interface as a second supportedInterfaces entry; ``legacy``
    (a caller that asked for 0.x) adds what 0.3 clients read beside it:
    ``url``/``preferredTransport``/``protocolVersion``/``additionalInterfaces``, 0.3's
    ``security`` list and ``type`` on each security scheme (the a2a-sdk 1.x card reader maps
    these legacy fields onto the 1.0 ones it also finds). A 1.0 card may carry none of them."""
    interfaces = [
        *card["supportedInterfaces"],
        {"url": url, "protocolBinding": "JSONRPC", "protocolVersion": "0.3"},
    ]
    if not legacy:
        return {**card, "supportedInterfaces": interfaces}
    schemes = {}
    for name, scheme in card.get("securitySchemes", {}).items():
        http = scheme.get("httpAuthSecurityScheme")
        if http is not None:
            scheme = {**scheme, "type": "http", **http}
        schemes[name] = scheme
    out = {
        **card,
        "supportedInterfaces": interfaces,
        "url": url,
        "preferredTransport": "JSONRPC",
        "protocolVersion": CARD_PROTOCOL_VERSION,
        "additionalInterfaces": [{"url": url, "transport": "JSONRPC"}],
        "supportsAuthenticatedExtendedCard": False,
        "securitySchemes": schemes,
    }
    if not public:
        out["security"] = [{name: []} for name in schemes]
    return out
