"""A run's transactions (runtime.turn.batch): the network I/O a step asks for is made with its
block committed, so no transaction is open and the task's row is not locked while a hosted
model or a tool server is out; a block whose row is no longer the run's is refused."""

import threading

import pytest
from django.db import connection, transaction

from runtime.kernel.task_models import Task, TaskState
from runtime.llm.actions import Reply
from runtime.turn.batch import RunBatch
from runtime.turn.claim import LeaseLost
from runtime.turn.runner import turn_run
from tests.core import decide, open_interaction, send, start

# Row locks seen from another connection: PostgreSQL's.
pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("postgres_only")]


def row_locked(task_pk: int) -> bool:
    """Whether another connection finds the task's row locked (FOR UPDATE NOWAIT)."""
    found = {}

    def probe():
        from django.db import OperationalError

        try:
            with transaction.atomic():
                Task.objects.select_for_update(nowait=True).filter(pk=task_pk).exists()
            found["locked"] = False
        except OperationalError:
            found["locked"] = True
        finally:
            connection.close()

    thread = threading.Thread(target=probe)
    thread.start()
    thread.join(10)
    return found["locked"]


class HostedModel:
    """A model asked over the network (not ``in_process``) that notes what it found."""

    def __init__(self, task_pk: int, seen: list):
        self.task_pk, self.seen = task_pk, seen

    def next_action(self, view):
        self.seen.append((connection.in_atomic_block, row_locked(self.task_pk)))
        return Reply("Done.")


def test_a_hosted_model_is_asked_with_no_transaction_open_and_the_row_unlocked(
    agents, make_agent, monkeypatch
):
    make_agent("hosted", [{"reply": "never used"}])
    task = send(agents.a, "hosted", "go")
    seen = []
    monkeypatch.setattr("runtime.turn.runner.model_for", lambda agent: HostedModel(task.pk, seen))

    turn_run(task_pk=task.pk, worker_id="w1")

    assert seen == [(False, False)]
    task.refresh_from_db()
    assert task.state == TaskState.COMPLETED


def test_a_tool_is_called_with_no_transaction_open_and_the_row_unlocked(agents, monkeypatch):
    from runtime.tools.demo_servers import SERVERS

    task = start(agents.a, "deployer", "deploy build 2026.10.06-1 to staging")
    decide(open_interaction(task), approved=True)
    deploy = SERVERS["deploy"]
    seen = []
    real_call = type(deploy).call

    def call(self, tool, arguments, ctx):
        seen.append((connection.in_atomic_block, row_locked(task.pk)))
        return real_call(self, tool, arguments, ctx)

    monkeypatch.setattr(type(deploy), "call", call)

    turn_run(task_pk=task.pk, worker_id="w1")

    assert seen == [(False, False)]
    task.refresh_from_db()
    assert task.state == TaskState.COMPLETED


def test_a_block_whose_row_is_no_longer_the_runs_is_refused(agents, make_agent):
    make_agent("hosted", [{"reply": "never used"}])
    task = send(agents.a, "hosted", "go")
    batch = RunBatch(task_pk=task.pk, worker_id="w1")
    with batch.claimed() as claimed:
        assert claimed.lease_owner == "w1"
    # Another worker's claim (the sweep gave the turn away) changed the run id.
    Task.objects.filter(pk=task.pk).update(run_id="run_other")

    with pytest.raises(LeaseLost), batch.locked():
        pytest.fail("the block ran on a row that is not the run's")
