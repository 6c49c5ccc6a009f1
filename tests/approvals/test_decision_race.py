"""Fifty people and programs decide the same approval at once: exactly one decision wins."""

import threading
import uuid

import pytest
from django.db import connections

from runtime.agents.agent_models import DemoRecord
from runtime.decisions.decision_models import Interaction
from runtime.kernel import extensions as ext
from runtime.kernel.errors import AlreadyDecided, UnsupportedOperation
from runtime.kernel.task_models import AuditEvent, Task, TaskState
from runtime.turn.intake import message_send
from tests.core import flow_answer, run

DECIDERS = 50
ROUNDS = 10


def decide(index: int, interaction: Interaction, side, barrier: threading.Barrier, outcomes):
    try:
        barrier.wait(timeout=30)
        approved = index % 2 == 0
        try:
            if index % 3 == 0:
                flow_answer(
                    tenant=side.tenant,
                    interaction_id=interaction.public_id,
                    answer={"approved": approved},
                    by=f"user:op{index}@acme.test",
                    via="page",
                )
            elif index % 3 == 1:
                flow_answer(
                    tenant=side.tenant,
                    interaction_id=interaction.public_id,
                    answer={"approved": approved},
                    by=f"program:bot{index}",
                    via="rest",
                )
            else:
                task = interaction.task
                message_send(
                    tenant=side.tenant,
                    agent=task.agent,
                    subject=task.subject,
                    message={
                        "messageId": str(uuid.uuid4()),
                        "role": "ROLE_USER",
                        "taskId": task.public_id,
                        "contextId": task.wire_context_id,
                        "parts": [{"text": "decision"}],
                        "metadata": {
                            ext.INTERACTIONS: {
                                "interactionId": interaction.public_id,
                                "approved": approved,
                            }
                        },
                    },
                )
            outcomes.append("won")
        except (AlreadyDecided, UnsupportedOperation):
            # A late in-band answer finds the task no longer waiting (UNSUPPORTED_OPERATION).
            outcomes.append("lost")
        except Exception as exc:  # noqa: BLE001 - any other outcome fails the test below
            outcomes.append(f"error: {exc!r}")
    finally:
        connections.close_all()


@pytest.mark.postgres
def test_fifty_concurrent_deciders_one_wins_and_the_tool_runs_once(
    postgres_only, transactional_db, agents
):
    side = agents.a
    for round_number in range(1, ROUNDS + 1):
        interaction = side.extra["make"].approval(build=f"r{round_number}")
        interaction = Interaction.objects.select_related("task", "task__agent").get(
            pk=interaction.pk
        )
        barrier = threading.Barrier(DECIDERS)
        outcomes: list[str] = []
        threads = [
            threading.Thread(target=decide, args=(i, interaction, side, barrier, outcomes))
            for i in range(DECIDERS)
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
        assert outcomes.count("won") == 1, outcomes
        assert outcomes.count("lost") == DECIDERS - 1, outcomes
        interaction.refresh_from_db()
        assert interaction.state == Interaction.State.ANSWERED
        assert AuditEvent.objects.filter(interaction=interaction).count() == 1

        # The winning decision resumes the turn; running it (again) completes it once.
        task = run(interaction.task)
        assert task.state == TaskState.COMPLETED
        run(task)
        assert Task.objects.get(pk=task.pk).event_seq == task.event_seq
        approved = interaction.answer["approved"]
        records = DemoRecord.objects.filter(effect_id=interaction.public_id).count()
        assert records == (1 if approved else 0)
    assert (
        AuditEvent.objects.filter(tenant=side.tenant, interaction__isnull=False).count() == ROUNDS
    )
    assert DemoRecord.objects.count() == Interaction.objects.filter(answer__approved=True).count()
