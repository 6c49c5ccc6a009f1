"""The A2A methods: SendMessage, GetTask, CancelTask, ListTasks and the four push config
methods (A2A §3.1), each parsing its params, calling one of the core's services and writing
the result on the wire. Domain errors are left to the view (errors.from_domain)."""

import asyncio
import base64
import binascii
import json
import re
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlsplit

from a2a import types as a2a
from django.conf import settings

from a2a_endpoint import errors, wire
from a2a_endpoint.asyncdb import (
    async_reads,
    db,
    task_read,
    tasks_page_read,
    wait_for_settled,
    wait_for_settled_stored,
)
from a2a_endpoint.identity import Caller
from a2a_endpoint.inputs import length_check
from config.logging import bind
from runtime.decisions.decision_models import Interaction
from runtime.kernel.push import push_configs
from runtime.kernel.push.push_models import PushConfig
from runtime.kernel.task_models import SETTLED_STATES, Task, TaskState
from runtime.kernel.task_selectors import task_for_caller, tasks_page
from runtime.kernel.wakeups import announcements_mark
from runtime.turn.cancel import task_cancel, task_hand_out
from runtime.turn.intake import CONTEXT_ID_RE, message_send


def _column(model, field: str) -> int:
    """The length of the column a field of the wire is stored in."""
    return model._meta.get_field(field).max_length


# An answer's messageId is stored in its interaction (the idempotency key of the answer).
MESSAGE_ID_MAX = _column(Interaction, "answer_message_id")
# A host name is at most 253 characters (RFC 1035); the config's receiver column is host:port.
HOST_MAX = 253
# What may stand in an HTTP header: an auth scheme is a token (RFC 7230 3.2.6), a value is
# visible ASCII with spaces and tabs.
HEADER_TOKEN_RE = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")
HEADER_VALUE_RE = re.compile(r"[\x20-\x7e\t]*")


def _task_out(caller: Caller, task: Task, **options) -> dict:
    """The task on the wire as this caller sees it (its extensions, its download links)."""
    return wire.task_wire(
        task, activated=caller.activated, files_base=caller.files_base_lazy, **options
    )


def _require_id(request) -> str:
    if not request.id:
        raise errors.invalid_params("id", "is required")
    return request.id


def _history_length(config) -> int | None:
    """historyLength of a SendMessage configuration, a GetTask or a ListTasks request."""
    if config is None or not config.HasField("history_length"):
        return None
    if config.history_length < 0:
        raise errors.invalid_params("historyLength", "must be 0 or more")
    return min(config.history_length, wire.MAX_HISTORY)


def _message_bounds(message: dict) -> None:
    """Refuse, before anything is written, the ids of a message that no column would hold."""
    length_check("message.messageId", message["messageId"], MESSAGE_ID_MAX)
    context_id = message.get("contextId")
    # fullmatch, as the core's own check (runtime.turn.intake): ``$`` would let a
    # trailing newline through into the 128-character column.
    if context_id and not CONTEXT_ID_RE.fullmatch(context_id):
        raise errors.invalid_params(
            "message.contextId", "must be 1-128 characters of A-Z, a-z, 0-9, '.', '_', ':' or '-'"
        )


# At most A2A_INTAKE_CONCURRENCY messages taken in at once per web process (message_accept):
# one semaphore, made as the process starts (config.asgi's lifespan calls intake_open). Without
# it a burst of 2,000 new calls queued 2,000 sends on the database threads and kept the event
# loop busy parsing them: a caller whose task settled meanwhile waited behind the burst for its
# answer (bench/waiters.py 2000 with the machine loaded: p99 2.6 s, the slowest 3.8 s; with it
# 136 and 443 ms). A waiting call costs nothing until it is let in. A process started without
# ASGI's lifespan (Django's test client) takes every message in at once.
_intake: asyncio.Semaphore | None = None


def intake_open() -> None:
    """Make the process's intake, on the event loop the server runs (at its start)."""
    global _intake
    _intake = asyncio.Semaphore(max(1, settings.A2A_INTAKE_CONCURRENCY))


async def message_accept(
    caller: Caller, params: dict, *, direct: bool = False, streaming: bool = False
):
    """SendMessage up to the wait: parse, start or resume the task, register an inline push
    config. Returns (task, configuration or None, historyLength); a2a_endpoint.streams
    streams from here. At most A2A_INTAKE_CONCURRENCY at once (``intake_open``).

    ``direct``: a 0.x direct send, whose new task is handed to the caller only
    when the answer is a Task (Task.direct); a message with an inline push config asks to
    follow a task, so it is never direct. ``streaming``: the message came on a stream, which
    gets the model's text as it is written (Task.live)."""
    if _intake is None:
        return await _message_accept(caller, params, direct=direct, streaming=streaming)
    async with _intake:
        return await _message_accept(caller, params, direct=direct, streaming=streaming)


async def _message_accept(
    caller: Caller, params: dict, *, direct: bool = False, streaming: bool = False
):
    request = wire.parse(params, a2a.SendMessageRequest)
    message = wire.message_in(params, request)
    _message_bounds(message)
    configuration = request.configuration if request.HasField("configuration") else None
    push_config = None
    if configuration is not None and configuration.HasField("task_push_notification_config"):
        push_config = _config_input(
            configuration.task_push_notification_config,
            field="configuration.taskPushNotificationConfig.",
        )
    history_length = _history_length(configuration)
    metadata = message.get("metadata") or {}
    skill_id = metadata.get("skillId") if isinstance(metadata, dict) else None
    delivery = metadata.get("delivery") if isinstance(metadata, dict) else None
    if skill_id is not None and not isinstance(skill_id, str):
        raise errors.invalid_params("message.metadata.skillId", "must be a string")
    if push_config is not None:
        # Bad input changes nothing: a receiver the tenant does not allow is refused before
        # the message starts a turn.
        await db(push_configs.push_url_check, tenant=caller.tenant, url=push_config.url)
    result = await db(
        message_send,
        **caller.scope,
        message=message,
        skill_id=skill_id,
        delivery=delivery,
        dialect=caller.dialect,
        direct=direct and push_config is None,
        live=streaming,
    )
    task = result.task
    bind(task_id=task.public_id, trace_id=task.trace_id)
    if push_config is not None and not result.replayed:
        # Registered before we wait, and with every event the task already has, so that the
        # receiver sees the task from its first status on (the config came with the message).
        # A retry (same messageId) registers nothing again: a config without an id would be
        # a second receiver of every event.
        await db(
            push_configs.push_config_create,
            **caller.scope,
            task_id=task.public_id,
            config=push_config,
            activated=caller.activated,
            from_start=True,
            dialect=caller.dialect,
        )
    return task, configuration, history_length, result.queued


def direct_reply(task: Task) -> dict | None:
    """The Message a 0.x direct send answers with (a reply message and its contextId; no task
    is created for it), or None when the answer must be the Task: a turn that paused,
    failed or has not ended, or made artifacts (a Message cannot carry them)."""
    if task.state != TaskState.COMPLETED:
        return None
    if task.reply_message:
        return task.reply_message
    if task.artifacts or not task.status_message:
        return None
    # The reply names no task: there is no task handle to name.
    return {k: v for k, v in task.status_message.items() if k != "taskId"}


async def send_message(caller: Caller, params: dict, *, direct: bool = False):
    """SendMessage; ``direct`` (a blocking 0.x message/send) answers a completed
    turn with its reply Message and hands out no task (Task.direct)."""
    # Before the message is taken (and its turn published): from here on the listener hears
    # every change of the task, and the wait below need not read its state first.
    mark = announcements_mark()
    task, configuration, history_length, queued = await message_accept(
        caller, params, direct=direct
    )
    blocking = not (configuration is not None and configuration.return_immediately)
    if blocking and not queued and task.state not in SETTLED_STATES:
        if async_reads() and caller.dialect == "1.0" and not task.direct:
            # Read as GetTask reads it (asyncdb.SettledTask): the wire's columns, the JSON put
            # on the wire as stored. Building a Task and writing it out again was 5-8% of the
            # web process's CPU per blocking send.
            settled = await wait_for_settled_stored(task, since=mark)
            if settled.state in SETTLED_STATES and (reply := settled.reply_message):
                return {"message": reply}
            return {
                "task": wire.stored_task_wire(
                    settled,
                    activated=caller.activated,
                    files_base=caller.files_base_lazy,
                    history_length=history_length,
                )
            }
        task = await wait_for_settled(task, since=mark)
    if task.direct:
        if (reply := direct_reply(task)) is not None:
            return {"message": reply}
        # Anything else is answered with the Task: from now on the caller holds its handle.
        await db(task_hand_out, task=task)
    elif task.reply_message and task.state in SETTLED_STATES and blocking:
        return {"message": task.reply_message}
    return {"task": _task_out(caller, task, history_length=history_length)}


def _get_task_params(params) -> tuple[str, int | None]:
    """GetTask's id and historyLength. The params nearly every client sends, ``{"id": ...}``
    and perhaps a historyLength, are read as they are; anything else goes through protobuf's
    ProtoJSON parser (a twentieth of a GetTask's CPU), which gives the same answer or error."""
    if type(params) is dict and type(task_id := params.get("id")) is str and task_id:
        if len(params) == 1:
            return task_id, None
        length = params.get("historyLength")
        if len(params) == 2 and type(length) is int and 0 <= length < 2**31:
            return task_id, min(length, wire.MAX_HISTORY)
    request = wire.parse(params, a2a.GetTaskRequest)
    return _require_id(request), _history_length(request)


async def get_task(caller: Caller, params: dict):
    task_id, history_length = _get_task_params(params)
    if async_reads():
        stored = await task_read(**caller.scope, task_id=task_id)
        # The 0.3 dialect rewrites the task's JSON (a2a_endpoint.dialect03): it gets it parsed.
        task_out = wire.stored_task_wire if caller.dialect == "1.0" else wire.task_wire
        return task_out(
            stored,
            activated=caller.activated,
            files_base=caller.files_base_lazy,
            history_length=history_length,
        )
    task = await db(task_for_caller, **caller.scope, task_id=task_id)
    return _task_out(caller, task, history_length=history_length)


async def cancel_task(caller: Caller, params: dict):
    request = wire.parse(params, a2a.CancelTaskRequest)
    _require_id(request)
    task = await db(
        task_cancel,
        **caller.scope,
        task_id=request.id,
    )
    return _task_out(caller, task)


def _task_state(raw, status: int) -> str | None:
    """ListTasks' status filter. Protobuf keeps an enum number it does not know and, with
    unknown fields ignored (A2A §5.7), drops a name it does not know: both are refused here,
    not read as "any status"."""
    if isinstance(raw, str) and raw not in a2a.TaskState.keys():
        status = -1
    if not status:
        return None
    name = a2a.TaskState.Name(status) if status in a2a.TaskState.values() else None
    if name not in TaskState.values:
        raise errors.invalid_params(
            "status", f"must be one of {', '.join(TaskState.values)}", value=raw
        )
    return name


# The largest pk a keyset token may name: PostgreSQL's bigint (SQLite's INTEGER is the same).
PK_MAX = 2**63 - 1


def _decode_page_token(token: str) -> tuple[datetime, int] | None:
    if not token:
        return None
    refused = errors.invalid_params("pageToken", "is not a token this server issued")
    try:
        raw = json.loads(base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)))
        if not isinstance(raw, list) or len(raw) != 2 or not isinstance(raw[1], int):
            raise refused
        after, pk = datetime.fromisoformat(raw[0]).astimezone(UTC), raw[1]
    except (ValueError, TypeError, OverflowError, binascii.Error, RecursionError):
        # A forged token is the caller's input like any other: a -32602, never a -32603.
        raise refused from None
    if not 0 < pk <= PK_MAX:
        raise refused
    return after, pk


def _encode_page_token(task) -> str:
    """The keyset position of ``task`` (a Task or an asyncdb.StoredTask)."""
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
    state = _task_state(params.get("status"), request.status)
    cursor = _decode_page_token(request.page_token)
    query: dict[str, Any] = {
        "context_id": request.context_id or None,
        "state": state,
        "status_after": after,
        "cursor": cursor,
        "page_size": page_size,
    }
    if async_reads():
        tasks, total, more = await tasks_page_read(**caller.scope, **query)
        task_out = wire.stored_task_wire
    else:
        tasks, total, more = await db(tasks_page, **caller.scope, **query)
        task_out = wire.task_wire
    include_artifacts = request.HasField("include_artifacts") and request.include_artifacts
    return {
        "tasks": [
            task_out(
                t,
                activated=caller.activated,
                files_base=caller.files_base_lazy,
                history_length=history_length,
                include_artifacts=include_artifacts,
            )
            for t in tasks
        ],
        "nextPageToken": _encode_page_token(tasks[-1]) if more else "",
        "pageSize": page_size,
        "totalSize": total,
    }


# --- push notification configs (A2A §3.1.7-10) ----------------------------------------------


def _config_input(
    config: a2a.TaskPushNotificationConfig, *, field: str = ""
) -> push_configs.ConfigInput:
    """``field`` is where the config is in params (SendMessage carries one inline)."""
    if not config.url:
        raise errors.invalid_params("url", "is required")
    auth = config.authentication if config.HasField("authentication") else None
    if auth is not None and not auth.scheme:
        raise errors.invalid_params("authentication.scheme", "is required")
    # Checked here, before the SendMessage it may come with starts a turn.
    length_check(f"{field}id", config.id, _column(PushConfig, "public_id"))
    length_check(f"{field}url", config.url, _column(PushConfig, "url"))
    # The token is stored encrypted (a text column), so its limit is the service's.
    length_check(f"{field}token", config.token, push_configs.TOKEN_MAX_LENGTH)
    if auth is not None:
        length_check(
            f"{field}authentication.scheme", auth.scheme, _column(PushConfig, "auth_scheme")
        )
        if not HEADER_TOKEN_RE.fullmatch(auth.scheme):
            raise errors.invalid_params(
                f"{field}authentication.scheme", "must be an HTTP auth scheme (RFC 7230 token)"
            )
        if not HEADER_VALUE_RE.fullmatch(auth.credentials):
            raise errors.invalid_params(
                f"{field}authentication.credentials",
                "must be printable ASCII (it is sent in the Authorization header)",
            )
    # Sent as a header value: a line break or a non-ASCII character could never be sent (and
    # the HTTP library's error would quote the secret into the delivery's recorded error).
    if not HEADER_VALUE_RE.fullmatch(config.token):
        raise errors.invalid_params(
            f"{field}token", "must be printable ASCII (it is sent in a header)"
        )
    try:
        host = urlsplit(config.url).hostname or ""
    except ValueError:
        host = ""  # push_url_check says what is wrong with it
    if len(host) > HOST_MAX:
        raise errors.invalid_params(
            f"{field}url", f"its host must be at most {HOST_MAX} characters", limit=HOST_MAX
        )
    return push_configs.ConfigInput(
        id=config.id,
        url=config.url,
        token=config.token,
        scheme=auth.scheme if auth else "",
        credentials=auth.credentials if auth else "",
    )


def _config_wire(config) -> dict:
    out = {"id": config.public_id, "taskId": config.task.public_id, "url": config.url}
    if token := config.token_plaintext():
        out["token"] = token
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
    config = await db(
        push_configs.push_config_create,
        **caller.scope,
        task_id=_require_task_id(request.task_id),
        config=_config_input(request),
        activated=caller.activated,
        dialect=caller.dialect,
    )
    return await db(_config_wire, config)


async def get_push_config(caller: Caller, params: dict):
    request = wire.parse(params, a2a.GetTaskPushNotificationConfigRequest)
    _require_id(request)
    config = await db(
        push_configs.push_config_get,
        **caller.scope,
        task_id=_require_task_id(request.task_id),
        config_id=request.id,
    )
    return await db(_config_wire, config)


async def list_push_configs(caller: Caller, params: dict):
    request = wire.parse(params, a2a.ListTaskPushNotificationConfigsRequest)
    page_size = request.page_size or push_configs.PAGE_SIZE_MAX
    if not 1 <= page_size <= push_configs.PAGE_SIZE_MAX:
        raise errors.invalid_params(
            "pageSize", f"must be between 1 and {push_configs.PAGE_SIZE_MAX}"
        )
    after = None
    if request.page_token:
        # isdigit() alone would pass "²" and "٣" (int() refuses the first) and any length.
        token = request.page_token
        if not (token.isascii() and token.isdigit() and int(token) <= PK_MAX):
            raise errors.invalid_params("pageToken", "is not a token this server issued")
        after = int(token)
    configs, more = await db(
        push_configs.push_configs_page,
        **caller.scope,
        task_id=_require_task_id(request.task_id),
        page_size=page_size,
        after=after,
    )
    return {
        "configs": [await db(_config_wire, c) for c in configs],
        "nextPageToken": str(configs[-1].pk) if more else "",
    }


async def delete_push_config(caller: Caller, params: dict):
    request = wire.parse(params, a2a.DeleteTaskPushNotificationConfigRequest)
    _require_id(request)
    await db(
        push_configs.push_config_delete,
        **caller.scope,
        task_id=_require_task_id(request.task_id),
        config_id=request.id,
    )
    return {}


HANDLERS: dict[str, Callable[[Caller, dict], Awaitable[Any]]] = {
    "SendMessage": send_message,
    "CreateTaskPushNotificationConfig": create_push_config,
    "GetTaskPushNotificationConfig": get_push_config,
    "ListTaskPushNotificationConfigs": list_push_configs,
    "DeleteTaskPushNotificationConfig": delete_push_config,
    "GetTask": get_task,
    "CancelTask": cancel_task,
    "ListTasks": list_tasks,
}
