"""A lean HTTP/1.1 client for the benchmarks that hold thousands of calls open at once.

httpx spends milliseconds of CPU per request; with 2,000 calls in one client process that
sharing the machine's two cores with the servers, the client itself answered its callers up
to a second late (bench/README.md, waiters.py). One call here is one connection, one request
written as bytes and one response read by its Content-Length: what is measured is the server.
"""

import asyncio
import time
from urllib.parse import urlsplit

import orjson


class CallError(Exception):
    """A call that got no HTTP answer (refused, reset, timed out)."""


def _head(url: str, token: str, length: int, extra: dict[str, str]) -> tuple[str, int, bytes]:
    parts = urlsplit(url)
    lines = [
        f"POST {parts.path} HTTP/1.1",
        f"Host: {parts.netloc}",
        "Content-Type: application/json",
        f"Content-Length: {length}",
        f"Authorization: Bearer {token}",
        "A2A-Version: 1.0",
        "Connection: close",
        *(f"{k}: {v}" for k, v in extra.items()),
    ]
    return parts.hostname, parts.port or 80, ("\r\n".join(lines) + "\r\n\r\n").encode()


async def post_json(
    url: str, token: str, body: dict, *, timeout: float, headers: dict[str, str] | None = None
) -> tuple[int, dict | None, float, float]:
    """POST ``body``; return (status, JSON payload or None, sent at, answered at) in
    ``time.time()`` seconds, or raise CallError."""
    data = orjson.dumps(body)
    host, port, head = _head(url, token, len(data), headers or {})
    writer = None
    try:
        async with asyncio.timeout(timeout):
            reader, writer = await asyncio.open_connection(host, port)
            sent = time.time()
            writer.write(head + data)
            status_line = await reader.readline()
            length = 0
            while (line := await reader.readline()) not in (b"\r\n", b""):
                name, _, value = line.partition(b":")
                if name.strip().lower() == b"content-length":
                    length = int(value.strip())
            payload = await reader.readexactly(length) if length else b""
            answered = time.time()
    except (OSError, TimeoutError, asyncio.IncompleteReadError, ValueError) as exc:
        raise CallError(type(exc).__name__) from None
    finally:
        if writer is not None:
            writer.close()
    try:
        status = int(status_line.split()[1])
    except (IndexError, ValueError):
        raise CallError("bad status line") from None
    try:
        parsed = orjson.loads(payload) if payload else None
    except orjson.JSONDecodeError:
        parsed = None
    return status, parsed, sent, answered


def send_message_body(i: int, message_id: str, text: str) -> dict:
    """A blocking SendMessage (A2A 1.0) that starts a new task."""
    return {
        "jsonrpc": "2.0",
        "id": i,
        "method": "SendMessage",
        "params": {
            "message": {"messageId": message_id, "role": "ROLE_USER", "parts": [{"text": text}]}
        },
    }


def loop_policy_install() -> None:
    """uvloop when it is installed (uvicorn[standard] brings it): a cheaper client loop."""
    try:
        import uvloop
    except ImportError:
        return
    asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())
