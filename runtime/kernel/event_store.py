"""A task's new events and their push deliveries, written by hand in one statement
(runtime.kernel.store's kind: built once per database from the models' ``_meta``, run on
rowsql's cursor): every batch of a turn writes its events here as it commits
(runtime.kernel.task_state.batch_write), and each event is queued for each of the task's
push configs in the same statement; on PostgreSQL the task row's save, its announcement and
the look for the context's next queued turn go in that statement too (``task_and_events_write``).
Like the store, it imports nothing but models and sits under every service of the core.
"""

import functools
from collections.abc import Sequence

from django.db import DatabaseError, connections
from django.db.models import Model
from django.utils import timezone

from runtime.kernel import rowsql
from runtime.kernel.push.push_models import PushConfig, PushDelivery
from runtime.kernel.task_models import Task, TaskEvent, TaskState

# The columns of a PushDelivery the statement writes (the others are NULL until delivered).
_DELIVERY_COLUMNS = (
    "tenant",
    "config",
    "event",
    "seq",
    "webhook_id",
    "state",
    "attempts",
    "next_attempt_at",
    "last_error",
    "created_at",
)


def _deliveries_select(events: str, using: str) -> str:
    """The INSERT ... SELECT of one pending delivery per event of ``events`` (an SQL row
    source with the events' ``id`` and ``seq``) and active config of the task; its
    parameters: state, now, now, the tenant's id and the task's."""
    connection = connections[using]
    q = connection.ops.quote_name
    columns = ", ".join(rowsql.column(PushDelivery, f, using) for f in _DELIVERY_COLUMNS)
    c = q("c")
    tenant = rowsql.column(PushConfig, "tenant", using)
    # A webhook-id per delivery (Standard Webhooks): "msg_" and 32 random hex digits.
    webhook_id = (
        "'msg_' || replace(gen_random_uuid()::text, '-', '')"
        if connection.vendor == "postgresql"
        else "'msg_' || lower(hex(randomblob(16)))"
    )
    return (
        f"INSERT INTO {q(PushDelivery._meta.db_table)} ({columns}) "
        f"SELECT {c}.{tenant}, {c}.{q(PushConfig._meta.pk.column)}, "
        f"{q('ev')}.{q('id')}, {q('ev')}.{q('seq')}, {webhook_id}, %s, 0, %s, '', %s "
        f"FROM {events} CROSS JOIN {q(PushConfig._meta.db_table)} {c} "
        f"WHERE {c}.{tenant} = %s "
        f"AND {c}.{rowsql.column(PushConfig, 'task', using)} = %s "
        f"AND {c}.{rowsql.column(PushConfig, 'disabled_at', using)} IS NULL"
    )


def _delivery_params(task: Task, connection) -> list:
    """The parameters of ``_deliveries_select``: state, now, now, the tenant's id, the task's."""
    now = PushDelivery._meta.get_field("created_at").get_db_prep_save(timezone.now(), connection)
    return [PushDelivery.State.PENDING, now, now, task.tenant_id, task.pk]


def _events_ctes(rows: int, using: str) -> str:
    """PostgreSQL: the events' INSERT (``ev``) and their deliveries' (``d``), as the CTEs of a
    statement; their parameters: each event's values, then the deliveries'."""
    connection = connections[using]
    q = connection.ops.quote_name
    insert = rowsql.insert_of(TaskEvent, using=using)
    events = (
        insert.head
        + ", ".join([insert.row] * rows)
        + f" RETURNING {q(TaskEvent._meta.pk.column)} AS {q('id')}, "
        f"{rowsql.column(TaskEvent, 'seq', using)} AS {q('seq')}"
    )
    deliveries = _deliveries_select(q("ev"), using)
    return (
        f"{q('ev')} AS ({events}), {q('d')} AS ({deliveries} "
        f"RETURNING {rowsql.column(PushDelivery, 'config', using)} AS {q('config')})"
    )


@functools.cache
def _events_with_deliveries_sql(rows: int, using: str) -> str:
    """PostgreSQL: the events' INSERT and their deliveries' in one statement, which returns
    each event's id (in seq order) and the configs that got deliveries."""
    q = connections[using].ops.quote_name
    return (
        f"WITH {_events_ctes(rows, using)} "
        f"SELECT {q('ev')}.{q('id')}, ARRAY(SELECT DISTINCT {q('config')} FROM {q('d')}) "
        f"FROM {q('ev')} ORDER BY {q('ev')}.{q('seq')}"
    )


@functools.cache
def next_turn_sql(using: str) -> str:
    """The key of a context's next queued turn; its parameters: the context's id, the turn
    after which to look, and SUBMITTED."""
    q = connections[using].ops.quote_name
    context, turn, state = (rowsql.column(Task, f, using) for f in ("context", "turn", "state"))
    return (
        f"SELECT {q(Task._meta.pk.column)} FROM {q(Task._meta.db_table)} "
        f"WHERE {context} = %s AND {turn} > %s AND {state} = %s ORDER BY {turn} LIMIT 1"
    )


@functools.cache
def _events_and_row_sql(
    rows: int,
    update: str,
    notify: bool,
    next_turn: bool,
    extra: tuple[type[Model], ...],
    moves: tuple[str, ...],
    using: str,
) -> str:
    """PostgreSQL: the events with their deliveries (none when ``rows`` is 0), one row of each
    model of ``extra`` (a receipt, an audit row), the conditional UPDATEs of ``moves``, the
    task row's UPDATE (with its NOTIFY) and the look for the next queued turn, in one
    statement, which returns the events' ids in seq order, the configs that got deliveries,
    how many rows the UPDATE changed, the next turn's key, the extra rows' keys and how many
    rows each move wrote."""
    q = connections[using].ops.quote_name
    ctes = [_events_ctes(rows, using)] if rows else []
    for n, model in enumerate(extra):
        insert = rowsql.insert_of(model, using=using)
        ctes.append(f"{q(f'x{n}')} AS ({insert.sql})")
    for n, move in enumerate(moves):
        ctes.append(f"{q(f'm{n}')} AS ({move} RETURNING 1)")
    returning = "1" + (", pg_notify(%s, %s)" if notify else "")
    ctes.append(f"{q('t')} AS ({update} RETURNING {returning})")
    events = (
        f"ARRAY(SELECT {q('id')} FROM {q('ev')} ORDER BY {q('seq')}), "
        f"ARRAY(SELECT DISTINCT {q('config')} FROM {q('d')})"
        if rows
        else "ARRAY[]::bigint[], ARRAY[]::bigint[]"
    )
    following = f"({next_turn_sql(using)})" if next_turn else "NULL"
    keys = "".join(f", (SELECT * FROM {q(f'x{n}')})" for n in range(len(extra)))
    keys += "".join(f", (SELECT count(*) FROM {q(f'm{n}')})" for n in range(len(moves)))
    return (
        f"WITH {', '.join(ctes)} "
        f"SELECT {events}, (SELECT count(*) FROM {q('t')}), {following}{keys}"
    )


def task_and_events_write(
    task: Task,
    events: Sequence[TaskEvent],
    fields: Sequence[str],
    *,
    notify: tuple[str, str] | None,
    next_turn: bool,
    extra: Sequence[Model] = (),
    moves: Sequence[tuple[str, list]] = (),
    using: str = "default",
) -> tuple[list[int], int | None, list[int]] | None:
    """PostgreSQL: write the task's new ``events`` (and their deliveries), the ``extra`` rows
    (new, of models whose INSERT returns their key) and the conditional writes of ``moves``
    (rowsql.move_of's), save ``fields`` of the task's row (announced by ``notify``) and, with
    ``next_turn``, look for its context's next queued turn, in one statement: one round trip
    where there were three or more. Set the new rows' keys; return the configs that got
    deliveries, the next turn's key and how many rows each move wrote; None where it cannot
    (another backend, a value the ORM must write), and nothing was written: the caller
    writes them apart.

    The caller holds the task's row lock, taken by an earlier statement, as for
    ``task_events_insert``; the look for the next turn is made as the row is saved, later
    than the end's own read was (runtime.turn.claim: a turn queued behind it waits for it)."""
    connection = connections[using]
    if connection.vendor != "postgresql":
        return None
    update = rowsql.update_of(task, fields, using=using)
    insert = rowsql.insert_of(TaskEvent, using=using)
    rows = [insert.values_of(event, connection) for event in events]
    added = [rowsql.insert_of(type(obj), using=using).values_of(obj, connection) for obj in extra]
    if (
        update is None
        or any(values is None for values in [*rows, *added])
        or any(obj.pk is not None for obj in extra)
    ):
        return None
    sql, row_params = update
    params = [v for values in rows for v in values]
    if events:
        params += _delivery_params(task, connection)
    params += [v for values in added for v in values]
    params += [v for _, values in moves for v in values]
    params += row_params
    if notify is not None:
        params += list(notify)
    if next_turn:
        params += [task.context_id, task.turn, TaskState.SUBMITTED]
    statement = _events_and_row_sql(
        len(events),
        sql,
        notify is not None,
        next_turn,
        tuple(type(o) for o in extra),
        tuple(move for move, _ in moves),
        using,
    )
    with rowsql.cursor(using) as cursor:
        cursor.execute(statement, params)
        keys, configs, updated, following, *added_keys = cursor.fetchone()
    extra_keys, moved = added_keys[: len(extra)], added_keys[len(extra) :]
    if updated != 1:
        raise DatabaseError("Save with update_fields did not affect any rows.")
    for obj, pk in zip([*events, *extra], [*keys, *extra_keys], strict=True):
        rowsql.saved(obj, pk, using)
    return sorted(configs), following, moved


@functools.cache
def _deliveries_of_events_sql(using: str) -> str:
    """Other backends: the deliveries of events already written (its parameters: state, now,
    now, then the task's id and the events' first and last seq, then the tenant's and the
    task's ids)."""
    connection = connections[using]
    q = connection.ops.quote_name
    events = (
        f"(SELECT {q(TaskEvent._meta.pk.column)} AS {q('id')}, "
        f"{rowsql.column(TaskEvent, 'seq', using)} AS {q('seq')} "
        f"FROM {q(TaskEvent._meta.db_table)} WHERE {rowsql.column(TaskEvent, 'task', using)} = %s "
        f"AND {rowsql.column(TaskEvent, 'seq', using)} BETWEEN %s AND %s) {q('ev')}"
    )
    return _deliveries_select(events, using)


def task_events_insert(events: Sequence[TaskEvent], *, using: str = "default") -> list[int]:
    """INSERT a task's new ``events`` (in seq order) and a pending push delivery of each to
    each active push config of the task; set the events' keys, and return the keys of the
    configs that got deliveries (to be scheduled once this transaction commits).

    The caller holds the task's row lock, taken by an earlier statement of its transaction,
    and configs are made under that same lock (runtime.kernel.push.push_configs): this
    statement, which reads the configs, starts after the lock was granted, so it sees every
    config committed before then (PostgreSQL's READ COMMITTED takes a snapshot per
    statement). A read made by the statement that waited for the lock would not: its
    snapshot predates the wait, and the locked row's re-check does not re-run a subquery
    (a config made just before would miss the first events). One statement on PostgreSQL,
    events and deliveries alike."""
    if not events:
        return []
    connection = connections[using]
    task = events[0].task
    insert = rowsql.insert_of(TaskEvent, using=using)
    rows = [insert.values_of(event, connection) for event in events]
    delivery = _delivery_params(task, connection)
    if connection.vendor == "postgresql" and all(values is not None for values in rows):
        with rowsql.cursor(using) as cursor:
            cursor.execute(
                _events_with_deliveries_sql(len(events), using),
                [v for values in rows for v in values] + delivery,
            )
            found = cursor.fetchall()
        for event, (pk, _) in zip(events, found, strict=True):
            rowsql.saved(event, pk, using)
        return sorted(found[0][1] or [])
    rowsql.rows_insert(list(events), using=using)
    with rowsql.cursor(using) as cursor:
        cursor.execute(
            _deliveries_of_events_sql(using),
            [*delivery[:3], task.pk, events[0].seq, events[-1].seq, *delivery[3:]],
        )
        if not cursor.rowcount:
            return []
    return sorted(
        set(
            PushDelivery.objects.using(using)
            .filter(event__in=events)
            .values_list("config_id", flat=True)
        )
    )
