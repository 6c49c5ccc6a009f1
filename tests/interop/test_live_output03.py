"""Live output to 0.3 clients: both a2a-sdk clients that speak 0.3 (the a2a-sdk 0.3 client
itself, and the a2a-sdk 1.3 over its 0.3 transport) stream a message to an agent whose
hosted model streams its reply (tests/llm_stub.py), on a live server of its own.

Both SDKs read the first Message of a 0.3 stream as the whole answer and close the stream
(0.3: a stream is one Message, or a Task and its updates). The text a model writes as it
goes must therefore reach them as the Task's artifact updates, and the caller must end with
the whole reply and a completed task. PostgreSQL only: live text travels as NOTIFY."""

import threading
import uuid

import pytest
from a2a.types import TaskState
from django.db import connection

from runtime.agents.agentfile import AgentSpec, agent_upsert
from runtime.kernel.task_models import Task
from runtime.kernel.task_models import TaskState as State
from tenants.models import Tenant
from tests.interop.clients03 import Partner03, client03
from tests.live import LiveStack, wait_until
from tests.llm_stub import LLMStub, completion
from tests.sdk_client import as_dict, user_message

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.postgres,
    pytest.mark.skipif(
        connection.vendor != "postgresql", reason="live output travels as PostgreSQL NOTIFY"
    ),
]

KEY = "sk-test-" + "lo03" * 8
REPLY = "Deployed b-7731 to staging. All checks passed."


@pytest.fixture(scope="module")
def stub():
    server = LLMStub().start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def stack(django_db_setup, django_db_blocker, tmp_path_factory, stub):
    with django_db_blocker.unblock():
        live = LiveStack(
            tmp_path_factory.mktemp("live-output-03"),
            extra_env={
                "CELERY_QUEUE": f"test-live03-{uuid.uuid4().hex[:8]}",
                "OPENAI_BASE_URL": stub.url,
                "OPENAI_API_KEY": KEY,
                "MODEL_RETRY_BASE_SECONDS": "0",
                "A2A_STREAM_KEEPALIVE_SECONDS": "1",
            },
        ).start()
    yield live
    live.stop()


@pytest.fixture
def agent_path(stack, demo, stub):
    with stub.lock:
        stub.requests.clear()
        stub.script.clear()
    tenant = Tenant.objects.get(slug=demo["tenant"])
    spec = AgentSpec(
        slug="live-writer",
        name="live-writer",
        description="Answers on a hosted model that streams.",
        skills=[{"id": "write", "name": "Write", "description": "w", "tags": [], "examples": []}],
        instructions="You answer.",
        model={"provider": "openai", "model": "gpt-4o-mini"},
    )
    agent, _ = agent_upsert(tenant=tenant, spec=spec)
    yield f"/a2a/{tenant.slug}/{agent.slug}"
    stack.quiesce()


def _handed_out() -> bool:
    """Whether the stream gave its caller the task (live text came, and with it the Task)."""
    return Task.objects.filter(agent__slug="live-writer", direct=False).exists()


def test_the_a2a_sdk_0_3_client_streams_the_whole_reply_and_a_completed_task(
    stack, demo, stub, agent_path
):
    # The model stops after two words until the test lets it go on: the first words reach
    # the caller while the rest is still being written.
    gate = threading.Event()
    stub.play(completion(REPLY, stream_hold=gate, stream_hold_after=2))
    command = {
        "do": "send",
        "url": f"{stack.url}{agent_path}",
        "token": demo["token"],
        "text": "deploy b-7731",
        "streaming": True,
    }
    answer: dict = {}

    def run_client():
        try:
            answer.update(client03(command))
        except BaseException as exc:  # noqa: BLE001 - reported by the test below
            answer["failed"] = repr(exc)

    client = threading.Thread(target=run_client)
    client.start()
    try:
        wait_until(
            lambda: not client.is_alive() or _handed_out(), 60, what="the stream's first frames"
        )
    finally:
        gate.set()
        client.join(120)
    assert answer and "failed" not in answer, answer

    events = answer["events"]
    # A series of Task updates, not a Message: the client read the stream to its end.
    assert all(e["kind"] == "task" for e in events), events
    task = events[-1]["task"]
    assert task["status"]["state"] == "completed"
    assert task["status"]["message"]["parts"] == [{"kind": "text", "text": REPLY}]
    # The live text, as the client put its artifact updates together.
    updates = [e["update"] for e in events if e.get("update", {}).get("kind") == "artifact-update"]
    assert updates, events
    [artifact] = task["artifacts"]
    assert "".join(p["text"] for p in artifact["parts"]) == REPLY
    # The turn completed (nothing canceled it) and the task is the caller's.
    stored = Task.objects.get(public_id=task["id"])
    assert stored.state == State.COMPLETED and not stored.direct


def test_the_a2a_sdk_1_3_over_0_3_streams_the_whole_reply_and_a_completed_task(
    stack, demo, stub, agent_path
):
    gate = threading.Event()
    stub.play(completion(REPLY, stream_hold=gate, stream_hold_after=2))
    partner = Partner03(stack.url, demo["token"])

    def on_event(event):
        # The first live text has come: the model may finish its reply.
        if event.HasField("artifact_update"):
            gate.set()

    try:
        events = partner.stream(agent_path, user_message("deploy b-7731"), on_event=on_event)
    finally:
        gate.set()
        partner.close()
    assert partner.requests == [("message/stream", "0.3")]

    kinds = [e.WhichOneof("payload") for e in events]
    assert kinds[0] == "task" and "message" not in kinds, kinds
    live = [e.artifact_update for e in events if e.HasField("artifact_update")]
    assert "".join(u.artifact.parts[0].text for u in live) == REPLY
    assert [u.append for u in live] == [False] + [True] * (len(live) - 1)
    last = events[-1].status_update
    assert last.status.state == TaskState.TASK_STATE_COMPLETED
    assert as_dict(last.status.message)["parts"] == [{"text": REPLY}]
    stored = Task.objects.get(public_id=events[0].task.id)
    assert stored.state == State.COMPLETED and not stored.direct
