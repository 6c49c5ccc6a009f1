"""The worker's turn consumer: turns started from a Redis list, without Celery's message.

A turn's start is the same message every time but for the task's key, and Celery's handling of
it in the worker (kombu's delivery, the task request, the trace wrapper, the ack) was a third
of the worker's CPU per blocking SendMessage (py-spy, bench/cpu_per_send.sh). On a
``redis://`` broker the web pushes the task's key (with the trace, when tracing is on) onto
the list ``<queue>.turns`` (``turn_push``), and each worker process pops it here and runs the
turn on a thread of its own pool, as many at once as the worker's concurrency.

What Celery's message gave a turn, the turn has already: its lease is in the task's row and the
turn sweep (``runtime.tasks.sweep_turns``, through Celery) gives a turn that no worker started,
or whose worker died, to a worker; a key is popped only when a thread is free to run it, so a
worker holds none it has not started. A stopping worker stops popping and lets its running
turns finish (a warm stop), or leaves them to the sweep (a cold one). ``TURN_CONSUMER=false``,
another broker or the prefork pool start every turn as the Celery task
``runtime.tasks.run_turn`` (config.broker.turn_consumer_on).
"""

import logging
import os
import socket
import threading
import uuid
from concurrent.futures import ThreadPoolExecutor

import orjson
import redis
from celery import bootsteps
from django.db import connections

from config.broker import turn_consumer_on, turns_list
from config.celery import queue as celery_queue
from config.tracing import context_attached, context_from_carrier
from runtime.turn.runner import turn_run

logger = logging.getLogger(__name__)

# How long one pop waits for a key before the loop looks whether it should stop.
POP_SECONDS = 1


class TurnConsumer(bootsteps.StartStopStep):
    """A Celery worker's bootstep: one thread pops turns and a pool runs them."""

    requires = ("celery.worker.components:Pool",)

    def __init__(self, worker, **kwargs):
        super().__init__(worker, **kwargs)
        self.thread: threading.Thread | None = None
        self.stopping = threading.Event()
        self.pool: ThreadPoolExecutor | None = None
        self.slots: threading.BoundedSemaphore | None = None

    def start(self, worker) -> None:
        broker_url = worker.app.conf.broker_url or ""
        if not turn_consumer_on(broker_url):
            return
        size = max(1, int(worker.concurrency or 1))
        self.slots = threading.BoundedSemaphore(size)
        self.pool = ThreadPoolExecutor(max_workers=size, thread_name_prefix="turn")
        self.stopping.clear()
        key = turns_list(celery_queue())
        self.thread = threading.Thread(
            target=self.consume, args=(broker_url, key), name="turn-consumer", daemon=True
        )
        self.thread.start()

    def stop(self, worker) -> None:
        self._stop(wait=True)

    def shutdown(self, worker) -> None:
        self._stop(wait=True)

    def terminate(self, worker) -> None:
        self._stop(wait=False)

    def _stop(self, *, wait: bool) -> None:
        self.stopping.set()
        if self.thread is not None:
            self.thread.join(POP_SECONDS + 5)
            self.thread = None
        if self.pool is not None:
            self.pool.shutdown(wait=wait, cancel_futures=not wait)
            self.pool = None

    def consume(self, broker_url: str, key: str) -> None:
        assert self.slots is not None and self.pool is not None
        client = redis.Redis.from_url(broker_url)
        while not self.stopping.is_set():
            # A key is taken only when a thread is free to run it.
            if not self.slots.acquire(timeout=POP_SECONDS):
                continue
            try:
                popped = client.brpop([key], timeout=POP_SECONDS)
                if popped is None:
                    self.slots.release()
                    continue
                self.pool.submit(self.run, popped[1])
            except Exception:
                # Redis refused, or the pool shut down meanwhile. The loop goes on (it must
                # never end while the worker runs); a key taken and not started is the sweep's.
                self.slots.release()
                if not self.stopping.is_set():
                    logger.warning(
                        "turn consumer: could not take a turn; trying again", exc_info=True
                    )
                    self.stopping.wait(POP_SECONDS)

    def run(self, raw: bytes | str) -> None:
        assert self.slots is not None
        try:
            task_pk, carrier = orjson.loads(raw)
            worker_id = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4()}"
            with context_attached(context_from_carrier(carrier)):
                turn_run(task_pk=int(task_pk), worker_id=worker_id)
        except Exception:
            logger.exception("turn consumer: could not start the turn %r", raw[:200])
        finally:
            # As at the end of a Celery task (its Django fixup): the thread's connections are
            # closed, given back to the pool where there is one.
            for connection in connections.all(initialized_only=True):
                connection.close()
            self.slots.release()
