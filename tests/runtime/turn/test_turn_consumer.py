"""runtime.turn.consumer: on a Redis broker a turn starts from the list ``<queue>.turns``, popped
by the worker's turn consumer and run on its pool, not as a Celery message; with
TURN_CONSUMER off it is a Celery message again."""

import os
import time
from contextlib import contextmanager
from types import SimpleNamespace

import pytest
import redis

from config.broker import turns_list
from config.celery import app as celery_app
from runtime.kernel.task_models import Task
from runtime.turn.consumer import TurnConsumer
from tests.core import send

BROKER = os.environ.get("CELERY_BROKER_URL", "")
pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(
        not BROKER.startswith("redis://"), reason="needs a Redis broker (CELERY_BROKER_URL)"
    ),
]


@pytest.fixture
def queue(settings):
    name = f"consumer-test-{os.getpid()}"
    settings.CELERY_TASK_DEFAULT_QUEUE = name
    settings.TURN_CONSUMER = True
    client = redis.Redis.from_url(BROKER)
    client.delete(name, turns_list(name))
    yield SimpleNamespace(name=name, turns=turns_list(name), redis=client)
    client.delete(name, turns_list(name))


@contextmanager
def consumer_running(concurrency: int = 2):
    """A worker's turn consumer, started as its bootstep starts it, and stopped at the end."""
    worker = SimpleNamespace(app=celery_app, concurrency=concurrency)
    consumer = TurnConsumer(worker)
    consumer.start(worker)
    try:
        yield consumer
    finally:
        consumer.stop(worker)


def assert_sent_as_a_celery_message(agents, queue) -> None:
    """A send's turn goes as a Celery message, and a worker's consumer leaves the list alone."""
    send(agents.a, "support", "hello")
    assert queue.redis.llen(queue.turns) == 0
    assert queue.redis.llen(queue.name) == 1
    with consumer_running() as consumer:
        assert consumer.thread is None


def settled(task: Task, timeout: float = 20) -> Task:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        task.refresh_from_db()
        if task.state == "TASK_STATE_COMPLETED":
            return task
        time.sleep(0.05)
    raise AssertionError(f"the turn never ran: {task.state}")


def test_a_sends_turn_is_pushed_to_the_list_and_the_workers_consumer_runs_it(agents, queue):
    task = send(agents.a, "support", "hello")
    # Committed and pushed: a key on the list, no Celery message.
    assert queue.redis.llen(queue.turns) == 1
    assert queue.redis.llen(queue.name) == 0
    with consumer_running() as consumer:
        assert settled(task).state == "TASK_STATE_COMPLETED"
        assert queue.redis.llen(queue.turns) == 0
        # Its run's lease was this worker process's, as a Celery task's would be.
        assert task.runs[-1]["worker"].split(":")[1] == str(os.getpid())
    assert consumer.thread is None and consumer.pool is None
    # Stopped: nothing pops the list any more.
    send(agents.a, "support", "later")
    time.sleep(0.3)
    assert queue.redis.llen(queue.turns) == 1


def test_with_the_consumer_off_a_turn_is_a_celery_message(agents, queue, settings):
    settings.TURN_CONSUMER = False
    assert_sent_as_a_celery_message(agents, queue)


def test_a_key_is_popped_only_when_a_thread_is_free(agents, queue, monkeypatch):
    """The consumer holds no turn it has not started: with its one thread busy, the next key
    stays on the list (for another worker, or this one once it is free)."""
    from runtime.turn import consumer as consumer_module

    release = []
    started = []

    def slow_turn(*, task_pk, worker_id):
        started.append(task_pk)
        while not release:
            time.sleep(0.02)

    monkeypatch.setattr(consumer_module, "turn_run", slow_turn)
    first = send(agents.a, "support", "one")
    with consumer_running(concurrency=1):
        try:
            deadline = time.monotonic() + 10
            while not started and time.monotonic() < deadline:
                time.sleep(0.02)
            assert started == [first.pk]
            second = send(agents.a, "support", "two")
            time.sleep(0.5)
            assert queue.redis.llen(queue.turns) == 1  # waiting for a free thread
            release.append(True)
            deadline = time.monotonic() + 10
            while len(started) < 2 and time.monotonic() < deadline:
                time.sleep(0.02)
            assert started == [first.pk, second.pk]
        finally:
            release.append(True)  # before the stop, which waits for the turn


def test_the_turns_entry_carries_the_trace_of_whoever_started_it(agents, queue):
    """With tracing on, the pushed key carries the enqueuing span's traceparent, and the
    consumer's run continues that trace (config.tracing.context_from_carrier)."""
    import orjson
    from opentelemetry import trace
    from opentelemetry.sdk.trace import TracerProvider

    from config.tracing import context_from_carrier, provider_use

    provider = TracerProvider()
    provider_use(provider)
    try:
        with provider.get_tracer("test").start_as_current_span("send") as span:
            send(agents.a, "support", "hello")
            wanted = span.get_span_context().trace_id
        task_pk, carrier = orjson.loads(queue.redis.lindex(queue.turns, 0))
        assert carrier["traceparent"].split("-")[1] == f"{wanted:032x}"
        context = context_from_carrier(carrier)
        assert trace.get_current_span(context).get_span_context().trace_id == wanted
    finally:
        provider_use(None)
    # Tracing off: an empty carrier, and no context to attach.
    assert context_from_carrier({}) is None


def test_a_prefork_worker_takes_its_turns_as_celery_messages(agents, queue, settings):
    """Its turns run in its children, as Celery tasks: the web does not push them to the list
    (the settings say the same to both) and the worker does not pop it."""
    settings.CELERY_WORKER_POOL = "prefork"
    assert_sent_as_a_celery_message(agents, queue)


def test_the_consumer_goes_on_after_redis_refuses(agents, queue, monkeypatch):
    refused = []
    brpop = redis.Redis.brpop

    def refusing_once(self, *args, **kwargs):
        if not refused:
            refused.append(True)
            raise redis.ConnectionError("Redis went away for a moment")
        return brpop(self, *args, **kwargs)

    monkeypatch.setattr(redis.Redis, "brpop", refusing_once)
    task = send(agents.a, "support", "hello")
    with consumer_running(concurrency=1) as consumer:
        assert settled(task).state == "TASK_STATE_COMPLETED"
        assert refused == [True]
        assert consumer.thread is not None and consumer.thread.is_alive()
