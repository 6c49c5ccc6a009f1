"""The request side of SendMessage: what starting a task costs the web process in queries,
and that the cheaper path keeps every rule of a retry (the messageId is the idempotency key)."""

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from runtime.agents.agent_models import Agent
from runtime.kernel.errors import InvalidParams
from runtime.kernel.task_models import Context, Task, TaskEvent
from runtime.turn.intake import message_send
from tests.core import message


def _statements(queries) -> list[str]:
    return [q["sql"].split()[0].upper() for q in queries]


def _fields_of(obj) -> dict:
    return {f.attname: getattr(obj, f.attname) for f in type(obj)._meta.concrete_fields}


def _writes_and_reads(queries) -> list[str]:
    # Savepoints are the test's own transaction around the service's durable one.
    return [s for s in _statements(queries) if s not in ("SAVEPOINT", "RELEASE", "ROLLBACK")]


@pytest.fixture
def support(agents):
    return agents.a, Agent.objects.get(tenant=agents.a.tenant, slug="support")


def test_a_message_in_a_new_context_costs_no_lookup_and_no_lock(support):
    side, agent = support
    with CaptureQueriesContext(connection) as queries:
        result = message_send(
            tenant=side.tenant, agent=agent, subject=side.subject, message=message("hi")
        )
    assert result.created and not result.queued
    statements = _writes_and_reads(queries)
    # The context, the task and its first event are written; nothing is read first (no
    # look for a retry, no context lookup, lock or busy check, no push configs of a task
    # that did not exist): a retry is caught by the unique messageId index instead. The
    # event's seq goes into the task's INSERT (no UPDATE after it), and nobody is woken (no
    # NOTIFY: none can wait on a task before the transaction that makes it commits). On
    # PostgreSQL the three rows are one statement (was 3 INSERTs, a NOTIFY and an UPDATE).
    assert not any("FOR UPDATE" in q["sql"] for q in queries)
    if connection.vendor == "postgresql":
        assert statements == ["WITH"], statements
    else:
        assert statements == ["INSERT"] * 3, statements


def test_the_rows_of_a_new_turn_read_back_as_written(support):
    side, agent = support
    result = message_send(
        tenant=side.tenant, agent=agent, subject=side.subject, message=message("hi")
    )
    task = result.task
    stored = Task.objects.get(pk=task.pk)
    assert _fields_of(stored) == _fields_of(task)
    assert stored.context_id == task.context.pk and stored.context.turns == 1
    assert stored.event_seq == 1
    (event,) = TaskEvent.objects.filter(task=stored)
    assert (event.tenant_id, event.seq, event.state) == (side.tenant.pk, 1, stored.state)
    assert event.payload["statusUpdate"]["taskId"] == stored.public_id


def test_a_turn_in_a_named_context_writes_the_task_and_its_first_event(support):
    side, agent = support
    message_send(
        tenant=side.tenant, agent=agent, subject=side.subject, message=message("a", contextId="c")
    )
    second = message_send(
        tenant=side.tenant, agent=agent, subject=side.subject, message=message("b", contextId="c")
    ).task
    stored = Task.objects.get(pk=second.pk)
    assert _fields_of(stored) == _fields_of(second)
    assert (stored.turn, stored.event_seq) == (2, 1)
    assert list(TaskEvent.objects.filter(task=stored).values_list("seq", flat=True)) == [1]


def test_a_retry_without_context_id_returns_the_first_task_and_leaves_nothing(support):
    side, agent = support
    sent = message("hi")
    first = message_send(tenant=side.tenant, agent=agent, subject=side.subject, message=sent)
    again = message_send(tenant=side.tenant, agent=agent, subject=side.subject, message=sent)
    assert again.replayed and again.task.public_id == first.task.public_id
    assert Task.objects.filter(tenant=side.tenant).count() == 1
    assert Context.objects.filter(tenant=side.tenant).count() == 1
    assert TaskEvent.objects.filter(task=first.task).count() == 1


def test_a_reused_message_id_with_another_body_is_refused_without_a_context_id(support):
    side, agent = support
    sent = message("hi")
    message_send(tenant=side.tenant, agent=agent, subject=side.subject, message=sent)
    with pytest.raises(InvalidParams):
        message_send(
            tenant=side.tenant,
            agent=agent,
            subject=side.subject,
            message={**sent, "parts": [{"text": "something else"}]},
        )
    assert Context.objects.filter(tenant=side.tenant).count() == 1


def test_a_named_context_still_queues_behind_its_running_turn(support):
    side, agent = support
    first = message_send(
        tenant=side.tenant, agent=agent, subject=side.subject, message=message("a", contextId="c-1")
    )
    second = message_send(
        tenant=side.tenant, agent=agent, subject=side.subject, message=message("b", contextId="c-1")
    )
    assert not first.queued and second.queued
    assert Context.objects.get(tenant=side.tenant, context_id="c-1").turns == 2
