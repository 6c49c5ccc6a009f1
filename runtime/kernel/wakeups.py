"""Wake-ups for callers waiting on a task (a blocking SendMessage).

The worker announces each change with PostgreSQL's NOTIFY inside the same transaction, so the
announcement is delivered exactly when the change commits. Each web process keeps one
LISTEN connection and wakes the coroutines waiting for that task: no thread per waiter and no
sleep loop. The embedded default (SQLite) has no NOTIFY and polls instead.

The same connection hears live output (runtime.kernel.live_channel): a model's text as it is
written, handed to the streams of its task only (task_watch's queues), in the order it was
sent among the task's announcements. An announcement says the task's state and its last
event's seq, so that a stream reads the events up to that one only: the text sent before the
next event is written before it.
"""

import asyncio
import contextlib
import logging
import time
import weakref
from collections import defaultdict, deque
from typing import NamedTuple

from django.db import connection, connections

from runtime.kernel import live_channel

logger = logging.getLogger(__name__)
CHANNEL = "countersign_tasks"
SQLITE_POLL_SECONDS = 0.1
# How many announcements a listener remembers (a few hundred kB): enough to cover the moment
# between a blocking send taking its mark and registering its waiter, even while a burst of
# sends keeps the event loop busy for seconds; past it, a waiter reads the task's state.
RECENT_ANNOUNCEMENTS = 4096
# Items a stream's queue may hold before live text for it is dropped (a reader that does not
# keep up): the stream sees the gap, leaves the rest of that reply out, and the final reply
# follows as ever. Announcements are always queued.
STREAM_QUEUE_LIVE_MAX = 256


def task_changed(task) -> None:
    """Announce a change of ``task``; call inside the transaction that changes it.

    While a turn's batch is open on the task (runtime.kernel.task_state.TurnBatch), the batch
    announces once, with the state it commits: a waiter reads the task when woken, and a
    stream every event after the last it sent, so one wake-up per commit is enough.
    """
    batch = getattr(task, "turn_batch", None)
    if batch is not None:
        batch.announce = True
    elif (notify := announcement(task)) is not None:
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_notify(%s, %s)", list(notify))


def announcement(task) -> tuple[str, str] | None:
    """The NOTIFY (channel, payload) that announces ``task`` as it is now; None where there
    is no NOTIFY (SQLite: waiters poll). runtime.kernel.task_state sends it with the task's save."""
    if connection.vendor != "postgresql":
        return None
    return CHANNEL, f"{task.pk}:{task.state}:{task.event_seq}"


def live_notify(payloads: list[str]) -> None:
    """Send these pieces of live text (runtime.kernel.live_channel), in order, in one
    statement (and one transaction: the sender's connection is in autocommit), so that they
    reach the listeners before anything the worker commits after them."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT pg_notify(%s, piece) FROM unnest(%s::text[]) WITH ORDINALITY AS p(piece, n) "
            "ORDER BY n",
            [live_channel.CHANNEL, payloads],
        )


class Announced(NamedTuple):
    """An announcement, as a stream's queue receives it: the task's state and the seq of its
    last event as the change committed (None from a sender that did not say)."""

    state: str
    seq: int | None


class StreamQueue(asyncio.Queue):
    """A stream's queue (task_watch): it receives announcements as Announced, and the task's
    live text (live_channel.LiveText); a blocking send's waiter gets states only."""


def listen_params() -> dict:
    """The connection parameters of a LISTEN connection: the default database's."""
    settings = connections["default"].settings_dict
    params = {
        "dbname": settings["NAME"],
        "user": settings.get("USER") or None,
        "password": settings.get("PASSWORD") or None,
        "host": settings.get("HOST") or None,
        "port": settings.get("PORT") or None,
    }
    return {k: v for k, v in params.items() if v}


@contextlib.contextmanager
def task_announcements_heard(*, poll_seconds: float = 0.25):
    """For a worker's thread that waits for a change of a task it does not hold (a question
    its open tool call waits on, runtime.turn.elicitation): yields ``heard(task_pk, seconds)``,
    which returns once the task is announced or ``seconds`` have passed; the caller then
    reads what it waits for. On PostgreSQL a LISTEN connection of its own, listening before
    the caller's first read (so no change after that read is missed); elsewhere (SQLite: no
    NOTIFY) ``heard`` waits ``poll_seconds`` at most, and the caller reads again."""
    if not notifications_available():
        yield lambda task_pk, seconds: time.sleep(max(0.0, min(seconds, poll_seconds)))
        return
    import psycopg

    conn = psycopg.connect(autocommit=True, **listen_params())
    try:
        conn.execute(f"LISTEN {CHANNEL}")

        def heard(task_pk: int, seconds: float) -> bool:
            wanted = f"{task_pk}:"
            deadline = time.monotonic() + seconds
            while (remaining := deadline - time.monotonic()) > 0:
                for notify in conn.notifies(timeout=remaining, stop_after=1):
                    if notify.payload.startswith(wanted):
                        return True
            return False

        yield heard
    finally:
        conn.close()


class Announcements:
    """The last state announced for each task, over one LISTEN connection's latest ``size``
    announcements; bounded, and it knows when it has forgotten one."""

    def __init__(self, size: int = RECENT_ANNOUNCEMENTS):
        self.size = size
        self.seq = 0  # announcements heard so far
        self.forgotten = 0  # the seq of the last one dropped to stay within size
        self.last: dict[int, tuple[int, str]] = {}
        self.order: deque[tuple[int, int]] = deque()

    def record(self, task_pk: int, state: str) -> None:
        self.seq += 1
        self.last[task_pk] = (self.seq, state)
        self.order.append((self.seq, task_pk))
        if len(self.order) > self.size:
            seq, dropped = self.order.popleft()
            self.forgotten = seq
            if self.last[dropped][0] == seq:
                del self.last[dropped]

    def since(self, task_pk: int, seq: int) -> str | None:
        """The last state announced for the task after announcement ``seq``: "" when none
        was, None when one may have been and is forgotten."""
        if self.forgotten > seq:
            return None
        heard = self.last.get(task_pk)
        return heard[1] if heard is not None and heard[0] > seq else ""


class Mark(NamedTuple):
    """Where a listening connection stood: what it had heard, and how many."""

    announcements: Announcements
    seq: int


class _Listener:
    """One LISTEN connection per event loop, fanning notifications out to waiters."""

    def __init__(self):
        self.waiters: dict[int, set[asyncio.Queue]] = defaultdict(set)
        self.ready = asyncio.Event()
        # What the current connection has heard since its LISTEN; None while not listening.
        self.announcements: Announcements | None = None
        self.task = asyncio.get_running_loop().create_task(self._run())

    async def _run(self) -> None:
        import psycopg

        params = listen_params()
        backoff = 0.5
        while True:
            try:
                conn = await psycopg.AsyncConnection.connect(autocommit=True, **params)
                async with conn:
                    await conn.execute(f"LISTEN {CHANNEL}; LISTEN {live_channel.CHANNEL}")
                    # A new connection has heard nothing yet: marks taken on an earlier one
                    # say nothing about what this one will hear.
                    announcements = self.announcements = Announcements()
                    self.ready.set()
                    backoff = 0.5
                    # Changes may have happened while we were not listening: let every
                    # waiter look again.
                    self._wake_all()
                    async for notify in conn.notifies():
                        if notify.channel == live_channel.CHANNEL:
                            self._live(notify.payload)
                            continue
                        pk_text, _, rest = notify.payload.partition(":")
                        state, _, seq_text = rest.partition(":")
                        pk = int(pk_text)
                        announcements.record(pk, state)
                        announced = Announced(state, int(seq_text) if seq_text.isdigit() else None)
                        for queue in list(self.waiters.get(pk, ())):
                            queue.put_nowait(announced if isinstance(queue, StreamQueue) else state)
            except asyncio.CancelledError:
                raise
            except Exception:  # noqa: BLE001 - a dropped connection must not stop the waiters
                logger.warning("task listener lost its connection; reconnecting", exc_info=True)
                self.announcements = None
                self.ready.clear()
                self._wake_all()
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, 10)

    def _live(self, payload: str) -> None:
        """Hand a piece of live text to the streams of its task in this process."""
        pk = live_channel.live_task_pk(payload)
        if pk is None:  # the notification names no task
            return
        queues = [q for q in self.waiters.get(pk, ()) if isinstance(q, StreamQueue)]
        if not queues:
            return
        piece = live_channel.live_parse(payload)
        if piece is None:
            return
        for queue in queues:
            if queue.qsize() < STREAM_QUEUE_LIVE_MAX:
                queue.put_nowait(piece)

    def _wake_all(self) -> None:
        for queues in list(self.waiters.values()):
            for queue in list(queues):
                queue.put_nowait("")

    def mark(self) -> Mark | None:
        announcements = self.announcements
        if announcements is None or not self.ready.is_set():
            return None
        return Mark(announcements, announcements.seq)

    def announced_since(self, task_pk: int, mark: Mark | None) -> str | None:
        """The last state announced for the task since ``mark``, "" when none was, None
        when this connection cannot tell (no mark, or it was taken on another connection)."""
        if mark is None or mark.announcements is not self.announcements:
            return None
        return mark.announcements.since(task_pk, mark.seq)


_listeners: "weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _Listener]" = (
    weakref.WeakKeyDictionary()
)


def _listener() -> _Listener:
    loop = asyncio.get_running_loop()
    listener = _listeners.get(loop)
    if listener is None or listener.task.done():
        listener = _listeners[loop] = _Listener()
    return listener


def listen_start() -> None:
    """Start this event loop's listener now, not at the first wait (a web process's start,
    config/asgi.py): a burst of blocking sends at once then finds it listening
    (announcements_mark)."""
    if notifications_available():
        _listener()


def announcements_mark() -> Mark | None:
    """Where this event loop's listener stands; None when it is not listening (SQLite, not
    started, or not connected yet).

    Take it before the change that starts a turn (a blocking send, before its message is
    taken): then every change of the task from there on is announced to this listener, and
    wait_for_state(since=...) knows the task's state without reading it.
    """
    if not notifications_available():
        return None
    # Not started here: a process that never waits needs no listener (listen_start).
    listener = _listeners.get(asyncio.get_running_loop())
    return listener.mark() if listener is not None else None


async def wait_for_state(
    task_pk: int,
    settled: frozenset,
    deadline: float,
    read_state,
    since: tuple[Mark | None, str] | None = None,
) -> str:
    """Wait until the task's state is in ``settled`` or ``deadline`` (monotonic) passes.

    ``read_state`` is an async callable returning the task's current state; it is called once
    after registering (so no change between the caller's read and our registration is
    missed) and again whenever a wake-up does not carry the new state.

    ``since`` is (mark, state): a mark (announcements_mark) taken before the task was last
    changed, and its state as that change left it. When the listener has heard, on the
    connection the mark was taken on, every announcement since, the last one for the task (or
    that state, when there was none) is its state now, and the first read is skipped: a
    blocking send's own read of the task it has just made, one query per call, queued behind
    the others when thousands of calls arrive at once (bench/waiters.py).
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
        # Registered first, so that what is announced from here on reaches the queue; what
        # was announced before, since the mark, the listener remembers.
        state = None
        if since is not None:
            mark, known = since
            announced = listener.announced_since(task_pk, mark)
            if announced is not None:
                state = announced or known
        if state is None:
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
    """A queue that receives a wake-up at each announced change of the task (a stream), as
    Announced, and the task's live text, in the order they were sent.

    Registered before the caller reads the task, so that no change after that read is
    missed; a wake-up may be empty (the listener reconnected: read again). On SQLite the
    queue never receives anything and the caller polls.
    """
    queue: asyncio.Queue = StreamQueue()
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
