"""A small approval gate on loopback for the Python client's own tests: real HTTP, A2A 1.0
JSON-RPC (SendMessage, GetTask, SubscribeToTask as Server-Sent Events), receipts signed with
an Ed25519 key of its own and a JWKS at ``/.well-known/jwks.json``, as the contract between
the server and the client says a gate answers.

The test decides (``stub.decide(task_id, ...)``) and can make it misbehave: drop streams,
refuse to stream, lose SendMessage's answer, sign with a key it does not publish, sign claims
of another tenant, rotate its key.
"""

import base64
import hashlib
import itertools
import json
import threading
import time
import uuid
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import jwt
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

TERMINAL = {"TASK_STATE_COMPLETED", "TASK_STATE_REJECTED", "TASK_STATE_FAILED"}
POLICY = {"docs/search": "allow", "payments/send": "hold", "payments/refund": "hold"}


def sha256_of(arguments: dict) -> str:
    canonical = json.dumps(arguments, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()


@dataclass
class SigningKey:
    kid: str
    private: Ed25519PrivateKey = field(default_factory=Ed25519PrivateKey.generate)

    def jwk(self) -> dict:
        raw = self.private.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)
        x = base64.urlsafe_b64encode(raw).rstrip(b"=").decode()
        return {
            "kty": "OKP",
            "crv": "Ed25519",
            "x": x,
            "kid": self.kid,
            "use": "sig",
            "alg": "EdDSA",
        }

    def sign(self, claims: dict) -> str:
        return jwt.encode(claims, self.private, algorithm="EdDSA", headers={"kid": self.kid})


@dataclass
class GateTask:
    id: str
    context_id: str
    tool: str
    arguments: dict
    reason: str
    note: str
    state: str = "TASK_STATE_SUBMITTED"
    status_text: str = ""
    receipt: dict | None = None


_kids = itertools.count(1)


class GateStub:
    def __init__(self, *, tenant: str = "acme", gate: str = "gate", token: str = "tok-acme"):
        self.tenant, self.gate, self.token = tenant, gate, token
        self.path = f"/a2a/{tenant}/{gate}"
        self.key = SigningKey(f"k{next(_kids)}")
        self.published: list[SigningKey] = [self.key]
        self.tasks: dict[str, GateTask] = {}
        self.by_message: dict[tuple[str, str], str] = {}
        self.calls: list[str] = []  # "SendMessage", "GetTask", "SubscribeToTask", "jwks"
        self.subscribed: dict[str, int] = {}
        self.redact: set[str] = set()
        # Misbehaviour, each as the test sets it.
        self.streaming = True
        self.drop_streams = 0  # drop this many streams after their first event
        self.keepalive: float | None = None  # a comment every so many seconds while held
        self.lose_answers = 0  # close this many SendMessage connections before answering
        self.claims_override: dict = {}
        self.sign_with: SigningKey | None = None
        self.lock = threading.Lock()
        self.changed = threading.Condition(self.lock)
        self.stopping = False
        stub = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def do_GET(self):
                if self.path != "/.well-known/jwks.json":
                    return self.reply(404, {"detail": "not found"})
                with stub.lock:
                    stub.calls.append("jwks")
                    keys = [key.jwk() for key in stub.published]
                self.reply(200, {"keys": keys})

            def do_POST(self):
                length = int(self.headers.get("Content-Length", "0"))
                body = json.loads(self.rfile.read(length) or b"null")
                if self.path != stub.path:
                    return self.reply(404, {"detail": "no such agent"})
                if self.headers.get("Authorization") != f"Bearer {stub.token}":
                    return self.reply(401, {"detail": "a bearer token of this tenant is needed"})
                if self.headers.get("A2A-Version") != "1.0":
                    return self.rpc_error(body, -32009, "send A2A-Version: 1.0")
                method, params = body.get("method"), body.get("params") or {}
                with stub.lock:
                    stub.calls.append(method)
                if method == "SendMessage":
                    return self.send_message(body, params)
                if method == "GetTask":
                    with stub.lock:
                        task = stub.tasks.get(params.get("id"))
                        found = task and stub.task_json(task)
                    if not found:
                        return self.rpc_error(body, -32001, "Task not found")
                    return self.reply(200, {"jsonrpc": "2.0", "id": body["id"], "result": found})
                if method == "SubscribeToTask":
                    return self.subscribe(body, params)
                return self.rpc_error(body, -32601, "Method not found")

            def send_message(self, body, params):
                message = params.get("message") or {}
                data = next((p["data"] for p in message.get("parts", []) if "data" in p), None)
                note = " ".join(p["text"] for p in message.get("parts", []) if "text" in p)
                if not isinstance(data, dict) or not isinstance(data.get("arguments"), dict):
                    return self.rpc_error(body, -32602, "one data part {tool, arguments} is needed")
                tool = data.get("tool")
                if tool not in POLICY:
                    return self.rpc_error(body, -32602, f"the policy does not name {tool!r}")
                with stub.lock:
                    seen = stub.by_message.get((stub.token, message["messageId"]))
                    if seen is None:
                        task = GateTask(
                            id=f"t-{uuid.uuid4()}",
                            context_id=f"c-{uuid.uuid4()}",
                            tool=tool,
                            arguments=data["arguments"],
                            reason=data.get("reason") or "",
                            note=note,
                        )
                        stub.tasks[task.id] = task
                        stub.by_message[(stub.token, message["messageId"])] = task.id
                        if POLICY[tool] == "allow":
                            stub.settle(task, True, "allowed", data["arguments"], ["policy"], "")
                        else:
                            task.state = "TASK_STATE_AUTH_REQUIRED"
                            task.status_text = "Waiting for approval"
                        stub.changed.notify_all()
                    else:
                        task = stub.tasks[seen]
                    lose = stub.lose_answers > 0
                    if lose:
                        stub.lose_answers -= 1
                    result = {"task": stub.task_json(task)}
                if lose:
                    self.close_connection = True
                    self.connection.shutdown(2)  # the answer is lost on the way back
                    return
                self.reply(200, {"jsonrpc": "2.0", "id": body["id"], "result": result})

            def subscribe(self, body, params):
                with stub.lock:
                    task = stub.tasks.get(params.get("id"))
                    if task is None:
                        return self.rpc_error(body, -32001, "Task not found")
                    if not stub.streaming or task.state in TERMINAL:
                        return self.rpc_error(body, -32004, "streaming is not supported here")
                    stub.subscribed[task.id] = stub.subscribed.get(task.id, 0) + 1
                    drop = stub.drop_streams > 0
                    if drop:
                        stub.drop_streams -= 1
                    first = stub.task_json(task)
                    stub.changed.notify_all()
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                try:
                    self.event(body, {"task": first})
                    if drop:
                        self.connection.shutdown(2)  # mid-stream: no closing chunk
                        self.close_connection = True
                        return
                    with stub.changed:
                        deadline = time.monotonic() + 60
                        while not (task.state in TERMINAL or stub.stopping):
                            if time.monotonic() > deadline:
                                break
                            if stub.changed.wait(stub.keepalive or 60) or not stub.keepalive:
                                continue
                            frame = b": keep-alive\n\n"
                            self.wfile.write(f"{len(frame):x}\r\n".encode() + frame + b"\r\n")
                            self.wfile.flush()
                        update = {
                            "taskId": task.id,
                            "contextId": task.context_id,
                            "status": stub.task_json(task)["status"],
                        }
                    self.event(body, {"statusUpdate": update})
                    self.wfile.write(b"0\r\n\r\n")
                    self.wfile.flush()
                except OSError:
                    pass

            def event(self, body, result):
                data = json.dumps({"jsonrpc": "2.0", "id": body["id"], "result": result})
                frame = f"data: {data}\n\n".encode()
                self.wfile.write(f"{len(frame):x}\r\n".encode() + frame + b"\r\n")
                self.wfile.flush()

            def rpc_error(self, body, code, message):
                rid = body.get("id") if isinstance(body, dict) else None
                error = {"code": code, "message": message}
                self.reply(200, {"jsonrpc": "2.0", "id": rid, "error": error})

            def reply(self, status, payload):
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, args=(0.05,), daemon=True)

    # What the server would do.

    def task_json(self, task: GateTask) -> dict:
        status: dict = {"state": task.state, "timestamp": "2026-12-04T12:00:00.000Z"}
        if task.status_text:
            status["message"] = {
                "messageId": f"m-{task.id}",
                "role": "ROLE_AGENT",
                "taskId": task.id,
                "contextId": task.context_id,
                "parts": [{"text": task.status_text}],
            }
        found = {"id": task.id, "contextId": task.context_id, "status": status}
        if task.receipt is not None:
            found["artifacts"] = [
                {
                    "artifactId": f"a-{task.id}",
                    "name": "receipt",
                    "parts": [{"data": task.receipt, "mediaType": "application/json"}],
                }
            ]
        return found

    def settle(self, task, approved, decision, arguments, decided_by, reason, channel="rest"):
        shown = {k: ("•••" if k in self.redact else v) for k, v in arguments.items()}
        fields = {
            "receipt_id": f"rcp_{uuid.uuid4().hex[:12]}",
            "approved": approved,
            "decision": decision,
            "tool": task.tool,
            "arguments": shown,
            "arguments_sha256": sha256_of(arguments),
            "edited": arguments != task.arguments,
            "policy": {"entry": task.tool, "rule": 0, "version": "ab12"},
            "decided_by": decided_by,
            "channel": "policy" if decided_by == ["policy"] else channel,
            "decided_at": "2026-12-04T12:00:00Z",
            "reason": reason,
        }
        claims = {
            **fields,
            "tenant": self.tenant,
            "agent": self.gate,
            "task_id": task.id,
            "interaction_id": "" if decided_by == ["policy"] else f"i-{task.id}",
            "iss": self.base,
            "iat": int(time.time()),
            **self.claims_override,
        }
        jws = (self.sign_with or self.key).sign(claims)
        task.receipt = {**fields, "jws": jws}
        task.state = "TASK_STATE_COMPLETED" if approved else "TASK_STATE_REJECTED"
        task.status_text = "" if approved else (reason or decision)

    def decide(
        self,
        task_id: str,
        approved: bool = True,
        *,
        arguments: dict | None = None,
        reason: str = "",
        expired: bool = False,
        decided_by=("user:alice@acme.test",),
    ) -> None:
        with self.changed:
            task = self.tasks[task_id]
            decision = "expired" if expired else ("approved" if approved else "denied")
            who = ["system:expiry"] if expired else list(decided_by)
            self.settle(task, approved, decision, arguments or task.arguments, who, reason)
            self.changed.notify_all()

    def rotate(self) -> SigningKey:
        """A new signing key, published beside the old one."""
        with self.lock:
            self.key = SigningKey(f"k{next(_kids)}")
            self.published.append(self.key)
            return self.key

    # What the test waits on.

    def wait_for_task(self, count: int = 1, timeout: float = 30) -> str:
        """The id of the ``count``-th task once it exists."""
        with self.changed:
            if not self.changed.wait_for(lambda: len(self.tasks) >= count, timeout):
                raise TimeoutError(f"the gate has {len(self.tasks)} tasks, not {count}")
            return list(self.tasks)[count - 1]

    def wait_for_subscription(self, task_id: str, count: int = 1, timeout: float = 30) -> None:
        with self.changed:
            if not self.changed.wait_for(lambda: self.subscribed.get(task_id, 0) >= count, timeout):
                raise TimeoutError(f"{self.subscribed.get(task_id, 0)} subscriptions")

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def start(self) -> "GateStub":
        self.thread.start()
        return self

    def stop(self) -> None:
        with self.changed:
            self.stopping = True
            self.changed.notify_all()
        self.server.shutdown()
        self.server.server_close()
