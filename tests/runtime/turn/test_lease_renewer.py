"""One lease renewer per worker process: turns waiting on the network keep their leases
without a thread each, in one UPDATE per round, and give their database connection back
while they wait."""

import threading
from contextlib import ExitStack
from datetime import timedelta
from types import SimpleNamespace

import pytest
from django.db import connection, transaction
from django.utils import timezone

from runtime.kernel.task_models import Task, TaskState
from runtime.llm.credentials import credential_set
from runtime.llm.registry import model_for
from runtime.turn import runner
from runtime.turn.claim import (
    db_released,
    lease_kept,
    lease_renewer,
    turn_claim,
    turns_to_sweep,
    worker_id_of,
)
from runtime.turn.runner import turn_run
from tests.core import send, status_text
from tests.live import wait_until

pytestmark = pytest.mark.django_db(transaction=True)


def claimed_tasks(agents, make_agent, n: int) -> list[Task]:
    make_agent("greeter", [{"reply": "Hello."}])
    tasks = []
    for i in range(n):
        task = send(agents.a, "greeter", f"hi {i}")
        tasks.append(turn_claim(task_pk=task.pk, worker_id=f"host:1:w{i}"))
    return tasks


def expire_soon(tasks: list[Task]) -> None:
    Task.objects.filter(pk__in=[t.pk for t in tasks]).update(
        lease_expires_at=timezone.now() + timedelta(seconds=1)
    )


def test_one_update_renews_every_lease_still_held_by_its_worker(
    agents, make_agent, django_assert_num_queries
):
    tasks = claimed_tasks(agents, make_agent, 3)
    expire_soon(tasks)
    # The third turn was taken over by another worker meanwhile: its lease is not ours.
    Task.objects.filter(pk=tasks[2].pk).update(lease_owner="host:2:other")
    with ExitStack() as stack:
        for task in tasks:
            stack.enter_context(lease_kept(task_pk=task.pk, worker_id=task.lease_owner))
        with django_assert_num_queries(1):
            assert lease_renewer.renew() == 2
    later = timezone.now() + timedelta(seconds=30)
    expiries = [Task.objects.get(pk=t.pk).lease_expires_at for t in tasks]
    assert expiries[0] > later and expiries[1] > later
    assert expiries[2] < later
    assert Task.objects.get(pk=tasks[2].pk).lease_owner == "host:2:other"
    assert lease_renewer.held() == []


def test_a_wait_held_past_its_limit_is_no_longer_renewed(agents, make_agent, settings, caplog):
    import logging

    from config.logging import log_context

    (task,) = claimed_tasks(agents, make_agent, 1)
    expire_soon([task])
    settings.TURN_HOLD_MAX_SECONDS = 0
    renewed = []
    with (
        log_context(task_id=task.public_id, tenant="acme"),  # as the turn's run has
        lease_kept(task_pk=task.pk, worker_id=task.lease_owner),
        caplog.at_level(logging.WARNING, logger="runtime.turn.claim"),
    ):
        # The renewer's own thread (no log context of its own) says so, naming the turn.
        renewer = threading.Thread(target=lambda: renewed.append(lease_renewer.renew()))
        renewer.start()
        renewer.join(10)
    assert renewed == [0]
    [warned] = [r for r in caplog.records if "no longer renewed" in r.getMessage()]
    assert (warned.task_id, warned.tenant) == (task.public_id, "acme")
    settings.TURN_HOLD_MAX_SECONDS = 600
    with lease_kept(task_pk=task.pk, worker_id=task.lease_owner):
        assert lease_renewer.renew() == 1


def test_many_waiting_turns_start_no_thread_each(agents, make_agent):
    tasks = claimed_tasks(agents, make_agent, 40)
    with lease_kept(task_pk=tasks[0].pk, worker_id=tasks[0].lease_owner):
        before = threading.active_count()  # the renewer runs from the first hold on
    with ExitStack() as stack:
        for task in tasks:
            stack.enter_context(lease_kept(task_pk=task.pk, worker_id=task.lease_owner))
        assert len(lease_renewer.held()) == 40
        assert threading.active_count() == before
    assert lease_renewer.held() == []


def test_the_renewer_keeps_a_lease_alive_past_its_length(agents, make_agent, settings):
    settings.TURN_LEASE_SECONDS = 2  # renewed every second
    (task,) = claimed_tasks(agents, make_agent, 1)
    first = Task.objects.get(pk=task.pk).lease_expires_at
    with lease_kept(task_pk=task.pk, worker_id=task.lease_owner):
        wait_until(
            lambda: Task.objects.get(pk=task.pk).lease_expires_at > first + timedelta(seconds=2),
            10,
            what="the renewer to renew the lease twice over",
        )
        assert task.pk not in turns_to_sweep()


def test_the_connection_goes_back_outside_a_transaction_only():
    Task.objects.exists()
    with transaction.atomic(), db_released():
        assert connection.connection is not None  # never while a transaction is open
    Task.objects.exists()
    with db_released():
        # PostgreSQL's connection goes back to the pool (or is closed); SQLite keeps its file.
        assert (connection.connection is None) == (connection.vendor != "sqlite")
    assert Task.objects.count() == 0  # the next query connects again


def test_a_turn_keeps_its_lease_while_the_model_is_out(agents, make_agent, settings, monkeypatch):
    settings.TURN_LEASE_SECONDS = 2
    make_agent("greeter", [{"reply": "Hello."}])
    task = send(agents.a, "greeter")
    asked, answer = threading.Event(), threading.Event()

    class SlowModel:
        """The scripted model behind a network wait: it answers when the test says so."""

        def __init__(self, agent):
            self.model = model_for(agent)

        def next_action(self, view):
            asked.set()
            assert answer.wait(30)
            return self.model.next_action(view)

    def work():
        try:
            turn_run(task_pk=task.pk, worker_id="w1")
        finally:
            connection.close()  # this thread's own

    monkeypatch.setattr(runner, "model_for", SlowModel)
    worker = threading.Thread(target=work)
    worker.start()
    try:
        assert asked.wait(30)
        claimed = Task.objects.get(pk=task.pk).lease_expires_at
        wait_until(
            lambda: Task.objects.get(pk=task.pk).lease_expires_at > claimed + timedelta(seconds=2),
            10,
            what="the lease to outlive its length while the model is out",
        )
        assert task.pk not in turns_to_sweep()
    finally:
        answer.set()
        worker.join(30)
    task.refresh_from_db()
    assert task.state == TaskState.COMPLETED
    assert status_text(task) == "Hello."
    assert (task.lease_owner, task.lease_expires_at) == ("", None)


def test_turns_in_one_worker_process_have_worker_ids_of_their_own():
    first, second = (worker_id_of(SimpleNamespace(id=str(i))) for i in ("a", "b"))
    # Threads of one process run different turns: the lease tells them apart by message.
    assert first != second
    assert first.rsplit(":", 1)[0] == second.rsplit(":", 1)[0]  # same host and process


def test_a_credential_read_while_the_model_is_out_gives_its_connection_back(
    agents, make_agent, monkeypatch
):
    """A provider reads its credential just before its call, once the turn has given its
    connection back: the read's own connection goes back too, not held through the call."""
    make_agent("greeter", [{"reply": "Hello."}])
    credential_set(tenant=agents.a.tenant, name="MODEL_KEY", secret="sk-held-" + "q" * 20)
    task = send(agents.a, "greeter")
    seen = []

    class KeyedModel:
        def __init__(self, agent):
            self.model = model_for(agent)

        def next_action(self, view):
            secret = view.credential("MODEL_KEY")
            seen.append((secret, connection.connection is None))  # during "the call"
            return self.model.next_action(view)

    monkeypatch.setattr(runner, "model_for", KeyedModel)
    turn_run(task_pk=task.pk, worker_id="w1")
    assert seen == [("sk-held-" + "q" * 20, connection.vendor != "sqlite")]
    assert Task.objects.get(pk=task.pk).state == TaskState.COMPLETED
