"""A turn's limits (AGENT.md ``loop.limits: {steps, tool_calls, tokens}``): when one is hit the
task fails with a message that names it. They hold for every provider: the turn loop checks
them, the model is not trusted to stop."""

from runtime.agents.llm.actions import CallTool
from runtime.kernel.task_models import Task

DEFAULT_LIMITS = {"steps": 25, "tool_calls": 100, "tokens": 1_000_000}
LIMIT_KEYS = tuple(DEFAULT_LIMITS)


def limits_error(limits) -> tuple[list, str] | None:
    """What is wrong with a ``loop.limits`` mapping: (the path under it, why), or None."""
    if not isinstance(limits, dict):
        return [], f"must be a mapping of {', '.join(LIMIT_KEYS)}"
    for key, value in limits.items():
        if key not in LIMIT_KEYS:
            return [key], f"unknown limit (known: {', '.join(LIMIT_KEYS)})"
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            return [key], "must be a positive whole number"
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
