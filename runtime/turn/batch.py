"""A run's transactions: each ``with batch.locked() as task:`` block is one.

A run of a turn writes its steps in batches (runtime.turn.runner): the steps that wait on
nothing (the claim, a model's reply and the actions it holds, a scripted agent's steps, the
finish) go on in one transaction, one lock, one save of the task row, one wake-up for its
waiters; a step that must wait on the network (a hosted model, a tool server, a url part, a
scripted wait) asks for it (``Outbound``), and the block commits before it is made. So every
step that must be durable before something acts (a call journalled as "sending" before it
leaves) is, and a crash loses at most the uncommitted steps, which acted on nothing outside
and are made again from the committed transcript.

Every line inside a block runs in its transaction, holding the task's row lock; nothing in a
block waits on the network; nothing outside one writes the task. While it holds its lease the
run is the only writer of its task row (answers, decisions and resolutions wait for a paused
task; cancel changes the state; a sweep's or a duplicate message's claim changes the run id),
so it keeps the row in memory from the claim on, and each block after the first starts by
locking the row on condition that it is still this run's.
"""

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from django.db import transaction

from runtime.kernel.store import task_lock_for_run
from runtime.kernel.task_models import Task
from runtime.kernel.task_state import STATUS_FIELDS, TurnBatch, batch_write, task_save
from runtime.turn.claim import LeaseLost, claim_locked, lease_expiry
from runtime.turn.transcript import TURN_FIELDS


@dataclass(frozen=True)
class Outbound:
    """Network I/O a step asks for, made with no transaction open: ``call()`` (with the lease
    kept and the database connection given back, unless ``keeps_lease``: it renews the lease
    itself), then ``then(task, result)`` applies its result in the next locked block. Either
    may return another Outbound."""

    call: Callable[[], Any]
    then: Callable[[Task, Any], "Step"]
    keeps_lease: bool = False


# What a step returns: True to go on with the next step in the same block, False when the
# turn paused, finished or was taken away, or the network I/O it needs.
Step = bool | Outbound


class RunBatch:
    """The transactions of one run of a turn: the claim's block (``claimed``), then one block
    after each wait on the network (``locked``). Each writes, as it commits, what its steps
    changed: their events (and push deliveries) in one statement, then the task row with its
    announcement (NOTIFY) in one more, renewing the lease."""

    def __init__(self, *, task_pk: int, worker_id: str) -> None:
        self.task_pk = task_pk
        self.worker_id = worker_id
        # The run's copy of the row (tenant and agent joined), from the claim on.
        self.task: Task | None = None
        # The run's id once its claim has committed (a crash in the claim's block rolls the
        # claim back with it: runtime.turn.outcomes.turn_crashed counts that attempt).
        self.run_id: str | None = None

    @contextmanager
    def claimed(self) -> Iterator[Task | None]:
        """Take the turn's lease (runtime.turn.claim) in a transaction that the run's first
        steps go on in: the claimed task, or None when it is not this worker's to run."""
        with transaction.atomic():
            writes = TurnBatch()
            task = claim_locked(task_pk=self.task_pk, worker_id=self.worker_id, batch=writes)
            if task is None:
                yield None
                return
            self.task = task
            with self.written(task, writes):
                yield task
        self.run_id = task.run_id

    @contextmanager
    def locked(self) -> Iterator[Task]:
        """The run's task, its row locked on condition that it is still this run's (LeaseLost
        otherwise), in a transaction that commits what the block's steps changed."""
        task = self.task
        if task is None:
            raise RuntimeError("a run locks its task only once it has claimed it")
        with transaction.atomic():
            # The agent's tool policy comes along with the lock: the run may have waited (a
            # model, a tool, a fetch) while an admin changed it, and every call it journals or
            # sends from here on is judged by the policy in force now.
            tool_policy = task_lock_for_run(
                task_pk=task.pk, run_id=task.run_id, worker_id=self.worker_id
            )
            if tool_policy is None:
                raise LeaseLost()
            if tool_policy != task.agent.tool_policy:
                task.agent.tool_policy = tool_policy
            with self.written(task, TurnBatch()):
                yield task

    @contextmanager
    def written(self, task: Task, writes: TurnBatch) -> Iterator[None]:
        """While a block runs, the task's saves and events wait in ``writes`` (task_save,
        event_emit); when it ends without an error they are written, once, before it
        commits (runtime.kernel.task_state.batch_write)."""
        task.turn_batch = writes
        try:
            yield
        finally:
            task.turn_batch = None
        if writes.fields and task.lease_owner == self.worker_id:
            task.lease_expires_at = lease_expiry()  # every commit renews the lease
            writes.fields.add("lease_expires_at")
        # The events, the row and its announcement (NOTIFY) in one statement.
        batch_write(task, writes)


def turn_save(task: Task) -> None:
    """Save what a step changed of the turn (its status and turn fields) with the block's
    writes."""
    task_save(task, [*STATUS_FIELDS, *TURN_FIELDS])
