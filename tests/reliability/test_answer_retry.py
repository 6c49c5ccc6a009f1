"""A caller's answer retried with the same messageId is applied once (the answer's messageId
is its idempotency key)."""

import uuid

from runtime.agents.agentfile import AgentSpec, agent_upsert
from runtime.decisions.decision_models import Interaction
from runtime.kernel.task_models import AuditEvent, TaskEvent, TaskState
from runtime.turn.intake import message_send
from runtime.turn.runner import turn_run

ASKER = AgentSpec(
    slug="asker",
    name="asker",
    description="Asks for the base branch, then answers.",
    skills=[{"id": "ask", "name": "Ask", "description": "Asks.", "tags": [], "examples": []}],
    model={
        "provider": "scripted",
        "script": [
            {
                "steps": [
                    {"ask": {"id": "base", "prompt": "Which base branch?"}},
                    {"reply": "Compared against {{ answers.base }}."},
                ]
            }
        ],
    },
)


def message(text, **extra):
    return {"messageId": str(uuid.uuid4()), "role": "ROLE_USER", "parts": [{"text": text}], **extra}


def test_same_answer_sent_twice_is_applied_once(world):
    tenant, subject = world.a.tenant, world.a.subject
    agent, _ = agent_upsert(tenant=tenant, spec=ASKER)
    started = message_send(tenant=tenant, agent=agent, subject=subject, message=message("review"))
    turn_run(task_pk=started.task.pk, worker_id="test-worker")
    task = started.task
    task.refresh_from_db()
    assert task.state == TaskState.INPUT_REQUIRED

    reply = message("main", taskId=task.public_id, contextId=task.wire_context_id)
    first = message_send(tenant=tenant, agent=agent, subject=subject, message=dict(reply))
    events = TaskEvent.objects.filter(task=task).count()
    again = message_send(tenant=tenant, agent=agent, subject=subject, message=dict(reply))

    assert not first.replayed and again.replayed
    assert again.task.pk == first.task.pk == task.pk
    task.refresh_from_db()
    assert [m["messageId"] for m in task.history].count(reply["messageId"]) == 1
    assert [e for e in task.transcript if e["type"] == "answer"] == [
        next(e for e in task.transcript if e["type"] == "answer")
    ]
    interaction = Interaction.objects.get(task=task)
    assert interaction.state == Interaction.State.ANSWERED
    assert interaction.answer == {"value": "main"}
    assert interaction.answer_message_id == reply["messageId"]
    assert AuditEvent.objects.filter(interaction=interaction, action="answered").count() == 1
    assert TaskEvent.objects.filter(task=task).count() == events

    # The retry after the turn finished still answers with the same task, not an error.
    turn_run(task_pk=task.pk, worker_id="test-worker")
    task.refresh_from_db()
    assert task.state == TaskState.COMPLETED
    late = message_send(tenant=tenant, agent=agent, subject=subject, message=dict(reply))
    assert late.replayed and late.task.pk == task.pk
    assert late.task.state == TaskState.COMPLETED
