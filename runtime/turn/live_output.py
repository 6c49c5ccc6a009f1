"""Live output, the worker's side: while a hosted model writes its reply
for a turn whose message came on a stream (Task.live), its text goes to the task's streams.

The model's text only: never a tool call, its arguments or a result (the profile: what is
visible while working). The pieces go out as notifications (runtime.kernel.live_channel),
never as rows of the journal, which records the reply exactly as it records one that was not
streamed: so nothing durable depends on them, and a resumed turn, which asks its model again,
replays none.

One thread per worker process sends the pieces of all its turns' replies, on a connection of
its own: the model's thread hands text over and reads on (it holds no database connection
while it waits on the model, runtime.turn.claim.db_released), and what arrives meanwhile is
sent together, at most one statement per ``LIVE_OUTPUT_INTERVAL_MS``. Bounded: a reply's
text waiting to be sent is capped (a database that does not keep up ends that reply's live
text; the final reply follows), and the reply's end waits a bounded time for its last piece,
so that every piece is sent before the step that records the reply commits.
"""

import logging
import os
import threading
from dataclasses import dataclass, field

from django.conf import settings
from django.db import connection

from runtime.kernel.live_channel import PIECE_CHARS, LiveText, live_payload
from runtime.kernel.task_models import Task, new_key
from runtime.kernel.wakeups import live_notify, notifications_available

logger = logging.getLogger(__name__)

# Text of one reply waiting to be sent, at most.
PENDING_MAX_CHARS = 256 * 1024
# How long the end of a reply waits for its last piece to be sent.
CLOSE_WAIT_SECONDS = 5.0
# The sending thread gives its connection back after this long with nothing to send.
IDLE_SECONDS = 2.0


def live_reply(task: Task, model) -> "LiveReply | None":
    """Where the model's text goes while it writes its next reply, or None: the turn's message
    did not come on a stream, the model cannot stream, or there are no notifications (SQLite)."""
    if not (task.live and getattr(model, "streams", False) and settings.LIVE_OUTPUT):
        return None
    if not notifications_available():
        return None
    return LiveReply(task_pk=task.pk, after_seq=task.event_seq)


def live_asked(model, view, live: "LiveReply"):
    """The model's next action, asked to stream its text to ``live``; the reply's live text
    ends (its last piece sent) before this returns, whatever the model did."""
    try:
        return model.next_action(view, live=live)
    finally:
        live.close()


@dataclass(eq=False)
class LiveReply:
    """One model reply's text on its way to the task's streams: one live artifact."""

    task_pk: int
    after_seq: int
    artifact_id: str = field(default_factory=lambda: new_key("live-", 9))
    # Guarded by ``lock``: text not sent yet, the next piece's index, whether it replaces
    # what came before (the first piece, and the first after a retried model call), whether
    # anything was sent, and whether the reply ended or its live text was given up.
    pending: list[str] = field(default_factory=list)
    pending_chars: int = 0
    index: int = 0
    replaces: bool = True
    sent: bool = False
    ending: bool = False
    given_up: bool = False
    lock: threading.Lock = field(default_factory=threading.Lock)
    ended: threading.Event = field(default_factory=threading.Event)

    def write(self, text: str) -> None:
        """More of the reply's text (the model's thread)."""
        if not text:
            return
        with self.lock:
            if self.ending or self.given_up:
                return
            self.pending.append(text)
            self.pending_chars += len(text)
            if self.pending_chars > PENDING_MAX_CHARS:
                # Sending does not keep up: the rest of this reply is not sent live (its
                # streams see the gap and wait for the final reply, which says it all).
                logger.warning("live output of task %s fell behind; given up", self.task_pk)
                self.given_up = True
                self.pending, self.pending_chars = [], 0
        PUBLISHER.due(self)

    def restart(self) -> None:
        """The model is asked again (a retry): its text starts over."""
        with self.lock:
            self.pending, self.pending_chars = [], 0
            self.replaces = True

    def close(self) -> None:
        """The reply ended: send its last piece, and wait (bounded) until it is sent."""
        with self.lock:
            self.ending = True
            nothing = not self.sent and not self.pending
        if nothing or self.given_up:
            return  # no live artifact was started (a reply of tool calls only)
        PUBLISHER.due(self, now=True)
        if not self.ended.wait(CLOSE_WAIT_SECONDS):
            logger.warning("live output of task %s: its last piece was not sent", self.task_pk)

    def take(self) -> tuple[list[str], bool]:
        """The payloads to send now, and whether they end the reply (the sending thread)."""
        with self.lock:
            if self.given_up:
                return [], True
            text = "".join(self.pending)
            self.pending, self.pending_chars = [], 0
            last = self.ending
            pieces = [text[i : i + PIECE_CHARS] for i in range(0, len(text), PIECE_CHARS)]
            if last and not pieces and self.sent:
                pieces = [""]  # the last piece says so, with no more text
            payloads = []
            for number, piece in enumerate(pieces):
                payloads.append(
                    live_payload(
                        LiveText(
                            task_pk=self.task_pk,
                            artifact_id=self.artifact_id,
                            index=self.index,
                            text=piece,
                            replaces=self.replaces,
                            last=last and number == len(pieces) - 1,
                            after_seq=self.after_seq,
                        )
                    )
                )
                self.index += 1
                self.replaces = False
                self.sent = True
            return payloads, last


class LivePublisher:
    """The worker process's sending thread; started with the first reply that has text, idle
    (and with no connection) while there is none."""

    def __init__(self) -> None:
        self._reset()
        os.register_at_fork(after_in_child=self._reset)

    def _reset(self) -> None:
        # After a fork only the forking thread exists: start afresh.
        self._lock = threading.Lock()
        self._due: dict[int, LiveReply] = {}
        self._wake = threading.Event()
        self._now = threading.Event()
        self._thread: threading.Thread | None = None

    def due(self, reply: LiveReply, *, now: bool = False) -> None:
        """``reply`` has something to send (``now``: its end, sent without waiting for the
        interval: the turn waits for it)."""
        with self._lock:
            self._due[id(reply)] = reply
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, name="live-output", daemon=True)
                self._thread.start()
        if now:
            self._now.set()
        self._wake.set()

    def _run(self) -> None:
        while True:
            if not self._wake.wait(IDLE_SECONDS):
                connection.close()  # this thread's own connection, back to the pool
                continue
            self._wake.clear()
            self._now.clear()
            self.send()
            # What arrives meanwhile goes out together, in the next round; a reply's end
            # does not wait.
            self._now.wait(max(0.0, settings.LIVE_OUTPUT_INTERVAL_MS / 1000))

    def send(self) -> None:
        with self._lock:
            due, self._due = list(self._due.values()), {}
        payloads, ended = [], []
        for reply in due:
            taken, last = reply.take()
            payloads.extend(taken)
            if last:
                ended.append(reply)
        try:
            if payloads:
                live_notify(payloads)
        except Exception:  # noqa: BLE001 - live text is not durable: the final reply follows
            logger.warning("live output could not be sent", exc_info=True)
            connection.close()
        finally:
            for reply in ended:
                reply.ended.set()


PUBLISHER = LivePublisher()
