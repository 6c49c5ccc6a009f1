"""The core's statements written by hand, each behind a function named in the domain's words.

Everything else reads and writes through the ORM, or through runtime.kernel.rowsql's saves
compiled once. A statement is here because the ORM cannot say it (one statement for rows of
several tables, a lock of one table of a join) or because a benchmark shows what compiling it
on every call costs (bench/turn_cost.py, bench/decisions.py; the counts are pinned in
tests/runtime/test_turn_queries.py and tests/approvals/test_answer_cost.py). Each statement is
built once per database vendor from the models' ``_meta`` and runs on rowsql's cursor.

The store sits with the models under every service of the core (tests/test_architecture.py):
its statements join tables of several domains (a task with its agent, an effect with its
interaction), so it cannot live in any one domain's package.
"""

import functools
from collections.abc import Sequence

from django.db import connections
from django.utils import timezone

from runtime.kernel import rowsql
from runtime.kernel.push.push_models import PushConfig, PushDelivery
from runtime.kernel.task_models import TaskEvent


def _q(connection):
    return connection.ops.quote_name


def _col(model, name: str, connection) -> str:
    return connection.ops.quote_name(model._meta.get_field(name).column)


# --- a task's events and their push deliveries ------------------------------------------------

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


def _deliveries_select(events: str, connection) -> str:
    """The INSERT ... SELECT of one pending delivery per event of ``events`` (an SQL row
    source with the events' ``id`` and ``seq``) and active config of the task; its
    parameters: state, now, now, the tenant's id and the task's."""
    q = _q(connection)
    columns = ", ".join(_col(PushDelivery, f, connection) for f in _DELIVERY_COLUMNS)
    c = q("c")
    # A webhook-id per delivery (Standard Webhooks): "msg_" and 32 random hex digits.
    webhook_id = (
        "'msg_' || replace(gen_random_uuid()::text, '-', '')"
        if connection.vendor == "postgresql"
        else "'msg_' || lower(hex(randomblob(16)))"
    )
    return (
        f"INSERT INTO {q(PushDelivery._meta.db_table)} ({columns}) "
        f"SELECT {c}.{_col(PushConfig, 'tenant', connection)}, {c}.{q(PushConfig._meta.pk.column)}, "
        f"{q('ev')}.{q('id')}, {q('ev')}.{q('seq')}, {webhook_id}, %s, 0, %s, '', %s "
        f"FROM {events} CROSS JOIN {q(PushConfig._meta.db_table)} {c} "
        f"WHERE {c}.{_col(PushConfig, 'tenant', connection)} = %s "
        f"AND {c}.{_col(PushConfig, 'task', connection)} = %s "
        f"AND {c}.{_col(PushConfig, 'disabled_at', connection)} IS NULL"
    )


@functools.cache
def _events_with_deliveries_sql(rows: int, using: str) -> str:
    """PostgreSQL: the events' INSERT and their deliveries' in one statement, which returns
    each event's id (in seq order) and the configs that got deliveries."""
    connection = connections[using]
    q = _q(connection)
    insert = rowsql.insert_of(TaskEvent, using=using)
    events = (
        insert.head
        + ", ".join([insert.row] * rows)
        + f" RETURNING {q(TaskEvent._meta.pk.column)} AS {q('id')}, "
        f"{_col(TaskEvent, 'seq', connection)} AS {q('seq')}"
    )
    deliveries = _deliveries_select(q("ev"), connection)
    return (
        f"WITH {q('ev')} AS ({events}), {q('d')} AS ({deliveries} "
        f"RETURNING {_col(PushDelivery, 'config', connection)} AS {q('config')}) "
        f"SELECT {q('ev')}.{q('id')}, ARRAY(SELECT DISTINCT {q('config')} FROM {q('d')}) "
        f"FROM {q('ev')} ORDER BY {q('ev')}.{q('seq')}"
    )


@functools.cache
def _deliveries_of_events_sql(using: str) -> str:
    """Other backends: the deliveries of events already written (its parameters: state, now,
    now, then the task's id and the events' first and last seq, then the tenant's and the
    task's ids)."""
    connection = connections[using]
    q = _q(connection)
    events = (
        f"(SELECT {q(TaskEvent._meta.pk.column)} AS {q('id')}, "
        f"{_col(TaskEvent, 'seq', connection)} AS {q('seq')} "
        f"FROM {q(TaskEvent._meta.db_table)} WHERE {_col(TaskEvent, 'task', connection)} = %s "
        f"AND {_col(TaskEvent, 'seq', connection)} BETWEEN %s AND %s) {q('ev')}"
    )
    return _deliveries_select(events, connection)


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
    (issue 28, finding 1). One statement on PostgreSQL, events and deliveries alike."""
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
