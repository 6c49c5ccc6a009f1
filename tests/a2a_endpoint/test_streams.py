"""SSE streams on the wire (a2a_endpoint.streams), against a live uvicorn and Celery worker
of their own (small limits, a short keep-alive): the frames, malformed requests, the
limits, a client that never reads, keep-alives and a server shutting down."""

import json
import signal
import socket
import time
import uuid

import httpx
import pytest

from runtime.kernel.task_models import Task
from tenants.models import Tenant
from tenants.tokens import api_token_create
from tests.live import LiveStack

pytestmark = pytest.mark.django_db(transaction=True)

PER_TOKEN, PER_PROCESS = 3, 4
QUEUE = f"test-streams-{uuid.uuid4().hex[:8]}"
DEPLOY = "deploy build 2026.10.06-1 to staging"


@pytest.fixture(scope="module")
def stack(django_db_setup, django_db_blocker, tmp_path_factory):
    with django_db_blocker.unblock():
        live = LiveStack(
            tmp_path_factory.mktemp("streams"),
            extra_env={
                "CELERY_QUEUE": QUEUE,
                "A2A_STREAM_KEEPALIVE_SECONDS": "1",
                "A2A_STREAMS_PER_TOKEN": str(PER_TOKEN),
                "A2A_STREAMS_PER_PROCESS": str(PER_PROCESS),
            },
        ).start()
    yield live
    live.stop()


def message(text: str, **fields) -> dict:
    return {
        "messageId": str(uuid.uuid4()),
        "role": "ROLE_USER",
        "parts": [{"text": text}],
        **fields,
    }


def headers(token: str | None, **extra) -> dict:
    out = {"Content-Type": "application/json", "A2A-Version": "1.0", **extra}
    if token is not None:
        out["Authorization"] = f"Bearer {token}"
    return out


def envelope(method: str, params, request_id="s-1") -> dict:
    return {"jsonrpc": "2.0", "id": request_id, "method": method, "params": params}


def read_stream(response: httpx.Response, *, until=None) -> tuple[list[dict], list[str]]:
    """The JSON-RPC bodies of the data lines, and the comment lines, to the stream's end."""
    bodies, comments = [], []
    for line in response.iter_lines():
        if line.startswith("data: "):
            bodies.append(json.loads(line[len("data: ") :]))
        elif line.startswith(":"):
            comments.append(line)
        if until is not None and until(bodies, comments):
            break
    return bodies, comments


def held_deploy(stack, demo, token=None) -> str:
    """A deploy waiting for an operator's approval (AUTH_REQUIRED); its task id."""
    response = httpx.post(
        f"{stack.url}{demo['agents']['deployer']}",
        json=envelope("SendMessage", {"message": message(DEPLOY)}),
        headers=headers(token or demo["token"]),
        timeout=60,
    )
    task = response.json()["result"]["task"]
    assert task["status"]["state"] == "TASK_STATE_AUTH_REQUIRED"
    return task["id"]


def open_subscription(client: httpx.Client, stack, demo, task_id, token):
    request = client.build_request(
        "POST",
        f"{stack.url}{demo['agents']['deployer']}",
        json=envelope("SubscribeToTask", {"id": task_id}),
        headers=headers(token),
    )
    return client.send(request, stream=True)


def other_token(demo, subject="partner:other") -> str:
    _, token = api_token_create(
        tenant=Tenant.objects.get(slug=demo["tenant"]), subject=subject, name=subject
    )
    return token


def test_each_event_is_a_json_rpc_response_with_the_request_id(stack, demo):
    for request_id in ("s-1", 7):
        with httpx.stream(
            "POST",
            f"{stack.url}{demo['agents']['code-reviewer']}",
            json=envelope(
                "SendStreamingMessage",
                {"message": message("Review this diff of payments-api")},
                request_id,
            ),
            headers=headers(demo["token"]),
            timeout=60,
        ) as response:
            assert response.status_code == 200
            assert response.headers["content-type"].startswith("text/event-stream")
            assert response.headers["cache-control"] == "no-cache"
            bodies, _ = read_stream(response)
        assert all(b["jsonrpc"] == "2.0" and b["id"] == request_id for b in bodies)
        assert "task" in bodies[0]["result"]
        task_id = bodies[0]["result"]["task"]["id"]
        updates = [b["result"]["statusUpdate"] for b in bodies[1:]]
        assert all(u["taskId"] == task_id for u in updates)
        # Closed by the server at the question.
        assert updates[-1]["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"


@pytest.mark.parametrize(
    ("method", "params", "code", "reason"),
    [
        ("SendStreamingMessage", "not an object", -32602, "INVALID_PARAMS"),
        ("SendStreamingMessage", {}, -32602, "INVALID_PARAMS"),
        ("SendStreamingMessage", {"message": {**message("x"), "parts": []}}, -32602, None),
        ("SendStreamingMessage", {"message": {**message("x"), "role": "ROLE_AGENT"}}, -32602, None),
        ("SendStreamingMessage", {"message": message("x", taskId="t1.nope")}, -32001, None),
        ("SubscribeToTask", {}, -32602, "INVALID_PARAMS"),
        ("SubscribeToTask", {"id": "t1.does-not-exist"}, -32001, "TASK_NOT_FOUND"),
        ("SubscribeToTask", {"id": ["not", "a", "string"]}, -32602, "INVALID_PARAMS"),
    ],
)
def test_malformed_streaming_requests_get_a_plain_json_rpc_error_and_start_nothing(
    stack, demo, method, params, code, reason
):
    response = httpx.post(
        f"{stack.url}{demo['agents']['support']}",
        json=envelope(method, params),
        headers=headers(demo["token"]),
        timeout=30,
    )
    assert response.status_code == 200
    assert response.headers["content-type"] == "application/json"
    error = response.json()["error"]
    assert response.json()["id"] == "s-1"
    assert error["code"] == code
    if reason:
        assert error["data"][0]["reason"] == reason
    assert not Task.objects.exists()


@pytest.mark.parametrize(
    ("case", "status", "code"),
    [
        ("not-json", 200, -32700),
        ("wrong-content-type", 415, -32005),
        ("no-version", 200, -32009),
        ("no-token", 401, -32000),
    ],
)
def test_a_broken_envelope_is_refused_before_any_stream(stack, demo, case, status, code):
    body = json.dumps(envelope("SendStreamingMessage", {"message": message("hello")})).encode()
    sent = headers(demo["token"])
    if case == "not-json":
        body = b"not json"
    elif case == "wrong-content-type":
        sent["Content-Type"] = "text/plain"
    elif case == "no-version":
        del sent["A2A-Version"]
    else:
        del sent["Authorization"]
    response = httpx.post(
        f"{stack.url}{demo['agents']['support']}", content=body, headers=sent, timeout=30
    )
    assert response.status_code == status
    assert response.headers["content-type"] == "application/json"
    assert response.json()["error"]["code"] == code
    assert not Task.objects.exists()


def test_an_idle_stream_gets_keep_alive_comments(stack, demo):
    task_id = held_deploy(stack, demo)
    with httpx.Client(timeout=30) as client:
        response = open_subscription(client, stack, demo, task_id, demo["token"])
        started = time.monotonic()
        bodies, comments = read_stream(response, until=lambda b, c: len(c) >= 2)
        response.close()
    assert [b["result"]["task"]["id"] for b in bodies] == [task_id]
    assert comments == [": keep-alive", ": keep-alive"]
    assert time.monotonic() - started < 10
    # Watching ended; the task did not.
    assert Task.objects.get(public_id=task_id).state == "TASK_STATE_AUTH_REQUIRED"


def test_streams_are_limited_per_token_and_per_process_and_a_disconnect_frees_its_place(
    stack, demo
):
    mine = held_deploy(stack, demo)
    token_b = other_token(demo)
    theirs = held_deploy(stack, demo, token_b)
    with httpx.Client(timeout=30) as client:
        open_streams = [
            open_subscription(client, stack, demo, mine, demo["token"]) for _ in range(PER_TOKEN)
        ]
        for response in open_streams:
            assert response.headers["content-type"].startswith("text/event-stream")
        refused = open_subscription(client, stack, demo, mine, demo["token"])
        refused.read()
        error = refused.json()["error"]
        assert error["data"][0]["reason"] == "TOO_MANY_STREAMS"
        assert error["data"][0]["metadata"] == {"scope": "token", "limit": str(PER_TOKEN)}
        assert "Too many open streams" in error["message"]

        open_streams.append(open_subscription(client, stack, demo, theirs, token_b))
        refused = open_subscription(client, stack, demo, theirs, token_b)
        refused.read()
        assert refused.json()["error"]["data"][0]["metadata"]["scope"] == "process"
        # A refused SendStreamingMessage starts no task.
        count = Task.objects.count()
        refused = client.post(
            f"{stack.url}{demo['agents']['support']}",
            json=envelope("SendStreamingMessage", {"message": message("hello")}),
            headers=headers(token_b),
        )
        assert refused.json()["error"]["data"][0]["reason"] == "TOO_MANY_STREAMS"
        assert Task.objects.count() == count

        # A client that goes away gives its place back.
        open_streams.pop(0).close()

        def admitted():
            response = open_subscription(client, stack, demo, theirs, token_b)
            if response.headers["content-type"].startswith("text/event-stream"):
                open_streams.append(response)
                return True
            response.read()
            response.close()
            return False

        deadline = time.monotonic() + 10
        while not admitted():
            assert time.monotonic() < deadline, "the closed stream's place was never freed"
            time.sleep(0.1)
        for response in open_streams:
            response.close()
    assert {t.state for t in Task.objects.all()} == {"TASK_STATE_AUTH_REQUIRED"}


def test_a_client_that_never_reads_does_not_hold_up_the_others(stack, demo):
    task_id = held_deploy(stack, demo)
    body = json.dumps(envelope("SubscribeToTask", {"id": task_id})).encode()
    host, port = "127.0.0.1", stack.port
    raw = (
        f"POST {demo['agents']['deployer']} HTTP/1.1\r\nHost: {host}:{port}\r\n"
        f"Authorization: Bearer {demo['token']}\r\nA2A-Version: 1.0\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
    ).encode() + body
    silent = []
    try:
        for _ in range(2):
            sock = socket.socket()
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1024)
            sock.connect((host, port))
            sock.sendall(raw)
            silent.append(sock)  # and never read from it
        time.sleep(2.5)  # keep-alives pile up on the silent sockets meanwhile
        token_b = other_token(demo)
        started = time.monotonic()
        with httpx.stream(
            "POST",
            f"{stack.url}{demo['agents']['code-reviewer']}",
            json=envelope(
                "SendStreamingMessage", {"message": message("Review this diff of payments-api")}
            ),
            headers=headers(token_b),
            timeout=30,
        ) as response:
            bodies, _ = read_stream(response)
        assert bodies[-1]["result"]["statusUpdate"]["status"]["state"] == (
            "TASK_STATE_INPUT_REQUIRED"
        )
        assert time.monotonic() - started < 15
        assert httpx.get(f"{stack.url}/healthz", timeout=5).status_code == 200
    finally:
        for sock in silent:
            sock.close()


def test_a_server_shutting_down_ends_its_streams_cleanly(stack, demo, tmp_path):
    task_id = held_deploy(stack, demo)
    web = LiveStack(tmp_path, extra_env={"A2A_STREAM_KEEPALIVE_SECONDS": "1"})
    web.start_web()
    try:
        with httpx.stream(
            "POST",
            f"{web.url}{demo['agents']['deployer']}",
            json=envelope("SubscribeToTask", {"id": task_id}),
            headers=headers(demo["token"]),
            timeout=30,
        ) as response:
            lines = response.iter_lines()
            assert next(lines).startswith("data: ")
            stopping = time.monotonic()
            web.web.send_signal(signal.SIGTERM)
            # The response ends properly (no "peer closed connection" error), promptly: a
            # stream left open would go on with its keep-alives, and uvicorn would wait for it.
            rest = []
            for line in lines:
                rest.append(line)
                assert time.monotonic() - stopping < 10, "the stream outlived the shutdown"
        assert all(line == "" or line.startswith(":") for line in rest)
        # uvicorn exits by re-raising the SIGTERM it caught, once everything has finished.
        assert web.web.wait(15) in (0, -signal.SIGTERM)
        assert "Finished server process" in web.logs()
        assert time.monotonic() - stopping < 10
    finally:
        web.stop()
    assert Task.objects.get(public_id=task_id).state == "TASK_STATE_AUTH_REQUIRED"
