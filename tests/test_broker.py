"""config.broker: kombu's Redis transport with one client per channel."""

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
