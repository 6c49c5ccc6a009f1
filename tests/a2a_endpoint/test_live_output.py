"""Live output on a live server: uvicorn and a Celery worker of their own,
an agent on ``provider: openai`` whose model is the local stub (tests/llm_stub.py), which
streams real SSE chunks and can stop mid-reply until the test lets it go on.

A partner that streams its message gets the model's text as it is written, before the final
reply, as the deltas of one artifact (a 0.x direct ``message/stream`` becomes its task's
stream at the first piece). The journal records the final reply only; a caller that does
not stream makes the model answer unstreamed. PostgreSQL only: the text travels as NOTIFY."""

import json
import threading
import time
import uuid

import httpx
import pytest
from django.db import connection

from runtime.agents.agent_models import DemoRecord
from runtime.agents.agentfile import AgentSpec, agent_upsert
from runtime.kernel.task_models import Task, TaskEvent, TaskState
from tenants.models import Tenant
from tenants.tokens import api_token_create
from tests.core import DEPLOY_TOOL
from tests.live import LiveStack, wait_until
from tests.llm_stub import LLMStub, call, completion

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.postgres,
    pytest.mark.skipif(
        connection.vendor != "postgresql", reason="live output travels as PostgreSQL NOTIFY"
    ),
]

KEY = "sk-test-" + "lv31" * 8
QUEUE = f"test-live-{uuid.uuid4().hex[:8]}"
REPLY = "Deployed b-7731 to staging. All checks passed."
SECRET_BUILD = "b-90210"  # in a tool call's arguments only: never on the wire


@pytest.fixture(scope="module")
def stub():
    server = LLMStub().start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def stack(django_db_setup, django_db_blocker, tmp_path_factory, stub):
    with django_db_blocker.unblock():
        live = LiveStack(
            tmp_path_factory.mktemp("live-output"),
            extra_env={
                "CELERY_QUEUE": QUEUE,
                "OPENAI_BASE_URL": stub.url,
                "OPENAI_API_KEY": KEY,
                "MODEL_RETRY_BASE_SECONDS": "0",
                # A line a second at least: a read that waits for a frame can see its deadline.
                "A2A_STREAM_KEEPALIVE_SECONDS": "1",
            },
        ).start()
    yield live
    live.stop()


@pytest.fixture
def agent_url(stack, demo, stub):
    with stub.lock:
        stub.requests.clear()
        stub.script.clear()
    tenant = Tenant.objects.get(slug=demo["tenant"])
    agent, _ = agent_upsert(tenant=tenant, spec=deployer_spec())
    yield f"{stack.url}/a2a/{tenant.slug}/{agent.slug}"
    stack.quiesce()


def deployer_spec() -> AgentSpec:
    return AgentSpec(
        slug="live-deployer",
        name="live-deployer",
        description="Deploys builds, on a hosted model.",
        skills=[{"id": "deploy", "name": "Deploy", "description": "d", "tags": [], "examples": []}],
        instructions="You deploy builds.",
        model={"provider": "openai", "model": "gpt-4o-mini"},
        tools=[DEPLOY_TOOL],
        tool_policy={"deploy/deploy_build": "allow"},
    )


def body(method: str, text: str, **message) -> dict:
    role = "user" if "/" in method else "ROLE_USER"
    return {
        "jsonrpc": "2.0",
        "id": "live-1",
        "method": method,
        "params": {
            "message": {
                "messageId": str(uuid.uuid4()),
                "role": role,
                "parts": [{"text": text}],
                **message,
            }
        },
    }


class Stream:
    """An SSE response read frame by frame."""

    def __init__(self, client: httpx.Client, url: str, payload: dict, headers: dict):
        request = client.build_request(
            "POST",
            url,
            json=payload,
            headers={"Content-Type": "application/json", **headers},
        )
        self.response = client.send(request, stream=True)
        assert self.response.status_code == 200, self.response.read()
        assert self.response.headers["content-type"].startswith("text/event-stream")
        self.lines = self.response.iter_lines()
        self.frames: list[dict] = []

    def read_until(self, done, timeout: float = 30) -> list[dict]:
        deadline = time.monotonic() + timeout
        for line in self.lines:
            if line.startswith("data: "):
                self.frames.append(json.loads(line.removeprefix("data: "))["result"])
                if done(self.frames):
                    break
            if time.monotonic() > deadline:
                raise TimeoutError(f"the stream did not get there; it sent {self.frames}")
        return self.frames

    def close(self):
        self.response.close()


def live_text(frames: list[dict]) -> str:
    return "".join(
        f["artifactUpdate"]["artifact"]["parts"][0]["text"] for f in frames if "artifactUpdate" in f
    )


def closed(frames: list[dict]) -> bool:
    return "statusUpdate" in frames[-1] and frames[-1]["statusUpdate"]["status"]["state"] in (
        "TASK_STATE_COMPLETED",
        "TASK_STATE_FAILED",
    )


def partner(demo) -> dict:
    return {"Authorization": f"Bearer {demo['token']}", "A2A-Version": "1.0"}


def test_a_streaming_partner_receives_the_reply_text_before_the_final_reply(agent_url, demo, stub):
    gate = threading.Event()
    stub.play(completion(REPLY, usage=(120, 9), stream_hold=gate, stream_hold_after=2))
    with httpx.Client(timeout=60) as client:
        stream = Stream(client, agent_url, body("SendStreamingMessage", "deploy"), partner(demo))
        try:
            frames = stream.read_until(lambda f: live_text(f) == "Deployed b-7731 ")
            task = Task.objects.get(public_id=frames[0]["task"]["id"])
            # The text arrived while the model is still writing: nothing of the reply is
            # recorded yet.
            assert task.state == TaskState.WORKING
            assert not [e for e in task.transcript if e["type"] in ("model", "action")]
            gate.set()
            frames = stream.read_until(closed)
        finally:
            gate.set()
            stream.close()

    kinds = [next(iter(f)) for f in frames]
    updates = [f["artifactUpdate"] for f in frames if "artifactUpdate" in f]
    first_live, last_live = (
        kinds.index("artifactUpdate"),
        len(kinds) - 1 - kinds[::-1].index("artifactUpdate"),
    )
    # The Task, its WORKING status, the live text, then the final status: in that order.
    assert kinds[0] == "task"
    assert kinds[first_live - 1] == "statusUpdate"
    assert frames[first_live - 1]["statusUpdate"]["status"]["state"] == "TASK_STATE_WORKING"
    assert kinds[last_live + 1 :] == ["statusUpdate"]
    final = frames[-1]["statusUpdate"]["status"]
    assert final["state"] == "TASK_STATE_COMPLETED"
    assert final["message"]["parts"] == [{"text": REPLY}]
    # One artifact, in pieces: the first replaces, the others append, the last says so.
    assert len({u["artifact"]["artifactId"] for u in updates}) == 1
    assert [u["append"] for u in updates] == [False] + [True] * (len(updates) - 1)
    assert [u["lastChunk"] for u in updates] == [False] * (len(updates) - 1) + [True]
    assert live_text(frames) == REPLY
    assert all(u["taskId"] == task.public_id for u in updates)

    # The model was asked to stream; the journal keeps the final reply only.
    asked = stub.bodies()[0]
    assert asked["stream"] is True and asked["stream_options"] == {"include_usage": True}
    task.refresh_from_db()
    assert task.live
    assert [e["action"]["kind"] for e in task.transcript if e["type"] == "action"] == ["reply"]
    assert task.tokens == 129
    assert not TaskEvent.objects.filter(task=task, kind=TaskEvent.Kind.ARTIFACT).exists()
    got = httpx.post(
        agent_url,
        json={"jsonrpc": "2.0", "id": 2, "method": "GetTask", "params": {"id": task.public_id}},
        headers=partner(demo),
        timeout=30,
    ).json()["result"]
    assert got["status"]["message"]["parts"] == [{"text": REPLY}]
    assert "artifacts" not in got or got["artifacts"] == []


def test_the_text_of_a_reply_written_at_once_comes_before_its_final_status(agent_url, demo, stub):
    """No wait between the last piece and the reply's end: every piece is sent before the
    step that records the reply commits, and the stream writes the events up to the one
    each announcement names, so none of the text is overtaken by the final status."""
    gate = threading.Event()
    stub.play(completion(REPLY, stream_hold=gate, stream_hold_after=0))
    with httpx.Client(timeout=60) as client:
        stream = Stream(client, agent_url, body("SendStreamingMessage", "deploy"), partner(demo))
        try:
            stream.read_until(lambda f: "statusUpdate" in f[-1])  # the turn started
            gate.set()
            frames = stream.read_until(closed)
        finally:
            gate.set()
            stream.close()
    kinds = [next(iter(f)) for f in frames]
    assert live_text(frames) == REPLY
    assert (
        kinds[-1] == "statusUpdate"
        and "statusUpdate" not in kinds[kinds.index("artifactUpdate") : -1]
    )
    assert frames[-1]["statusUpdate"]["status"]["state"] == "TASK_STATE_COMPLETED"


def test_a_stream_that_attaches_mid_reply_gets_what_comes_after(agent_url, demo, stub):
    gate = threading.Event()
    stub.play(completion(REPLY, stream_hold=gate, stream_hold_after=2))
    with httpx.Client(timeout=60) as client:
        sender = Stream(client, agent_url, body("SendStreamingMessage", "deploy"), partner(demo))
        try:
            frames = sender.read_until(lambda f: live_text(f) == "Deployed b-7731 ")
            task_id = frames[0]["task"]["id"]
            subscribe = {
                "jsonrpc": "2.0",
                "id": "sub",
                "method": "SubscribeToTask",
                "params": {"id": task_id},
            }
            late = Stream(client, agent_url, subscribe, partner(demo))
            late.read_until(lambda f: "task" in f[0])
            gate.set()
            late_frames = late.read_until(closed)
            frames = sender.read_until(closed)
        finally:
            gate.set()
            sender.close()

    assert live_text(frames) == REPLY
    assert live_text(late_frames) == "to staging. All checks passed."
    late_updates = [f["artifactUpdate"] for f in late_frames if "artifactUpdate" in f]
    assert late_updates[0]["append"] is False  # it starts the artifact with what it has
    assert late_updates[-1]["lastChunk"] is True
    assert late_frames[-1]["statusUpdate"]["status"]["message"]["parts"] == [{"text": REPLY}]


def test_a_partner_that_does_not_stream_gets_no_live_text_and_the_model_does_not_stream(
    agent_url, demo, stub
):
    stub.play(completion(REPLY))
    result = httpx.post(
        agent_url, json=body("SendMessage", "deploy"), headers=partner(demo), timeout=60
    ).json()["result"]
    assert result["task"]["status"]["state"] == "TASK_STATE_COMPLETED"
    assert result["task"]["status"]["message"]["parts"] == [{"text": REPLY}]
    asked = stub.bodies()[0]
    assert "stream" not in asked and "stream_options" not in asked
    assert not Task.objects.get(public_id=result["task"]["id"]).live


def test_a_tool_call_in_a_streamed_reply_is_not_written_as_text_and_is_made(agent_url, demo, stub):
    arguments = {"build": SECRET_BUILD, "environment": "staging"}
    stub.play(
        completion("Deploying now.", calls=[call("deploy__deploy_build", arguments, "call_1")]),
        completion("Done: the build is on staging."),
    )
    with httpx.Client(timeout=60) as client:
        stream = Stream(client, agent_url, body("SendStreamingMessage", "deploy"), partner(demo))
        try:
            frames = stream.read_until(closed)
            raw = json.dumps(frames)
        finally:
            stream.close()

    assert frames[-1]["statusUpdate"]["status"]["state"] == "TASK_STATE_COMPLETED"
    # Each model reply is an artifact of its own; the call is in neither.
    updates = [f["artifactUpdate"] for f in frames if "artifactUpdate" in f]
    texts: dict[str, str] = {}
    for update in updates:
        artifact = update["artifact"]
        texts[artifact["artifactId"]] = (
            texts.get(artifact["artifactId"], "") + (artifact["parts"][0]["text"])
        )
    assert list(texts.values()) == ["Deploying now.", "Done: the build is on staging."]
    assert SECRET_BUILD not in raw and "deploy__deploy_build" not in raw
    # The call was made as ever: once.
    assert DemoRecord.objects.count() == 1
    assert [b.get("stream") for b in stub.bodies()] == [True, True]


def test_a_1_0_partner_that_leaves_mid_reply_does_not_break_the_turn(agent_url, demo, stub):
    gate = threading.Event()
    stub.play(completion(REPLY, stream_hold=gate, stream_hold_after=2))
    with httpx.Client(timeout=60) as client:
        stream = Stream(client, agent_url, body("SendStreamingMessage", "deploy"), partner(demo))
        try:
            frames = stream.read_until(lambda f: bool(live_text(f)))
        finally:
            stream.close()  # the partner goes away mid-reply
            gate.set()
    assert live_text(frames) and REPLY.startswith(live_text(frames))
    task_id = frames[0]["task"]["id"]
    done = wait_until(
        lambda: (t := Task.objects.get(public_id=task_id)).state in (TaskState.COMPLETED,) and t,
        30,
        what="the turn to complete",
    )
    assert done.status_message["parts"] == [{"text": REPLY}]


def live_text03(frames: list[dict]) -> str:
    return "".join(
        f["artifact"]["parts"][0]["text"] for f in frames if f["kind"] == "artifact-update"
    )


def test_a_0_x_direct_stream_with_live_text_becomes_its_task_stream(agent_url, demo, stub):
    """A stream is one Message, or a Task and its updates: the a2a-sdk clients take a first
    Message for the whole answer. So the model's text comes after the Task, as its artifact
    updates, and the stream ends with the completed status carrying the whole reply."""
    gate = threading.Event()
    stub.play(completion(REPLY, stream_hold=gate, stream_hold_after=2))
    headers = {"Authorization": f"Bearer {demo['token']}"}  # no A2A-Version: 0.3
    with httpx.Client(timeout=60) as client:
        stream = Stream(client, agent_url, body("message/stream", "deploy"), headers)
        try:
            frames = stream.read_until(lambda f: live_text03(f) == "Deployed b-7731 ")
            gate.set()
            frames = stream.read_until(lambda f: False)  # to the stream's end
        finally:
            gate.set()
            stream.close()

    kinds = [f["kind"] for f in frames]
    assert kinds[0] == "task" and "message" not in kinds, kinds
    task_id = frames[0]["id"]
    updates = [f for f in frames if f["kind"] == "artifact-update"]
    assert live_text03(frames) == REPLY
    assert [u["append"] for u in updates] == [False] + [True] * (len(updates) - 1)
    assert updates[-1]["lastChunk"] is True
    assert all(u["taskId"] == task_id for u in updates)
    statuses = [f for f in frames if f["kind"] == "status-update"]
    assert [s["final"] for s in statuses] == [False] * (len(statuses) - 1) + [True]
    final = frames[-1]
    assert final["kind"] == "status-update" and final["status"]["state"] == "completed"
    assert final["status"]["message"]["parts"] == [{"kind": "text", "text": REPLY}]
    # The caller holds the task: every task method finds it.
    task = Task.objects.get(public_id=task_id)
    assert not task.direct and task.state == TaskState.COMPLETED
    got = httpx.post(
        agent_url,
        json={"jsonrpc": "2.0", "id": 2, "method": "tasks/get", "params": {"id": task_id}},
        headers=headers,
        timeout=30,
    ).json()["result"]
    assert got["status"]["state"] == "completed"


def test_a_0_x_stream_closed_after_the_first_text_of_the_reply_leaves_the_turn_running(
    agent_url, demo, stub
):
    """A 0.3 client that reads the reply's first words and closes the stream (as the a2a-sdk
    clients do after what they read as the whole answer) holds the task: the turn goes on."""
    gate = threading.Event()
    stub.play(completion(REPLY, stream_hold=gate, stream_hold_after=2))
    headers = {"Authorization": f"Bearer {demo['token']}"}
    with httpx.Client(timeout=60) as client:
        stream = Stream(client, agent_url, body("message/stream", "deploy"), headers)
        try:
            frames = stream.read_until(
                lambda f: any("Deployed" in json.dumps(frame) for frame in f)
            )
        finally:
            stream.close()
            gate.set()
    assert frames[0]["kind"] == "task", frames
    done = wait_until(
        lambda: (t := Task.objects.get(agent__slug="live-deployer")).is_terminal and t,
        30,
        what="the turn to end",
    )
    assert done.state == TaskState.COMPLETED, done.status_message
    assert done.status_message["parts"] == [{"text": REPLY}]
    assert not done.direct


def test_a_0_x_direct_stream_left_before_any_text_aborts_the_turn(agent_url, demo, stub, stack):
    """The 0.x direct stream's rule stands while the caller holds nothing: leaving a direct stream before
    its first frame aborts the turn, and no background task is left."""
    gate = threading.Event()
    stub.play(completion(REPLY, stream_hold=gate, stream_hold_after=0))
    headers = {"Authorization": f"Bearer {demo['token']}"}
    with httpx.Client(timeout=60) as client:
        stream = Stream(client, agent_url, body("message/stream", "deploy"), headers)
        try:
            wait_until(lambda: stub.bodies(), 30, what="the model to be asked")
        finally:
            stream.close()
    task = Task.objects.get(agent__slug="live-deployer")
    wait_until(
        lambda: Task.objects.get(pk=task.pk).state == TaskState.CANCELED,
        30,
        what="the turn to be aborted",
    )
    gate.set()
    wait_until(
        lambda: any(
            f"task={task.public_id}" in line and "lease lost or task no longer working" in line
            for line in stack.logs().splitlines()
        ),
        30,
        what="the worker to drop the aborted turn",
    )
    task.refresh_from_db()
    assert task.state == TaskState.CANCELED and task.direct
    assert not [e for e in task.transcript if e["type"] == "action"]


# --- live output reaches the task's own caller only ------------------------------------------


def intruders(demo, stack, agent_url: str) -> dict[str, tuple[str, dict]]:
    """Callers who must not reach the demo partner's task: another subject of its tenant,
    a caller of another tenant (at its own agent of the same name, and at the demo's)."""
    home = Tenant.objects.get(slug=demo["tenant"])
    _, colleague = api_token_create(tenant=home, subject="partner:initech", name="initech")
    other = Tenant.objects.create(slug="globex", name="Globex")
    agent_upsert(tenant=other, spec=deployer_spec())
    _, stranger = api_token_create(tenant=other, subject="partner:globex", name="globex")
    return {
        "another subject": (agent_url, {"Authorization": f"Bearer {colleague}"}),
        "another tenant": (
            f"{stack.url}/a2a/globex/live-deployer",
            {"Authorization": f"Bearer {stranger}"},
        ),
        "another tenant's token here": (agent_url, {"Authorization": f"Bearer {stranger}"}),
    }


def attempts(task_id: str, context_id: str) -> dict[str, tuple[str, str, dict | None, dict]]:
    """Every way to be handed a task's stream: (method, path after the agent's URL, JSON-RPC
    body or None for the HTTP+JSON binding, headers)."""
    v1, v03 = {"A2A-Version": "1.0"}, {"A2A-Version": "0.3"}

    def rpc(method, params):
        return {"jsonrpc": "2.0", "id": "x", "method": method, "params": params}

    answer = {"messageId": str(uuid.uuid4()), "taskId": task_id, "contextId": context_id}
    return {
        "SubscribeToTask": ("POST", "", rpc("SubscribeToTask", {"id": task_id}), v1),
        "SendStreamingMessage on the task": (
            "POST",
            "",
            rpc(
                "SendStreamingMessage",
                {"message": {**answer, "role": "ROLE_USER", "parts": [{"text": "more"}]}},
            ),
            v1,
        ),
        "HTTP+JSON subscribe": ("POST", f"/tasks/{task_id}:subscribe", None, v1),
        "HTTP+JSON subscribe (GET)": ("GET", f"/tasks/{task_id}:subscribe", None, v1),
        "tasks/resubscribe": ("POST", "", rpc("tasks/resubscribe", {"id": task_id}), v03),
        "message/stream on the task": (
            "POST",
            "",
            rpc(
                "message/stream",
                {
                    "message": {
                        **answer,
                        "kind": "message",
                        "role": "user",
                        "parts": [{"kind": "text", "text": "more"}],
                    }
                },
            ),
            v03,
        ),
    }


def test_no_other_caller_receives_a_tasks_live_output(agent_url, demo, stub, stack):
    gate = threading.Event()
    stub.play(completion(REPLY, stream_hold=gate, stream_hold_after=2))
    others = intruders(demo, stack, agent_url)
    with httpx.Client(timeout=60) as client:
        owner = Stream(client, agent_url, body("SendStreamingMessage", "deploy"), partner(demo))
        try:
            frames = owner.read_until(lambda f: live_text(f) == "Deployed b-7731 ")
            task = frames[0]["task"]
            answers = {}
            # While the model is writing the reply (its text going out to its streams):
            for who, (url, auth) in others.items():
                for what, (verb, path, payload, version) in attempts(
                    task["id"], task["contextId"]
                ).items():
                    request = client.build_request(
                        verb, url + path, json=payload, headers={**auth, **version}
                    )
                    response = client.send(request, stream=True)
                    try:
                        if response.headers["content-type"].startswith("text/event-stream"):
                            # A stream it should never have had: its first frame shows it.
                            lines = response.iter_lines()
                            text = next(line for line in lines if line.startswith("data: "))
                        else:
                            text = response.read().decode()
                        answers[who, what] = (response, text)
                    finally:
                        response.close()
            gate.set()
            frames = owner.read_until(closed)
        finally:
            gate.set()
            owner.close()

    assert live_text(frames) == REPLY  # the text was going out all along, to its caller
    for (who, what), (response, text) in answers.items():
        assert response.headers["content-type"].startswith("application/json"), (who, what)
        assert "Deployed" not in text and "live-" not in text, (who, what, text)
        answer = json.loads(text)
        if who == "another tenant's token here":
            # Its token reaches none of this tenant's agents: refused before any task is
            # looked up, as an agent that does not exist.
            assert response.status_code == 404 and "AGENT_NOT_FOUND" in text, (who, what, text)
        elif "HTTP+JSON" in what:
            assert (response.status_code, answer["error"]["status"]) == (404, "NOT_FOUND")
        else:
            assert answer["error"]["code"] == -32001, (who, what, answer)  # TaskNotFound
    # Nothing was made for them, and the task ran to its end once.
    assert Task.objects.count() == 1
    assert Task.objects.get(public_id=task["id"]).state == TaskState.COMPLETED
