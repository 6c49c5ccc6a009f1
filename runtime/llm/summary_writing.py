"""A model's short summary of a held call, for the person who decides it (the tenant's
"AI summaries of held calls"; runtime.decisions.call_summaries asks for it in a worker).

The agent's own model writes it, through its provider: a provider that can has a
``summarise(ask, credential)`` method returning plain text (``provider: openai`` and
``openai-responses`` ask their endpoint with the agent's model and credential; ``scripted``
fills its ``summary`` template, for the demo and tests); a provider without one (an agent
URL, a gate, an MCP gateway) writes none. What the model is given is the ``SummaryAsk``
alone: the tool, its description, the arguments with every redacted field already taken
out, and a bounded tail of the conversation with redacted values blanked out
(runtime.decisions.call_summaries builds it). The model is told to name only values the
arguments hold; runtime.decisions.summary_check checks that it did.
"""

from collections.abc import Callable

from runtime.llm.actions import ModelError, SummaryUnavailable
from runtime.llm.registry import PROVIDERS
from runtime.llm.summary_ask import SUMMARY_CHARS, SummaryAsk


def summary_model_name(model: dict) -> str:
    """Which model writes an agent's summaries, as the page names it."""
    provider = str((model or {}).get("provider") or "scripted")
    name = str((model or {}).get("model") or "")
    return f"{provider} {name}".strip()


def summary_write(
    *, model: dict, ask: SummaryAsk, credential: Callable[..., str]
) -> tuple[str, str]:
    """The summary the agent's ``model`` (its AGENT.md ``model`` mapping) writes of ``ask``,
    and the model's name. Raises SummaryUnavailable (it writes none) or ModelError (it
    could not answer: the caller retries a bounded number of times)."""
    provider = (model or {}).get("provider", "scripted")
    if provider not in PROVIDERS:
        raise SummaryUnavailable(f"unknown model provider {provider!r}")
    summarise = getattr(PROVIDERS[provider](model), "summarise", None)
    if summarise is None:
        raise SummaryUnavailable(f"the {provider} provider writes no summaries")
    text = " ".join(str(summarise(ask, credential) or "").split())
    if not text:
        raise ModelError("the model's summary is empty")
    if len(text) > SUMMARY_CHARS:
        text = text[: SUMMARY_CHARS - 1].rstrip() + "…"
    return text, summary_model_name(model)
