"""What a model is given to summarise a held call (runtime.llm.summary_writing asks it):
the ``SummaryAsk``, the instructions and the one user message made of it. A provider's
``summarise`` sends exactly these, nothing of the turn besides."""

import json
from dataclasses import dataclass, field

# What the model is asked to write, and how long it may be (tokens asked, characters kept).
SUMMARY_INSTRUCTIONS = (
    "You help a person decide whether to approve a tool call that an AI agent wants to "
    "make. In one or two short sentences of plain words, say what the call would do and "
    "why the agent is making it, as the conversation shows. Name only values that appear in "
    "the call's arguments, exactly as they appear there; never guess or add a value. Do not "
    "recommend approving or denying."
)
SUMMARY_TOKENS = 300
SUMMARY_CHARS = 600


@dataclass(frozen=True)
class SummaryAsk:
    """Everything a model is given to summarise a held call (and nothing else)."""

    server: str
    tool: str
    description: str = ""
    # The call's arguments without their redacted fields.
    arguments: dict = field(default_factory=dict)
    # The conversation before the call, oldest first: (who, text) pairs, bounded.
    conversation: tuple[tuple[str, str], ...] = ()


def summary_prompt(ask: SummaryAsk) -> str:
    """The user message a hosted model is sent."""
    lines = [f"Tool: {ask.server} / {ask.tool}"]
    if ask.description:
        lines.append(f"What the tool does: {ask.description}")
    lines.append(
        "Arguments (JSON): "
        + json.dumps(ask.arguments, ensure_ascii=False, sort_keys=True, separators=(", ", ": "))
    )
    if ask.conversation:
        lines.append("")
        lines.append("The conversation that led to the call, oldest first:")
        lines.extend(f"{who}: {text}" for who, text in ask.conversation)
    return "\n".join(lines)
