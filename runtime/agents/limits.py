"""A turn's limits (AGENT.md ``loop.limits: {steps, tool_calls, tokens, bad_replies,
tool_result_bytes}``): when one is hit the task fails with a message that names it. They hold
for every provider: the turn loop checks them, the model is not trusted to stop.

``bad_replies``: how many replies in a row that cannot be used (unparsable, no choices, an
unknown tool, arguments that fail the tool's schema) go back to the model as errors; the next
one fails the task. ``tool_result_bytes``: the most of one tool result the model is sent (the
whole result is kept as a task file, runtime.turn.calls)."""

from runtime.kernel.task_models import Task
from runtime.llm.actions import CallTool

DEFAULT_LIMITS = {
    "steps": 25,
    "tool_calls": 100,
    "tokens": 1_000_000,
    "bad_replies": 2,
    "tool_result_bytes": 64 * 1024,
}
LIMIT_KEYS = tuple(DEFAULT_LIMITS)
# 0 is a limit too for these: the first bad reply fails the task.
MAY_BE_ZERO = {"bad_replies"}
# A result cut shorter than this would tell the model nothing.
TOOL_RESULT_MIN_BYTES = 1024


def limits_error(limits) -> tuple[list, str] | None:
    """What is wrong with a ``loop.limits`` mapping: (the path under it, why), or None."""
    if not isinstance(limits, dict):
        return [], f"must be a mapping of {', '.join(LIMIT_KEYS)}"
    for key, value in limits.items():
        if key not in LIMIT_KEYS:
            return [key], f"unknown limit (known: {', '.join(LIMIT_KEYS)})"
        lowest = 0 if key in MAY_BE_ZERO else 1
        if isinstance(value, bool) or not isinstance(value, int) or value < lowest:
            return [key], "must be a whole number of 0 or more" if lowest == 0 else (
                "must be a positive whole number"
            )
        if key == "tool_result_bytes" and value < TOOL_RESULT_MIN_BYTES:
            return [key], f"must be at least {TOOL_RESULT_MIN_BYTES}"
    return None


def turn_limits(agent) -> dict[str, int]:
    """The agent's limits over the defaults; agentfile keeps ``loop.limits`` in ``model``."""
    return {**DEFAULT_LIMITS, **((agent.model or {}).get("limits") or {})}


def steps_error(task: Task) -> str | None:
    """Why the turn may take no further action, or None."""
    limit = turn_limits(task.agent)["steps"]
    if task.steps >= limit:
        return f"The turn reached its limit of {limit} steps (loop.limits.steps) and was stopped."
    return None


def action_error(task: Task, action) -> str | None:
    """Why ``action`` may not be applied (a step or tool-call limit), or None."""
    error = steps_error(task)
    if error or not isinstance(action, CallTool):
        return error
    limit = turn_limits(task.agent)["tool_calls"]
    calls = sum(
        1 for e in task.transcript if e["type"] == "action" and e["action"]["kind"] == "call"
    )
    if calls >= limit:
        return (
            f"The turn reached its limit of {limit} tool calls (loop.limits.tool_calls) "
            "and was stopped."
        )
    return None


def tokens_error(task: Task) -> str | None:
    limit = turn_limits(task.agent)["tokens"]
    if task.tokens > limit:
        return (
            f"The turn used {task.tokens} model tokens, over its limit of {limit} "
            "(loop.limits.tokens), and was stopped."
        )
    return None


def bad_reply_error(task: Task, streak: int, problem: str) -> str | None:
    """Why the turn stops after the ``streak``-th unusable reply in a row, or None while the
    error may still go back to the model."""
    limit = turn_limits(task.agent)["bad_replies"]
    if streak <= limit:
        return None
    return (
        f"The model's reply could not be used {streak} times in a row "
        f"(loop.limits.bad_replies is {limit}), and the turn was stopped. "
        f"The last problem: {problem[:500]}"
    )
