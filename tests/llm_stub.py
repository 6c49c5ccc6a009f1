"""A local OpenAI-compatible Chat Completions server for tests: real HTTP on 127.0.0.1, started
by the test. It records every request it receives and plays the responses the test scripted,
in order (several tool calls in one reply, usage, a 429 then success, a 500 storm, a
timeout, a call that hangs until the test lets it go). It also serves files for url parts.

A request with ``stream: true`` is answered as the APIs stream (Server-Sent Events, chunked):
a chat completion as ``chat.completion.chunk`` objects (the content in pieces, each tool call
as its id and name, then its arguments in parts, the finish reason, the usage last when
``stream_options.include_usage`` asks for it) and ``data: [DONE]``; a Responses API response
as ``response.output_text.delta`` events, then ``response.completed``. ``pieces`` says how
the content is cut (default: word by word); ``stream_hold`` stops the stream after
``stream_hold_after`` pieces until the test sets it; ``stream_cut_after`` drops the
connection after that many pieces.
"""

import itertools
import json
import re
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


@dataclass
class Respond:
    status: int = 200
    body: dict | str = field(default_factory=dict)
    headers: dict = field(default_factory=dict)
    delay: float = 0.0  # seconds before answering (a timeout, when over the client's)
    hold: threading.Event | None = None  # answer only once this is set (a call in flight)
    # Streamed (the request said ``stream: true``):
    pieces: list[str] | None = None
    stream_hold: threading.Event | None = None
    stream_hold_after: int = 1
    stream_cut_after: int | None = None


_ids = itertools.count(1)


def call(name: str, arguments: dict | str, call_id: str | None = None) -> dict:
    """One tool call of a reply; ``arguments`` as a dict, or a raw (maybe broken) string."""
    raw = arguments if isinstance(arguments, str) else json.dumps(arguments)
    return {
        "id": call_id or f"call_{next(_ids)}",
        "type": "function",
        "function": {"name": name, "arguments": raw},
    }


def completion(
    content: str | None = None,
    calls: list[dict] = (),
    usage: tuple[int, int] = (100, 20),
    model: str = "gpt-4o-mini",
    **respond,
) -> Respond:
    message: dict = {"role": "assistant", "content": content}
    if calls:
        message["tool_calls"] = list(calls)
    return Respond(
        body={
            "id": f"chatcmpl-{next(_ids)}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": model,
            "choices": [
                {
                    "index": 0,
                    "message": message,
                    "finish_reason": "tool_calls" if calls else "stop",
                }
            ],
            "usage": {
                "prompt_tokens": usage[0],
                "completion_tokens": usage[1],
                "total_tokens": usage[0] + usage[1],
            },
        },
        **respond,
    )


def reply_with(
    message: dict | None, *, usage: tuple[int, int] | None = (100, 20), **body
) -> Respond:
    """A chat completion holding ``message`` exactly as given (content as a list of parts,
    arguments as an object, a refusal...); ``usage=None`` leaves usage out; ``body``
    overrides the completion's fields (``choices=[]``)."""
    completion_body: dict = {
        "id": f"chatcmpl-{next(_ids)}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": "gpt-4o-mini",
        "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
    }
    if usage is not None:
        completion_body["usage"] = {"prompt_tokens": usage[0], "completion_tokens": usage[1]}
    completion_body.update(body)
    return Respond(body=completion_body)


def response(*output: dict, usage: tuple[int, int] = (100, 20), **body) -> Respond:
    """A Responses API response (``POST /responses``) with these output items."""
    return Respond(
        body={
            "id": f"resp_{next(_ids)}",
            "object": "response",
            "status": "completed",
            "model": "gpt-5-mini",
            "output": list(output),
            "usage": {
                "input_tokens": usage[0],
                "output_tokens": usage[1],
                "total_tokens": usage[0] + usage[1],
            },
            **body,
        }
    )


def pieces_of(text: str | None) -> list[str]:
    """Word by word, each with the spaces after it."""
    return re.findall(r"\S+\s*|\s+", text or "")


def chat_chunks(body: dict, pieces: list[str], include_usage: bool) -> list:
    """A chat completion as the chunks that stream it; each content piece is a str marker
    (its position), the rest dicts."""
    base = {"id": body["id"], "object": "chat.completion.chunk", "model": body["model"]}
    base["created"] = body.get("created", 0)
    if not body.get("choices"):
        return [{**base, "choices": [], "usage": body.get("usage")}]
    choice = body["choices"][0]
    message = choice["message"]

    def chunk(delta: dict, finish=None) -> dict:
        return {**base, "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}

    out: list = [chunk({"role": "assistant", "content": ""})]
    out += [("piece", chunk({"content": piece})) for piece in pieces]
    if message.get("refusal"):
        out.append(chunk({"refusal": message["refusal"]}))
    for index, call in enumerate(message.get("tool_calls") or []):
        function = call["function"]
        head = {"index": index, "id": call["id"], "type": "function"}
        out.append(chunk({"tool_calls": [{**head, "function": {"name": function["name"]}}]}))
        arguments = function["arguments"]
        half = len(arguments) // 2
        for part in (arguments[:half], arguments[half:]):
            out.append(chunk({"tool_calls": [{"index": index, "function": {"arguments": part}}]}))
    out.append(chunk({}, choice.get("finish_reason")))
    if include_usage and body.get("usage"):
        out.append({**base, "choices": [], "usage": body["usage"]})
    return out


def response_events(body: dict, pieces: list[str]) -> list:
    """A Responses API response as the events that stream it."""
    out: list = [{"type": "response.created", "response": {**body, "output": []}}]
    out += [
        ("piece", {"type": "response.output_text.delta", "delta": piece, "output_index": 0})
        for piece in pieces
    ]
    out.append({"type": "response.completed", "response": body})
    return out


def response_text(body: dict) -> str:
    return "".join(
        part.get("text", "")
        for item in body.get("output", [])
        if item.get("type") == "message"
        for part in item.get("content", [])
    )


def error(status: int, message: str = "error", **respond) -> Respond:
    return Respond(
        status=status,
        body={"error": {"message": message, "type": "error", "code": None}},
        **respond,
    )


class LLMStub:
    def __init__(self):
        self.requests: list[dict] = []
        self.script: list[Respond] = []
        self.fallback: Respond | None = None
        self.files: dict[str, tuple[bytes, str]] = {}
        self.lock = threading.Lock()
        self.arrived = threading.Condition(self.lock)
        stub = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def do_GET(self):
                found = stub.files.get(self.path)
                if found is None:
                    self.send_response(404)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                body, media_type = found
                self.send_response(200)
                self.send_header("Content-Type", media_type)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_POST(self):
                length = int(self.headers.get("Content-Length", "0"))
                raw = self.rfile.read(length).decode("utf-8")
                asked = json.loads(raw) if raw else None
                with stub.lock:
                    stub.requests.append(
                        {
                            "path": self.path,
                            "headers": {k.lower(): v for k, v in self.headers.items()},
                            "raw": raw,
                            "body": asked,
                            "client_port": self.client_address[1],  # one per connection
                        }
                    )
                    stub.arrived.notify_all()
                    if stub.script:
                        response = stub.script.pop(0)
                    else:
                        response = stub.fallback or error(500, "the stub has no response left")
                if response.hold is not None:
                    response.hold.wait(120)
                if response.delay:
                    time.sleep(response.delay)
                if (
                    isinstance(asked, dict)
                    and asked.get("stream")
                    and response.status == 200
                    and isinstance(response.body, dict)
                ):
                    self.stream(response, asked)
                    return
                body = response.body
                data = (body if isinstance(body, str) else json.dumps(body)).encode()
                try:
                    self.send_response(response.status)
                    self.send_header(
                        "Content-Type", response.headers.get("Content-Type", "application/json")
                    )
                    self.send_header("Content-Length", str(len(data)))
                    for key, value in response.headers.items():
                        if key != "Content-Type":
                            self.send_header(key, value)
                    self.end_headers()
                    self.wfile.write(data)
                except OSError:
                    pass  # the client went away (a timeout, a killed worker)

            def stream(self, response: Respond, asked: dict) -> None:
                body = response.body
                if self.path.endswith("/responses"):
                    text = response_text(body)
                    events = response_events(body, response.pieces or pieces_of(text))
                else:
                    choices = body.get("choices") or [{"message": {}}]
                    text = choices[0]["message"].get("content")
                    include = (asked.get("stream_options") or {}).get("include_usage", False)
                    events = chat_chunks(body, response.pieces or pieces_of(text), include)
                try:
                    self.send_response(200)
                    self.send_header("Content-Type", "text/event-stream")
                    self.send_header("Transfer-Encoding", "chunked")
                    self.end_headers()
                    sent = 0
                    for event in events:
                        if isinstance(event, tuple):
                            if sent == response.stream_cut_after:
                                self.connection.shutdown(2)  # the connection drops mid-reply
                                self.close_connection = True
                                return
                            if response.stream_hold is not None and (
                                sent == response.stream_hold_after
                            ):
                                response.stream_hold.wait(120)
                            sent += 1
                            event = event[1]
                        self.event(event)
                    if not self.path.endswith("/responses"):
                        self.event("[DONE]")
                    self.wfile.write(b"0\r\n\r\n")
                    self.wfile.flush()
                except OSError:
                    pass  # the client went away

            def event(self, event) -> None:
                data = event if isinstance(event, str) else json.dumps(event)
                head = (
                    f"event: {event['type']}\n"
                    if isinstance(event, dict) and "type" in event
                    else ""
                )
                frame = f"{head}data: {data}\n\n".encode()
                self.wfile.write(f"{len(frame):x}\r\n".encode() + frame + b"\r\n")
                self.wfile.flush()

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    @property
    def url(self) -> str:
        """The base URL an OpenAI client takes."""
        return f"{self.base}/v1"

    def play(self, *responses: Respond) -> "LLMStub":
        with self.lock:
            self.script.extend(responses)
        return self

    def wait_for_requests(self, count: int, timeout: float = 30) -> None:
        with self.arrived:
            if not self.arrived.wait_for(lambda: len(self.requests) >= count, timeout):
                raise TimeoutError(f"the stub got {len(self.requests)} requests, not {count}")

    def bodies(self) -> list[dict]:
        return [r["body"] for r in self.requests]

    def start(self) -> "LLMStub":
        self.thread.start()
        return self

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
