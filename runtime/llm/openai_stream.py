"""A model's reply read as it streams (live output), for ``provider: openai``
and ``provider: openai-responses``.

Asked with ``stream: true``, both APIs answer with Server-Sent Events through the official
``openai`` package's stream: Chat Completions sends ``chat.completion.chunk`` objects (text in
``delta.content``, tool calls in pieces under ``delta.tool_calls``, usage in a last chunk
when ``stream_options.include_usage`` asks for it) and ``data: [DONE]``; the Responses API
sends typed events (``response.output_text.delta``, then ``response.completed`` with the whole
response). The reply's text goes to ``live`` as it comes (runtime.turn.live_output), and
nothing else does: not a tool call's name or arguments, not a refusal, not reasoning. The
chunks are put back together into the reply the API would have sent without streaming, so
that the provider reads it as it reads any other (OpenAIChatModel.turn_from), bad replies
included.

A stream that stops before the reply ends (the connection dropped, a timeout between chunks,
an error event) is a failed attempt, retried as any other (OpenAIChatModel.complete); the live
text starts over with the new attempt.
"""

from collections.abc import Callable, Iterable
from typing import Any

import httpx
import openai

from runtime.llm.actions import LiveWriter, ModelError

# The text and tool call arguments of one reply, at most (a reply that goes on past it is
# not read further: the turn fails, as for a provider that cannot be used).
MAX_REPLY_CHARS = 2_000_000

TextOf = Callable[[Any], str]


class StreamBroken(Exception):
    """The stream stopped before the reply ended: the attempt failed, and is retried."""


def stream_reply(
    client: openai.OpenAI,
    path: str,
    body: dict,
    options: openai.RequestOptions,
    read: Callable[[Iterable[Any], LiveWriter], dict],
    live: LiveWriter,
) -> dict:
    """Send ``body`` (with ``stream: true``) and read the streamed reply with ``read``. An
    error before the stream starts is the SDK's (a status, a connection, a timeout), as for a
    reply that is not streamed; a stream cut short is StreamBroken, or APITimeoutError."""
    events = client.post(
        path,
        body=body,
        cast_to=object,
        options=options,
        stream=True,
        stream_cls=openai.Stream[object],
    )
    try:
        with events:
            return read(events, live)
    except httpx.TimeoutException as exc:
        raise openai.APITimeoutError(request=events.response.request) from exc
    except httpx.TransportError as exc:
        raise StreamBroken(f"the stream was cut ({type(exc).__name__})") from exc
    except openai.APIError as exc:  # an error event in the stream
        raise StreamBroken(f"the stream reported an error: {str(exc.message)[:200]}") from None


class _Length:
    def __init__(self) -> None:
        self.chars = 0

    def add(self, text: str) -> None:
        self.chars += len(text)
        if self.chars > MAX_REPLY_CHARS:
            raise ModelError(
                f"The model's reply was longer than {MAX_REPLY_CHARS} characters; it was cut off."
            )


def chat_stream_read(events: Iterable[Any], live: LiveWriter, text_of: TextOf) -> dict:
    """Chat Completions chunks as the chat completion they make (its first choice)."""
    content: list[str] = []
    refusal: list[str] = []
    calls: dict[int, dict] = {}
    finish = usage = None
    chosen = False
    length = _Length()
    for chunk in events:
        if not isinstance(chunk, dict):
            continue
        if isinstance(chunk.get("usage"), dict):
            usage = chunk["usage"]
        choices = chunk.get("choices")
        for choice in choices if isinstance(choices, list) else ():
            if not isinstance(choice, dict) or choice.get("index", 0) != 0:
                continue
            chosen = True
            delta = choice.get("delta")
            if isinstance(delta, dict):
                text = text_of(delta.get("content"))
                if text:
                    length.add(text)
                    content.append(text)
                    live.write(text)
                if isinstance(delta.get("refusal"), str):
                    length.add(delta["refusal"])
                    refusal.append(delta["refusal"])
                pieces = delta.get("tool_calls")
                for piece in pieces if isinstance(pieces, list) else ():
                    _call_piece(calls, piece, length)
            if choice.get("finish_reason"):
                finish = choice["finish_reason"]
    if not chosen:
        # As a reply without choices: a bad reply, whose error goes back to the model.
        return {"object": "chat.completion", "choices": [], "usage": usage}
    if finish is None:
        raise StreamBroken("the stream ended before the reply did")
    message: dict = {"role": "assistant", "content": "".join(content) or None}
    if refusal:
        message["refusal"] = "".join(refusal)
    if calls:
        message["tool_calls"] = [
            {
                "id": call["id"],
                "type": "function",
                "function": {"name": call["name"], "arguments": call["arguments"]},
            }
            for _, call in sorted(calls.items())
        ]
    return {
        "object": "chat.completion",
        "choices": [{"index": 0, "message": message, "finish_reason": finish}],
        "usage": usage,
    }


def _call_piece(calls: dict[int, dict], piece: Any, length: _Length) -> None:
    """One chunk's piece of a tool call: its id and name come once, its arguments in parts
    (or, from some servers, whole, as an object)."""
    if not isinstance(piece, dict):
        return
    index = piece.get("index")
    if not isinstance(index, int) or isinstance(index, bool):
        index = len(calls)
    call = calls.setdefault(index, {"id": None, "name": "", "arguments": ""})
    if isinstance(piece.get("id"), str) and piece["id"]:
        call["id"] = piece["id"]
    function = piece.get("function")
    if not isinstance(function, dict):
        return
    if isinstance(function.get("name"), str) and not call["name"]:
        call["name"] = function["name"]
    arguments = function.get("arguments")
    if isinstance(arguments, str):
        length.add(arguments)
        call["arguments"] = (
            call["arguments"] + arguments if isinstance(call["arguments"], str) else arguments
        )
    elif isinstance(arguments, dict):
        call["arguments"] = arguments


def responses_stream_read(events: Iterable[Any], live: LiveWriter, text_of: TextOf) -> dict:
    """Responses API events as the response they end with."""
    final = None
    length = _Length()
    for event in events:
        if not isinstance(event, dict):
            continue
        kind = event.get("type")
        if kind == "response.output_text.delta":
            text = text_of(event.get("delta"))
            if text:
                length.add(text)
                live.write(text)
        elif kind in ("response.completed", "response.incomplete", "response.failed"):
            final = event.get("response")
        elif kind == "error":
            raise StreamBroken(f"the stream reported an error: {str(event.get('message'))[:200]}")
    if not isinstance(final, dict):
        raise StreamBroken("the stream ended before the response did")
    return final
