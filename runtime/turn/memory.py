"""Conversation memory: a turn's model sees the earlier turns of its context.

Before a turn's model is first asked, the earlier turns of its context are read once (one
statement) and a compact record of each is kept in the turn's transcript (a ``memory``
entry): the caller's message, what the agent did (its tool calls with their outcomes and the
people's decisions, its questions with their answers, its artifacts, the apps connected) and
how the turn ended. The agent's budget (AGENT.md ``memory: {turns, tokens}``,
runtime.agents.memory_budget) keeps the newest turns that fit; the oldest drop first, and how many
dropped is recorded in the same entry and logged. Kept in the transcript, the memory is the
same every time the turn's model is asked, also after a pause or on another worker.

A context belongs to one tenant, one agent and one caller (runtime.kernel.task_models.Context):
another caller naming the same contextId has a context of its own, so no turn ever sees
another caller's conversation.
"""

import json
import logging

from runtime.agents.memory_budget import agent_memory
from runtime.kernel.task_models import Task
from runtime.tools.catalog import BUILTIN_SERVER, REQUEST_CONNECTION

logger = logging.getLogger(__name__)

# The most of one text (a message, a reply, a question's prompt or answer) a record keeps.
TEXT_MAX = 4000
# The most of one tool call's arguments or result (as JSON) a record keeps.
VALUE_MAX = 2000
# Tokens are estimated (no tokenizer is at hand for every model): about 4 characters each.
CHARS_PER_TOKEN = 4


def memory_wanted(task: Task, model) -> bool:
    """Whether the turn is to read its context's earlier turns now: a later turn of its
    context, whose agent keeps memory, whose model reads it, and that has not read it yet."""
    return (
        task.turn > 1
        and getattr(model, "uses_memory", True)
        and agent_memory(task.agent)["turns"] > 0
        and not any(e["type"] == "memory" for e in task.transcript)
    )


def memory_record(task: Task) -> dict:
    """Read the earlier turns the budget allows and keep their records in the transcript
    (the caller saves the row). One statement."""
    budget = agent_memory(task.agent)
    rows = (
        Task.objects.filter(
            tenant_id=task.tenant_id,
            context_id=task.context_id,
            turn__lt=task.turn,
            turn__gte=max(1, task.turn - budget["turns"]),
        )
        .order_by("turn")
        .values_list("turn", "public_id", "state", "transcript", "status_message")
    )
    records = [turn_record(*row) for row in rows]
    kept, tokens = memory_fit(records, tokens=budget["tokens"])
    entry = {
        "type": "memory",
        "turns": kept,
        # Every earlier turn not kept: over the budget, or gone (a deleted task).
        "dropped": task.turn - 1 - len(kept),
        "tokens": tokens,
    }
    task.transcript.append(entry)
    if entry["dropped"]:
        logger.info(
            "memory: %s of %s earlier turns kept (%s tokens at most); %s dropped, oldest first",
            len(kept),
            task.turn - 1,
            budget["tokens"],
            entry["dropped"],
        )
    return entry


def memory_of(task: Task) -> tuple[list[dict], int]:
    """The turn's memory as recorded: (the earlier turns' records, how many were dropped)."""
    entry = next((e for e in task.transcript if e["type"] == "memory"), None)
    if entry is None:
        return [], 0
    return list(entry.get("turns") or []), int(entry.get("dropped") or 0)


def memory_fit(records: list[dict], *, tokens: int) -> tuple[list[dict], int]:
    """The newest records whose estimated tokens fit ``tokens``, oldest first, and their
    tokens. Once one does not fit, none older is kept: the memory stays one unbroken stretch
    of the conversation up to this turn."""
    kept: list[dict] = []
    used = 0
    for record in reversed(records):
        cost = record_tokens(record)
        if used + cost > tokens:
            break
        kept.append(record)
        used += cost
    kept.reverse()
    return kept, used


def record_tokens(record: dict) -> int:
    return len(json.dumps(record, ensure_ascii=False)) // CHARS_PER_TOKEN + 1


def cut_text(value, limit: int = TEXT_MAX) -> str:
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    return text if len(text) <= limit else text[:limit] + " [cut]"


def cut_value(value):
    """A call's arguments or result, as it is when small, else its JSON's beginning."""
    text = json.dumps(value, ensure_ascii=False, sort_keys=True)
    if len(text) <= VALUE_MAX:
        return value
    return {"cut": True, "partial": text[:VALUE_MAX]}


def message_text(message) -> str:
    parts = message.get("parts") if isinstance(message, dict) else None
    return "\n".join(p["text"] for p in parts or [] if isinstance(p.get("text"), str))


def turn_record(turn: int, public_id: str, state: str, transcript, status_message) -> dict:
    """One earlier turn as its record (docs/reference/agents.md "Conversation memory" shows one)."""
    transcript = transcript or [{}]
    first = transcript[0]
    inputs: dict = next((e for e in transcript if e.get("type") == "inputs"), {})
    files = [
        str(f.get("filename") or f"file {f.get('index')}") for f in inputs.get("files") or []
    ] or [str(u.get("filename") or u.get("url", "a file")) for u in first.get("urls") or []]
    message = {"text": cut_text(first.get("text", "")), "data": [], "files": files[:20]}
    data = first.get("data") or []
    if data:
        message["data"] = [cut_value(item) for item in data[:5]]
    return {
        "turn": turn,
        "taskId": public_id,
        "state": state,
        "message": message,
        "events": turn_events(transcript),
        "reply": cut_text(message_text(status_message)),
    }


def turn_events(transcript: list[dict]) -> list[dict]:
    """What the agent did in a turn, compactly: calls with outcomes and decisions, questions
    with answers, artifacts, connections. Steps that only shaped the turn (plans, waits, bad
    replies) are left out."""
    events = []
    for index, entry in enumerate(transcript):
        if entry.get("type") != "action":
            continue
        action = entry.get("action") or {}
        kind = action.get("kind")
        later = transcript[index + 1 :]
        if kind == "ask":
            event = {"type": "question", "prompt": cut_text(action.get("prompt", ""))}
            answer = next(
                (
                    e
                    for e in later
                    if e.get("type") == "answer"
                    and e.get("questionId") == action.get("questionId")
                    and "value" in e
                ),
                None,
            )
            if answer is not None:
                event["answer"] = cut_value(answer["value"])
            events.append(event)
        elif kind == "artifact":
            events.append({"type": "artifact", "name": str(action.get("artifactId", ""))})
        elif kind == "call":
            events.append(call_event(entry["step"], action, later))
    return events


def call_event(step: int, action: dict, later: list[dict]) -> dict:
    result = next(
        (e for e in later if e.get("type") == "tool_result" and e.get("step") == step), None
    )
    if action.get("server") == BUILTIN_SERVER and action.get("tool") == REQUEST_CONNECTION:
        return {
            "type": "connection",
            "app": str((action.get("arguments") or {}).get("app", "")),
            "connected": bool(result and result.get("ok")),
        }
    event = {
        "type": "call",
        "server": action.get("server", ""),
        "tool": action.get("tool", ""),
        "arguments": cut_value(action.get("arguments") or {}),
    }
    # A person's decision on it: the approval's answer, between the call and its result.
    until = later.index(result) if result in later else len(later)
    decision = next(
        (
            e
            for e in later[:until]
            if e.get("type") == "answer" and e.get("kind") == "approval" and "approved" in e
        ),
        None,
    )
    if decision is not None:
        event["decision"] = {"approved": bool(decision["approved"])}
        if decision.get("reason"):
            event["decision"]["reason"] = cut_text(decision["reason"], 500)
    if result is None:
        event["ok"] = False
        event["error"] = "the call has no result (the turn ended before it)"
    elif result.get("ok"):
        event["ok"] = True
        event["result"] = cut_value(result.get("result"))
    else:
        event["ok"] = False
        event["error"] = cut_text(result.get("error", "failed"), 500)
        if result.get("reason"):
            event["reason"] = cut_text(result["reason"], 500)
    return event
