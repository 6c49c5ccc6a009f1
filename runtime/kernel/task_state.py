"""The one way to change a task's state.

A status change is a contract, not one assignment: the previous status message moves into
the history (as the a2a SDK's task manager does), an event records the change (and its push
deliveries are queued by the same statement), listeners are woken, and the row
is saved with every field the change touched. A task that ends also frees its lease and lets
its context's next queued turn start. Callers hold the task's row lock in their transaction.

The turn runner makes several steps in one transaction (runtime.turn.runner): it hangs a
``TurnBatch`` on the task, and the saves and wake-ups of those steps are then gathered and
made once, when it commits (``task_save``; runtime.kernel.wakeups.task_changed). A status
change outside a run, and a decision's close with its receipt and audit row, gather theirs
in a batch of their own (``batched``). On PostgreSQL a batch is written in one statement:
its events with their push deliveries, its new rows, the task row with its NOTIFY and, at a
task's end, the look for the context's next queued turn (``batch_write``).
"""

from collections.abc import Iterable, Iterator
from contextlib import contextmanager

from django.db import DatabaseError, transaction
from django.db.models import Model
from django.utils import timezone
from kombu.utils.uuid import uuid

from config.broker import turn_publish, turn_push
from config.celery import RUN_TURN, task_enqueue
from config.celery import app as celery_app
from config.celery import queue as celery_queue
from config.tracing import carrier_now, context_attached, context_for_later
from runtime.kernel import extensions as ext
from runtime.kernel.event_store import task_and_events_write, task_events_insert
from runtime.kernel.push.push_delivery import push_deliveries_schedule
from runtime.kernel.rowsql import move_of, row_insert, row_move, row_update, statement_run
from runtime.kernel.shapes import status_payload
from runtime.kernel.store import context_next_turn
from runtime.kernel.task_models import Task, TaskEvent
from runtime.kernel.wakeups import announcement, task_changed

# The fields a status change writes; nobody else lists them.
STATUS_FIELDS = (
    "state",
    "status_message",
    "status_ext",
    "status_timestamp",
    "history",
    "event_seq",
)
LEASE_FIELDS = ("lease_owner", "lease_expires_at", "attempts")


class TurnBatch:
    """What a turn's steps in one transaction left to write to the task row: the fields to
    save and whether to announce the change. The runner writes them, once, as it commits.

    The batch holds the task's row lock from its first statement to its commit. Its
    ``events`` are written together, in one statement, as it commits (``events_write``): no
    one outside the transaction could see them sooner."""

    def __init__(self) -> None:
        self.fields: set[str] = set()
        self.announce = False
        self.events: list[TaskEvent] = []
        # The task ended: its context's next queued turn may start (task_end).
        self.next_turn = False
        # New rows written with the batch's statement (``row_add``: a decision's receipt and
        # audit row, runtime.decisions.interaction_state.interaction_close).
        self.rows: list[Model] = []
        # Conditional writes (statement, parameters) made with the batch's statement
        # (``row_move_with``), and how many rows each wrote, once it is written.
        self.moves: list[tuple[str, list]] = []
        self.moved: list[int] = []


@contextmanager
def batched(task: Task, batch: TurnBatch | None = None) -> Iterator[TurnBatch]:
    """The batch open on ``task`` (a turn's), or one of its own (``batch``, else a new one)
    that writes what the block changed when it ends without an error (``batch_write``): a
    status change's event, row and announcement in one statement."""
    opened: TurnBatch | None = getattr(task, "turn_batch", None)
    if opened is not None:
        yield opened
        return
    batch = task.turn_batch = batch or TurnBatch()
    try:
        yield batch
    finally:
        task.turn_batch = None
    batch_write(task, batch)


def row_add(obj: Model, batch: TurnBatch | None) -> None:
    """INSERT ``obj`` now, or with ``batch``'s statement (its key is set then): for a caller
    that writes the batch itself before anything reads the row or its key."""
    if batch is None:
        row_insert(obj)
    else:
        batch.rows.append(obj)


def row_move_later(task: Task, model: type[Model], pk, *, where: dict, values: dict) -> None:
    """``rowsql.row_move`` with the task's batch's statement (now when no batch is open), for
    a write whose outcome the caller does not look at (a call's journal closed after it)."""
    row_move_with(getattr(task, "turn_batch", None), model, pk, where=where, values=values)


def row_move_with(
    batch: TurnBatch | None, model: type[Model], pk, *, where: dict, values: dict
) -> int | None:
    """``rowsql.row_move`` now (how many rows it wrote), or with ``batch``'s statement (None:
    ``batch.moved`` says it once the batch is written)."""
    if batch is None:
        return row_move(model, pk, where=where, values=values)
    batch.moves.append(move_of(model, pk, where=where, values=values))
    return None


def batch_write(task: Task, batch: TurnBatch) -> None:
    """Write what ``batch`` gathered: its events (with their push deliveries, scheduled once
    this transaction commits), its new rows and conditional writes, the task row's fields with
    their announcement, and, when the task ended, the start of its context's next queued
    turn. One statement on PostgreSQL (runtime.kernel.event_store.task_and_events_write)."""
    fields = sorted(batch.fields)
    written = None
    if fields:
        written = task_and_events_write(
            task,
            batch.events,
            fields,
            notify=announcement(task) if batch.announce else None,
            next_turn=batch.next_turn,
            extra=batch.rows,
            moves=batch.moves,
        )
    if written is None:
        configs = task_events_insert(batch.events)
        for obj in batch.rows:
            row_insert(obj)
        batch.moved = [statement_run(sql, params) for sql, params in batch.moves]
        task_write(task, fields, announce=batch.announce)
        following = context_next_turn(task) if batch.next_turn else None
    else:
        configs, following, batch.moved = written
    push_deliveries_schedule(config_pks=configs)
    if following is not None:
        _turn_enqueue_pk(following)


def task_save(task: Task, fields: Iterable[str], *, announce: bool = False) -> None:
    """Save ``fields`` of the task now or, while a turn's batch is open on it, with the batch;
    ``announce``: and announce the change (runtime.kernel.wakeups.task_changed) with that save."""
    batch: TurnBatch | None = getattr(task, "turn_batch", None)
    if batch is None:
        task_write(task, fields, announce=announce)
    else:
        batch.fields.update(fields)
        batch.announce = batch.announce or announce


def task_write(task: Task, fields: Iterable[str], *, announce: bool = False) -> None:
    """``task.save(update_fields=fields)`` without compiling the UPDATE on every call (the
    turn's hot path; runtime.kernel.rowsql). The caller holds the row's lock, so the row is there;
    if it is not, this fails as ``save`` does. ``announce``: the change is announced
    (runtime.kernel.wakeups.task_changed) by the same statement."""
    fields = sorted(set(fields))
    if not fields:
        if announce:
            task_changed(task)
        return
    if row_update(task, fields, notify=announcement(task) if announce else None) != 1:
        raise DatabaseError("Save with update_fields did not affect any rows.")


def event_emit(
    task: Task,
    kind: str,
    payload: dict,
    extension_data: dict | None = None,
    *,
    announce: bool = True,
) -> TaskEvent:
    """Record the task's next event (the caller saves ``event_seq`` with its change); while
    a turn's batch is open on the task, the event is written when the batch commits.
    ``announce=False``: the caller announces the change with its save (task_save)."""
    task.event_seq += 1
    event = TaskEvent(
        tenant_id=task.tenant_id,
        task=task,
        seq=task.event_seq,
        kind=kind,
        state=task.state,
        payload={**payload, "_ext": extension_data or {}},
    )
    batch: TurnBatch | None = getattr(task, "turn_batch", None)
    if batch is not None:
        batch.events.append(event)
    else:
        events_write(task, [event])
    # Streams watch every event, artifacts included.
    if announce:
        task_changed(task)
    return event


def events_write(task: Task, events: list[TaskEvent]) -> None:
    """Write the task's new events and queue their push deliveries, one to each of the
    task's push configs, in one statement (runtime.kernel.event_store.task_events_insert); each
    config that got one is delivered once this transaction commits. The caller holds the
    task's row lock, under which configs are made too: no config made before an event
    misses it, and none made after it gets it twice (push_config_create's backfill)."""
    configs = task_events_insert(events)
    push_deliveries_schedule(config_pks=configs)


def with_plan(task: Task, status_ext: dict) -> dict:
    """Every status update of a turn with a plan carries it (progress/v1)."""
    if not task.plan:
        return status_ext
    return {**status_ext, ext.PROGRESS: {"steps": task.plan}}


def task_status_set(
    task: Task,
    state: str,
    *,
    message: dict | None = None,
    status_ext: dict | None = None,
    history_append: dict | None = None,
    also: Iterable[str] = (),
) -> None:
    """Move the task to ``state`` and save it with the fields in ``also``.

    The previous status message goes into the history first; ``history_append`` (a caller's
    answer) follows it there, after the prompt it answers.
    """
    with batched(task):
        if task.status_message:
            task.history.append(task.status_message)
        task.state = state
        task.status_message = message
        task.status_ext = status_ext or {}
        task.status_timestamp = timezone.now()
        # Announced by the save: one statement writes the event, the row and its NOTIFY.
        event_emit(
            task, TaskEvent.Kind.STATUS, status_payload(task), task.status_ext, announce=False
        )
        if history_append is not None:
            task.history.append(history_append)
        task_save(task, [*STATUS_FIELDS, *also], announce=True)


def task_first_event(task: Task) -> TaskEvent:
    """A new task's first status event, unsaved: the caller writes it with the task, whose
    ``event_seq`` it sets (one INSERT of the task, no UPDATE after it). No push config can
    name the task yet: a config sent with the message is made after that commit, and is
    given this event then (push_config_create's backfill).

    Nobody is woken (no NOTIFY): a waiter or a stream names a task by the id the transaction
    that makes it returns, so none can wait on it before that commit, and each reads the task
    once it has registered (runtime.kernel.wakeups.wait_for_state, task_watch), or, for a blocking
    send whose listener was listening before the task was made, takes its state from what
    the listener has heard since (announcements_mark)."""
    task.event_seq = 1
    return TaskEvent(
        tenant_id=task.tenant_id,
        task=task,
        seq=1,
        kind=TaskEvent.Kind.STATUS,
        state=task.state,
        payload={**status_payload(task), "_ext": {}},
    )


def lease_release(task: Task) -> None:
    """Free the turn's lease on the row in hand; task_pause and task_end save it. The run
    paused or ended: a turn resumed after it is a new run, whose attempts start afresh
    (runtime.turn.outcomes)."""
    task.lease_owner = ""
    task.lease_expires_at = None
    task.attempts = 0


def task_pause(
    task: Task,
    state: str,
    message: dict,
    *,
    status_ext: dict | None = None,
    also: Iterable[str] = (),
) -> None:
    """The turn stops running until a person acts: free its lease, set the status, save."""
    lease_release(task)
    task_status_set(
        task, state, message=message, status_ext=status_ext, also=[*LEASE_FIELDS, *also]
    )


def task_end(
    task: Task,
    state: str,
    message: dict,
    *,
    status_ext: dict | None = None,
    also: Iterable[str] = (),
) -> None:
    """Move a locked task to a terminal state, free its lease, and let its context go on (its
    next queued turn is looked for as the row is saved: ``batch_write``)."""
    with batched(task) as batch:
        task_pause(task, state, message, status_ext=status_ext, also=also)
        batch.next_turn = True


def turn_enqueue(task: Task) -> None:
    """Start (or resume) the task's turn in a worker once this transaction commits."""
    _turn_enqueue_pk(task.pk)


def _turn_enqueue_pk(task_pk: int) -> None:
    # The trace of whoever enqueued it (a decision's span ends before its transaction
    # commits): the turn is that span's child, or links to it (config.tracing).
    context = context_for_later()
    transaction.on_commit(lambda: _turn_publish(task_pk, context))


def _turn_publish(task_pk: int, context=None) -> None:
    """Publish ``run_turn(task_pk)``: the message ``apply_async`` sends, without the per-call
    work a turn does not need (routing options, a result object, the parent task's
    bookkeeping): on a Redis broker one LPUSH (config.broker.turn_publish), elsewhere, or
    with tracing's ``before_task_publish`` to carry the trace, Celery's publish with its
    retry policy."""
    with context_attached(context):
        _turn_message_send(task_pk)


def _turn_message_send(task_pk: int) -> None:
    if celery_app.conf.task_always_eager:
        # Tests run the turn in-process, as apply_async does in that mode.
        task_enqueue(RUN_TURN, (task_pk,))
        return
    queue = celery_queue()
    broker_url = celery_app.conf.broker_url
    if turn_push(broker_url, task_pk, queue, carrier_now()):
        return
    if turn_publish(broker_url, task_pk, queue, reply_to=celery_app.thread_oid):
        return
    message = celery_app.amqp.create_task_message(
        uuid(), RUN_TURN, (task_pk,), {}, ignore_result=True, reply_to=celery_app.thread_oid
    )
    with celery_app.producer_or_acquire() as producer:
        celery_app.amqp.send_task_message(producer, RUN_TURN, message, queue=queue)
