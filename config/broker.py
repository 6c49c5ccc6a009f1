"""Kombu's Redis transport, with one Redis client per channel instead of one per message.

Kombu's Redis channel makes a new ``redis.Redis`` for every command it sends outside its
polling client: each delivered message (the unacked index), each ack, each publish. Building
one sets up redis-py's table of some hundred response callbacks, which cost the worker about
a tenth of its CPU per turn (py-spy, bench/cpu_per_send.sh). The client only wraps the
channel's connection pool and is safe to share between threads, so one is made per pool and
kept. Selected by the settings (``CELERY_BROKER_TRANSPORT``) for ``redis://`` brokers.
"""

from contextlib import contextmanager

from kombu.transport import redis


class Channel(redis.Channel):
    _shared_client = None

    @contextmanager
    def conn_or_acquire(self, client=None):
        if client:
            yield client
            return
        shared = self._shared_client
        # The pool is made again after a fork or a reconnection: so is the client.
        if shared is None or shared.connection_pool is not self._pool:
            # kombu's own (private) way to make a client; its type stubs leave it out.
            shared = self._shared_client = self._create_client()  # type: ignore[attr-defined]
        yield shared


class Transport(redis.Transport):
    Channel = Channel
