"""Kombu's Redis transport, with one Redis client per channel instead of one per message.

Kombu's Redis channel makes a new ``redis.Redis`` for every command it sends outside its
polling client: each delivered message (the unacked index), each ack, each publish. Building
one sets up redis-py's table of some hundred response callbacks, which cost the worker about
a tenth of its CPU per turn (py-spy, bench/cpu_per_send.sh). The client only wraps the
channel's connection pool and is safe to share between threads, so one is made per pool and
kept. Selected by the settings (``CELERY_BROKER_TRANSPORT``) for ``redis://`` brokers.

A turn's message (``runtime.tasks.run_turn``) is also kept out of Redis' unacked index, which
kombu writes as each message arrives and clears as it is acked: two Redis transactions per
message, 15% of the worker's CPU per blocking send and a round trip before every turn starts.
That index gives a message back to the queue when its worker dies, after the visibility
timeout (an hour). A turn does not need it: its lease is in the task's row, and the turn sweep
(``runtime.tasks.sweep_turns``, every ``TURN_SWEEP_SECONDS``) gives a turn whose worker died,
or whose message was lost, to another worker within a minute. A turn held by a worker that
stops warmly goes back to its queue from the worker's memory, as kombu does with the others.
"""

import base64
import os
import socket
from contextlib import contextmanager
from typing import Any
from uuid import uuid4

import orjson
import redis as redis_client
from django.conf import settings
from kombu.transport import redis, virtual

from config.celery import RUN_TURN
from config.tracing import provider_current


def is_turn(message) -> bool:
    return (message.headers or {}).get("task") == RUN_TURN


class QoS(redis.QoS):
    # kombu's type stubs leave out what the Redis transport's channel and the base QoS have.
    channel: Any
    _delivered: Any

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        # Delivery tags of the turns this channel holds, unacked (kept in memory only).
        self._turns: set = set()

    def append(self, message, delivery_tag):
        if is_turn(message):
            self._turns.add(delivery_tag)
            virtual.QoS.append(self, message, delivery_tag)
            return
        super().append(message, delivery_tag)

    def ack(self, delivery_tag):
        if delivery_tag in self._turns:
            self._turns.discard(delivery_tag)
            virtual.QoS.ack(self, delivery_tag)
            return
        super().ack(delivery_tag)

    def reject(self, delivery_tag, requeue=False):
        if delivery_tag in self._turns:
            if requeue:
                self._turn_restore(self._delivered[delivery_tag], leftmost=True)
            self._turns.discard(delivery_tag)
            virtual.QoS.ack(self, delivery_tag)
            return
        super().reject(delivery_tag, requeue=requeue)

    def restore_unacked(self, client=None):
        # The worker stops: the turns it holds and has not acked go back to their queue.
        virtual.QoS._flush(self)  # type: ignore[attr-defined]
        for tag in list(self._turns):
            message = self._delivered.pop(tag, None)
            if message is not None:
                self._turn_restore(message)
        self._turns.clear()
        super().restore_unacked(client)

    def _turn_restore(self, message, leftmost: bool = False) -> None:
        delivery = message.delivery_info
        # The client itself takes the push kombu would put in a pipeline: one command.
        with self.channel.conn_or_acquire() as client:
            self.channel._do_restore_message(
                message._raw, delivery["exchange"], delivery["routing_key"], client, leftmost
            )


class Channel(redis.Channel):
    QoS = QoS
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


# --- A turn's message, published straight to Redis -----------------------------------------
#
# Celery's publish (``send_task_message``: the producer, its retry wrapper, the queue's
# declaration, the signals, kombu's envelope) cost a web process 330 us of CPU per turn, for a
# message that is the same each time but for its ids and the task's key: a tenth of a blocking
# SendMessage's CPU, and as much on each decision. The same message, as Celery's protocol 2
# and kombu's Redis envelope write it, is pushed with one LPUSH here. Where the publish must
# do more, Celery's own path is taken: a broker other than ``redis://``, tracing on (its
# receiver of ``before_task_publish`` puts the trace in the headers), or Redis refusing the
# push (Celery's retry policy then applies). Nothing else here listens to Celery's publish
# signals.

_EMBED = {"callbacks": None, "errbacks": None, "chain": None, "chord": None}
_clients: dict[str, Any] = {}


def _client(url: str):
    client = _clients.get(url)
    if client is None:
        # redis-py's pool makes its connections again in a forked child (it checks the pid).
        client = _clients[url] = redis_client.Redis.from_url(url)
    return client


def turn_message(task_pk: int, queue: str, *, reply_to: str) -> bytes:
    """``run_turn(task_pk)``'s message on ``queue``, as Celery and kombu would write it."""
    task_id = str(uuid4())
    body = orjson.dumps([[task_pk], {}, _EMBED])
    return orjson.dumps(
        {
            "body": base64.b64encode(body).decode(),
            "content-encoding": "utf-8",
            "content-type": "application/json",
            "headers": {
                "lang": "py",
                "task": RUN_TURN,
                "id": task_id,
                "shadow": None,
                "eta": None,
                "expires": None,
                "group": None,
                "group_index": None,
                "retries": 0,
                "timelimit": [None, None],
                "root_id": task_id,
                "parent_id": None,
                "argsrepr": f"({task_pk!r},)",
                "kwargsrepr": "{}",
                "origin": f"gen{os.getpid()}@{socket.gethostname()}",
                "ignore_result": True,
                "replaced_task_nesting": 0,
                "stamped_headers": None,
                "stamps": {},
            },
            "properties": {
                "correlation_id": task_id,
                "reply_to": reply_to,
                "delivery_mode": 2,
                "delivery_info": {"exchange": "", "routing_key": queue},
                "priority": 0,
                "body_encoding": "base64",
                "delivery_tag": str(uuid4()),
            },
        }
    )


def turns_list(queue: str) -> str:
    """The Redis list of the turns the workers of ``queue`` start (runtime.turn.consumer)."""
    return f"{queue}.turns"


def turn_consumer_on(broker_url: str) -> bool:
    """Whether turns start from the workers' turn list (runtime.turn.consumer): with
    ``TURN_CONSUMER``, on a ``redis://`` broker, and with the threads pool (a prefork worker's
    turns run in its children, as Celery tasks). Web processes and workers read the same
    settings, so they agree."""
    return (
        bool(settings.TURN_CONSUMER)
        and broker_url.startswith("redis://")
        and settings.CELERY_WORKER_POOL == "threads"
    )


def turn_push(broker_url: str, task_pk: int, queue: str, carrier: dict) -> bool:
    """Push the turn's task key (and the trace's ``carrier``) for the workers' turn consumer
    (runtime.turn.consumer): True once it is there; False where the turn must go as a Celery
    message (``turn_consumer_on`` says no, or Redis refuses)."""
    if not turn_consumer_on(broker_url):
        return False
    try:
        _client(broker_url).lpush(turns_list(queue), orjson.dumps([task_pk, carrier]))
    except redis_client.RedisError:
        return False
    return True


def turn_publish(broker_url: str, task_pk: int, queue: str, *, reply_to: str) -> bool:
    """Push ``run_turn(task_pk)`` onto ``queue`` with one LPUSH: True once it is there; False
    where Celery's publish must do it (see above)."""
    if not broker_url.startswith("redis://") or provider_current() is not None:
        return False
    try:
        _client(broker_url).lpush(queue, turn_message(task_pk, queue, reply_to=reply_to))
    except redis_client.RedisError:
        return False
    return True
