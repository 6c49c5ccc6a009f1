"""runtime.kernel.rowsql writes and reads rows as the ORM does, on both backends."""

from datetime import timedelta
from decimal import Decimal

import pytest
from django.db import connection
from django.db.models import F
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from runtime.kernel.rowsql import (
    Columns,
    Statements,
    column,
    row_insert,
    row_move,
    row_update,
    rows_insert,
)
from runtime.kernel.task_models import Task, TaskEvent, TaskState
from tests.core import send

pytestmark = pytest.mark.django_db


def fields_of(obj) -> dict:
    return {f.attname: getattr(obj, f.attname) for f in type(obj)._meta.concrete_fields}


def test_an_inserted_row_reads_back_as_the_orm_would_write_it(agents):
    task = send(agents.a, "support", "hi")
    payload = {"statusUpdate": {"x": [1, "ü", None, 12345678901234567890]}, "_ext": {}}
    event = TaskEvent(
        tenant_id=task.tenant_id, task=task, seq=99, kind="status", state="working", payload=payload
    )

    row_insert(event)

    assert event.pk is not None and not event._state.adding
    stored = TaskEvent.objects.get(pk=event.pk)
    assert fields_of(stored) == fields_of(event)
    assert stored.payload == payload


def test_an_insert_keeps_a_primary_key_it_is_given(agents):
    task = send(agents.a, "support", "hi")
    pk = TaskEvent.objects.order_by("-pk").values_list("pk", flat=True).first() + 1000
    event = TaskEvent(
        pk=pk, tenant_id=task.tenant_id, task=task, seq=98, kind="status", state="working"
    )
    event.payload = {}

    row_insert(event)

    assert TaskEvent.objects.get(pk=pk).seq == 98


def test_an_update_writes_the_named_fields_only(agents):
    task = send(agents.a, "support", "hi")
    before = Task.objects.get(pk=task.pk)
    task.runs = [{"runId": "run_1", "worker": "w"}]
    task.lease_expires_at = timezone.now() + timedelta(seconds=60)
    task.cost_usd = Decimal("1.250000")
    task.steps = 7  # not named: not written

    assert row_update(task, ["runs", "lease_expires_at", "cost_usd", "updated_at"]) == 1

    stored = Task.objects.get(pk=task.pk)
    assert stored.runs == task.runs
    assert stored.lease_expires_at == task.lease_expires_at
    assert stored.cost_usd == Decimal("1.250000")
    assert stored.steps == before.steps
    # auto_now, as save(update_fields=[..., "updated_at"]) does.
    assert stored.updated_at > before.updated_at


def test_an_update_of_a_row_that_is_gone_says_so(agents):
    task = send(agents.a, "support", "hi")
    Task.objects.filter(pk=task.pk).delete()

    assert row_update(task, ["steps"]) == 0


def test_an_expression_is_left_to_the_orm(agents):
    task = send(agents.a, "support", "hi")
    steps = Task.objects.get(pk=task.pk).steps
    task.steps = F("steps") + 2

    assert row_update(task, ["steps"]) == 1

    assert Task.objects.get(pk=task.pk).steps == steps + 2


def test_a_row_read_with_columns_is_the_instance_the_orm_makes(agents):
    task = send(agents.a, "support", "hi")
    Task.objects.filter(pk=task.pk).update(
        cost_usd=Decimal("0.000123"), lease_expires_at=timezone.now(), plan=[{"label": "a"}]
    )
    columns = Columns(Task, "t")
    table = connection.ops.quote_name(Task._meta.db_table)

    with connection.cursor() as cursor:
        cursor.execute(f"SELECT {columns.sql()} FROM {table} t WHERE t.id = %s", [task.pk])
        built = columns.build(cursor.fetchone())

    stored = Task.objects.get(pk=task.pk)
    assert fields_of(built) == fields_of(stored)
    assert not built._state.adding and built._state.db == "default"


def test_columns_of_some_fields_leave_the_others_deferred(agents):
    task = send(agents.a, "support", "hi")
    # Named out of the model's order: the instance still maps each value to its field.
    columns = Columns(Task, "t", ["state", "id", "public_id"])
    table = connection.ops.quote_name(Task._meta.db_table)

    with connection.cursor() as cursor:
        cursor.execute(f"SELECT {columns.sql()} FROM {table} t WHERE t.id = %s", [task.pk])
        built = columns.build(cursor.fetchone())

    assert (built.pk, built.public_id, built.state) == (task.pk, task.public_id, task.state)
    assert built.get_deferred_fields() >= {"transcript", "runs"}


def test_the_statements_are_one_each(agents):
    task = send(agents.a, "support", "hi")
    event = TaskEvent(
        tenant_id=task.tenant_id, task=task, seq=97, kind="status", state="working", payload={}
    )

    with CaptureQueriesContext(connection) as captured:
        row_insert(event)
        row_update(task, ["steps"])

    assert len(captured.captured_queries) == 2


def test_rows_are_inserted_in_one_statement_with_their_keys_in_order(agents):
    task = send(agents.a, "support", "hi")
    events = [
        TaskEvent(
            tenant_id=task.tenant_id,
            task=task,
            seq=90 + i,
            kind="status",
            state="working",
            payload={"n": i},
        )
        for i in range(3)
    ]

    with CaptureQueriesContext(connection) as captured:
        rows_insert(events)

    if connection.features.can_return_rows_from_bulk_insert:
        assert len(captured.captured_queries) == 1
    for event in events:
        stored = TaskEvent.objects.get(pk=event.pk)
        assert (stored.seq, stored.payload) == (event.seq, event.payload)
        assert not event._state.adding


def test_a_move_writes_only_a_row_still_in_the_state_it_names(agents):
    task = send(agents.a, "support", "hi")
    status = {"text": "moved"}
    at = timezone.now()

    with CaptureQueriesContext(connection) as captured:
        moved = row_move(
            Task,
            task.pk,
            where={"state": task.state},
            values={"state": TaskState.WORKING, "status_ext": status, "status_timestamp": at},
        )
    again = row_move(Task, task.pk, where={"state": task.state}, values={"state": TaskState.FAILED})

    assert (moved, again) == (1, 0)
    assert len(captured.captured_queries) == 1
    stored = Task.objects.get(pk=task.pk)
    # As filter(pk=..., state=...).update(...) writes them: JSON as JSON, times as times.
    assert (stored.state, stored.status_ext, stored.status_timestamp) == (
        TaskState.WORKING,
        status,
        at,
    )


def test_a_move_takes_plain_values_only(agents):
    task = send(agents.a, "support", "hi")
    with pytest.raises(TypeError):
        row_move(Task, task.pk, where={"state": task.state}, values={"steps": F("steps") + 1})
    with pytest.raises(TypeError):
        row_move(Task, task.pk, where={"lease_owner": None}, values={"steps": 1})


def test_statements_are_built_once_per_database_and_name_quoted_columns():
    built = []

    class Read(Statements):
        def build(self, connection):
            built.append(connection.vendor)
            return f"SELECT {column(Task, 'status_timestamp')} FROM {Task._meta.db_table}"

    read = Read()
    assert read.sql() is read.sql()
    assert built == [connection.vendor]
    assert read.sql() == (
        f"SELECT {connection.ops.quote_name('status_timestamp')} FROM {Task._meta.db_table}"
    )
