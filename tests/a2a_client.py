"""A JSON-RPC client for the A2A endpoint in-process: posts through Django's test client and
readers of what comes back (results, errors with their ErrorInfo, tasks checked against the
A2A 1.0 ProtoJSON schema).

Turns run in Celery tasks enqueued on commit; with the `eager` fixture (tests/conftest.py)
they run inline when the request's transaction commits, so a blocking SendMessage returns
the settled task.
"""

import json
import uuid

from a2a import types as a2a
from asgiref.sync import async_to_sync
from django.test import Client
from google.protobuf import json_format

from runtime.kernel import extensions as ext

A2A_HEADERS = {"A2A-Version": "1.0", "Content-Type": "application/json"}
EXTENSIONS = {"A2A-Extensions": ext.INTERACTIONS}


def post(client: Client, path: str, body, *, token: str | None = None, headers=None):
    """POST a raw body (str or bytes) with the A2A headers; a header given as None is left out."""
    merged = {**A2A_HEADERS, **(headers or {})}
    if token is not None:
        merged.setdefault("Authorization", f"Bearer {token}")
    merged = {k: v for k, v in merged.items() if v is not None}
    content_type = merged.pop("Content-Type", "")
    return client.post(path, data=body, content_type=content_type, headers=merged)


def rpc(
    client: Client,
    path: str,
    method: str,
    params=None,
    *,
    token: str | None = None,
    headers: dict | None = None,
    request_id=1,
):
    """POST one JSON-RPC request; a header given as None in ``headers`` is left out."""
    body = {"jsonrpc": "2.0", "id": request_id, "method": method}
    if params is not None:
        body["params"] = params
    return post(client, path, json.dumps(body), token=token, headers=headers)


def user_message(text: str | None = "hello", **fields) -> dict:
    """A ROLE_USER message; extra fields (taskId, contextId, metadata, parts...) as given."""
    message = {"messageId": f"m-{uuid.uuid4()}", "role": "ROLE_USER"}
    if text is not None:
        message["parts"] = [{"text": text}]
    message.update(fields)
    return message


def answer_message(task: dict, **fields) -> dict:
    """A message on the same task and context (an answer)."""
    return user_message(taskId=task["id"], contextId=task["contextId"], **fields)


def interaction_metadata(interaction_id: str, **answer) -> dict:
    return {ext.INTERACTIONS: {"interactionId": interaction_id, **answer}}


def result_of(response) -> dict:
    body = response.json()
    assert "error" not in body, body
    return body["result"]


def error_of(response) -> dict:
    body = response.json()
    assert "result" not in body, body
    return body["error"]


def error_info(error: dict) -> dict:
    infos = [d for d in error.get("data", []) if d["@type"].endswith("google.rpc.ErrorInfo")]
    assert len(infos) == 1, error
    assert infos[0]["domain"] == "a2a-protocol.org"
    assert infos[0]["reason"]
    return infos[0]


def assert_error(response, code: int, reason: str | None = None, *, status: int = 200) -> dict:
    """The response is JSON-RPC error ``code`` with its ErrorInfo; return the error."""
    assert response.status_code == status, (response.status_code, response.content)
    error = error_of(response)
    assert error["code"] == code, error
    info = error_info(error)
    if reason is not None:
        assert info["reason"] == reason, error
    return error


def field_violations(error: dict) -> list[dict]:
    return [
        v
        for d in error.get("data", [])
        if d["@type"].endswith("google.rpc.BadRequest")
        for v in d["fieldViolations"]
    ]


def as_task(obj: dict) -> dict:
    """Check that ``obj`` is a valid A2A 1.0 Task (ProtoJSON) and return it."""
    json_format.ParseDict(obj, a2a.Task())
    return obj


def task_of(response) -> dict:
    result = result_of(response)
    assert "task" in result, result
    return as_task(result["task"])


def status_text(task: dict) -> str:
    message = task["status"].get("message") or {}
    return " ".join(p.get("text", "") for p in message.get("parts", []))


def interaction_of(task: dict) -> dict:
    return task["status"]["message"]["metadata"][ext.INTERACTIONS]


def sse_results(response) -> list[dict]:
    """The JSON-RPC bodies of an SSE response (read to its end), in order."""
    assert response["Content-Type"] == "text/event-stream", response.content

    async def read() -> bytes:
        return b"".join([chunk async for chunk in response.streaming_content])

    raw = async_to_sync(read)().decode()
    return [
        json.loads(line[len("data: ") :]) for line in raw.splitlines() if line.startswith("data: ")
    ]


def sse_first_result(response) -> dict:
    """The first JSON-RPC body of an SSE response that stays open; the stream is then closed."""
    assert response["Content-Type"] == "text/event-stream", response.content

    async def read() -> bytes:
        chunks = response.streaming_content
        try:
            async for chunk in chunks:
                if chunk.startswith(b"data: "):
                    return chunk
        finally:
            await chunks.aclose()
        raise AssertionError("the stream ended without an event")

    return json.loads(async_to_sync(read)().decode().split("data: ", 1)[1].split("\n", 1)[0])
