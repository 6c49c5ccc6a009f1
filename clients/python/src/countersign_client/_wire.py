"""The A2A 1.0 JSON-RPC wire, as the gate speaks it: requests, results, SSE events, tasks.

Pure functions: the sync and async clients share them and differ only in how they wait.
"""

from __future__ import annotations

import inspect
import json
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import httpx

from .errors import GateError

A2A_VERSION = "1.0"
TERMINAL = frozenset(
    {"TASK_STATE_COMPLETED", "TASK_STATE_FAILED", "TASK_STATE_CANCELED", "TASK_STATE_REJECTED"}
)
# A2A error codes (A2A 1.0 §5.4): the task is unknown (or not the caller's); the operation
# is not supported (streaming off, or the task already terminal).
TASK_NOT_FOUND = -32001
UNSUPPORTED_OPERATION = -32004


def headers(token: str, *, stream: bool = False) -> dict[str, str]:
    return {
        "Authorization": f"Bearer {token}",
        "A2A-Version": A2A_VERSION,
        "Content-Type": "application/json",
        "Accept": "text/event-stream" if stream else "application/json",
    }


def rpc(method: str, params: Mapping[str, Any]) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": str(uuid.uuid4()), "method": method, "params": dict(params)}


def send_params(
    tool: str,
    arguments: Mapping[str, Any],
    *,
    reason: str | None,
    note: str | None,
    message_id: str,
) -> dict[str, Any]:
    """SendMessage's params: one data part ``{"tool", "arguments", "reason"}``, the caller's
    note as a text part. The messageId is the idempotency key: the gate answers a message it
    has seen from the same caller with the same task."""
    data: dict[str, Any] = {"tool": tool, "arguments": dict(arguments)}
    if reason:
        data["reason"] = reason
    parts: list[dict[str, Any]] = [{"data": data, "mediaType": "application/json"}]
    if note:
        parts.append({"text": note})
    return {"message": {"messageId": message_id, "role": "ROLE_USER", "parts": parts}}


def result_of(response: httpx.Response) -> Any:
    """The JSON-RPC result of a response, or GateError for an error or a non-JSON answer."""
    try:
        body = response.json()
    except ValueError:
        raise GateError(
            f"the gate answered HTTP {response.status_code} without JSON", code=None
        ) from None
    return result_of_body(body, status=response.status_code)


def result_of_body(body: Any, *, status: int = 200) -> Any:
    if isinstance(body, Mapping) and isinstance(body.get("error"), Mapping):
        error = body["error"]
        raise GateError(
            str(error.get("message") or "the gate refused the request"),
            code=error.get("code") if isinstance(error.get("code"), int) else None,
            data=error.get("data"),
        )
    if not isinstance(body, Mapping) or "result" not in body:
        detail = body.get("detail") if isinstance(body, Mapping) else None
        raise GateError(f"the gate answered HTTP {status}: {detail or 'not a JSON-RPC result'}")
    return body["result"]


def task_of_send(result: Any) -> dict[str, Any]:
    if isinstance(result, Mapping) and isinstance(result.get("task"), Mapping):
        return dict(result["task"])
    raise GateError("the gate answered with a message, not a task: is this URL a gate?")


def state_of(task: Mapping[str, Any]) -> str:
    status = task.get("status")
    return str(status.get("state", "")) if isinstance(status, Mapping) else ""


def status_text(task: Mapping[str, Any]) -> str:
    status = task.get("status") or {}
    message = status.get("message") if isinstance(status, Mapping) else None
    parts = message.get("parts", []) if isinstance(message, Mapping) else []
    return " ".join(str(p["text"]) for p in parts if isinstance(p, Mapping) and "text" in p)


def receipt_of(task: Mapping[str, Any]) -> dict[str, Any] | None:
    """The data of the task's ``receipt`` artifact (its one data part), or None."""
    for artifact in task.get("artifacts") or []:
        if not isinstance(artifact, Mapping) or artifact.get("name") != "receipt":
            continue
        for part in artifact.get("parts") or []:
            if isinstance(part, Mapping) and isinstance(part.get("data"), Mapping):
                return dict(part["data"])
    return None


@dataclass
class StreamEvent:
    """One event of a task's stream: its state when it tells one, and whether it is final."""

    state: str = ""

    @property
    def terminal(self) -> bool:
        return self.state in TERMINAL


def event_of(data: str) -> StreamEvent:
    """An SSE ``data:`` payload (a JSON-RPC response whose result is a StreamResponse)."""
    result = result_of_body(json.loads(data))
    if not isinstance(result, Mapping):
        return StreamEvent()
    if isinstance(result.get("task"), Mapping):
        return StreamEvent(state_of(result["task"]))
    if isinstance(result.get("statusUpdate"), Mapping):
        return StreamEvent(state_of(result["statusUpdate"]))
    return StreamEvent()


def sse_data(lines: Iterable[str]) -> Iterable[str]:
    """The ``data`` of each Server-Sent Event in a stream of lines (multi-line data joined)."""
    buffer: list[str] = []
    for line in lines:
        if line == "":
            if buffer:
                yield "\n".join(buffer)
                buffer = []
            continue
        if line.startswith(":"):
            continue  # a comment: a keep-alive
        name, _, value = line.partition(":")
        if name == "data":
            buffer.append(value[1:] if value.startswith(" ") else value)
    if buffer:
        yield "\n".join(buffer)


def call_arguments(signature: inspect.Signature, args: tuple, kwargs: dict) -> dict[str, Any]:
    """A guarded function's call as the arguments an approver sees: every parameter by name,
    defaults included, ``**kwargs`` spread."""
    bound = signature.bind(*args, **kwargs)
    bound.apply_defaults()
    arguments: dict[str, Any] = {}
    for name, value in bound.arguments.items():
        if signature.parameters[name].kind is inspect.Parameter.VAR_KEYWORD:
            arguments.update(value)
        else:
            arguments[name] = value
    return arguments


def check_guardable(signature: inspect.Signature, name: str) -> None:
    for parameter in signature.parameters.values():
        if parameter.kind in (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.VAR_POSITIONAL):
            raise TypeError(
                f"{name}: a guarded function takes its arguments by name, so that the "
                f"approved ones can be passed back (not {parameter})"
            )
