"""Live output, the providers' side: ``provider: openai`` and
``openai-responses`` asked to stream, against the local OpenAI-compatible server
(tests/llm_stub.py) answering with real SSE chunks. The reply's text is written as it comes,
nothing else is, and the streamed reply becomes the same actions as the reply unstreamed."""

import json

import pytest

from runtime.llm.actions import BadReply, CallTool, Fail, ModelError, ModelTurn, Reply, TurnView
from runtime.llm.openai_chat import OpenAIChatModel
from runtime.llm.openai_responses import OpenAIResponsesModel
from tests.core import DEPLOY_TOOL
from tests.llm_stub import LLMStub, call, completion, reply_with, response

KEY = "sk-test-" + "live" * 8
DEPLOY = "deploy__deploy_build"
STAGING = {"build": "b-7731", "environment": "staging"}


class Written:
    """A LiveWriter that keeps what it was given."""

    def __init__(self):
        self.texts: list[str] = []
        self.restarts = 0

    def write(self, text: str) -> None:
        self.texts.append(text)

    def restart(self) -> None:
        self.restarts += 1
        self.texts.append("<restart>")


@pytest.fixture
def stub(settings):
    server = LLMStub().start()
    settings.OPENAI_BASE_URL = server.url
    settings.MODEL_RETRY_BASE_SECONDS = 0.01
    settings.MODEL_MAX_ATTEMPTS = 3
    settings.MODEL_TIMEOUT_SECONDS = 5
    yield server
    server.stop()


def view() -> TurnView:
    return TurnView(
        text="deploy b-7731 to staging",
        message_id="m1",
        instructions="You deploy builds.",
        tools=[DEPLOY_TOOL],
        credential=lambda name, environment=True: KEY,
    )


def chat() -> OpenAIChatModel:
    return OpenAIChatModel({"provider": "openai", "model": "gpt-4o-mini"})


def test_a_streamed_reply_writes_its_text_as_it_comes_and_is_the_same_reply(stub):
    text = "Deployed b-7731 to staging. All checks passed."
    stub.play(completion(text, usage=(120, 9)), completion(text, usage=(120, 9)))
    written = Written()
    streamed = chat().next_action(view(), live=written)
    plain = chat().next_action(view())

    assert written.texts == ["<restart>", "Deployed ", "b-7731 ", "to ", "staging. ", "All "] + [
        "checks ",
        "passed.",
    ]
    assert streamed == plain
    assert streamed.actions == (Reply(text),)
    assert (streamed.usage.input_tokens, streamed.usage.output_tokens) == (120, 9)
    asked, unstreamed = stub.bodies()
    assert asked["stream"] is True and asked["stream_options"] == {"include_usage": True}
    assert "stream" not in unstreamed and "stream_options" not in unstreamed
    assert {k: v for k, v in asked.items() if not k.startswith("stream")} == unstreamed


def test_tool_calls_in_a_streamed_reply_are_never_written_as_text(stub):
    stub.play(
        completion(
            "Deploying now.",
            calls=[call(DEPLOY, STAGING, "call_a"), call(DEPLOY, {**STAGING, "build": "b-2"})],
        )
    )
    written = Written()
    turn = chat().next_action(view(), live=written)

    assert "".join(written.texts) == "<restart>Deploying now."
    assert isinstance(turn, ModelTurn)
    assert turn.actions == (
        CallTool(server="deploy", tool="deploy_build", arguments=STAGING),
        CallTool(server="deploy", tool="deploy_build", arguments={**STAGING, "build": "b-2"}),
    )
    assert turn.ids[0] == "call_a"
    # Kept as the model is shown it again: the arguments put back together, as a string.
    stored = turn.message["tool_calls"][0]["function"]
    assert (stored["name"], json.loads(stored["arguments"])) == (DEPLOY, STAGING)
    assert turn.message["content"] == "Deploying now."


def test_a_refusal_is_not_written_and_rejects_as_unstreamed(stub):
    stub.play(reply_with({"role": "assistant", "content": None, "refusal": "I cannot do that."}))
    written = Written()
    turn = chat().next_action(view(), live=written)
    assert written.texts == ["<restart>"]
    assert turn.actions == (Fail("I cannot do that.", reject=True),)


def test_a_stream_cut_mid_reply_is_asked_again_and_its_text_starts_over(stub):
    text = "Deployed b-7731 to staging."
    stub.play(completion(text, stream_cut_after=2), completion(text))
    written = Written()
    turn = chat().next_action(view(), live=written)

    assert turn.actions == (Reply(text),)
    assert len(stub.requests) == 2
    assert written.texts == [
        "<restart>",
        "Deployed ",
        "b-7731 ",
        "<restart>",
        "Deployed ",
        "b-7731 ",
        "to ",
        "staging.",
    ]


def test_a_stream_that_ends_before_its_reply_is_retried_then_fails(stub, settings):
    settings.MODEL_MAX_ATTEMPTS = 2
    stub.play(completion("never ends", stream_cut_after=1), completion("x", stream_cut_after=0))
    with pytest.raises(ModelError, match="did not answer after 2 attempts"):
        chat().next_action(view(), live=Written())


def test_a_streamed_reply_without_choices_is_a_bad_reply(stub):
    stub.play(reply_with(None, choices=[]))
    turn = chat().next_action(view(), live=Written())
    assert isinstance(turn.actions[0], BadReply)


def test_the_responses_api_streams_its_output_text(stub):
    text = "Deployed b-7731 to staging."
    stub.play(
        response(
            {
                "type": "message",
                "role": "assistant",
                "content": [{"type": "output_text", "text": text}],
            },
            {
                "type": "function_call",
                "call_id": "call_r",
                "name": DEPLOY,
                "arguments": json.dumps(STAGING),
            },
            usage=(50, 5),
        )
    )
    written = Written()
    model = OpenAIResponsesModel({"provider": "openai-responses", "model": "gpt-5-mini"})
    turn = model.next_action(view(), live=written)

    assert "".join(written.texts) == f"<restart>{text}"
    assert turn.actions == (CallTool(server="deploy", tool="deploy_build", arguments=STAGING),)
    assert (turn.usage.input_tokens, turn.usage.output_tokens) == (50, 5)
    asked = stub.bodies()[0]
    assert stub.requests[0]["path"] == "/v1/responses"
    assert asked["stream"] is True and "stream_options" not in asked
