"""Stream memory is bounded per stream: the stream path never reads the
turn runtime's columns (the transcript above all), keeps no Task row between frames, and a
client that never reads is dropped once a write has waited A2A_STREAM_WRITE_TIMEOUT_SECONDS,
its frame and its slot given back."""

import json
import socket
import uuid

import httpx
import pytest
from django.db.backends import utils as db_utils

from runtime.kernel.task_models import Task
from tests.a2a_client import rpc, sse_first_result, sse_results, user_message
from tests.live import LiveStack, wait_until

DEPLOY = "deploy build 2026.10.06-1 to staging"
QUEUE = f"test-stream-memory-{uuid.uuid4().hex[:8]}"
PER_TOKEN = 2
BIG = 8 * 1024 * 1024  # a history far larger than any socket's buffers


def envelope(method: str, params) -> dict:
    return {"jsonrpc": "2.0", "id": "m-1", "method": method, "params": params}


@pytest.fixture
def statements(monkeypatch):
    """Every SQL statement run meanwhile, on any thread (the endpoint's run on a pool)."""
    seen: list[str] = []
    for wrapper in (db_utils.CursorWrapper, db_utils.CursorDebugWrapper):
        original = wrapper.execute

        def execute(self, sql, params=None, _original=original):
            seen.append(str(sql))
            return _original(self, sql, params)

        monkeypatch.setattr(wrapper, "execute", execute)
    return seen


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("eager")
def test_the_stream_path_reads_no_transcript(agents, client, statements):
    """A stream reads the task for its first frame and its events after: never the turn
    runtime's columns (transcript, runs, plan), however large they are."""
    response = rpc(
        client,
        "/a2a/acme/code-reviewer",
        "SendStreamingMessage",
        {"message": user_message("Review this diff")},
        token=agents.a.token,
    )
    streamed = [body["result"] for body in sse_results(response)]
    task_id = streamed[0]["task"]["id"]
    Task.objects.filter(public_id=task_id).update(transcript=[{"kind": "note", "text": "x" * 1000}])
    statements.clear()
    response = rpc(
        client, "/a2a/acme/code-reviewer", "SubscribeToTask", {"id": task_id}, token=agents.a.token
    )
    first = sse_first_result(response)["result"]
    assert first["task"]["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"
    reads = [sql for sql in statements if sql.lstrip().upper().startswith("SELECT")]
    assert any('"runtime_task"' in sql for sql in reads)
    for column in ("transcript", "runs", "plan"):
        assert not [sql for sql in reads if f'"runtime_task"."{column}"' in sql], column


@pytest.fixture(scope="module")
def stack(django_db_setup, django_db_blocker, tmp_path_factory):
    with django_db_blocker.unblock():
        live = LiveStack(
            tmp_path_factory.mktemp("stream-memory"),
            extra_env={
                "CELERY_QUEUE": QUEUE,
                "A2A_STREAM_KEEPALIVE_SECONDS": "1",
                "A2A_STREAMS_PER_TOKEN": str(PER_TOKEN),
                "A2A_STREAM_WRITE_TIMEOUT_SECONDS": "1",
            },
        ).start()
    yield live
    live.stop()


def held_deploy(stack, demo) -> str:
    response = httpx.post(
        f"{stack.url}{demo['agents']['deployer']}",
        json=envelope("SendMessage", {"message": user_message(DEPLOY)}),
        headers={"Authorization": f"Bearer {demo['token']}", "A2A-Version": "1.0"},
        timeout=60,
    )
    task = response.json()["result"]["task"]
    assert task["status"]["state"] == "TASK_STATE_AUTH_REQUIRED"
    return task["id"]


def silent_subscriber(stack, demo, task_id) -> socket.socket:
    """A SubscribeToTask whose client reads nothing (a tiny receive buffer, never drained)."""
    body = json.dumps(envelope("SubscribeToTask", {"id": task_id})).encode()
    raw = (
        f"POST {demo['agents']['deployer']} HTTP/1.1\r\nHost: 127.0.0.1:{stack.port}\r\n"
        f"Authorization: Bearer {demo['token']}\r\nA2A-Version: 1.0\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
    ).encode() + body
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1024)
    sock.connect(("127.0.0.1", stack.port))
    sock.sendall(raw)
    return sock


def subscribe_reads_first_frame(stack, demo, task_id) -> bool:
    """Whether a reading subscriber gets in (a slot of the token is free) and its Task."""
    with httpx.stream(
        "POST",
        f"{stack.url}{demo['agents']['deployer']}",
        json=envelope("SubscribeToTask", {"id": task_id}),
        headers={"Authorization": f"Bearer {demo['token']}", "A2A-Version": "1.0"},
        timeout=30,
    ) as response:
        for line in response.iter_lines():
            if line.startswith("data: "):
                body = json.loads(line[len("data: ") :])
                return "result" in body and body["result"]["task"]["id"] == task_id
    return False


def closed_by_server(sock: socket.socket) -> int | None:
    """Read what the server buffered: its byte count once the server dropped the connection,
    None if it is still open after 15 s of silence."""
    sock.settimeout(15)
    got = 0
    try:
        while True:
            piece = sock.recv(1 << 20)
            if not piece:
                return got
            got += len(piece)
    except ConnectionResetError:
        return got
    except TimeoutError:
        return None


@pytest.mark.django_db(transaction=True)
def test_a_client_that_never_reads_is_dropped_and_its_slot_given_back(stack, demo):
    task_id = held_deploy(stack, demo)
    task = Task.objects.get(public_id=task_id)
    # A task whose first frame is far larger than the connection can buffer.
    Task.objects.filter(pk=task.pk).update(
        history=[*task.history, {**task.history[0], "parts": [{"text": "h" * BIG}]}]
    )
    silent = [silent_subscriber(stack, demo, task_id) for _ in range(PER_TOKEN)]
    try:
        # Both take the token's slots; their writes wait on clients that never read, until
        # the write timeout drops them: then a reader of the same token gets in.
        wait_until(
            lambda: subscribe_reads_first_frame(stack, demo, task_id),
            60,
            interval=0.5,
            what="a slot of the token to be given back",
        )
        for sock in silent:
            got = closed_by_server(sock)
            assert got is not None, "the server kept a silent client's connection open"
            assert got < BIG  # dropped with most of its frame never sent
    finally:
        for sock in silent:
            sock.close()
    assert "A2A stream dropped: its client read nothing for 1s" in stack.logs()
    assert Task.objects.get(pk=task.pk).state == "TASK_STATE_AUTH_REQUIRED"
