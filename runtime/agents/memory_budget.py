"""Conversation memory, as an agent configures it (AGENT.md ``memory: {turns, tokens}``): how
many of the context's earlier turns its model sees, and how many tokens of them at most. The
turn loop applies it (runtime.turn.memory); the oldest turns drop first."""

DEFAULT_MEMORY = {"turns": 20, "tokens": 8000}
MEMORY_KEYS = tuple(DEFAULT_MEMORY)
MAX_MEMORY = {"turns": 200, "tokens": 200_000}


def memory_error(memory) -> tuple[list, str] | None:
    """What is wrong with a ``memory`` mapping: (the path under it, why), or None."""
    if not isinstance(memory, dict):
        return [], f"must be a mapping of {', '.join(MEMORY_KEYS)}"
    for key, value in memory.items():
        if key not in MEMORY_KEYS:
            return [key], f"unknown field (known: {', '.join(MEMORY_KEYS)})"
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            return [key], "must be a whole number of 0 or more (0: no memory)"
        if value > MAX_MEMORY[key]:
            return [key], f"must be at most {MAX_MEMORY[key]}"
    return None


def agent_memory(agent) -> dict[str, int]:
    """The agent's memory budget over the defaults; agentfile keeps ``memory`` in ``model``
    (the agent row has no field of its own for it, as for ``loop.limits``)."""
    return {**DEFAULT_MEMORY, **((agent.model or {}).get("memory") or {})}
