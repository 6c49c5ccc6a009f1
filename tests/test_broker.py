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
