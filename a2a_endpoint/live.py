"""Live output on a stream: a model's text, as the worker sends it
(runtime.kernel.live_channel), written for the stream's caller.

On every stream the text of one model reply is one artifact, ``live-...``, sent in pieces as
TaskArtifactUpdateEvents: the first replaces (``append: false``), the others append, the last
says ``lastChunk: true``; the final reply follows as it always does, in the status that ends
the turn. The artifact is the stream's only: the task keeps the final reply, not the pieces
(GetTask shows no live artifact). A 0.x direct message/stream becomes its task's stream at the
first piece (a2a_endpoint.streams._Stream.run_direct): a stream is one Message or a Task and
its updates, so the pieces are never Message frames.

A stream that attaches mid-reply starts the artifact with what comes next. A piece that is
missing (a reader that did not keep up, a listener that reconnected) ends that reply's live
text on this stream: what follows would not read on from what it has; the final reply says
it all. A piece sent before an event the stream has already written is of a reply that
ended before that event, and is dropped.
"""

from runtime.kernel.live_channel import LiveText

LIVE_ARTIFACT_NAME = "live-reply"


class LiveFollow:
    """What one stream has written of the task's live replies."""

    def __init__(self) -> None:
        # artifactId -> the index of the next piece this stream can write (None: given up)
        self.next: dict[str, int | None] = {}

    @staticmethod
    def current(piece: LiveText, seq: int) -> bool:
        """Whether ``piece`` is of a reply still being written when the stream has read the
        task's events up to ``seq`` (else its reply ended before one of them)."""
        return piece.after_seq >= seq

    def take(self, piece: LiveText, seq: int) -> bool | None:
        """Whether to write ``piece`` on a stream that has written the task's events up to
        ``seq``: None to drop it, else whether it starts the artifact on this stream (it
        replaces what the stream sent of that reply before, if anything)."""
        if not self.current(piece, seq):
            return None  # its reply ended before an event already written
        expected = self.next.get(piece.artifact_id, piece.index)
        # A piece that replaces the artifact (a retried model call) reads on from nothing.
        if not piece.replaces and piece.index != expected:
            self.next[piece.artifact_id] = None
            return None
        starts = piece.artifact_id not in self.next or piece.replaces
        # Bounded: a turn's replies are few, and one that ended is not looked up again.
        self.next[piece.artifact_id] = None if piece.last else piece.index + 1
        return starts

    def artifact_update(self, piece: LiveText, starts: bool, task) -> dict:
        """The piece as a 1.0 StreamResponse of the task."""
        return {
            "artifactUpdate": {
                "taskId": task.public_id,
                "contextId": task.wire_context_id,
                "artifact": {
                    "artifactId": piece.artifact_id,
                    "name": LIVE_ARTIFACT_NAME,
                    "parts": [{"text": piece.text}],
                },
                "append": not starts,
                "lastChunk": piece.last,
            }
        }
