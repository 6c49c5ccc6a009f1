"""Reading and writing A2A 1.0 ProtoJSON with the a2a-sdk's generated types.

Requests are parsed into the SDK's protobuf messages (both camelCase and proto field names
are accepted, unknown fields ignored, as A2A §5.7 asks); their JSON values (metadata, data
parts) are taken from the request as sent, so that 42 stays 42 and does not become 42.0.
"""

import json
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

import orjson
from a2a import types as a2a
from django.conf import settings
from google.protobuf import json_format
from google.protobuf.message import Message as ProtoMessage

from a2a_endpoint.errors import invalid_params
from a2a_endpoint.files import linker
from connections.outbound import OutboundRefused
from runtime.kernel.files import file_ref, url_part_check
from runtime.kernel.shapes import now_iso
from runtime.kernel.task_models import Task

if TYPE_CHECKING:
    from a2a_endpoint.asyncdb import StoredTask

MAX_HISTORY = 10_000

M = TypeVar("M", bound=ProtoMessage)


def parse(params: Any, proto_class: type[M]) -> M:
    if not isinstance(params, dict):
        raise invalid_params("params", "must be an object")
    try:
        return json_format.ParseDict(params, proto_class(), ignore_unknown_fields=True)
    except json_format.ParseError as exc:
        raise invalid_params("params", str(exc).splitlines()[0]) from None
    except (TypeError, ValueError, OverflowError) as exc:
        raise invalid_params("params", str(exc)) from None


def message_in(raw_params: dict, request: a2a.SendMessageRequest) -> dict:
    """The incoming message as canonical ProtoJSON, validated; raises invalid_params."""
    if not request.HasField("message"):
        raise invalid_params("message", "is required")
    message = request.message
    if not message.message_id:
        raise invalid_params("message.messageId", "is required")
    if message.role != a2a.Role.ROLE_USER:
        raise invalid_params("message.role", "must be ROLE_USER")
    if len(message.parts) == 0:
        raise invalid_params("message.parts", "at least one part is required")
    url_parts = sum(1 for p in message.parts if p.WhichOneof("content") == "url")
    if url_parts > settings.A2A_MAX_URL_PARTS:
        # Each is fetched by the worker before the turn starts: bound the work one message buys.
        raise invalid_params(
            "message.parts",
            f"has {url_parts} url parts; the limit is {settings.A2A_MAX_URL_PARTS}",
            limit=settings.A2A_MAX_URL_PARTS,
        )
    raw_message = raw_params.get("message") or {}
    raw_parts = raw_message.get("parts") or []
    out = json_format.MessageToDict(message)
    for i, part in enumerate(message.parts):
        if part.WhichOneof("content") is None:
            raise invalid_params(f"message.parts[{i}]", "needs one of text, raw, url or data")
        if part.WhichOneof("content") == "raw" and len(part.raw) > settings.A2A_MAX_RAW_PART_BYTES:
            raise invalid_params(
                f"message.parts[{i}].raw",
                f"is {len(part.raw)} bytes; the limit is {settings.A2A_MAX_RAW_PART_BYTES} bytes "
                "(send a larger file as a url part)",
            )
        if part.WhichOneof("content") == "url":
            # A URL the worker could never fetch is the caller's error, refused before any
            # task exists (files/v1); one that fails only when fetched fails that part.
            try:
                url_part_check(part.url)
            except OutboundRefused as exc:
                raise invalid_params(f"message.parts[{i}].url", str(exc)) from None
        if (
            part.WhichOneof("content") == "data"
            and i < len(raw_parts)
            and isinstance(raw_parts[i], dict)
        ):
            out["parts"][i]["data"] = raw_parts[i].get("data")
        if (
            i < len(raw_parts)
            and isinstance(raw_parts[i], dict)
            and isinstance(raw_parts[i].get("metadata"), dict)
        ):
            out["parts"][i]["metadata"] = raw_parts[i]["metadata"]
    if isinstance(raw_message.get("metadata"), dict):
        out["metadata"] = raw_message["metadata"]
    return out


def _chosen(ext_data: dict, activated: frozenset) -> dict:
    return {uri: data for uri, data in (ext_data or {}).items() if uri in activated}


def _with_extensions(obj: dict, ext_data: dict, activated: frozenset) -> dict:
    chosen = _chosen(ext_data, activated)
    if not chosen:
        return obj
    return {
        **obj,
        "extensions": sorted({*obj.get("extensions", []), *chosen}),
        "metadata": {**(obj.get("metadata") or {}), **chosen},
    }


def status_wire(task: "Task | StoredTask", activated: frozenset) -> dict:
    status: dict[str, Any] = {"state": task.state, "timestamp": now_iso(task.status_timestamp)}
    if task.status_message:
        status["message"] = _with_extensions(task.status_message, task.status_ext, activated)
    return status


def _parts_out(artifact: dict, link: Callable[[str], str]) -> dict:
    """Stored file references become the caller's signed download links (files/v1)."""
    if not any(file_ref(p) for p in artifact.get("parts", [])):
        return artifact
    parts = [{**p, "url": link(ref)} if (ref := file_ref(p)) else p for p in artifact["parts"]]
    return {**artifact, "parts": parts}


def artifact_wire(
    artifact: dict,
    task: "Task | StoredTask",
    activated: frozenset,
    files_base: str | Callable[[], str] = "",
) -> dict:
    return _with_extensions(
        _parts_out(artifact, linker(task, files_base)),
        task.artifact_ext.get(artifact["artifactId"], {}),
        activated,
    )


def task_wire(
    task: "Task | StoredTask",
    *,
    activated: frozenset = frozenset(),
    history_length: int | None = None,
    include_artifacts: bool = True,
    files_base: str | Callable[[], str] = "",
) -> dict:
    """``files_base`` (a2a_endpoint.files.files_base, or a function that gives it when the
    first link is made) starts the artifacts' download links."""
    out: dict[str, Any] = {
        "id": task.public_id,
        "contextId": task.wire_context_id,
        "status": status_wire(task, activated),
    }
    if not task.status_message:
        # A status without a message (a plan step advanced) still carries its extension data
        # for callers that activated it: on the Task's metadata here, and on the
        # TaskStatusUpdateEvent's metadata in push (event_wire).
        chosen = _chosen(task.status_ext, activated)
        if chosen:
            out["metadata"] = chosen
    if include_artifacts and task.artifacts:
        out["artifacts"] = [artifact_wire(a, task, activated, files_base) for a in task.artifacts]
    history = _history_trimmed(task.history, history_length)
    if history:
        out["history"] = history
    return out


def _history_trimmed(history, history_length: int | None):
    """The last ``history_length`` messages (A2A historyLength; None: all of them)."""
    if history_length is None:
        return history
    return history[-history_length:] if history_length > 0 else []


def _stored_truthy(text: str | None) -> bool:
    """Whether a stored JSON value (jsonb's text) parses to a true value, mostly unparsed."""
    if text is None:
        return False
    if text[0] in "{[":
        # jsonb writes an empty object or array as {} or []; anything in one is longer.
        return len(text) > 2
    return bool(json.loads(text))


def stored_task_wire(
    task,
    *,
    activated: frozenset = frozenset(),
    history_length: int | None = None,
    include_artifacts: bool = True,
    files_base: str | Callable[[], str] = "",
) -> dict:
    """task_wire of a StoredTask (a2a_endpoint.asyncdb.tasks_page_read), the same JSON: where
    the wire shows a JSON column unchanged, it goes out as stored (an orjson.Fragment), neither
    parsed nor written again; a trimmed history is parsed."""
    if (include_artifacts and _stored_truthy(task.artifacts_text)) or (
        activated and _stored_truthy(task.status_ext_text)
    ):
        # Download links, extension data: task_wire makes what changes.
        return task_wire(
            task,
            activated=activated,
            history_length=history_length,
            include_artifacts=include_artifacts,
            files_base=files_base,
        )
    status: dict[str, Any] = {"state": task.state, "timestamp": task.status_timestamp_wire}
    if _stored_truthy(task.status_message_text):
        status["message"] = orjson.Fragment(task.status_message_text)
    out: dict[str, Any] = {
        "id": task.public_id,
        "contextId": task.wire_context_id,
        "status": status,
    }
    if history_length is not None:
        history = _history_trimmed(task.history, history_length)
        if history:
            out["history"] = history
    elif _stored_truthy(task.history_text):
        out["history"] = orjson.Fragment(task.history_text)
    return out


def event_wire(
    payload: dict, activated: frozenset, link: Callable[[str], str] | None = None
) -> dict:
    """A stored TaskEvent payload as a StreamResponse for a receiver with ``activated``;
    ``link`` makes download links for the artifact's hosted files."""
    ext_data = payload.get("_ext", {})
    body = {k: v for k, v in payload.items() if k != "_ext"}
    if "statusUpdate" in body and body["statusUpdate"]["status"].get("message"):
        update = body["statusUpdate"]
        status = {
            **update["status"],
            "message": _with_extensions(update["status"]["message"], ext_data, activated),
        }
        return {"statusUpdate": {**update, "status": status}}
    if "statusUpdate" in body and _chosen(ext_data, activated):
        return {"statusUpdate": {**body["statusUpdate"], "metadata": _chosen(ext_data, activated)}}
    if "artifactUpdate" in body:
        update = body["artifactUpdate"]
        return {
            "artifactUpdate": {
                **update,
                "artifact": _with_extensions(
                    _parts_out(update["artifact"], link) if link else update["artifact"],
                    ext_data,
                    activated,
                ),
            }
        }
    return body
