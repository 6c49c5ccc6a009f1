"""The A2A endpoint's bridge from async views to the database, and its blocking wait.

A blocking SendMessage can wait for minutes. Django would run each request's database work
on a thread of the request's own (thread-sensitive), idle for the whole wait: a thousand
waiters, a thousand threads. A2A requests run theirs on a small shared pool instead (see
config/asgi.py), holding a thread only while a query runs, and a database connection only
for one call.
"""

import time
from concurrent.futures import ThreadPoolExecutor

from asgiref.sync import sync_to_async
from django.conf import settings
from django.db import connection

from config.metrics import A2A_WAITERS
from runtime.models import SETTLED_STATES, Task
from runtime.notify import wait_for_state


def release_connection() -> None:
    """Give the database connection back (to the pool) before a long wait."""
    # So that a thousand waiting callers do not hold a thousand connections.
    connection.close()


def _call_releasing(fn, *args, **kwargs):
    try:
        return fn(*args, **kwargs)
    finally:
        # Hold a database connection for one call, not for the whole request: under ASGI
        # each request has a thread of its own, and a thousand requests in flight queued for
        # a pool of a few connections and timed out (bench/waiters.py). Inside an atomic
        # block (a test's transaction) the connection is the caller's to keep.
        if not connection.in_atomic_block:
            connection.close()


# Tests that drive the view in-process turn A2A_DB_THREAD_SENSITIVE on, so that the view's
# queries run on the test's thread and see the test's transaction.
_DB_EXECUTOR = ThreadPoolExecutor(max_workers=settings.A2A_DB_THREADS, thread_name_prefix="a2a-db")


async def db(fn, *args, **kwargs):
    """Run ``fn`` on the shared database pool (the test's thread in tests) and await it."""
    if settings.A2A_DB_THREAD_SENSITIVE:
        return await sync_to_async(_call_releasing, thread_sensitive=True)(fn, *args, **kwargs)
    return await sync_to_async(_call_releasing, thread_sensitive=False, executor=_DB_EXECUTOR)(
        fn, *args, **kwargs
    )


def _read_state(pk: int) -> str:
    state = Task.objects.filter(pk=pk).values_list("state", flat=True).first()
    release_connection()
    return state


async def wait_for_settled(task: Task) -> Task:
    """A blocking send waits for a terminal or interrupted state, or A2A_WAIT_MS."""
    await db(release_connection)
    deadline = time.monotonic() + settings.A2A_WAIT_MS / 1000

    async def read_state():
        return await db(_read_state, task.pk)

    with A2A_WAITERS.track_inprogress():
        await wait_for_state(task.pk, SETTLED_STATES, deadline, read_state)
    return await db(Task.objects.get, pk=task.pk)
