"""``provider: openai-responses``: OpenAI's Responses API (``POST /responses``), through the
official ``openai`` package, beside ``provider: openai`` (Chat Completions).

    model:
      provider: openai-responses
      model: gpt-5-mini
      reasoning_effort: low                  # optional, as the other parameters
      max_output_tokens: 2000                # optional

It is the Chat Completions provider (runtime.llm.openai_chat) with another request and
another reply: the same clients, retries, credential handling, tool names, built-in tools,
conversation (the transcript and the conversation's earlier turns) and bounded handling of
replies that cannot be used. The conversation is sent as input items (messages,
``function_call`` and ``function_call_output``); the instructions go in ``instructions``.
Each request is whole: no ``previous_response_id``, so a turn resumed on another worker, or
after a pause of days, asks exactly what the first would have asked, and nothing depends on
the provider keeping a response (``store: false`` may be set).
"""

import json
from typing import Any

from runtime.llm.actions import LiveWriter, ModelError, ModelTurn, TurnView
from runtime.llm.openai_chat import OpenAIChatModel
from runtime.llm.openai_conversation import ToolNames, conversation, tool_definitions
from runtime.llm.openai_reply import NOT_JSON, bad_reply, content_text, reply_turn, usage_of
from runtime.llm.openai_spec import RESPONSES_PARAMETERS, request_parameters
from runtime.llm.openai_stream import responses_stream_read
from runtime.llm.summary_ask import SUMMARY_INSTRUCTIONS, SUMMARY_TOKENS, SummaryAsk, summary_prompt


def input_items(messages: list[dict]) -> tuple[str, list[dict]]:
    """Chat messages as (instructions, the Responses API's input items)."""
    instructions, items = "", []
    for message in messages:
        role = message.get("role")
        if role == "system":
            instructions = message.get("content") or ""
        elif role == "tool":
            items.append(
                {
                    "type": "function_call_output",
                    "call_id": message["tool_call_id"],
                    "output": message.get("content") or "",
                }
            )
        elif role == "assistant":
            if message.get("content"):
                items.append({"role": "assistant", "content": message["content"]})
            for call in message.get("tool_calls") or []:
                items.append(
                    {
                        "type": "function_call",
                        "call_id": call["id"],
                        "name": call["function"]["name"],
                        "arguments": call["function"]["arguments"],
                    }
                )
        else:
            items.append({"role": "user", "content": message.get("content") or ""})
    return instructions, items


def function_tools(tools: list[dict]) -> list[dict]:
    """Chat Completions' tool definitions as the Responses API takes them (flat)."""
    return [{"type": "function", **tool["function"]} for tool in tools]


class OpenAIResponsesModel(OpenAIChatModel):
    path = "/responses"
    parameters = RESPONSES_PARAMETERS
    # Streamed, the response's usage is in the ``response.completed`` event.
    stream_fields: dict = {"stream": True}

    def stream_read(self, events, live: LiveWriter) -> dict:
        return responses_stream_read(events, live, content_text)

    def request(self, view: TurnView, names: ToolNames) -> dict[str, Any]:
        instructions, items = input_items(conversation(view))
        request: dict[str, Any] = {
            "model": self.model,
            "instructions": instructions,
            "input": items,
            "tools": function_tools(tool_definitions(view, names)),
        }
        if self.spec.get("temperature") is not None:
            request["temperature"] = self.spec["temperature"]
        if self.spec.get("max_output_tokens") is not None:
            request["max_output_tokens"] = self.spec["max_output_tokens"]
        passed = request_parameters(self.spec, self.parameters)
        # The Responses API nests these two.
        if "reasoning_effort" in passed:
            request["reasoning"] = {"effort": passed.pop("reasoning_effort")}
        if "verbosity" in passed:
            request["text"] = {"verbosity": passed.pop("verbosity")}
        request.update(passed)
        return request

    def summary_request(self, ask: SummaryAsk) -> dict[str, Any]:
        return {
            "model": self.model,
            "instructions": SUMMARY_INSTRUCTIONS,
            "input": [{"role": "user", "content": summary_prompt(ask)}],
            "max_output_tokens": SUMMARY_TOKENS,
        }

    def summary_text(self, reply: Any) -> str:
        output = reply.get("output") if isinstance(reply, dict) else None
        if not isinstance(output, list):
            raise ModelError("the summary's reply is not a response")
        return "".join(
            content_text(item.get("content"))
            for item in output
            if isinstance(item, dict) and item.get("type") == "message"
        )

    def turn_from(self, view: TurnView, names: ToolNames, reply: Any) -> ModelTurn:
        """A response (as parsed JSON): its output's text, refusal and function calls."""
        if reply is NOT_JSON or not isinstance(reply, dict):
            return bad_reply("the reply is not a response (a JSON object)", None)
        usage = usage_of(reply.get("usage"), self.model)
        error = reply.get("error")
        if isinstance(error, dict) and error.get("message"):
            return bad_reply(f"the response failed: {str(error['message'])[:300]}", usage)
        output = reply.get("output")
        if not isinstance(output, list) or not output:
            return bad_reply("the response has no output", usage)
        texts, refusals, calls = [], [], []
        for item in output:
            if not isinstance(item, dict):
                continue
            if item.get("type") == "message":
                content = item.get("content")
                texts.append(content_text(content))
                for part in content if isinstance(content, list) else []:
                    if isinstance(part, dict) and part.get("type") == "refusal":
                        refusals.append(str(part.get("refusal", "")))
            elif item.get("type") == "function_call":
                arguments = item.get("arguments")
                calls.append(
                    {
                        "id": item.get("call_id") or item.get("id"),
                        "function": {
                            "name": item.get("name"),
                            "arguments": arguments
                            if isinstance(arguments, str | dict)
                            else json.dumps(arguments),
                        },
                    }
                )
            # reasoning items and the rest: not shown again (each request is whole)
        details = reply.get("incomplete_details")
        cut = isinstance(details, dict) and details.get("reason") == "max_output_tokens"
        return reply_turn(
            view,
            names,
            content="".join(texts),
            refusal=" ".join(r for r in refusals if r) or None,
            calls=calls,
            cut=cut,
            usage=usage,
        )
