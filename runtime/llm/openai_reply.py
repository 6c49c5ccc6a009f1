"""A reply of an OpenAI-compatible model (Chat Completions or the Responses API, as parsed
JSON) as the actions it holds: text, a refusal, tool calls mapped back to the agent's tools and
the built-in ones. What cannot be used becomes a BadReply or a BadToolCall, whose error goes
back to the model, never an exception that crashes the turn."""

import json
from typing import Any

from runtime.llm.actions import (
    AdvancePlan,
    Ask,
    BadReply,
    BadToolCall,
    CallTool,
    EmitArtifact,
    Fail,
    ModelTurn,
    Reply,
    SetPlan,
    TurnView,
    Usage,
)
from runtime.llm.openai_conversation import (
    ASK_QUESTION,
    BUILTINS,
    EMIT_ARTIFACT,
    NO_USABLE_REPLY,
    ToolNames,
)
from runtime.tools.catalog import BUILTIN_SERVER, REQUEST_CONNECTION, validate_arguments


def no_nul(value: Any) -> Any:
    """PostgreSQL's JSON refuses NUL characters and lone surrogates: drop the first and
    replace the others in what the model sent, so that it can be journalled."""
    if isinstance(value, str):
        return value.replace("\x00", "").encode("utf-8", errors="replace").decode("utf-8")
    if isinstance(value, dict):
        return {no_nul(k): no_nul(v) for k, v in value.items()}
    if isinstance(value, list):
        return [no_nul(v) for v in value]
    return value


def not_json(constant: str):
    raise ValueError(f"{constant} is not a JSON value")


def call_action(view: TurnView, names: ToolNames, name: str, raw: Any, call_id: str):
    """One tool call of the model's reply as an action; what cannot be made is a BadToolCall,
    whose error goes back to the model (nothing is sent). ``raw``: the arguments as the
    provider sent them: a JSON string, or (some servers) the object itself."""
    offered = set(names.by_name) | set(BUILTINS)
    if not view.connections_enabled:
        offered.discard(REQUEST_CONNECTION)
    if name not in offered:
        return BadToolCall(
            tool=name,
            error=f"unknown tool {name[:100]!r}; the tools offered are: {', '.join(sorted(offered))}",
        )
    if isinstance(raw, dict):
        arguments: Any = raw
    elif isinstance(raw, str) or raw is None:
        try:
            arguments = json.loads(raw or "{}", parse_constant=not_json)
        except (ValueError, RecursionError) as exc:
            return BadToolCall(tool=name, error=f"the arguments are not valid JSON: {exc}")
    else:
        arguments = raw
    if not isinstance(arguments, dict):
        return BadToolCall(tool=name, error="the arguments must be a JSON object")
    arguments = no_nul(arguments)
    if name in names.by_name:
        spec = names.by_name[name]
        # Checked here against the schema offered, so that a reply with arguments that do not
        # fit counts as a bad reply (loop.limits.bad_replies); the turn loop checks them again
        # against the tool as it stands, before the policy (runtime.turn.calls).
        error = validate_arguments(spec.get("schema"), arguments)
        if error:
            return BadToolCall(tool=name, error=error)
        return CallTool(server=spec["server"], tool=spec["tool"], arguments=arguments)
    error = validate_arguments(BUILTINS[name]["parameters"], arguments)
    if error:
        return BadToolCall(tool=name, error=error)
    if name == ASK_QUESTION:
        choices = tuple(arguments.get("choices") or ())
        return Ask(
            question_id=call_id,
            prompt=arguments["prompt"],
            choices=choices,
            allow_custom=bool(arguments.get("allow_custom", not choices)),
        )
    if name == REQUEST_CONNECTION:
        return CallTool(
            server=BUILTIN_SERVER,
            tool=REQUEST_CONNECTION,
            arguments={"app": arguments["app"], "reason": arguments.get("reason", "")},
        )
    if name == EMIT_ARTIFACT:
        if ("text" in arguments) == ("data" in arguments):
            return BadToolCall(tool=name, error="give exactly one of text or data")
        if "text" in arguments:
            if not isinstance(arguments["text"], str):
                return BadToolCall(tool=name, error="text must be a string")
            part = {"text": arguments["text"]}
        else:
            part = {"data": arguments["data"], "mediaType": "application/json"}
        return EmitArtifact(
            artifact_id=arguments["name"][:200],
            name=arguments["name"][:200],
            parts=(part,),
            description=str(arguments.get("description", "")),
        )
    # update_plan: all the steps, or one step's state
    if "steps" in arguments:
        return SetPlan(
            steps=tuple(
                {"label": s["label"], "state": s.get("state", "pending"), "note": s.get("note", "")}
                for s in arguments["steps"]
            )
        )
    if "step" not in arguments or "state" not in arguments:
        return BadToolCall(tool=name, error="give either steps, or a step and its state")
    return AdvancePlan(
        step=arguments["step"], state=arguments["state"], note=str(arguments.get("note", ""))
    )


# A 2xx reply whose body is not JSON.
NOT_JSON = object()


def content_text(content: Any) -> str:
    """A message's content as text: a string, or (Mistral's reasoning models, the Responses
    API) a list of parts, whose text parts are joined; thinking and other parts are left
    out."""
    if isinstance(content, str):
        return no_nul(content)
    if not isinstance(content, list):
        return ""
    texts = []
    for part in content:
        if isinstance(part, str):
            texts.append(part)
        elif (
            isinstance(part, dict)
            and part.get("type", "text") in ("text", "output_text")
            and isinstance(part.get("text"), str)
        ):
            texts.append(part["text"])
    return no_nul("".join(texts))


def usage_of(usage: Any, model: str) -> Usage | None:
    """Tokens of a reply (Chat Completions' prompt/completion or the Responses API's
    input/output names); None when the server sent none."""
    if not isinstance(usage, dict):
        return None

    def count(*keys: str) -> int:
        for key in keys:
            value = usage.get(key)
            if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
                return value
        return 0

    return Usage(
        model=model,
        input_tokens=count("prompt_tokens", "input_tokens"),
        output_tokens=count("completion_tokens", "output_tokens"),
    )


def bad_reply(error: str, usage: Usage | None, content: str = "") -> ModelTurn:
    """A reply that cannot be used at all: its error goes back to the model (BadReply)."""
    return ModelTurn(
        actions=(BadReply(error),),
        ids=("reply",),
        message={"role": "assistant", "content": content or NO_USABLE_REPLY},
        usage=usage,
    )


def reply_turn(
    view: TurnView,
    names: ToolNames,
    *,
    content: str,
    refusal: Any,
    calls: list,
    cut: bool,
    usage: Usage | None,
) -> ModelTurn:
    """A reply, as both APIs say it (text, a refusal, tool calls ``{id, function: {name,
    arguments}}``), as the actions it holds."""
    calls = [c for c in calls if isinstance(c, dict) and isinstance(c.get("function"), dict)]
    if not calls:
        action: Reply | Fail
        if content.strip():
            action = Reply(content)
        elif isinstance(refusal, str) and refusal.strip():
            # The model declined: the task is rejected, with the model's words.
            action = Fail(no_nul(refusal), reject=True)
        elif cut:
            return bad_reply(
                "the reply was cut off at the output token limit before it said anything", usage
            )
        else:
            return bad_reply("the reply was empty: it had neither text nor a tool call", usage)
        return ModelTurn(
            actions=(action,),
            ids=("reply",),
            message={"role": "assistant", "content": content or no_nul(str(refusal))},
            usage=usage,
        )
    actions, ids, stored = [], [], []
    seen = {
        c["id"]
        for e in view.transcript
        if e["type"] == "model"
        for c in e["message"].get("tool_calls") or []
    }
    for index, call in enumerate(calls):
        call_id = call.get("id")
        call_id = no_nul(call_id) if isinstance(call_id, str) else ""
        if not call_id or call_id in seen or len(call_id) > 100:
            # Some servers leave ids out or repeat them; each call needs its own.
            call_id = f"call_{len(view.transcript)}_{index}"
        seen.add(call_id)
        function = call["function"]
        name = function.get("name")
        name = no_nul(name) if isinstance(name, str) else ""
        raw = function.get("arguments")
        raw = no_nul(raw)
        actions.append(call_action(view, names, name, raw, call_id))
        ids.append(call_id)
        # Kept as the model will be shown it again: arguments as a JSON string, whatever the
        # server sent.
        shown = raw if isinstance(raw, str) else json.dumps(raw, ensure_ascii=False)
        stored.append(
            {"id": call_id, "type": "function", "function": {"name": name, "arguments": shown}}
        )
    return ModelTurn(
        actions=tuple(actions),
        ids=tuple(ids),
        message={"role": "assistant", "content": content or None, "tool_calls": stored},
        usage=usage,
    )
