"""A task's new events and their push deliveries, written by hand in one statement
(runtime.kernel.store's kind: built once per database from the models' ``_meta``, run on
rowsql's cursor): every batch of a turn writes its events here as it commits
(runtime.kernel.task_state.events_write), and each event is queued for each of the task's
push configs in the same statement. Like the store, it imports nothing but models and sits
under every service of the core.
"""

import functools
from collections.abc import Sequence

from django.db import connections
from django.utils import timezone

from runtime.kernel import rowsql
from runtime.kernel.push.push_models import PushConfig, PushDelivery
from runtime.kernel.task_models import TaskEvent

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


@functools.cache
def _events_with_deliveries_sql(rows: int, using: str) -> str:
    """PostgreSQL: the events' INSERT and their deliveries' in one statement, which returns
    each event's id (in seq order) and the configs that got deliveries."""
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
        f"WITH {q('ev')} AS ({events}), {q('d')} AS ({deliveries} "
        f"RETURNING {rowsql.column(PushDelivery, 'config', using)} AS {q('config')}) "
        f"SELECT {q('ev')}.{q('id')}, ARRAY(SELECT DISTINCT {q('config')} FROM {q('d')}) "
        f"FROM {q('ev')} ORDER BY {q('ev')}.{q('seq')}"
    )


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
    now = PushDelivery._meta.get_field("created_at").get_db_prep_save(timezone.now(), connection)
    delivery = [PushDelivery.State.PENDING, now, now, task.tenant_id, task.pk]
    if connection.vendor == "postgresql" and all(values is not None for values in rows):
        with rowsql.cursor(using) as cursor:
            cursor.execute(
                _events_with_deliveries_sql(len(events), using),
                [v for values in rows for v in values] + delivery,
            )
            found = cursor.fetchall()
        for event, (pk, _) in zip(events, found, strict=True):
            event.pk = pk
            event._state.adding = False
            event._state.db = using
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
