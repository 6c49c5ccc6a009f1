"""A 0.x host's direct stream on a live server (uvicorn and a Celery worker): disconnecting
during generation aborts the streamed turn; it does not create a background task. Only a 0.x
direct stream does that; a 1.0 stream that closes ends its watching, never the task."""

import uuid

import httpx
import pytest

from runtime.kernel.task_models import Task, TaskState
from tests.live import wait_until

pytestmark = pytest.mark.django_db(transaction=True)


def _open(client: httpx.Client, url: str, body: dict, headers: dict) -> httpx.Response:
    request = client.build_request(
        "POST", url, json=body, headers={"Content-Type": "application/json", **headers}
    )
    response = client.send(request, stream=True)
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/event-stream")
    return response


def _task_of(message_id: str) -> Task | None:
    # The public conformance agent: each anonymous task has a subject of its own, so the
    # message's id is what finds it.
    for task in Task.objects.filter(agent__slug="tck").order_by("-pk")[:20]:
        if task.history and task.history[0].get("messageId") == message_id:
            return task
    return None


def _working(message_id: str) -> Task | None:
    task = _task_of(message_id)
    return task if task is not None and task.state == TaskState.WORKING else None


def test_disconnecting_a_direct_0_x_stream_during_generation_aborts_the_turn(live_stack, demo):
    url = f"{live_stack.url}{demo['agents']['tck']}"
    # The conformance agent's slow scenario: the turn waits 4 s before it answers.
    message_id = f"test-resubscribe-message-id-{uuid.uuid4()}"
    body = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "message/stream",
        "params": {"message": {"role": "user", "messageId": message_id, "parts": [{"text": "go"}]}},
    }
    with httpx.Client(timeout=30) as client:
        response = _open(client, url, body, {})
        task = wait_until(lambda: _working(message_id), 30, what="the turn to start")
        response.close()
    aborted = wait_until(
        lambda: (t := Task.objects.get(pk=task.pk)).state == TaskState.CANCELED and t,
        30,
        what="the turn to be aborted",
    )
    assert aborted.direct  # never handed out: no task method finds it
    # The worker's turn stops at its next step instead of finishing: no background task.
    wait_until(
        lambda: any(
            f"task={task.public_id}" in line and "lease lost or task no longer working" in line
            for line in live_stack.logs().splitlines()
        ),
        30,
        what="the worker to drop the aborted turn",
    )
    assert Task.objects.get(pk=task.pk).state == TaskState.CANCELED


def test_a_1_0_stream_that_closes_leaves_the_turn_running(live_stack, demo):
    url = f"{live_stack.url}{demo['agents']['tck']}"
    message_id = f"test-resubscribe-message-id-{uuid.uuid4()}"
    body = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "SendStreamingMessage",
        "params": {
            "message": {"role": "ROLE_USER", "messageId": message_id, "parts": [{"text": "go"}]}
        },
    }
    with httpx.Client(timeout=30) as client:
        response = _open(client, url, body, {"A2A-Version": "1.0"})
        task = wait_until(lambda: _working(message_id), 30, what="the turn to start")
        response.close()
    done = wait_until(
        lambda: (
            (t := Task.objects.get(pk=task.pk)).state
            in (
                TaskState.COMPLETED,
                TaskState.CANCELED,
            )
            and t
        ),
        30,
        what="the turn to end",
    )
    assert done.state == TaskState.COMPLETED
