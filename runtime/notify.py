"""Wake-ups for callers waiting on a task (a blocking SendMessage).

The worker announces each change with PostgreSQL's NOTIFY inside the same transaction, so the
announcement is delivered exactly when the change commits. Each web process keeps one
LISTEN connection and wakes the coroutines waiting for that task: no thread per waiter and no
sleep loop. The embedded default (SQLite) has no NOTIFY and polls instead.
"""

import asyncio
import contextlib
import logging
import time
import weakref
from collections import defaultdict

from django.db import connection, connections

logger = logging.getLogger(__name__)
CHANNEL = "countersign_tasks"
SQLITE_POLL_SECONDS = 0.1


def task_changed(task) -> None:
    """Announce a change of ``task``; call inside the transaction that changes it.

    While a turn's batch is open on the task (runtime.task_state.TurnBatch), the batch
    announces once, with the state it commits: a waiter reads the task when woken, and a
    stream every event after the last it sent, so one wake-up per commit is enough.
    """
    batch = getattr(task, "turn_batch", None)
    if batch is not None:
        batch.announce = True
    elif connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_notify(%s, %s)", [CHANNEL, f"{task.pk}:{task.state}"])


class _Listener:
    """One LISTEN connection per event loop, fanning notifications out to waiters."""

    def __init__(self):
        self.waiters: dict[int, set[asyncio.Queue]] = defaultdict(set)
        self.ready = asyncio.Event()
        self.task = asyncio.get_running_loop().create_task(self._run())

    async def _run(self) -> None:
        import psycopg

        settings = connections["default"].settings_dict
        params = {
            "dbname": settings["NAME"],
            "user": settings.get("USER") or None,
            "password": settings.get("PASSWORD") or None,
            "host": settings.get("HOST") or None,
            "port": settings.get("PORT") or None,
        }
        params = {k: v for k, v in params.items() if v}
        backoff = 0.5
        while True:
            try:
                conn = await psycopg.AsyncConnection.connect(autocommit=True, **params)
                async with conn:
                    await conn.execute(f"LISTEN {CHANNEL}")
                    self.ready.set()
                    backoff = 0.5
                    # Changes may have happened while we were not listening: let every
                    # waiter look again.
                    self._wake_all()
                    async for notify in conn.notifies():
                        pk, _, state = notify.payload.partition(":")
                        for queue in list(self.waiters.get(int(pk), ())):
                            queue.put_nowait(state)
            except asyncio.CancelledError:
                raise
            except Exception:  # noqa: BLE001 - a dropped connection must not stop the waiters
                logger.warning("task listener lost its connection; reconnecting", exc_info=True)
                self.ready.clear()
                self._wake_all()
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, 10)

    def _wake_all(self) -> None:
        for queues in list(self.waiters.values()):
            for queue in list(queues):
                queue.put_nowait("")


_listeners: "weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _Listener]" = (
    weakref.WeakKeyDictionary()
)


def _listener() -> _Listener:
    loop = asyncio.get_running_loop()
    listener = _listeners.get(loop)
    if listener is None or listener.task.done():
        listener = _listeners[loop] = _Listener()
    return listener


async def wait_for_state(task_pk: int, settled: frozenset, deadline: float, read_state) -> str:
    """Wait until the task's state is in ``settled`` or ``deadline`` (monotonic) passes.

    ``read_state`` is an async callable returning the task's current state; it is called once
    after registering (so no change between the caller's read and our registration is
    missed) and again whenever a wake-up does not carry the new state.
    """
    if connections["default"].vendor != "postgresql":
        while True:
            state = await read_state()
            if state in settled or time.monotonic() >= deadline:
                return state
            await asyncio.sleep(min(SQLITE_POLL_SECONDS, max(0.0, deadline - time.monotonic())))

    listener = _listener()
    queue: asyncio.Queue = asyncio.Queue()
    listener.waiters[task_pk].add(queue)
    try:
        try:
            await asyncio.wait_for(
                listener.ready.wait(), timeout=max(0.0, deadline - time.monotonic())
            )
        except TimeoutError:
            pass
        state = await read_state()
        while state not in settled:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            try:
                announced = await asyncio.wait_for(queue.get(), timeout=remaining)
            except TimeoutError:
                break
            state = announced or await read_state()
        return state
    finally:
        waiters = listener.waiters.get(task_pk)
        if waiters is not None:
            waiters.discard(queue)
            if not waiters:
                listener.waiters.pop(task_pk, None)


def notifications_available() -> bool:
    """Whether changes are announced (PostgreSQL); SQLite watchers poll instead."""
    return connections["default"].vendor == "postgresql"


@contextlib.asynccontextmanager
async def task_watch(task_pk: int, ready_timeout: float = 5.0):
    """A queue that receives a wake-up at each announced change of the task (a stream).

    Registered before the caller reads the task, so that no change after that read is
    missed; a wake-up may be empty (the listener reconnected: read again). On SQLite the
    queue never receives anything and the caller polls.
    """
    queue: asyncio.Queue = asyncio.Queue()
    if not notifications_available():
        yield queue
        return
    listener = _listener()
    listener.waiters[task_pk].add(queue)
    try:
        try:
            await asyncio.wait_for(listener.ready.wait(), timeout=ready_timeout)
        except TimeoutError:
            pass
        yield queue
    finally:
        waiters = listener.waiters.get(task_pk)
        if waiters is not None:
            waiters.discard(queue)
            if not waiters:
                listener.waiters.pop(task_pk, None)
