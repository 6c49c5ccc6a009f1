"""Live output, the turn's side: which turns stream (Task.live, set by each
message), and the worker's sending of a reply's text (runtime.turn.live_output) as PostgreSQL
notifications: in order, in pieces that fit NOTIFY, ended by a last piece that is sent before
the reply is recorded, bounded when sending does not keep up."""

import threading

import psycopg
import pytest
from django.db import connection

from runtime.agents.agent_models import Agent
from runtime.kernel import live_channel
from runtime.kernel.live_channel import PIECE_CHARS, live_parse
from runtime.llm.scripted import ScriptedModel
from runtime.turn import live_output
from runtime.turn.intake import message_send
from runtime.turn.live_output import PENDING_MAX_CHARS, LiveReply, live_asked, live_reply
from tests.core import CHOOSER, message, reply, run

postgres_only = pytest.mark.skipif(
    connection.vendor != "postgresql", reason="live output travels as PostgreSQL NOTIFY"
)


class Streaming:
    """A model that can stream (as the OpenAI providers)."""

    streams = True

    def __init__(self, texts=()):
        self.texts = texts

    def next_action(self, view, live=None):
        for text in self.texts:
            live.write(text)
        return "the action"


def send(side, slug: str, text: str, *, live: bool):
    agent = Agent.objects.get(tenant=side.tenant, slug=slug)
    return message_send(
        tenant=side.tenant, agent=agent, subject=side.subject, message=message(text), live=live
    ).task


@pytest.mark.django_db
def test_each_message_says_whether_its_turn_streams(agents, make_agent):
    make_agent("chooser", CHOOSER)
    task = send(agents.a, "chooser", "pick", live=True)
    assert task.live
    task = run(task)
    assert task.state == "TASK_STATE_INPUT_REQUIRED"
    # The answer came without a stream: the rest of the turn does not stream.
    answered = reply(task, "staging", metadata={})
    assert answered.task.live is False
    task.refresh_from_db()
    assert not task.live
    assert not send(agents.a, "chooser", "again", live=False).live


@pytest.mark.django_db
def test_an_answer_on_a_stream_makes_the_resumed_turn_stream(agents, make_agent):
    make_agent("chooser", CHOOSER)
    task = run(send(agents.a, "chooser", "pick", live=False))
    agent = task.agent
    message_send(
        tenant=task.tenant,
        agent=agent,
        subject=task.subject,
        message=message("staging", taskId=task.public_id),
        live=True,
    )
    task.refresh_from_db()
    assert task.live


@pytest.mark.django_db
def test_only_a_streamed_turn_of_a_model_that_streams_gets_a_live_reply(
    agents, make_agent, settings
):
    make_agent("chooser", CHOOSER)
    task = send(agents.a, "chooser", "pick", live=True)
    scripted = ScriptedModel(CHOOSER)
    assert live_reply(task, scripted) is None  # a scripted model does not stream
    streamed = live_reply(task, Streaming())
    if connection.vendor != "postgresql":
        assert streamed is None  # no notifications: no live output
        return
    assert streamed is not None and streamed.task_pk == task.pk
    assert streamed.after_seq == task.event_seq
    settings.LIVE_OUTPUT = False
    assert live_reply(task, Streaming()) is None
    settings.LIVE_OUTPUT = True
    task.live = False
    assert live_reply(task, Streaming()) is None


@pytest.fixture
def listening():
    db = connection.settings_dict
    with psycopg.connect(
        host=db["HOST"],
        port=db["PORT"] or 5432,
        user=db["USER"],
        password=db["PASSWORD"],
        dbname=db["NAME"],
        autocommit=True,
    ) as conn:
        conn.execute(f"LISTEN {live_channel.CHANNEL}")
        yield conn


def heard(conn, reply: LiveReply) -> list:
    pieces = []
    for notify in conn.notifies(timeout=5):
        piece = live_parse(notify.payload)
        if piece.artifact_id == reply.artifact_id:
            pieces.append(piece)
            if piece.last:
                break
    return pieces


@postgres_only
@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_a_reply_is_sent_in_order_in_pieces_that_fit_and_ends_before_it_returns(listening):
    long = "é" * (PIECE_CHARS + 10)
    texts = ["Deployed ", "b-1 ", long, "\x01 done."]
    reply_text = "".join(texts)
    live = LiveReply(task_pk=42, after_seq=7)
    assert live_asked(Streaming(texts), view=None, live=live) == "the action"
    # Returned: the last piece was sent (the step that records the reply commits after it).
    assert live.ended.is_set()
    pieces = heard(listening, live)
    assert "".join(p.text for p in pieces) == reply_text
    assert [p.index for p in pieces] == list(range(len(pieces)))
    assert [p.replaces for p in pieces] == [True] + [False] * (len(pieces) - 1)
    assert [p.last for p in pieces] == [False] * (len(pieces) - 1) + [True]
    assert {(p.task_pk, p.after_seq) for p in pieces} == {(42, 7)}
    assert all(len(p.text) <= PIECE_CHARS for p in pieces)


@postgres_only
@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_a_retried_call_starts_its_text_over_and_a_reply_without_text_sends_nothing(listening):
    live = LiveReply(task_pk=42, after_seq=1)
    live.write("Deplo")
    live_output.PUBLISHER.due(live, now=True)
    first = next(iter(listening.notifies(timeout=5, stop_after=1)))
    live.restart()
    live.close()
    pieces = [live_parse(first.payload), *heard(listening, live)]
    assert [(p.index, p.text, p.replaces, p.last) for p in pieces] == [
        (0, "Deplo", True, False),
        (1, "", True, True),  # the retried reply had no text: it replaces what was sent
    ]
    silent = LiveReply(task_pk=42, after_seq=1)
    silent.close()  # tool calls only: no artifact was started, nothing is sent
    assert list(listening.notifies(timeout=0.3)) == []


@postgres_only
@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_a_reply_whose_sending_falls_behind_is_given_up_and_the_turn_goes_on(
    listening, monkeypatch
):
    held = threading.Event()
    sending = threading.Event()
    real = live_output.live_notify

    def slow(payloads):
        sending.set()
        held.wait(10)
        real(payloads)

    monkeypatch.setattr(live_output, "live_notify", slow)
    live = LiveReply(task_pk=42, after_seq=1)
    live.write("first")
    assert sending.wait(5)
    live.write("x" * (PENDING_MAX_CHARS + 1))  # while the database is slow
    assert live.given_up and not live.pending
    live.write("more")
    live.close()  # does not wait for a reply it gave up
    held.set()
    pieces = [live_parse(n.payload) for n in listening.notifies(timeout=1)]
    assert [(p.index, p.text, p.last) for p in pieces] == [(0, "first", False)]
