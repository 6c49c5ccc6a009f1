"""Flow 5: a worker killed while a tool call is out. The resumed turn finds the call sent but
not closed, so the task stays WORKING with `uncertain` under effects/v1 until an operator
says what happened; each of the three resolutions then finishes the turn."""

import uuid

import pytest
from a2a.types import TaskState

from runtime.agents.agent_models import DemoRecord
from runtime.agents.agentfile import AgentSpec, agent_upsert
from runtime.decisions.decision_models import Effect
from runtime.decisions.effects import effect_resolve
from runtime.kernel import extensions as ext
from runtime.kernel.task_models import Task
from tenants.models import Tenant
from tests.live import LiveStack, wait_until
from tests.sdk_client import Partner, as_dict, status_text, user_message

pytestmark = pytest.mark.django_db(transaction=True)

SLOW_DEPLOYER = AgentSpec(
    slug="slow-deployer",
    name="slow-deployer",
    description="Deploys slowly, without asking.",
    skills=[
        {"id": "deploy", "name": "Deploy", "description": "Deploys.", "tags": [], "examples": []}
    ],
    tools=[
        {
            "server": "deploy",
            "tool": "deploy_build",
            "schema": {
                "type": "object",
                "properties": {
                    "build": {"type": "string"},
                    "environment": {"type": "string"},
                    "durationSeconds": {"type": "number"},
                },
                "required": ["build", "environment"],
            },
        }
    ],
    tool_policy={"deploy/deploy_build": "allow"},
    model={
        "provider": "scripted",
        "script": [
            {
                "steps": [
                    {
                        "call": {
                            "server": "deploy",
                            "tool": "deploy_build",
                            "args": {
                                "build": "b-7",
                                "environment": "staging",
                                "durationSeconds": 6,
                            },
                        }
                    },
                    {
                        "if": {"result": "ok"},
                        "reply": "Deployed as {{ last.result.deploymentId }}.",
                    },
                    {"if": {"result": "error"}, "reply": "Not deployed: {{ last.error }}"},
                ]
            }
        ],
    },
)


@pytest.fixture
def stack(tmp_path, settings):
    queue = f"reliability-{uuid.uuid4().hex[:8]}"
    stack = LiveStack(
        tmp_path,
        beat=True,
        extra_env={"TURN_LEASE_SECONDS": "3", "TURN_SWEEP_SECONDS": "1", "CELERY_QUEUE": queue},
    )
    # The operator's resolution, made in this process, must reach this stack's worker.
    settings.CELERY_TASK_DEFAULT_QUEUE = queue
    try:
        yield stack.start()
    finally:
        stack.stop()


@pytest.mark.parametrize("resolution", ["happened", "not_happened", "fail"])
def test_a_call_whose_worker_died_is_uncertain_until_an_operator_resolves_it(
    stack, demo, resolution
):
    tenant = Tenant.objects.get(slug=demo["tenant"])
    agent, _ = agent_upsert(tenant=tenant, spec=SLOW_DEPLOYER)
    path = f"/a2a/{tenant.slug}/{agent.slug}"
    partner = Partner(stack.url, demo["token"])
    try:
        sent = partner.send(path, user_message("deploy"), polling=True)
        effect = wait_until(
            lambda: Effect.objects.filter(
                task__public_id=sent.id, state=Effect.State.SENDING
            ).first(),
            30,
            what="the deploy call to be out",
        )
        stack.kill_worker()
        stack.start_worker()
        wait_until(
            lambda: Effect.objects.filter(pk=effect.pk, state=Effect.State.UNCERTAIN).exists(),
            60,
            what="the resumed turn to mark the call uncertain",
        )
        task = partner.get(path, sent.id, extensions=[ext.EFFECTS])
        assert task.status.state == TaskState.TASK_STATE_WORKING
        assert as_dict(task)["status"]["message"]["metadata"][ext.EFFECTS] == {
            "uncertain": effect.public_id
        }
        plain = as_dict(partner.get(path, sent.id))
        assert ext.EFFECTS not in plain["status"].get("message", {}).get("metadata", {})
        assert not DemoRecord.objects.exists()  # the worker died before the deployment was recorded

        effect_resolve(
            tenant=tenant,
            effect_id=effect.public_id,
            resolution=resolution,
            by="user:operator@demo.test",
            result={"deploymentId": "dep-manual"} if resolution == "happened" else None,
        )
        done = partner.wait_for(path, sent.id, timeout=60)
    finally:
        partner.close()

    if resolution == "happened":
        assert done.status.state == TaskState.TASK_STATE_COMPLETED, stack.logs()
        assert status_text(done) == "Deployed as dep-manual."
        assert not DemoRecord.objects.exists()
    elif resolution == "not_happened":
        assert done.status.state == TaskState.TASK_STATE_COMPLETED, stack.logs()
        assert DemoRecord.objects.count() == 1  # sent again, once
        assert status_text(done).startswith("Deployed as dep-")
    else:
        assert done.status.state == TaskState.TASK_STATE_FAILED, stack.logs()
        assert not DemoRecord.objects.exists()
    assert Task.objects.get(public_id=sent.id).effects.get().state != Effect.State.UNCERTAIN
