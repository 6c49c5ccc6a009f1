"""The conversation an OpenAI-compatible model is sent: the instructions, the context's
earlier turns (runtime.turn.memory makes their records), then the turn's transcript, each
tool call with what came of it. Rebuilt from the transcript at every step: a resumed turn
sends the same conversation. And the tools it is offered: the agent's, under function names
that map back to them (ToolNames), and the built-in ones (BUILTINS)."""

import hashlib
import json
import re
from typing import Any

from runtime.llm.actions import TurnView
from runtime.tools.catalog import REQUEST_CONNECTION

# --- the conversation --------------------------------------------------------------------------


def user_content(view: TurnView) -> str:
    """The caller's message, its data parts and the files the worker fetched for it."""
    content = view.text or "(no text)"
    if view.data:
        content += "\n\nData sent with the message (JSON):"
        for item in view.data:
            content += "\n" + json.dumps(item, ensure_ascii=False)
    if view.files:
        content += "\n\nFiles sent with the message:"
        for f in view.files:
            head = f"\n- {f.get('filename') or 'file ' + str(f.get('index'))} ({f.get('mediaType', '')}"
            if "error" in f:
                content += f"{head}): could not be fetched: {f['error']}"
                continue
            content += f"{head}, {f.get('size', 0)} bytes)"
            if "text" in f:
                note = " (cut short)" if f.get("truncated") else ""
                content += f"{note}:\n```\n{f['text']}\n```"
            else:
                content += ": not text; its content is not shown"
    return content


def tool_result_content(transcript: list[dict], step: int | None, call_id: str) -> str:
    """What came of one tool call of a model's reply, as the model reads it back."""
    if step is None or step >= len(transcript):
        return json.dumps({"error": "This call was not made."})
    action = transcript[step].get("action", {})
    kind = action.get("kind")
    later = transcript[step + 1 :]
    if kind == "ask":
        answer = next(
            (e for e in later if e["type"] == "answer" and e.get("questionId") == call_id), None
        )
        if answer is None or "value" not in answer:
            return json.dumps({"error": "The question expired without an answer."})
        return json.dumps({"answer": answer["value"]}, ensure_ascii=False)
    if kind in ("call", "bad_call"):
        result = next((e for e in later if e["type"] == "tool_result" and e["step"] == step), None)
        if result is None:
            return json.dumps({"error": "The call has no result."})
        edit = next(
            (
                e
                for e in later
                if e["type"] == "answer" and e.get("edited") and e.get("step") == step
            ),
            None,
        )
        if result["ok"]:
            body = {"ok": True, "result": result.get("result")}
            if result.get("reason"):
                # The approver's note (the decision page says the model sees it).
                body["approvalReason"] = result["reason"]
        else:
            body = {"ok": False, "error": result.get("error", "failed")}
            if result.get("error") == "tool.denied":
                body["error"] = "The call was not made: it was denied."
            if result.get("reason"):
                body["reason"] = result["reason"]
        if edit is not None:
            # An operator changed the arguments before approving: say so, and to what.
            body["argumentsEdited"] = {
                "note": "An operator changed this call's arguments before approving it; "
                "it was made with these arguments instead of yours.",
                "arguments": edit.get("arguments"),
            }
        # A result's keys sorted: the same bytes whether the turn read the result back from
        # the database (PostgreSQL's jsonb reorders keys) or kept it as the tool returned it
        # (runtime.turn.runner keeps the row in memory), so a resumed turn asks the model
        # exactly what the one cut short asked.
        return json.dumps(body, ensure_ascii=False, sort_keys=bool(result["ok"]))
        return json.dumps(body, ensure_ascii=False)
    if kind == "artifact":
        return json.dumps({"ok": True, "artifactId": action.get("artifactId")})
    return json.dumps({"ok": True})


BAD_REPLY_NOTE = (
    "Your last reply could not be used: {error}. Reply again: answer with text, "
    "or call one of the tools offered."
)
NO_USABLE_REPLY = "(no usable reply)"


def conversation(view: TurnView) -> list[dict]:
    system = view.instructions.strip() or "You are a helpful agent."
    if view.connections_enabled:
        apps = ", ".join(sorted(view.connected_apps)) or "none"
        system += f"\n\nApps connected for this tenant: {apps}."
    if view.history_dropped:
        system += (
            f"\n\nThis conversation had {view.history_dropped} earlier turn(s) that are not "
            "shown here (they did not fit the agent's memory)."
        )
    messages: list[dict] = [
        {"role": "system", "content": system},
        *memory_messages(view.history),
        {"role": "user", "content": user_content(view)},
    ]
    for entry in view.transcript:
        if entry["type"] != "model":
            continue
        messages.append(entry["message"])
        applied = {a["id"]: a["step"] for a in entry.get("applied", [])}
        for call in entry["message"].get("tool_calls") or []:
            messages.append(
                {
                    "role": "tool",
                    "tool_call_id": call["id"],
                    "content": tool_result_content(
                        view.transcript, applied.get(call["id"]), call["id"]
                    ),
                }
            )
        bad = bad_reply_of(entry)
        if bad is not None:
            # The whole reply was unusable: say why, as the caller's next message, so that the
            # roles still alternate (some servers' chat templates insist).
            messages.append({"role": "user", "content": BAD_REPLY_NOTE.format(error=bad)})
    return messages


def bad_reply_of(entry: dict) -> str | None:
    """The error of a model entry whose reply was unusable as a whole (a BadReply), or None."""
    queue = entry.get("queue") or []
    if len(queue) == 1 and queue[0]["action"].get("type") == "BadReply":
        return str(queue[0]["action"].get("error", ""))
    return None


# --- the conversation's earlier turns (runtime.turn.memory makes the records) -------------------


def memory_messages(history: list[dict]) -> list[dict]:
    """The earlier turns of the context, as the model reads them: each caller's message, then
    what the agent did (its tool calls, questions and the people's decisions, replayed as
    tool calls with their outcomes) and how the turn ended."""
    messages: list[dict] = []
    for record in history:
        messages.append({"role": "user", "content": memory_user_content(record)})
        calls, results = [], []
        for index, event in enumerate(record.get("events") or []):
            call_id = f"t{record.get('turn', 0)}_{index}"
            name, arguments, outcome = memory_call(event)
            calls.append(
                {
                    "id": call_id,
                    "type": "function",
                    "function": {"name": name, "arguments": json.dumps(arguments)},
                }
            )
            results.append(
                {
                    "role": "tool",
                    "tool_call_id": call_id,
                    "content": json.dumps(outcome, ensure_ascii=False, sort_keys=True),
                }
            )
        if calls:
            messages.append({"role": "assistant", "content": None, "tool_calls": calls})
            messages.extend(results)
        messages.append({"role": "assistant", "content": memory_ending(record)})
    return messages


def memory_user_content(record: dict) -> str:
    message = record.get("message") or {}
    content = message.get("text") or "(no text)"
    for item in message.get("data") or []:
        content += "\n" + json.dumps(item, ensure_ascii=False)
    if message.get("files"):
        content += "\n\nFiles sent with the message: " + ", ".join(message["files"])
    return content


def memory_call(event: dict) -> tuple[str, dict, dict]:
    """(function name, arguments, outcome) of one event of an earlier turn."""
    kind = event.get("type")
    if kind == "question":
        outcome = (
            {"answer": event["answer"]}
            if "answer" in event
            else {"error": "The question was not answered."}
        )
        return ASK_QUESTION, {"prompt": event.get("prompt", "")}, outcome
    if kind == "artifact":
        return EMIT_ARTIFACT, {"name": event.get("name", "")}, {"ok": True}
    if kind == "connection":
        return (
            REQUEST_CONNECTION,
            {"app": event.get("app", "")},
            {"ok": bool(event.get("connected")), "connected": bool(event.get("connected"))},
        )
    name = re.sub(r"[^a-zA-Z0-9_-]", "_", f"{event.get('server', '')}__{event.get('tool', '')}")
    outcome = {k: event[k] for k in ("ok", "result", "error", "reason", "decision") if k in event}
    return name[:64], event.get("arguments") or {}, outcome


def memory_ending(record: dict) -> str:
    """How an earlier turn ended, as the agent's last message of it."""
    reply = record.get("reply") or ""
    state = record.get("state", "")
    if state == "TASK_STATE_COMPLETED":
        return reply or "(done)"
    said = {
        "TASK_STATE_FAILED": "This turn failed",
        "TASK_STATE_CANCELED": "This turn was canceled",
        "TASK_STATE_REJECTED": "This turn was rejected",
    }.get(state, "This turn ended")
    return f"({said}{': ' + reply if reply else ''})"


ASK_QUESTION = "ask_question"
EMIT_ARTIFACT = "emit_artifact"
UPDATE_PLAN = "update_plan"


PLAN_STATES = ["pending", "active", "completed", "failed", "skipped"]


BUILTINS: dict[str, dict[str, Any]] = {
    ASK_QUESTION: {
        "description": "Ask the caller a question and wait for the answer.",
        "parameters": {
            "type": "object",
            "properties": {
                "prompt": {"type": "string", "minLength": 1},
                "choices": {"type": "array", "items": {"type": "string"}},
                "allow_custom": {"type": "boolean"},
            },
            "required": ["prompt"],
        },
    },
    REQUEST_CONNECTION: {
        "description": "Ask a person to connect an app (for tools that need it).",
        "parameters": {
            "type": "object",
            "properties": {
                "app": {"type": "string", "minLength": 1},
                "reason": {"type": "string"},
            },
            "required": ["app"],
        },
    },
    EMIT_ARTIFACT: {
        "description": "Hand the caller a result: a text or a JSON document, with a name.",
        "parameters": {
            "type": "object",
            "properties": {
                "name": {"type": "string", "minLength": 1},
                "description": {"type": "string"},
                "text": {"type": "string"},
                "data": {"type": "object"},
            },
            "required": ["name"],
        },
    },
    UPDATE_PLAN: {
        "description": (
            "Show the caller your plan: either all its steps, or one step's new state "
            "(by its index) and a note."
        ),
        "parameters": {
            "type": "object",
            "properties": {
                "steps": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "properties": {
                            "label": {"type": "string"},
                            "state": {"type": "string", "enum": PLAN_STATES},
                            "note": {"type": "string"},
                        },
                        "required": ["label"],
                    },
                },
                "step": {"type": "integer", "minimum": 0},
                "state": {"type": "string", "enum": PLAN_STATES},
                "note": {"type": "string"},
            },
        },
    },
}


# --- the tools offered -----------------------------------------------------------------------


class ToolNames:
    """Function names for the agent's tools: ``server__tool`` cut to what function names may
    be (^[a-zA-Z0-9_-]{1,64}$), made unique with a hash when two collide. The same tools give
    the same names, so a name the model used maps back to its server and tool."""

    def __init__(self, tools: list[dict]):
        self.by_name: dict[str, dict] = {}
        for spec in tools:
            server, tool = str(spec["server"]), str(spec["tool"])
            name = re.sub(r"[^a-zA-Z0-9_-]", "_", f"{server}__{tool}")[:64]
            if name in self.by_name or name in BUILTINS:
                digest = hashlib.sha256(f"{server}/{tool}".encode()).hexdigest()[:8]
                name = f"{name[:55]}_{digest}"
            self.by_name[name] = spec


def tool_definitions(view: TurnView, names: ToolNames) -> list[dict]:
    tools = []
    for name, spec in names.by_name.items():
        schema = spec.get("schema")
        tools.append(
            {
                "type": "function",
                "function": {
                    "name": name,
                    "description": str(
                        spec.get("description") or f"{spec['server']} / {spec['tool']}"
                    ),
                    "parameters": schema
                    if isinstance(schema, dict) and schema
                    else {"type": "object", "properties": {}},
                },
            }
        )
    for name, builtin in BUILTINS.items():
        if name == REQUEST_CONNECTION and not view.connections_enabled:
            continue
        tools.append({"type": "function", "function": {"name": name, **builtin}})
    return tools
