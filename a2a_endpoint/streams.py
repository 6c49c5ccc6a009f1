"""SendStreamingMessage and SubscribeToTask: A2A 1.0 JSON-RPC over Server-Sent Events.

A stream is a coroutine of the async view, woken by the same change notifications as the
blocking SendMessage (runtime.kernel.wakeups: one LISTEN connection per web process; SQLite polls).
It holds no thread and no database connection between events: each wake-up reads the task's
new events (TaskEvent, in seq order) on the shared database pool (a2a_endpoint.asyncdb).

The first event is the Task (or the Message of a direct reply), then the stored status and
artifact updates in order, each a JSON-RPC response with the request's id, written for this
caller's activated extensions exactly as GetTask writes them (a2a_endpoint.wire). The stream
stays open through AUTH_REQUIRED and closes after a Message, a terminal state or
INPUT_REQUIRED (SubscribeToTask on a task already waiting for input sends it, then waits for
what follows the answer). A client that goes away ends its watching, never the task.

The 0.3 dialect reuses the same machinery through ``stream_open(..., translate=...)``, and
closes its streams at either pause (``closing``); its direct message/stream is
``_Stream.run_direct``. The HTTP+JSON binding writes each event without the JSON-RPC envelope
(``envelope=False``).

Live output (a2a_endpoint.live): while the model writes a reply for a turn whose message came
on a stream, its text reaches the task's streams between the stored events, in the order it
was sent among them: each announcement says the seq of the event it announces, and a stream
reads the events up to that one only, so the text sent before the next event is written
before it.
"""

import asyncio
import json
import logging
import signal
import threading
import time
from collections import Counter
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, replace

from a2a import types as a2a
from django.conf import settings
from django.http import StreamingHttpResponse

from a2a_endpoint import errors, inputs, wire
from a2a_endpoint.asyncdb import db
from a2a_endpoint.files import linker
from a2a_endpoint.identity import Caller
from a2a_endpoint.live import LiveFollow
from a2a_endpoint.methods import direct_reply, message_accept
from config.logging import bind
from runtime.kernel.errors import TaskNotCancelable
from runtime.kernel.live_channel import LiveText
from runtime.kernel.presence import stream_alive, stream_attach, stream_detach
from runtime.kernel.task_models import (
    SETTLED_STATES,
    TERMINAL_STATES,
    TURN_RUNTIME_FIELDS,
    Task,
    TaskEvent,
    TaskState,
)
from runtime.kernel.task_selectors import task_for_caller
from runtime.kernel.wakeups import (
    SQLITE_POLL_SECONDS,
    Announced,
    notifications_available,
    task_watch,
)
from runtime.turn.cancel import task_cancel, task_hand_out

logger = logging.getLogger(__name__)

# After these a stream closes (as a2a-go, a2a-js and the conformance kit do); it stays open
# through AUTH_REQUIRED, which a person resolves outside A2A.
CLOSING_STATES = TERMINAL_STATES | {TaskState.INPUT_REQUIRED}
# A turn that has only started may still answer with a direct Message instead of a Task.
STARTING_STATES = frozenset({TaskState.SUBMITTED, TaskState.WORKING})
KEEPALIVE = b": keep-alive\n\n"
SHUTDOWN = object()

Translate = Callable[[dict], dict]


# --- how many streams are open -------------------------------------------------------------


class _Registry:
    """The open streams of this process: counted per token and in all, and told when the
    server shuts down."""

    def __init__(self):
        self.lock = threading.Lock()
        self.per_token: Counter = Counter()
        self.total = 0
        self.queues: dict[int, tuple[asyncio.AbstractEventLoop, asyncio.Queue]] = {}

    def take(self, key: tuple) -> "Slot":
        with self.lock:
            if self.total >= settings.A2A_STREAMS_PER_PROCESS:
                raise too_many_streams("process", settings.A2A_STREAMS_PER_PROCESS)
            if self.per_token[key] >= settings.A2A_STREAMS_PER_TOKEN:
                # Per token's subject; callers without a token, per address (Caller.limit_key).
                scope = "address" if len(key) > 2 else "token"
                raise too_many_streams(scope, settings.A2A_STREAMS_PER_TOKEN)
            self.per_token[key] += 1
            self.total += 1
        return Slot(self, key)

    def give_back(self, key: tuple) -> None:
        with self.lock:
            self.total -= 1
            self.per_token[key] -= 1
            if self.per_token[key] <= 0:
                del self.per_token[key]

    def shutdown(self) -> None:
        """Tell every open stream to end (the server is stopping)."""
        for loop, queue in list(self.queues.values()):
            try:
                loop.call_soon_threadsafe(queue.put_nowait, SHUTDOWN)
            except RuntimeError:  # the loop is already closed
                pass


class Slot:
    """One open stream's place in the registry; given back exactly once."""

    def __init__(self, registry: _Registry, key: tuple):
        self.registry, self.key, self.released = registry, key, False
        self.task_pk: int | None = None

    def watch(self, queue: asyncio.Queue, task_pk: int) -> None:
        """The stream watches the task: shown on its page, woken at shutdown."""
        self.registry.queues[id(self)] = (asyncio.get_running_loop(), queue)
        self.task_pk = task_pk
        stream_attach(task_pk, presence_ttl())

    def alive(self) -> None:
        if self.task_pk is not None:
            stream_alive(self.task_pk, presence_ttl())

    def release(self) -> None:
        if self.released:
            return
        self.released = True
        self.registry.queues.pop(id(self), None)
        self.registry.give_back(self.key)
        if self.task_pk is not None:
            try:
                stream_detach(self.task_pk)
            except Exception:  # noqa: BLE001 - the page's count expires on its own
                logger.warning("could not count a stream off its task", exc_info=True)


REGISTRY = _Registry()


def presence_ttl() -> float:
    """How long the task page believes in a stream after its last keep-alive."""
    return 3 * settings.A2A_STREAM_KEEPALIVE_SECONDS + 5


def streams_open() -> int:
    """How many streams this process serves now."""
    return REGISTRY.total


def too_many_streams(scope: str, limit: int) -> errors.RpcError:
    return errors.RpcError(
        -32000,
        f"Too many open streams for this {scope} (the limit is {limit}); close one, or poll "
        "with GetTask, or register a push notification config.",
        "TOO_MANY_STREAMS",
        metadata={"scope": scope, "limit": limit},
    )


_handlers_installed = False


def _shutdown_hooks_install() -> None:
    """End the streams when the server is told to stop (SIGTERM, SIGINT), then let the
    server's own handler run: streams end cleanly instead of holding the shutdown open."""
    global _handlers_installed
    if _handlers_installed or threading.current_thread() is not threading.main_thread():
        return
    _handlers_installed = True
    for signum in (signal.SIGTERM, signal.SIGINT):
        previous = signal.getsignal(signum)

        def handler(number, frame, previous=previous):
            REGISTRY.shutdown()
            if callable(previous):
                previous(number, frame)
            elif previous == signal.SIG_DFL:
                signal.signal(number, signal.SIG_DFL)
                signal.raise_signal(number)

        signal.signal(signum, handler)


# --- reading the task ----------------------------------------------------------------------


def _task_load(pk: int) -> Task:
    """The task as its first frame shows it: never the turn runtime's own columns (the
    transcript is often the largest), which no stream reads."""
    return Task.objects.select_related("tenant").defer(*TURN_RUNTIME_FIELDS).get(pk=pk)


@dataclass(frozen=True)
class _Glance:
    """What a stream keeps of its task between frames (not the task: a stream that lives for
    hours would hold its history and artifacts all along, 19 MB for a 3 MB task)."""

    pk: int
    tenant_id: int
    public_id: str
    subject: str
    state: str
    reply_message: dict | None = None
    # Its last event's seq as last read, and its contextId (live output's frames name it).
    event_seq: int = 0
    wire_context_id: str = ""

    @classmethod
    def of(cls, task: Task) -> "_Glance":
        return cls(
            task.pk,
            task.tenant_id,
            task.public_id,
            task.subject,
            task.state,
            event_seq=task.event_seq,
            wire_context_id=task.wire_context_id,
        )


def _glance_load(glance: "_Glance") -> "_Glance":
    """The task's state now (and a direct reply's Message once it is settled), one small read."""
    state, reply, event_seq = (
        Task.objects.filter(pk=glance.pk).values_list("state", "reply_message", "event_seq").get()
    )
    return replace(
        glance,
        state=state,
        reply_message=reply if state in SETTLED_STATES else None,
        event_seq=event_seq,
    )


def _task_wire(caller: Caller, task: Task, history_length: int | None) -> dict:
    return wire.task_wire(
        task,
        activated=caller.activated,
        files_base=caller.files_base,
        history_length=history_length,
    )


def _artifact_flags(result: dict) -> dict:
    """An artifact event replaces the artifact whole (a new version of the same artifactId
    replaces the old one): append is false and this chunk is the last."""
    update = result.get("artifactUpdate")
    if update is not None:
        update.setdefault("append", False)
        update.setdefault("lastChunk", True)
    return result


def _events_after(
    caller: Caller, task: "_Glance", seq: int, upto: int | None = None
) -> list[tuple[int, str, str, dict]]:
    """The task's events after ``seq`` (up to ``upto``, when given): (seq, kind, state,
    StreamResponse for this caller)."""
    link = linker(task, caller.files_base)
    events = TaskEvent.objects.filter(tenant_id=task.tenant_id, task_id=task.pk, seq__gt=seq)
    if upto is not None:
        events = events.filter(seq__lte=upto)
    return [
        (
            e.seq,
            e.kind,
            e.state,
            _artifact_flags(wire.event_wire(e.payload, caller.activated, link)),
        )
        for e in events.only("seq", "kind", "state", "payload").order_by("seq")
    ]


def _informative(events) -> bool:
    """Whether a starting task has shown something beyond 'submitted' and 'working'."""
    for _seq, kind, state, result in events:
        if kind == TaskEvent.Kind.ARTIFACT or state not in STARTING_STATES:
            return True
        update = result.get("statusUpdate", {})
        if update.get("status", {}).get("message") or update.get("metadata"):
            return True
    return False


# --- the stream ----------------------------------------------------------------------------


class _Stream:
    def __init__(
        self,
        caller: Caller,
        request_id,
        translate: Translate | None,
        slot: Slot,
        closing: frozenset = CLOSING_STATES,
        envelope: bool = True,
    ):
        self.caller, self.request_id, self.translate, self.slot = (
            caller,
            request_id,
            translate,
            slot,
        )
        self.closing = closing
        # JSON-RPC wraps each event in a response with the request's id; the HTTP+JSON
        # binding sends the StreamResponse itself (A2A §11.7).
        self.envelope = envelope
        self.notified = notifications_available()
        self.live = LiveFollow()

    def frame(self, result: dict) -> bytes:
        if self.translate is not None:
            result = self.translate(result)
        body = (
            {"jsonrpc": "2.0", "id": self.request_id, "result": result} if self.envelope else result
        )
        return b"data: " + json.dumps(body).encode() + b"\n\n"

    def error_frame(self, error: errors.RpcError) -> bytes:
        body = error.body(self.request_id) if self.envelope else errors.status_body(error)[1]
        return b"data: " + json.dumps(body).encode() + b"\n\n"

    async def wake(self, queue: asyncio.Queue, timeout: float):
        """Wait for a change of the task (or, on SQLite, the next poll): what the queue holds
        then, in order (announcements, live text, "" to read anew); SHUTDOWN; None on
        timeout."""
        if not self.notified:
            timeout = min(timeout, SQLITE_POLL_SECONDS)
        try:
            items = [await asyncio.wait_for(queue.get(), timeout=max(0.0, timeout))]
        except TimeoutError:
            return None if self.notified else [""]
        while not queue.empty():  # several changes, one read
            items.append(queue.get_nowait())
        return SHUTDOWN if SHUTDOWN in items else items

    async def follow(self, task: "_Glance", seq: int, items: list) -> AsyncIterator[tuple]:
        """Write ``items`` (wake) in order from event ``seq`` on: the events each announcement
        names (runs of them, one read), the live text between them. Yields (frame, the seq
        written up to, whether the stream closes there)."""
        at = 0
        while at < len(items):
            item = items[at]
            if isinstance(item, LiveText):
                at += 1
                starts = self.live.take(item, seq)
                if starts is not None:
                    yield self.frame(self.live.artifact_update(item, starts, task)), seq, False
                continue
            upto: int | None = -1
            while at < len(items) and not isinstance(items[at], LiveText):
                bound = items[at].seq if isinstance(items[at], Announced) else None
                # "" (the listener reconnected; SQLite's poll) or an announcement that does
                # not say its seq: everything there is.
                upto = None if upto is None or bound is None else max(upto, bound)
                at += 1
            if upto is not None and upto <= seq:
                continue
            for event_seq, kind, state, result in await db(
                _events_after, self.caller, task, seq, upto
            ):
                seq = event_seq
                closes = kind == TaskEvent.Kind.STATUS and state in self.closing
                yield self.frame(result), seq, closes
                if closes:
                    return

    async def tail(
        self, queue: asyncio.Queue, task: "_Glance", seq: int, items: list, next_keepalive: float
    ) -> AsyncIterator[bytes]:
        """Everything after the first frame: ``items`` from event ``seq`` on, then what the
        queue brings, with keep-alives, until a closing state (or the server stops)."""
        keepalive = settings.A2A_STREAM_KEEPALIVE_SECONDS
        while True:
            async for frame, written, closes in self.follow(task, seq, items):
                seq = written
                yield frame
                if closes:
                    return
            while True:
                if time.monotonic() >= next_keepalive:
                    # Proxies cut idle connections; a comment keeps this one open.
                    yield KEEPALIVE
                    self.slot.alive()
                    next_keepalive = time.monotonic() + keepalive
                woken = await self.wake(queue, next_keepalive - time.monotonic())
                if woken is SHUTDOWN:
                    return
                if woken is not None:
                    items = woken
                    break

    async def run(
        self, task: Task, *, sending: bool, history_length: int | None
    ) -> AsyncIterator[bytes]:
        caller = self.caller
        keepalive = settings.A2A_STREAM_KEEPALIVE_SECONDS
        try:
            async with task_watch(task.pk) as queue:
                self.slot.watch(queue, task.pk)
                next_keepalive = time.monotonic() + keepalive
                # The Task, then the events after it, from its event_seq. A send's stream
                # starts from the task as the message left it, whatever the worker has done
                # since: its caller sees every update of the turn, down to the one that ends
                # it, however soon that came. A subscriber's starts from the task as it is now.
                start = task if sending else await db(_task_load, task.pk)
                first = self.frame({"task": await db(_task_wire, caller, start, history_length)})
                first_state, seq = start.state, start.event_seq
                # From here on the stream holds its first frame until it is written, and a
                # glance of the task: no Task row (its history, artifacts, transcript).
                glance = latest = _Glance.of(start)
                del task
                start = None
                # What to write after the first event, in order: the events up to the task as
                # read once this stream listened (announced before it did), then what the
                # queue brings.
                items: list = [Announced(glance.state, glance.event_seq)]
                if sending:
                    # Where the turn is now: a fast worker may have answered already.
                    latest = await db(_glance_load, glance)
                    items = [Announced(latest.state, latest.event_seq)]
                    # Hold the first event while the turn has only started: a direct reply
                    # is a Message, and a stream is either one Message or a Task's events.
                    hold_until = time.monotonic() + settings.A2A_STREAM_FIRST_EVENT_MS / 1000
                    while latest.state in STARTING_STATES and time.monotonic() < hold_until:
                        woken = await self.wake(queue, hold_until - time.monotonic())
                        if woken is SHUTDOWN:
                            return
                        if woken is None:
                            break
                        items.extend(woken)
                        if any(isinstance(item, LiveText) for item in woken):
                            break  # the model is writing a reply: a task's (never direct)
                        events = await db(_events_after, caller, glance, seq)
                        latest = await db(_glance_load, latest)
                        if _informative(events):
                            break
                    if latest.reply_message and latest.state in TERMINAL_STATES:
                        yield self.frame({"message": latest.reply_message})
                        return
                yield first
                del first  # written: not held while the stream lives
                # A send's stream ends at the pause its turn reached; a subscriber to a task
                # waiting for input is watching for what follows the answer (the conformance
                # kit's STREAM-SUB-002): its stream stays open until the next closing state.
                if sending and first_state in self.closing:
                    return
                async for frame in self.tail(queue, glance, seq, items, next_keepalive):
                    yield frame
        except asyncio.CancelledError:
            # The client went away: its watching ends here; the turn runs on in the worker.
            raise
        except Exception:
            logger.exception("A2A stream failed")
            yield self.error_frame(errors.RpcError(-32603, "Internal error", "INTERNAL"))
        finally:
            self.slot.release()

    async def run_direct(self, task: Task, *, history_length: int | None):
        """A 0.x direct message/stream: no task is handed out while the turn runs.
        The stream waits (with keep-alives) until the turn settles, then sends the reply
        Message, or, when the answer must be a Task (a pause, a failure, artifacts), the Task
        as its terminal frame. A client that goes away before it holds either aborts the
        turn: it is canceled, and no background task is left.

        Live text makes it the task's stream. A stream is one Message, or a Task and its
        updates (A2A 1.0 §3.1.2; the a2a-sdk clients read a 0.3 stream so, taking a first
        Message for the whole answer and closing the stream), so the model's text cannot come
        as Message frames before the reply. At its first piece the task is handed out and the
        stream goes on as a task's (run): the Task as the message left it, then its events
        and the text as artifact updates, up to the state that closes it. From then on the
        caller holds the task, and leaving ends its watching, never the turn."""
        caller = self.caller
        keepalive = settings.A2A_STREAM_KEEPALIVE_SECONDS
        answered = False
        try:
            async with task_watch(task.pk) as queue:
                self.slot.watch(queue, task.pk)
                next_keepalive = time.monotonic() + keepalive
                latest = await db(_glance_load, _Glance.of(task))
                seq = latest.event_seq
                live: list | None = None  # what woke the stream, from its first live piece on
                while live is None and latest.state not in SETTLED_STATES:
                    if time.monotonic() >= next_keepalive:
                        yield KEEPALIVE
                        self.slot.alive()
                        next_keepalive = time.monotonic() + keepalive
                    woken = await self.wake(queue, next_keepalive - time.monotonic())
                    if woken is SHUTDOWN:
                        # The server is stopping, not the caller: it gets the task's handle
                        # to follow it (tasks/get, tasks/resubscribe) rather than losing it.
                        break
                    for at, item in enumerate(woken or ()):
                        if isinstance(item, LiveText):
                            if self.live.current(item, seq):
                                live = woken[at:]
                                break
                        elif not isinstance(item, Announced) or item.seq is None:
                            latest = await db(_glance_load, latest)
                            seq = max(seq, latest.event_seq)
                        elif item.state in SETTLED_STATES:
                            # Settled as announced: the live text sent before it is written.
                            latest = await db(_glance_load, latest)
                            break
                        else:
                            seq = max(seq, item.seq)
                if live is not None:
                    await db(task_hand_out, task=task)
                    yield self.frame({"task": await db(_task_wire, caller, task, history_length)})
                    answered = True  # the caller holds the task: its turn is no longer aborted
                    # The events up to the last one announced before the text, then the text.
                    items = [Announced(latest.state, seq), *live]
                    async for frame in self.tail(
                        queue, _Glance.of(task), task.event_seq, items, next_keepalive
                    ):
                        yield frame
                    return
                # The settled task, read once (its turn runtime's columns left out).
                settled = await db(_task_load, task.pk)
                reply = direct_reply(settled) if settled.state in SETTLED_STATES else None
                answered = True
                if reply is not None:
                    yield self.frame({"message": reply})
                    return
                await db(task_hand_out, task=settled)
                yield self.frame({"task": await db(_task_wire, caller, settled, history_length)})
        except Exception:
            logger.exception("A2A stream failed")
            yield self.error_frame(errors.RpcError(-32603, "Internal error", "INTERNAL"))
        finally:
            self.slot.release()
            if not answered:
                # Cancelled (the client went away) or closed before the answer: abort the
                # turn. Not awaited here, where a cancellation would cut it short.
                _abort(caller, task)


# Aborts of direct streams in flight: referenced until done (the loop keeps weak references).
_aborts: set = set()


def _abort(caller: Caller, task: Task) -> None:
    async def cancel():
        try:
            await db(task_cancel, **caller.scope, task_id=task.public_id, direct=True)
        except TaskNotCancelable:
            pass  # it ended as the client went away: there is no turn left to abort
        except Exception:
            logger.exception("could not abort the turn of a closed direct stream")

    try:
        pending = asyncio.get_running_loop().create_task(cancel())
    except RuntimeError:  # no loop any more: the process is stopping
        return
    _aborts.add(pending)
    pending.add_done_callback(_aborts.discard)


class EventStreamResponse(StreamingHttpResponse):
    """An SSE response that gives its stream's slot back however the response ends."""

    def __init__(self, content, slot: Slot, activated: frozenset):
        super().__init__(content, content_type="text/event-stream")
        self.slot = slot
        self["Cache-Control"] = "no-cache"
        # Buffering proxies (nginx) would hold the events back.
        self["X-Accel-Buffering"] = "no"
        if activated:
            self["A2A-Extensions"] = ", ".join(sorted(activated))

    def close(self):
        self.slot.release()
        super().close()


def _params(params) -> dict:
    if params is None:
        params = {}
    if not isinstance(params, dict):
        raise errors.invalid_params("params", "must be an object")
    inputs.params_check(params)
    return params


async def _subscribe_task(caller: Caller, params: dict) -> Task:
    request = wire.parse(params, a2a.SubscribeToTaskRequest)
    if not request.id:
        raise errors.invalid_params("id", "is required")
    task = await db(task_for_caller, **caller.scope, task_id=request.id, wire_only=True)
    if task.is_terminal:
        raise errors.unsupported(
            f"Task {task.public_id} is {task.get_state_display()}; a terminal task has no more "
            "events to stream (read it with GetTask).",
            taskId=task.public_id,
        )
    return task


async def stream_open(
    caller: Caller,
    request_id,
    method: str,
    params,
    *,
    translate: Translate | None = None,
    closing: frozenset = CLOSING_STATES,
    direct: bool = False,
    envelope: bool = True,
) -> EventStreamResponse:
    """Start a SendStreamingMessage or SubscribeToTask stream, or raise the RpcError (or
    domain error) to answer as a plain JSON-RPC response; nothing starts past the limits.

    ``translate`` rewrites each event's ``result`` (a 1.0 StreamResponse dict) before it is
    written, e.g. into another dialect's shape; after a status in ``closing`` the stream
    ends; ``direct`` (a 0.x message/stream that starts a turn) streams as _Stream.run_direct;
    without ``envelope`` each event is the bare StreamResponse (HTTP+JSON, a2a_endpoint.rest)."""
    params = _params(params)
    slot = REGISTRY.take(caller.limit_key)
    try:
        if method == "SendStreamingMessage":
            task, _configuration, history_length, _queued = await message_accept(
                caller, params, direct=direct, streaming=True
            )
            sending = True
        elif method == "SubscribeToTask":
            task = await _subscribe_task(caller, params)
            bind(task_id=task.public_id, trace_id=task.trace_id)
            history_length, sending = None, False
        else:
            raise errors.method_not_found(method)
        _shutdown_hooks_install()
        stream = _Stream(caller, request_id, translate, slot, closing, envelope)
        if sending and task.direct:
            events = stream.run_direct(task, history_length=history_length)
        else:
            events = stream.run(task, sending=sending, history_length=history_length)
        return EventStreamResponse(events, slot, caller.activated)
    except BaseException:
        slot.release()
        raise
