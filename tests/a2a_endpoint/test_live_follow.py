"""Live output on a stream (a2a_endpoint.live, a2a_endpoint.streams): how a stream writes a
model's live text among the task's stored events, in the order they were sent, and what it
does with a piece that is missing, late or retried."""

import asyncio
import json

import pytest

from a2a_endpoint.identity import Caller
from a2a_endpoint.live import LiveFollow
from a2a_endpoint.streams import CLOSING_STATES, _Stream
from a2a_endpoint.wire03 import event_out
from runtime.kernel.live_channel import LiveText
from runtime.kernel.task_models import TaskState
from runtime.kernel.wakeups import Announced
from tests.core import run, send


def piece(index: int, text: str = "x", *, replaces=None, last=False, after=2, artifact="live-a"):
    return LiveText(
        task_pk=1,
        artifact_id=artifact,
        index=index,
        text=text,
        replaces=index == 0 if replaces is None else replaces,
        last=last,
        after_seq=after,
    )


def test_a_reply_followed_from_its_start_starts_the_artifact_once():
    follow = LiveFollow()
    assert [follow.take(piece(i, last=i == 2), 2) for i in range(3)] == [True, False, False]
    assert follow.take(piece(3), 2) is None  # after its last piece: nothing of it


def test_a_stream_that_attaches_mid_reply_starts_the_artifact_with_what_comes_next():
    follow = LiveFollow()
    assert follow.take(piece(4), 2) is True
    assert follow.take(piece(5), 2) is False


def test_a_missing_piece_ends_that_reply_on_the_stream_and_a_retry_starts_it_again():
    follow = LiveFollow()
    assert follow.take(piece(0), 2) is True
    assert follow.take(piece(2), 2) is None  # piece 1 never came
    assert follow.take(piece(3), 2) is None
    # The model was asked again: its text replaces the artifact, from nothing.
    assert follow.take(piece(4, "again", replaces=True), 2) is True
    assert follow.take(piece(5), 2) is False
    # Another reply of the turn is followed on its own.
    assert follow.take(piece(0, artifact="live-b"), 2) is True


def test_a_piece_of_a_reply_that_ended_before_an_event_written_is_dropped():
    follow = LiveFollow()
    assert follow.take(piece(0, after=2), 3) is None


def test_a_piece_is_current_until_an_event_after_its_reply_was_read():
    # What turns a 0.x direct stream into its task's stream: a piece it would write.
    follow = LiveFollow()
    assert follow.current(piece(0, after=2), 2) and follow.current(piece(3, after=2), 1)
    assert not follow.current(piece(0, after=2), 3)
    assert follow.next == {}  # asking changes nothing of what the stream has written


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("translate", [None, event_out], ids=["1.0", "0.3"])
def test_live_text_is_written_before_the_event_announced_after_it(agents, make_agent, translate):
    """The worker sent the reply's pieces before the commit that records the reply; by the
    time the stream reads the task, that commit may be there too. Reading only up to the
    event each announcement names, the stream writes the pieces first."""
    make_agent("greeter", [{"reply": "Hello there."}])
    task = run(send(agents.a, "greeter", "hi"))  # events: submitted, working, completed
    assert task.event_seq == 3 and task.state == TaskState.COMPLETED
    caller = Caller(task.agent, task.subject, frozenset())
    stream = _Stream(caller, "r1", translate, slot=None, closing=CLOSING_STATES)
    items = [
        Announced(TaskState.WORKING, 2),
        piece(0, "Hello ", after=2),
        piece(1, "there.", last=True, after=2),
        Announced(TaskState.COMPLETED, 3),
    ]

    async def written():
        return [
            (json.loads(frame.removeprefix(b"data: "))["result"], seq, closes)
            async for frame, seq, closes in stream.follow(task, 1, items)
        ]

    frames = asyncio.run(written())
    if translate is None:
        shapes = [
            ("statusUpdate", f["statusUpdate"]["status"]["state"])
            if "statusUpdate" in f
            else ("artifactUpdate", f["artifactUpdate"]["artifact"]["parts"][0]["text"])
            for f, _, _ in frames
        ]
        assert shapes == [
            ("statusUpdate", TaskState.WORKING),
            ("artifactUpdate", "Hello "),
            ("artifactUpdate", "there."),
            ("statusUpdate", TaskState.COMPLETED),
        ]
        live = [f["artifactUpdate"] for f, _, _ in frames[1:3]]
        assert [(u["append"], u["lastChunk"]) for u in live] == [(False, False), (True, True)]
        assert {u["artifact"]["artifactId"] for u in live} == {"live-a"}
    else:
        assert [f["kind"] for f, _, _ in frames] == [
            "status-update",
            "artifact-update",
            "artifact-update",
            "status-update",
        ]
        assert frames[2][0]["append"] is True and frames[2][0]["lastChunk"] is True
        assert frames[2][0]["artifact"]["parts"] == [{"kind": "text", "text": "there."}]
    assert [(seq, closes) for _, seq, closes in frames] == [
        (2, False),
        (2, False),
        (2, False),
        (3, True),
    ]


@pytest.mark.django_db(transaction=True)
def test_a_wake_up_that_does_not_say_its_seq_reads_every_event(agents, make_agent):
    make_agent("greeter", [{"reply": "Hello there."}])
    task = run(send(agents.a, "greeter", "hi"))
    stream = _Stream(Caller(task.agent, task.subject, frozenset()), "r1", None, slot=None)

    async def written():
        return [seq async for _, seq, _ in stream.follow(task, 1, ["", Announced("x", None)])]

    assert asyncio.run(written()) == [2, 3]
