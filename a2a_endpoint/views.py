"""The A2A 1.0 JSON-RPC endpoint and agent cards.

Edges translate, the core decides: this module parses the wire, checks identity, calls the
runtime's services and writes the wire back; every domain error becomes a JSON-RPC error in
one place (errors.from_domain). The view is async: a blocking SendMessage waits for a wake-up
without holding a thread or a database connection.
"""

import base64
import binascii
import json
import logging
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime

from a2a import types as a2a
from asgiref.sync import sync_to_async
from django.conf import settings
from django.core.exceptions import RequestDataTooBig
from django.db import close_old_connections, connection
from django.http import HttpResponse, HttpResponseNotModified, JsonResponse
from django.utils.http import http_date
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_GET

from a2a_endpoint import errors, files, push, wire
from a2a_endpoint.card import agent_card, card_etag
from config.logging import bind
from runtime import extensions as ext
from runtime.errors import RuntimeFault
from runtime.models import SETTLED_STATES, Agent, Task
from runtime.notify import wait_for_state
from runtime.selectors import task_for_caller, tasks_page
from runtime.services.messages import message_send
from runtime.services.tasks import task_cancel
from tenants.tokens import TokenError, aauthenticate_bearer

logger = logging.getLogger(__name__)

JSON_TYPES = {"application/json", "application/a2a+json"}
STREAMING_METHODS = {"SendStreamingMessage", "SubscribeToTask"}


class Caller:
    def __init__(self, agent: Agent, subject: str, activated: frozenset, base_url: str = ""):
        self.agent = agent
        self.tenant = agent.tenant
        self.subject = subject
        self.activated = activated
        # Where this caller reached us: the start of the file download links we hand out.
        self.files_base = files.files_base(base_url, agent.tenant.slug, agent.slug)


def _release_connection() -> None:
    # Give the database connection back (to the pool) before a long wait, so that a
    # thousand waiting callers do not hold a thousand connections.
    connection.close()


def _call_releasing(fn, *args, **kwargs):
    try:
        return fn(*args, **kwargs)
    finally:
        # Hold a database connection for one call, not for the whole request: under ASGI
        # each request has a thread of its own, and a thousand requests in flight queued for
        # a pool of a few connections and timed out (bench/waiters.py). Inside an atomic
        # block (a test's transaction) the connection is the caller's to keep.
        if not connection.in_atomic_block:
            connection.close()


# A blocking SendMessage can wait for minutes. Django would run each request's database
# work on a thread of the request's own (thread-sensitive), idle for the whole wait: a
# thousand waiters, a thousand threads. A2A requests run theirs on this small shared pool
# instead (see config/asgi.py), holding a thread only while a query runs. Tests that drive
# the view in-process turn A2A_DB_THREAD_SENSITIVE on, so that the view's queries run on the
# test's thread and see the test's transaction.
_DB_EXECUTOR = ThreadPoolExecutor(max_workers=settings.A2A_DB_THREADS, thread_name_prefix="a2a-db")


async def _db(fn, *args, **kwargs):
    if settings.A2A_DB_THREAD_SENSITIVE:
        return await sync_to_async(_call_releasing, thread_sensitive=True)(fn, *args, **kwargs)
    return await sync_to_async(_call_releasing, thread_sensitive=False, executor=_DB_EXECUTOR)(
        fn, *args, **kwargs
    )


def _load_agent(tenant_slug: str, agent_slug: str) -> Agent | None:
    return (
        Agent.objects.select_related("tenant")
        .filter(tenant__slug=tenant_slug, tenant__active=True, slug=agent_slug)
        .first()
    )


async def _identify(request, tenant_slug: str, agent_slug: str) -> tuple[Agent, str]:
    """The caller's subject, or raise the exact error a stranger would get."""
    agent = await _db(_load_agent, tenant_slug, agent_slug)
    header = request.headers.get("Authorization")
    if header is None:
        if agent is not None and agent.public:
            return agent, "anonymous"
        # Without credentials a caller learns nothing, not even whether the agent exists.
        raise errors.unauthenticated(TokenError.REASONS["missing"], "missing")
    try:
        identity = await aauthenticate_bearer(header)
    except TokenError as exc:
        raise errors.unauthenticated(str(exc), exc.reason) from None
    if (
        agent is None
        or identity.tenant.pk != agent.tenant_id
        or not identity.token.may_call(agent.slug)
    ):
        raise errors.agent_not_found()
    return agent, identity.subject


def _activated(request) -> frozenset:
    requested = {
        uri.strip() for uri in request.headers.get("A2A-Extensions", "").split(",") if uri.strip()
    }
    return frozenset(requested & set(ext.IMPLEMENTED))


def _check_version(request) -> None:
    version = (
        request.headers.get("A2A-Version", "").strip() or request.GET.get("A2A-Version", "").strip()
    )
    # A2A §3.6: no version means 0.3, which this endpoint does not serve; patch is ignored.
    parts = version.split(".")
    if len(parts) < 2 or parts[0] != "1" or parts[1] != "0":
        raise errors.version_not_supported(version)


def _rpc_response(
    body: dict, *, status: int = 200, activated: frozenset = frozenset(), extra_headers=None
) -> JsonResponse:
    response = JsonResponse(body, status=status)
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


def _read_body(request) -> tuple[object, object]:
    """Return (request id, envelope) or raise an RpcError."""
    content_type = request.content_type.lower() if request.content_type else ""
    if content_type not in JSON_TYPES:
        raise errors.content_type_not_supported(content_type)
    length = request.META.get("CONTENT_LENGTH") or "0"
    if length.isdigit() and int(length) > settings.A2A_MAX_BODY_BYTES:
        raise errors.invalid_request(
            f"the body is larger than {settings.A2A_MAX_BODY_BYTES} bytes", http_status=413
        )
    try:
        raw = request.body
    except RequestDataTooBig:
        raise errors.invalid_request(
            f"the body is larger than {settings.A2A_MAX_BODY_BYTES} bytes", http_status=413
        ) from None
    if len(raw) > settings.A2A_MAX_BODY_BYTES:
        raise errors.invalid_request(
            f"the body is larger than {settings.A2A_MAX_BODY_BYTES} bytes", http_status=413
        )
    try:
        envelope = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as exc:
        raise errors.parse_error(str(exc)) from None
    if not isinstance(envelope, dict):
        raise errors.invalid_request(
            "the body must be one JSON-RPC request object (batches are not supported)"
        )
    request_id = envelope.get("id")
    if isinstance(request_id, bool) or not isinstance(request_id, str | int | type(None)):
        raise errors.invalid_request("id must be a string or a number")
    if envelope.get("jsonrpc") != "2.0":
        raise errors.invalid_request('jsonrpc must be "2.0"')
    if not isinstance(envelope.get("method"), str):
        raise errors.invalid_request("method must be a string")
    if "id" not in envelope:
        raise errors.invalid_request("id is required (notifications are not supported)")
    return request_id, envelope


@csrf_exempt
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
    activated = frozenset()
    try:
        found, subject = await _identify(request, tenant, agent)
        bind(tenant=tenant, subject=subject)
        activated = _activated(request)
        request_id, envelope = _read_body(request)
        _check_version(request)
        caller = Caller(
            found,
            subject,
            activated,
            settings.PUBLIC_BASE_URL or f"{request.scheme}://{request.get_host()}",
        )
        result = await _dispatch(caller, envelope["method"], envelope.get("params", {}))
        return _rpc_response(
            {"jsonrpc": "2.0", "id": request_id, "result": result}, activated=activated
        )
    except errors.RpcError as exc:
        return _rpc_response(exc.body(request_id), status=exc.http_status, activated=activated)
    except RuntimeFault as exc:
        return _rpc_response(errors.from_domain(exc).body(request_id), activated=activated)
    except Exception:
        logger.exception("A2A request failed")
        return _rpc_response(
            errors.RpcError(-32603, "Internal error", "INTERNAL").body(request_id),
            activated=activated,
        )
    finally:
        await _db(close_old_connections)


async def _dispatch(caller: Caller, method: str, params):
    # Capabilities are checked before parameters (A2A §3.3.4): streaming is off.
    if method in STREAMING_METHODS:
        raise errors.unsupported(
            "Streaming is not supported by this agent (its card says streaming: false)."
        )
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
    return await handler(caller, params)


def _history_length(config) -> int | None:
    """historyLength of a SendMessage configuration, a GetTask or a ListTasks request."""
    if config is None or not config.HasField("history_length"):
        return None
    if config.history_length < 0:
        raise errors.invalid_params("historyLength", "must be 0 or more")
    return min(config.history_length, wire.MAX_HISTORY)


async def send_message(caller: Caller, params: dict):
    request = wire.parse(params, a2a.SendMessageRequest)
    message = wire.message_in(params, request)
    configuration = request.configuration if request.HasField("configuration") else None
    push_config = None
    if configuration is not None and configuration.HasField("task_push_notification_config"):
        push_config = _config_input(configuration.task_push_notification_config)
    history_length = _history_length(configuration)
    metadata = message.get("metadata") or {}
    skill_id = metadata.get("skillId") if isinstance(metadata, dict) else None
    delivery = metadata.get("delivery") if isinstance(metadata, dict) else None
    if skill_id is not None and not isinstance(skill_id, str):
        raise errors.invalid_params("message.metadata.skillId", "must be a string")
    if push_config is not None:
        # Bad input changes nothing: a receiver the tenant does not allow is refused before
        # the message starts a turn.
        await _db(push.push_url_check, tenant=caller.tenant, url=push_config.url)
    result = await _db(
        message_send,
        tenant=caller.tenant,
        agent=caller.agent,
        subject=caller.subject,
        message=message,
        skill_id=skill_id,
        delivery=delivery,
    )
    task = result.task
    bind(task_id=task.public_id, trace_id=task.trace_id)
    if push_config is not None:
        # Registered before we wait, and with every event the task already has, so that the
        # receiver sees the task from its first status on (the config came with the message).
        await _db(
            push.push_config_create,
            tenant=caller.tenant,
            agent=caller.agent,
            subject=caller.subject,
            task_id=task.public_id,
            config=push_config,
            activated=caller.activated,
            from_start=True,
        )
    blocking = not (configuration is not None and configuration.return_immediately)
    if blocking and not result.queued and task.state not in SETTLED_STATES:
        task = await _wait(task)
    if task.reply_message and task.state in SETTLED_STATES and blocking:
        return {"message": task.reply_message}
    return {
        "task": wire.task_wire(
            task,
            activated=caller.activated,
            history_length=history_length,
            files_base=caller.files_base,
        )
    }


def _read_state(pk: int) -> str:
    state = Task.objects.filter(pk=pk).values_list("state", flat=True).first()
    _release_connection()
    return state


async def _wait(task: Task) -> Task:
    """A blocking send waits for a terminal or interrupted state, or A2A_WAIT_MS."""
    await _db(_release_connection)
    deadline = time.monotonic() + settings.A2A_WAIT_MS / 1000

    async def read_state():
        return await _db(_read_state, task.pk)

    await wait_for_state(task.pk, SETTLED_STATES, deadline, read_state)
    return await _db(Task.objects.get, pk=task.pk)


async def get_task(caller: Caller, params: dict):
    request = wire.parse(params, a2a.GetTaskRequest)
    if not request.id:
        raise errors.invalid_params("id", "is required")
    history_length = _history_length(request)
    task = await _db(
        task_for_caller,
        tenant=caller.tenant,
        agent=caller.agent,
        subject=caller.subject,
        task_id=request.id,
    )
    return wire.task_wire(
        task,
        activated=caller.activated,
        history_length=history_length,
        files_base=caller.files_base,
    )


async def cancel_task(caller: Caller, params: dict):
    request = wire.parse(params, a2a.CancelTaskRequest)
    if not request.id:
        raise errors.invalid_params("id", "is required")
    task = await _db(
        task_cancel,
        tenant=caller.tenant,
        agent=caller.agent,
        subject=caller.subject,
        task_id=request.id,
    )
    return wire.task_wire(task, activated=caller.activated, files_base=caller.files_base)


def _decode_page_token(token: str) -> tuple[datetime, int] | None:
    if not token:
        return None
    try:
        raw = json.loads(base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)))
        return datetime.fromisoformat(raw[0]), int(raw[1])
    except (ValueError, TypeError, IndexError, binascii.Error, json.JSONDecodeError):
        raise errors.invalid_params("pageToken", "is not a token this server issued") from None


def _encode_page_token(task: Task) -> str:
    raw = json.dumps([task.status_timestamp.isoformat(), task.pk]).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


async def list_tasks(caller: Caller, params: dict):
    request = wire.parse(params, a2a.ListTasksRequest)
    page_size = request.page_size if request.HasField("page_size") else 50
    if not 1 <= page_size <= 100:
        raise errors.invalid_params("pageSize", "must be between 1 and 100")
    history_length = _history_length(request)
    after = None
    if request.HasField("status_timestamp_after"):
        after = request.status_timestamp_after.ToDatetime(tzinfo=UTC)
    state = a2a.TaskState.Name(request.status) if request.status else None
    cursor = _decode_page_token(request.page_token)
    tasks, total, more = await _db(
        tasks_page,
        tenant=caller.tenant,
        agent=caller.agent,
        subject=caller.subject,
        context_id=request.context_id or None,
        state=state,
        status_after=after,
        cursor=cursor,
        page_size=page_size,
    )
    include_artifacts = request.HasField("include_artifacts") and request.include_artifacts
    return {
        "tasks": [
            wire.task_wire(
                t,
                activated=caller.activated,
                history_length=history_length,
                include_artifacts=include_artifacts,
                files_base=caller.files_base,
            )
            for t in tasks
        ],
        "nextPageToken": _encode_page_token(tasks[-1]) if more else "",
        "pageSize": page_size,
        "totalSize": total,
    }


# --- push notification configs (A2A §3.1.7-10) ----------------------------------------------


def _config_input(config: a2a.TaskPushNotificationConfig) -> push.ConfigInput:
    if not config.url:
        raise errors.invalid_params("url", "is required")
    auth = config.authentication if config.HasField("authentication") else None
    if auth is not None and not auth.scheme:
        raise errors.invalid_params("authentication.scheme", "is required")
    return push.ConfigInput(
        id=config.id,
        url=config.url,
        token=config.token,
        scheme=auth.scheme if auth else "",
        credentials=auth.credentials if auth else "",
    )


def _config_wire(config) -> dict:
    out = {"id": config.public_id, "taskId": config.task.public_id, "url": config.url}
    if config.token:
        out["token"] = config.token
    if config.auth_scheme:
        # Credentials are write-only: they are stored encrypted and never read back out.
        out["authentication"] = {"scheme": config.auth_scheme}
    return out


def _require_task_id(task_id: str) -> str:
    if not task_id:
        raise errors.invalid_params("taskId", "is required")
    return task_id


async def create_push_config(caller: Caller, params: dict):
    request = wire.parse(params, a2a.TaskPushNotificationConfig)
    config = await _db(
        push.push_config_create,
        tenant=caller.tenant,
        agent=caller.agent,
        subject=caller.subject,
        task_id=_require_task_id(request.task_id),
        config=_config_input(request),
        activated=caller.activated,
    )
    return await _db(_config_wire, config)


async def get_push_config(caller: Caller, params: dict):
    request = wire.parse(params, a2a.GetTaskPushNotificationConfigRequest)
    if not request.id:
        raise errors.invalid_params("id", "is required")
    config = await _db(
        push.push_config_get,
        tenant=caller.tenant,
        agent=caller.agent,
        subject=caller.subject,
        task_id=_require_task_id(request.task_id),
        config_id=request.id,
    )
    return await _db(_config_wire, config)


async def list_push_configs(caller: Caller, params: dict):
    request = wire.parse(params, a2a.ListTaskPushNotificationConfigsRequest)
    page_size = request.page_size or push.PAGE_SIZE_MAX
    if not 1 <= page_size <= push.PAGE_SIZE_MAX:
        raise errors.invalid_params("pageSize", f"must be between 1 and {push.PAGE_SIZE_MAX}")
    after = None
    if request.page_token:
        if not request.page_token.isdigit():
            raise errors.invalid_params("pageToken", "is not a token this server issued")
        after = int(request.page_token)
    configs, more = await _db(
        push.push_configs_page,
        tenant=caller.tenant,
        agent=caller.agent,
        subject=caller.subject,
        task_id=_require_task_id(request.task_id),
        page_size=page_size,
        after=after,
    )
    return {
        "configs": [await _db(_config_wire, c) for c in configs],
        "nextPageToken": str(configs[-1].pk) if more else "",
    }


async def delete_push_config(caller: Caller, params: dict):
    request = wire.parse(params, a2a.DeleteTaskPushNotificationConfigRequest)
    if not request.id:
        raise errors.invalid_params("id", "is required")
    await _db(
        push.push_config_delete,
        tenant=caller.tenant,
        agent=caller.agent,
        subject=caller.subject,
        task_id=_require_task_id(request.task_id),
        config_id=request.id,
    )
    return {}


HANDLERS = {
    "SendMessage": send_message,
    "CreateTaskPushNotificationConfig": create_push_config,
    "GetTaskPushNotificationConfig": get_push_config,
    "ListTaskPushNotificationConfigs": list_push_configs,
    "DeleteTaskPushNotificationConfig": delete_push_config,
    "GetTask": get_task,
    "CancelTask": cancel_task,
    "ListTasks": list_tasks,
}


@require_GET
async def card(request, tenant: str, agent: str):
    try:
        found, _subject = await _identify(request, tenant, agent)
    except errors.RpcError as exc:
        return _rpc_response(exc.body(None), status=exc.http_status)
    body = agent_card(request, found)
    etag = card_etag(body)
    if request.headers.get("If-None-Match") == etag:
        return HttpResponseNotModified(headers={"ETag": etag})
    response = HttpResponse(json.dumps(body), content_type="application/json")
    response["ETag"] = etag
    response["Last-Modified"] = http_date(found.updated_at.timestamp())
    response["Cache-Control"] = f"{'public' if found.public else 'private'}, max-age=300"
    return response
