"""A stub OpenAI-compatible Chat Completions server for bench/slow_turns.py: every
``POST .../chat/completions`` is answered after ``STUB_DELAY_SECONDS`` (default 2) with a plain
assistant reply (no tool calls) and a usage block, as a hosted model that thinks for a while.

It is an ASGI app on asyncio, so that it holds any number of requests at once:

    STUB_DELAY_SECONDS=2 .venv/bin/uvicorn bench.stub_model:app --port 8787 --no-access-log
    # base URL for the openai client: http://127.0.0.1:8787/v1

``GET /stats`` says how many completions it has served and the most it held at once.
"""

import asyncio
import json
import os
import time
import uuid

DELAY = float(os.environ.get("STUB_DELAY_SECONDS", "2"))
stats = {"served": 0, "in_flight": 0, "max_in_flight": 0}


async def read_body(receive) -> bytes:
    body = b""
    while True:
        event = await receive()
        body += event.get("body", b"")
        if not event.get("more_body"):
            return body


async def respond(send, status: int, payload: dict) -> None:
    body = json.dumps(payload).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})


def completion(request: dict) -> dict:
    return {
        "id": f"chatcmpl-{uuid.uuid4().hex[:12]}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": request.get("model", "stub"),
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": "Done thinking.", "refusal": None},
                "finish_reason": "stop",
                "logprobs": None,
            }
        ],
        "usage": {"prompt_tokens": 20, "completion_tokens": 3, "total_tokens": 23},
    }


async def app(scope, receive, send):
    if scope["type"] == "lifespan":
        while (await receive())["type"] != "lifespan.shutdown":
            await send({"type": "lifespan.startup.complete"})
        await send({"type": "lifespan.shutdown.complete"})
        return
    body = await read_body(receive)
    if scope["method"] == "GET" and scope["path"] == "/stats":
        await respond(send, 200, stats)
        return
    if scope["method"] != "POST" or not scope["path"].endswith("/chat/completions"):
        await respond(send, 404, {"error": {"message": "not found", "type": "invalid_request"}})
        return
    try:
        request = json.loads(body)
    except ValueError:
        await respond(send, 400, {"error": {"message": "not JSON", "type": "invalid_request"}})
        return
    stats["in_flight"] += 1
    stats["max_in_flight"] = max(stats["max_in_flight"], stats["in_flight"])
    try:
        await asyncio.sleep(DELAY)
    finally:
        stats["in_flight"] -= 1
    stats["served"] += 1
    await respond(send, 200, completion(request))
