"""Live output's channel: a model's text, as it is written, from the worker to the task's
streams.

The text travels as PostgreSQL notifications on its own channel, never as rows: it is not
part of the task's record. The journal keeps the final reply (one entry, and the same status
and artifact events as a reply that was not streamed); a lost piece of live text loses
nothing durable, a stream that attaches mid-reply gets what follows, and a resumed turn asks
its model again instead of replaying any of it. The worker sends the pieces
(runtime.turn.live_output), each web process's listener hands them to the streams of the
task it names (runtime.kernel.wakeups, which also sends them: live_notify), and a stream writes them for its caller
(a2a_endpoint.live). SQLite has no notifications, so there is no live output there.

A piece is ``<task pk>:<JSON>``, the JSON ``{a, i, n, l, s, t}``: the live artifact's id (one
per model reply), the piece's index in it (0, 1, ...), whether it replaces what came before
(the first piece, and the first after a retried model call), whether it is the last, the
task's event seq when the model was asked (the pieces come after that event and before the
next), and the text. Pieces are small enough for NOTIFY's 8000-byte payload.
"""

import json
import logging
from dataclasses import dataclass

logger = logging.getLogger(__name__)

CHANNEL = "countersign_live"
# Characters of text per piece: at most 6 bytes each once in JSON (a control character is
# \\u00XX), so a piece and its envelope stay well under NOTIFY's 8000-byte payload.
PIECE_CHARS = 1000


@dataclass(frozen=True)
class LiveText:
    """One piece of a model reply's text, as a stream receives it."""

    task_pk: int
    artifact_id: str
    index: int
    text: str
    replaces: bool = False
    last: bool = False
    after_seq: int = 0


def live_payload(piece: LiveText) -> str:
    body = {
        "a": piece.artifact_id,
        "i": piece.index,
        "n": piece.replaces,
        "l": piece.last,
        "s": piece.after_seq,
        "t": piece.text,
    }
    return f"{piece.task_pk}:{json.dumps(body, ensure_ascii=False, separators=(',', ':'))}"


def live_parse(payload: str) -> LiveText | None:
    """The piece a notification carries, or None when it is not one (it is dropped)."""
    pk_text, _, body = payload.partition(":")
    try:
        data = json.loads(body)
        piece = LiveText(
            task_pk=int(pk_text),
            artifact_id=str(data["a"]),
            index=int(data["i"]),
            text=str(data["t"]),
            replaces=bool(data["n"]),
            last=bool(data["l"]),
            after_seq=int(data["s"]),
        )
    except (ValueError, KeyError, TypeError):
        logger.warning("a live text notification that is not one was dropped")
        return None
    return piece


def live_task_pk(payload: str) -> int | None:
    """The task a notification names, read without parsing the rest (most listeners have no
    stream on that task)."""
    pk_text = payload.partition(":")[0]
    return int(pk_text) if pk_text.isdigit() else None
