"""A worker killed with SIGKILL in the middle of a turn: the lease runs out, the sweep gives
the turn to another worker, and the turn completes as a second run linked to the first."""

import uuid

import pytest
from a2a.types import TaskState

from runtime.agents.agentfile import AgentSpec, agent_upsert
from runtime.kernel.task_models import Task
from tenants.models import Tenant
from tests.live import LiveStack, wait_until
from tests.sdk_client import Partner, status_text, user_message

pytestmark = pytest.mark.django_db(transaction=True)

SLOW = AgentSpec(
    slug="slowpoke",
    name="slowpoke",
    description="Thinks for a while, then answers.",
    skills=[{"id": "think", "name": "Think", "description": "Thinks.", "tags": [], "examples": []}],
    model={
        "provider": "scripted",
        "script": [{"steps": [{"wait": 5}, {"reply": "Done thinking."}]}],
    },
)


@pytest.fixture
def sweeping_stack(tmp_path):
    """A stack of its own (beat on, short leases), on a queue of its own so that no other
    worker sharing the broker picks its turns up."""
    stack = LiveStack(
        tmp_path,
        beat=True,
        extra_env={
            "TURN_LEASE_SECONDS": "3",
            "TURN_SWEEP_SECONDS": "1",
            "CELERY_QUEUE": f"reliability-{uuid.uuid4().hex[:8]}",
        },
    )
    try:
        yield stack.start()
    finally:
        stack.stop()


def test_turn_survives_its_worker_killed_mid_turn(sweeping_stack, demo):
    tenant = Tenant.objects.get(slug=demo["tenant"])
    agent, _ = agent_upsert(tenant=tenant, spec=SLOW)
    path = f"/a2a/{tenant.slug}/{agent.slug}"
    partner = Partner(sweeping_stack.url, demo["token"])
    try:
        sent = partner.send(path, user_message("think about it"), polling=True)

        def mid_turn():
            task = Task.objects.get(public_id=sent.id)
            return task.state == "TASK_STATE_WORKING" and len(task.runs) == 1 and task

        first = wait_until(mid_turn, 30, what="the first run to be under way")

        sweeping_stack.kill_worker()
        sweeping_stack.start_worker()

        done = partner.wait_for(path, sent.id, timeout=60)
        assert done.status.state == TaskState.TASK_STATE_COMPLETED, sweeping_stack.logs()
        assert status_text(done) == "Done thinking."
    finally:
        partner.close()

    runs = Task.objects.get(public_id=sent.id).runs
    assert len(runs) >= 2
    assert runs[0]["runId"] == first.runs[0]["runId"]
    assert runs[0]["resumedFrom"] is None
    assert runs[1]["resumedFrom"] == runs[0]["runId"]
    assert runs[1]["worker"] != runs[0]["worker"]
