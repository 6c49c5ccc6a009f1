"""The demo deployer and coder keep a plan (progress/v1) through their pauses."""

import pytest

from connections.models import App
from connections.services import connection_connect_token
from runtime.agents.agent_models import Agent
from runtime.decisions.decision_models import Interaction
from runtime.kernel import extensions as ext
from runtime.kernel.task_models import Task, TaskState
from runtime.turn.intake import message_send
from runtime.turn.runner import turn_run
from tenants.models import Tenant, User
from tests.core import flow_answer


def start(agent_slug: str, text: str) -> Task:
    tenant = Tenant.objects.get(slug="demo")
    result = message_send(
        tenant=tenant,
        agent=Agent.objects.get(tenant=tenant, slug=agent_slug),
        subject="partner:demo-client",
        message={"messageId": f"m-{agent_slug}", "role": "ROLE_USER", "parts": [{"text": text}]},
    )
    return run(result.task)


def run(task: Task) -> Task:
    turn_run(task_pk=task.pk, worker_id="test-worker")
    return Task.objects.get(pk=task.pk)


def plan_states(task: Task) -> list[tuple[str, str]]:
    return [(s["label"], s["state"]) for s in task.plan]


def approve(task: Task) -> Task:
    interaction = Interaction.objects.get(task=task, state=Interaction.State.OPEN)
    assert interaction.kind == Interaction.Kind.APPROVAL
    flow_answer(
        tenant=task.tenant,
        interaction_id=interaction.public_id,
        answer={"approved": True},
        by="user:operator@demo.test",
        via="page",
    )
    return run(task)


@pytest.mark.django_db(transaction=True)
def test_the_deployer_advances_its_plan_after_approval_and_after_the_deploy(demo):
    task = start("deployer", "deploy build 2026.10.06-1 to staging")
    assert task.state == TaskState.AUTH_REQUIRED
    assert task.status_ext[ext.PROGRESS]["steps"][1]["state"] == "active"
    task = approve(task)
    assert task.state == TaskState.COMPLETED
    assert plan_states(task) == [
        ("Check the build", "completed"),
        ("Get approval", "completed"),
        ("Deploy", "completed"),
    ]
    assert task.plan[2]["note"] == "2026.10.06-1 is on staging"
    # The terminal status carries the finished plan.
    assert task.status_ext[ext.PROGRESS]["steps"] == task.plan


@pytest.mark.django_db(transaction=True)
def test_the_coder_sets_and_advances_a_plan_through_connect_and_approval(demo):
    task = start("coder", "open a pull request on payments-api: fix rounding")
    assert task.state == TaskState.AUTH_REQUIRED
    assert plan_states(task)[0] == ("Connect GitHub", "active")
    connection_connect_token(
        tenant=task.tenant,
        app=App.objects.get(slug="github"),
        token="ghp_demo_token_1234567890",
        by=User.objects.get(email="operator@demo.test"),
    )
    task = run(Task.objects.get(pk=task.pk))
    assert task.state == TaskState.AUTH_REQUIRED
    assert plan_states(task) == [
        ("Connect GitHub", "completed"),
        ("Get approval", "active"),
        ("Open the pull request", "pending"),
    ]
    task = approve(task)
    assert task.state == TaskState.COMPLETED, task.status_message
    assert [s for _, s in plan_states(task)] == ["completed", "completed", "completed"]
    assert task.plan[2]["note"].startswith("http")
