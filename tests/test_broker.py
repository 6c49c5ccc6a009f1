"""config.broker: kombu's Redis transport with one client per channel."""

import json
import os

import pytest
from kombu import Connection

from config.broker import Transport

BROKER = os.environ.get("CELERY_BROKER_URL", "")
needs_redis = pytest.mark.skipif(
    not BROKER.startswith("redis://"), reason="needs a Redis broker (CELERY_BROKER_URL)"
)


def test_the_settings_choose_it_for_redis_brokers_only(settings):
    chosen = getattr(settings, "CELERY_BROKER_TRANSPORT", None)
    assert (chosen == "config.broker:Transport") == settings.CELERY_BROKER_URL.startswith(
        "redis://"
    )


@needs_redis
def test_a_channel_keeps_one_client_for_its_commands():
    with Connection(BROKER, transport=Transport) as connection:
        channel = connection.channel()
        try:
            with channel.conn_or_acquire() as first, channel.conn_or_acquire() as second:
                assert first is second
                assert first.ping()
            # A pool made again (after a fork, a reconnection) gets a client of its own.
            channel._disconnect_pools()
            with channel.conn_or_acquire() as third:
                assert third is not first and third.connection_pool is channel.pool
        finally:
            channel.close()


def _publish(connection, queue, task_name: str, args: tuple) -> None:
    from celery import uuid

    from config.celery import app

    message = app.amqp.create_task_message(uuid(), task_name, args, {}, ignore_result=True)
    with connection.Producer() as producer:
        app.amqp.send_task_message(producer, task_name, message, queue=queue.name)


def _received(connection, queue, n: int) -> list:
    got: list = []
    consumer = connection.Consumer([queue], callbacks=[lambda body, m: got.append(m)])
    consumer.consume()
    while len(got) < n:
        connection.drain_events(timeout=5)
    consumer.cancel()
    return got


def _unacked(channel) -> dict:
    with channel.conn_or_acquire() as client:
        return client.hgetall(channel.unacked_key)


@needs_redis
def test_a_turn_stays_out_of_the_unacked_index_and_other_tasks_do_not():
    """A turn's message is held in the worker's memory only (its lease and the turn sweep
    recover it); every other task's message is in Redis' unacked index until it is acked."""
    from kombu import Queue

    from config.celery import RUN_TURN

    queue = Queue(f"broker-test-{os.getpid()}")
    with Connection(BROKER, transport=Transport) as connection:
        channel = connection.default_channel
        queue(channel).declare()
        queue(channel).purge()
        with channel.conn_or_acquire() as client:
            client.delete(channel.unacked_key, channel.unacked_index_key)
        _publish(connection, queue, RUN_TURN, (1,))
        _publish(connection, queue, "runtime.tasks.sweep_turns", ())
        turn, other = sorted(_received(connection, queue, 2), key=lambda m: m.headers["task"])
        assert turn.headers["task"] == RUN_TURN
        unacked = _unacked(channel)
        assert other.delivery_tag.encode() in unacked
        assert turn.delivery_tag.encode() not in unacked
        turn.ack()
        other.ack()
        assert _unacked(channel) == {}
        assert channel.qos._turns == set()
        queue(channel).delete()


@needs_redis
def test_a_turn_rejected_or_held_at_a_warm_stop_goes_back_to_its_queue():
    from kombu import Queue

    from config.celery import RUN_TURN

    queue = Queue(f"broker-test-requeue-{os.getpid()}")
    with Connection(BROKER, transport=Transport) as connection:
        channel = connection.default_channel
        queue(channel).declare()
        queue(channel).purge()
        _publish(connection, queue, RUN_TURN, (7,))
        (first,) = _received(connection, queue, 1)
        first.reject(requeue=True)
        (again,) = _received(connection, queue, 1)
        assert again.headers["task"] == RUN_TURN and again.payload[0] == [7]
        assert again.headers.get("redelivered") is True
        # The worker stops with the turn held and not acked: it is put back, not lost.
        channel.qos.restore_unacked()
        assert channel.qos._turns == set()
        assert queue(channel).get(no_ack=True).payload[0] == [7]
        queue(channel).delete()


def _normalised(raw: bytes) -> dict:
    import base64

    payload = json.loads(raw)
    task_id = payload["headers"]["id"]
    for key in ("id", "root_id"):
        assert payload["headers"][key] == task_id
        payload["headers"][key] = "ID"
    assert payload["properties"]["correlation_id"] == task_id
    payload["properties"]["correlation_id"] = "ID"
    payload["properties"]["delivery_tag"] = "TAG"
    payload["headers"]["origin"] = payload["headers"]["origin"].split("@")[0][:3]
    payload["body"] = json.loads(base64.b64decode(payload["body"]))
    return payload


@needs_redis
def test_a_turn_published_straight_to_redis_is_the_message_celery_would_send(settings, monkeypatch):
    """runtime.kernel.task_state publishes a turn with one LPUSH (config.broker.turn_publish):
    the message is Celery's own, field for field but for its ids. With tracing on, Celery
    publishes it (its signal puts the trace in the headers). A consumer reads both alike."""
    import redis as redis_client
    from kombu import Queue
    from opentelemetry.sdk.trace import TracerProvider

    from config.broker import turn_publish
    from config.celery import RUN_TURN, app
    from config.tracing import provider_use
    from runtime.kernel.task_state import _turn_message_send

    queue = f"broker-test-direct-{os.getpid()}"
    settings.CELERY_TASK_DEFAULT_QUEUE = queue
    settings.TURN_CONSUMER = False  # turns as Celery messages (runtime.turn.consumer is off)
    client = redis_client.Redis.from_url(BROKER)
    client.delete(queue)
    celery_sends: list = []
    send_task_message = app.amqp.send_task_message
    monkeypatch.setattr(
        app.amqp,
        "send_task_message",
        lambda *a, **kw: celery_sends.append(a[1]) or send_task_message(*a, **kw),
    )
    _turn_message_send(42)  # straight to Redis
    assert celery_sends == []
    provider = TracerProvider()
    provider_use(provider)
    try:
        assert turn_publish(BROKER, 42, queue, reply_to="r") is False
        with provider.get_tracer("test").start_as_current_span("send"):
            _turn_message_send(42)
    finally:
        provider_use(None)
    assert celery_sends == [RUN_TURN]
    # LPUSH: the first one pushed is at the right end, where the worker pops.
    celery_raw, direct_raw = client.lrange(queue, 0, -1)
    through_celery = _normalised(celery_raw)
    assert through_celery["headers"].pop("traceparent")
    through_celery["headers"].pop("tracestate", None)
    assert _normalised(direct_raw) == through_celery

    with Connection(BROKER, transport=Transport) as connection:
        received = _received(connection, Queue(queue), 2)
        for message in received:
            assert message.headers["task"] == RUN_TURN
            assert message.payload[0] == [42]
            assert message.delivery_info["routing_key"] == queue
            message.ack()
    client.delete(queue)
