"""The held call as notifications show it: a thin adapter over the interface of
runtime.decisions.summaries (issue 25, item 1), which another branch adds.

``held_call_view(interaction, *, reveal=False)`` gives ``{"server", "tool", "arguments",
"summary"}`` (the fields the tool's policy lists under ``redact`` as "•••" unless ``reveal``),
or None for an interaction that holds no call; ``held_call_summary(interaction)`` the one line.
Until that module is merged, this reads the same policy keys (``title``, ``redact``) the same
way; then the two functions are imported from there and this module goes.
"""

from runtime.agents.tools import policy_rule
from runtime.decisions.decision_models import Interaction
from runtime.decisions.decision_selectors import held_call_of

REDACTED = "•••"
# How long the summary of key=value pairs gets before it is cut.
SUMMARY_MAX = 160


def _policy_entry(interaction: Interaction, server: str, tool: str) -> dict:
    rule = policy_rule(interaction.task.agent, server, tool)
    return rule if isinstance(rule, dict) else {}


def _text(value) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    if isinstance(value, int | float):
        return str(value)
    return "{…}" if isinstance(value, dict) else "[…]"


def _summary(arguments: dict, title: str | None) -> str:
    if isinstance(title, str) and title:
        try:
            return title.format_map({k: _text(v) for k, v in arguments.items()})[:SUMMARY_MAX]
        except (KeyError, IndexError, ValueError, AttributeError):
            pass  # a template naming a field the call lacks: the pairs instead
    pairs = ", ".join(f"{k}={_text(v)}" for k, v in arguments.items())
    return pairs if len(pairs) <= SUMMARY_MAX else pairs[: SUMMARY_MAX - 1] + "…"


def held_call_view(interaction: Interaction, *, reveal: bool = False) -> dict | None:
    """The held call of an approval: server, tool, arguments (redacted unless ``reveal``) and
    the one-line summary (made of the redacted arguments unless ``reveal``)."""
    held = held_call_of(interaction)
    if held is None:
        return None
    entry = _policy_entry(interaction, held.server, held.tool)
    redact = {str(f) for f in entry.get("redact") or () if isinstance(f, str)}
    arguments = held.arguments if isinstance(held.arguments, dict) else {}
    if not reveal:
        arguments = {k: (REDACTED if k in redact else v) for k, v in arguments.items()}
    return {
        "server": held.server,
        "tool": held.tool,
        "arguments": arguments,
        "summary": _summary(arguments, entry.get("title")),
    }


def held_call_summary(interaction: Interaction) -> str:
    """The held call in one line (redacted), or "" for an interaction that holds none."""
    view = held_call_view(interaction)
    return view["summary"] if view else ""
