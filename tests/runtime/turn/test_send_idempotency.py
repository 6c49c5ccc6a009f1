"""Two hundred copies of one SendMessage at once (a client retrying hard): one task, one turn."""

import threading

import pytest
from django.db import connections

from runtime.agents.agent_models import Agent
from runtime.kernel.task_models import Context, Task, TaskEvent
from runtime.turn.intake import message_send
from tests.core import message

COPIES = 200
# Each thread has its own connection; PostgreSQL's default max_connections (100) is shared
# with the test database's own and other suites, so 40 threads send 5 copies each.
THREADS = 40


def _send(side, agent, sent: dict, barrier: threading.Barrier, outcomes: list):
    try:
        barrier.wait(timeout=60)
        for _ in range(COPIES // THREADS):
            result = message_send(
                tenant=side.tenant, agent=agent, subject=side.subject, message=sent
            )
            outcomes.append(result.task.public_id)
    except Exception as exc:  # noqa: BLE001 - any other outcome fails the test below
        outcomes.append(f"error: {exc!r}")
    finally:
        connections.close_all()


@pytest.mark.postgres
@pytest.mark.parametrize("fields", [{}, {"contextId": "ticket-4821"}], ids=["new", "context"])
def test_two_hundred_concurrent_duplicates_make_one_task(
    postgres_only, transactional_db, agents, fields
):
    side = agents.a
    agent = Agent.objects.get(tenant=side.tenant, slug="support")
    sent = message("hello", **fields)
    barrier = threading.Barrier(THREADS)
    outcomes: list[str] = []
    threads = [
        threading.Thread(target=_send, args=(side, agent, sent, barrier, outcomes))
        for _ in range(THREADS)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    task = Task.objects.get()
    assert outcomes == [task.public_id] * COPIES
    # One turn queued: the context counted one turn, the task announced one submitted status.
    assert Context.objects.get().turns == 1
    assert TaskEvent.objects.filter(task=task).count() == 1
