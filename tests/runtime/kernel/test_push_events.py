"""Each event of a task reaches each of its push configs once, in order:
the statement that writes events queues their deliveries, after the task's row lock was
taken; an event that still has no delivery is queued before the config's next round and
found by the sweep."""

import threading
import time

import pytest
from django.db import connection, transaction

from runtime.kernel.push import push_delivery
from runtime.kernel.push.push_configs import ConfigInput, push_config_create
from runtime.kernel.push.push_models import PushConfig, PushDelivery, PushSettings
from runtime.kernel.task_models import Task, TaskEvent, TaskState
from runtime.turn.runner import turn_run
from tests.a2a_endpoint.receiver import Receiver
from tests.core import send


@pytest.fixture
def pushing(agents, settings):
    settings.PUSH_ALLOW_PRIVATE_HOSTS = True
    PushSettings.objects.create(tenant=agents.a.tenant, allowed_hosts="127.0.0.1")
    return agents


def config_create(side, task: Task, url: str, *, from_start: bool) -> PushConfig:
    return push_config_create(
        tenant=side.tenant,
        agent=task.agent,
        subject=side.subject,
        task_id=task.public_id,
        config=ConfigInput(id="hook", url=url),
        from_start=from_start,
    )


def delivered_seqs(config: PushConfig) -> list[int]:
    return list(
        PushDelivery.objects.filter(config=config).order_by("seq").values_list("seq", flat=True)
    )


def waiting_for_a_lock() -> bool:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
            "AND wait_event_type = 'Lock'"
        )
        return cursor.fetchone()[0] > 0


@pytest.mark.usefixtures("postgres_only")  # its row locks and snapshots
@pytest.mark.django_db(transaction=True)
def test_a_config_committed_while_the_worker_waits_for_the_task_lock_gets_every_event(pushing):
    # The message's inline config is made under the task's row lock while the worker's claim
    # waits for that lock: the claim's statement took its snapshot before the config was
    # committed, so what it could read of the configs is stale; the events' statement, which
    # queues the deliveries, starts after the lock is granted and must see the config.
    task = send(pushing.a, "support", "How do I reset my password?")
    ran = threading.Thread(
        target=lambda: (turn_run(task_pk=task.pk, worker_id="w1"), connection.close())
    )
    with transaction.atomic():
        Task.objects.select_for_update().get(pk=task.pk)
        ran.start()
        deadline = time.monotonic() + 10
        while not waiting_for_a_lock():
            assert time.monotonic() < deadline, "the worker never waited for the task's lock"
            time.sleep(0.01)
        config = config_create(pushing.a, task, "http://127.0.0.1:9/hook", from_start=True)
    ran.join(10)

    task.refresh_from_db()
    assert task.state == TaskState.COMPLETED
    assert delivered_seqs(config) == [1, 2, 3]  # SUBMITTED (the backfill), WORKING, COMPLETED


@pytest.mark.django_db(transaction=True)
def test_a_config_made_later_gets_the_events_from_then_on(pushing):
    task = send(pushing.a, "code-reviewer", "Review this diff of payments-api")
    turn_run(task_pk=task.pk, worker_id="w1")  # asks which base branch: seq 1-3
    task.refresh_from_db()
    config = config_create(pushing.a, task, "http://127.0.0.1:9/hook", from_start=False)
    assert (config.from_seq, delivered_seqs(config)) == (task.event_seq + 1, [])
    # Nothing is missing: the events before the config are not its.
    assert push_delivery.configs_missing_deliveries() == []


@pytest.mark.django_db(transaction=True)
def test_an_event_without_its_delivery_is_found_by_the_sweep_and_delivered_in_order(pushing):
    receiver = Receiver(secret=PushSettings.objects.get(tenant=pushing.a.tenant).secret).start()
    try:
        task = send(pushing.a, "support", "How do I reset my password?")
        config = config_create(pushing.a, task, receiver.url, from_start=True)
        turn_run(task_pk=task.pk, worker_id="w1")
        assert delivered_seqs(config) == [1, 2, 3]
        # However an event came to have no delivery (none should), it is not lost.
        PushDelivery.objects.filter(config=config, seq=2).delete()
        assert push_delivery.configs_missing_deliveries() == [config.pk]

        push_delivery.push_deliver(config_pk=config.pk, worker_id="push")
    finally:
        receiver.stop()

    assert delivered_seqs(config) == [1, 2, 3]
    assert set(PushDelivery.objects.values_list("state", flat=True)) == {"delivered"}
    states = [body["statusUpdate"]["status"]["state"] for body in receiver.events]
    assert states == list(
        TaskEvent.objects.filter(task=task).order_by("seq").values_list("state", flat=True)
    )
    assert push_delivery.configs_missing_deliveries() == []


@pytest.mark.django_db(transaction=True)
def test_the_sweep_schedules_a_config_with_an_event_missing_its_delivery(pushing, monkeypatch):
    from runtime.tasks import deliver_push, sweep_push

    task = send(pushing.a, "support", "How do I reset my password?")
    config = config_create(pushing.a, task, "http://127.0.0.1:9/hook", from_start=True)
    turn_run(task_pk=task.pk, worker_id="w1")
    PushDelivery.objects.filter(config=config).delete()
    scheduled = []
    monkeypatch.setattr(deliver_push, "apply_async", lambda args, **kw: scheduled.append(args))

    assert sweep_push() == 1
    assert scheduled == [(config.pk,)]


@pytest.mark.django_db(transaction=True)
def test_a_disabled_config_enabled_again_is_given_the_events_from_then_on(pushing):
    from django.utils import timezone

    from runtime.kernel.push.push_configs import push_config_enable

    task = send(pushing.a, "code-reviewer", "Review this diff of payments-api")
    config = config_create(pushing.a, task, "http://127.0.0.1:9/hook", from_start=True)
    PushConfig.objects.filter(pk=config.pk).update(disabled_at=timezone.now())
    turn_run(task_pk=task.pk, worker_id="w1")  # its events while disabled: none queued
    assert delivered_seqs(config) == [1]

    assert push_config_enable(config)

    config.refresh_from_db()
    task.refresh_from_db()
    # The receiver asked to stop (a 410): what it missed meanwhile is not sent after all.
    assert config.from_seq == task.event_seq + 1
    assert push_delivery.configs_missing_deliveries() == []
