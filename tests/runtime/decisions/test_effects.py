"""Uncertain effects (effects/v1): a call found "sending" when its turn resumes (its worker
died mid-call) parks the task WORKING with `uncertain`, until an operator resolves it.

These tests call the services and the turn loop directly (no broker: enqueued turns are
dropped with the test transaction) and play the worker crash by hand."""

from datetime import timedelta

import pytest
from django.utils import timezone

from runtime.agents.agent_models import DemoRecord
from runtime.decisions.decision_models import Effect
from runtime.decisions.effects import effect_resolve
from runtime.kernel import extensions as ext
from runtime.kernel.errors import InvalidParams, NotAllowed, TaskNotFound
from runtime.kernel.task_models import AuditEvent, Task
from runtime.turn.batch import RunBatch
from runtime.turn.claim import turns_to_sweep
from runtime.turn.intake import message_send
from runtime.turn.runner import TurnRunner, turn_run
from tests.core import DEPLOY_TOOL, message

pytestmark = pytest.mark.django_db

STEPS = [
    {
        "call": {
            "server": "deploy",
            "tool": "deploy_build",
            "args": {"build": "b-1", "environment": "staging"},
        }
    },
    {"if": {"result": "ok"}, "reply": "Deployed as {{ last.result.deploymentId }}."},
    {"if": {"result": "error"}, "reply": "Not deployed: {{ last.error }}"},
]


@pytest.fixture
def crashed(agents, make_agent):
    """Return a function making a turn whose worker died after journalling 'sending'."""

    def make(idempotent: bool = False) -> Task:
        agent = make_agent(
            "deploy-allowed",
            STEPS,
            tools=[{**DEPLOY_TOOL, "idempotent": idempotent}],
            tool_policy={"deploy/deploy_build": "allow"},
        )
        task = message_send(
            tenant=agents.a.tenant,
            agent=agent,
            subject=agents.a.subject,
            message=message("go"),
        ).task
        batch = RunBatch(task_pk=task.pk, worker_id="w1")
        with batch.claimed() as claimed:
            assert TurnRunner(batch, claimed).step(claimed) is True  # the call is journalled
        effect = Effect.objects.get(task=task)
        assert effect.state == Effect.State.APPROVED
        # The worker marked it sending and died before it recorded the outcome.
        Effect.objects.filter(pk=effect.pk).update(
            state=Effect.State.SENDING, sent_at=timezone.now()
        )
        Task.objects.filter(pk=task.pk).update(
            lease_expires_at=timezone.now() - timedelta(seconds=1)
        )
        return Task.objects.get(pk=task.pk)

    return make


def reply_text(task: Task) -> str:
    return task.status_message["parts"][0]["text"]


def test_a_call_found_sending_is_uncertain_and_the_task_stays_working(agents, crashed):
    task = crashed()
    turn_run(task_pk=task.pk, worker_id="w2")
    task.refresh_from_db()
    effect = Effect.objects.get()
    assert effect.state == Effect.State.UNCERTAIN
    assert task.state == "TASK_STATE_WORKING"
    assert task.status_ext == {ext.EFFECTS: {"uncertain": effect.public_id}}
    assert task.lease_owner == ""
    assert not DemoRecord.objects.exists()
    # (How the wire shows it: tests/a2a_endpoint/test_effects_wire.py.)
    # The sweep leaves it for the operator, and running it again changes nothing.
    assert task.pk not in turns_to_sweep(now=timezone.now() + timedelta(hours=1))
    turn_run(task_pk=task.pk, worker_id="w3")
    assert Effect.objects.get().state == Effect.State.UNCERTAIN
    assert not DemoRecord.objects.exists()


def _uncertain(crashed) -> tuple[Task, Effect]:
    task = crashed()
    turn_run(task_pk=task.pk, worker_id="w2")
    return task, Effect.objects.get()


def resolve(agents, effect: Effect, resolution: str, by="user:operator@acme.test", **extra):
    effect_resolve(
        tenant=agents.a.tenant, effect_id=effect.public_id, resolution=resolution, by=by, **extra
    )


def test_resolved_as_happened_the_turn_continues_with_the_given_result(agents, crashed):
    task, effect = _uncertain(crashed)
    resolve(agents, effect, "happened", result={"deploymentId": "dep-manual"})
    task.refresh_from_db()
    assert task.state == "TASK_STATE_WORKING"
    assert task.status_ext == {}
    turn_run(task_pk=task.pk, worker_id="w3")
    task.refresh_from_db()
    assert task.state == "TASK_STATE_COMPLETED"
    assert reply_text(task) == "Deployed as dep-manual."
    assert not DemoRecord.objects.exists()  # not sent again
    audit = AuditEvent.objects.get()
    assert (audit.action, audit.actor) == ("effect_happened", "user:operator@acme.test")


def test_resolved_as_not_happened_the_call_is_sent_again(agents, crashed):
    task, effect = _uncertain(crashed)
    resolve(agents, effect, "not_happened")
    turn_run(task_pk=task.pk, worker_id="w3")
    task.refresh_from_db()
    record = DemoRecord.objects.get()
    assert task.state == "TASK_STATE_COMPLETED"
    assert reply_text(task) == f"Deployed as dep-{record.pk}."
    assert Effect.objects.get().state == Effect.State.SUCCEEDED


def test_resolved_as_fail_the_task_fails(agents, crashed):
    task, effect = _uncertain(crashed)
    resolve(agents, effect, "fail", by="user:op@acme.test")
    task.refresh_from_db()
    assert task.state == "TASK_STATE_FAILED"
    assert "failed" in reply_text(task)
    assert Effect.objects.get().state == Effect.State.FAILED
    turn_run(task_pk=task.pk, worker_id="w3")
    assert Task.objects.get(pk=task.pk).state == "TASK_STATE_FAILED"
    assert not DemoRecord.objects.exists()


def test_an_effect_is_resolved_once_by_its_own_tenant_with_a_known_resolution(agents, crashed):
    task, effect = _uncertain(crashed)
    with pytest.raises(InvalidParams):
        effect_resolve(
            tenant=agents.a.tenant, effect_id=effect.public_id, resolution="maybe", by="x"
        )
    with pytest.raises(TaskNotFound):
        effect_resolve(
            tenant=agents.b.tenant, effect_id=effect.public_id, resolution="fail", by="x"
        )
    effect_resolve(
        tenant=agents.a.tenant, effect_id=effect.public_id, resolution="happened", by="x"
    )
    with pytest.raises(NotAllowed):
        effect_resolve(
            tenant=agents.a.tenant, effect_id=effect.public_id, resolution="fail", by="y"
        )
    assert AuditEvent.objects.count() == 1


def test_an_idempotent_tool_is_sent_again_without_asking(agents, crashed):
    task = crashed(idempotent=True)
    turn_run(task_pk=task.pk, worker_id="w2")
    task.refresh_from_db()
    assert task.state == "TASK_STATE_COMPLETED"
    assert Effect.objects.get().state == Effect.State.SUCCEEDED
    assert reply_text(task) == f"Deployed as dep-{DemoRecord.objects.get().pk}."
    assert all(ext.EFFECTS not in event.payload["_ext"] for event in task.events.all())
