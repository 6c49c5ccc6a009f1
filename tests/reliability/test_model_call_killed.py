"""A worker killed (SIGKILL) while a model call is in flight, just after a held tool call was
approved and sent: the sweep hands the turn to another worker, which resumes from its journal
and asks the model again, and the approved call is not sent twice (the stub's requests and
the DemoRecord count prove it)."""

import threading
import uuid

import pytest
from a2a.types import TaskState

from runtime.agents.agent_models import DemoRecord
from runtime.agents.agentfile import AgentSpec, agent_upsert
from runtime.decisions.decision_models import Effect, Interaction
from runtime.kernel.task_models import Task
from tenants.models import Tenant
from tests.core import DEPLOY_TOOL, decide
from tests.live import LiveStack, wait_until
from tests.llm_stub import LLMStub, call, completion
from tests.sdk_client import Partner, status_text, user_message

pytestmark = pytest.mark.django_db(transaction=True)

KEY = "sk-test-" + "kill" * 8
LLM_DEPLOYER = AgentSpec(
    slug="llm-deployer",
    name="llm-deployer",
    description="Deploys builds, on a hosted model.",
    skills=[
        {"id": "deploy", "name": "Deploy", "description": "Deploys.", "tags": [], "examples": []}
    ],
    instructions="You deploy builds.",
    model={"provider": "openai", "model": "gpt-4o-mini"},
    tools=[DEPLOY_TOOL],
    tool_policy={"deploy/deploy_build": "approve"},
)


@pytest.fixture
def stub():
    server = LLMStub().start()
    yield server
    server.stop()


@pytest.fixture
def stack(tmp_path, settings, stub):
    queue = f"reliability-{uuid.uuid4().hex[:8]}"
    stack = LiveStack(
        tmp_path,
        beat=True,
        extra_env={
            "TURN_LEASE_SECONDS": "3",
            "TURN_SWEEP_SECONDS": "1",
            "CELERY_QUEUE": queue,
            "OPENAI_BASE_URL": stub.url,
            "OPENAI_API_KEY": KEY,
        },
    )
    # The operator's decision, made in this process, must reach this stack's worker.
    settings.CELERY_TASK_DEFAULT_QUEUE = queue
    try:
        yield stack.start()
    finally:
        stack.stop()


def test_a_worker_killed_during_a_model_call_resumes_without_sending_the_call_again(
    stack, stub, demo
):
    in_flight = threading.Event()  # the second model call hangs until the test lets it go
    stub.play(
        completion(
            calls=[
                call("deploy__deploy_build", {"build": "b-9", "environment": "staging"}, "call_dep")
            ]
        ),
        completion("never seen", hold=in_flight),
        completion("Deployed b-9 to staging."),
    )
    tenant = Tenant.objects.get(slug=demo["tenant"])
    agent, _ = agent_upsert(tenant=tenant, spec=LLM_DEPLOYER)
    path = f"/a2a/{tenant.slug}/{agent.slug}"
    partner = Partner(stack.url, demo["token"])
    try:
        sent = partner.send(path, user_message("deploy b-9 to staging"), polling=True)
        interaction = wait_until(
            lambda: Interaction.objects.filter(
                task__public_id=sent.id, state=Interaction.State.OPEN
            ).first(),
            30,
            what="the deploy call to be held",
        )
        decide(interaction, by="user:operator@demo.test", approved=True)
        # The approved call is sent, then the model is asked again: kill the worker mid-call.
        stub.wait_for_requests(2, timeout=30)
        assert DemoRecord.objects.count() == 1
        sent_once = Effect.objects.get(task__public_id=sent.id)
        assert sent_once.state == Effect.State.SUCCEEDED
        first_run = Task.objects.get(public_id=sent.id).runs[-1]["runId"]
        stack.kill_worker()
        stack.start_worker()
        done = partner.wait_for(path, sent.id, timeout=60)
    finally:
        in_flight.set()
        partner.close()

    assert done.status.state == TaskState.TASK_STATE_COMPLETED, stack.logs()
    assert status_text(done) == "Deployed b-9 to staging."
    # Sent once: one deployment, one effect, closed once.
    assert DemoRecord.objects.count() == 1
    effect = Effect.objects.get(task__public_id=sent.id)
    assert effect.state == Effect.State.SUCCEEDED
    assert (effect.sent_at, effect.closed_at) == (sent_once.sent_at, sent_once.closed_at)
    journal = Task.objects.get(public_id=sent.id).transcript
    assert [e["step"] for e in journal if e["type"] == "tool_result"] == [effect.step]
    # Three model calls: the first reply, the one cut short, and the resumed turn's, which
    # saw the same conversation as the one cut short (the call's result, once).
    assert len(stub.requests) == 3
    cut_short, resumed = stub.requests[1]["body"], stub.requests[2]["body"]
    assert resumed == cut_short
    tool_messages = [m for m in resumed["messages"] if m["role"] == "tool"]
    assert [m["tool_call_id"] for m in tool_messages] == ["call_dep"]
    assert f"dep-{DemoRecord.objects.get().pk}" in tool_messages[0]["content"]
    assert all(KEY not in r["raw"] for r in stub.requests)
    runs = Task.objects.get(public_id=sent.id).runs
    killed = next(r for r in runs if r["runId"] == first_run)
    after = [r for r in runs if r["resumedFrom"] == first_run]
    assert len(after) == 1
    assert after[0]["worker"] != killed["worker"]
