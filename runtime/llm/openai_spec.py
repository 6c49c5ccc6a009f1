"""What an agent's ``model:`` mapping may say for ``provider: openai`` and
``provider: openai-responses``, checked when the agent is loaded (AGENT.md or admin): the
keys, the allow-listed request parameters passed through to the provider, ``extra_body``."""

import json
import re
from collections.abc import Callable
from typing import Any

from connections.outbound import (
    OutboundRefused,
    url_parse,
)


class ModelSpecError(Exception):
    def __init__(self, path: list, message: str):
        self.path, self.message = path, message
        super().__init__(f"{'.'.join(map(str, path))}: {message}")


# Request parameters an agent may pass through to its provider, each checked when the agent is
# loaded (AGENT.md or admin): name -> (check, what it must be). Anything else is refused, so
# that a typo is a load error, not a request every call of which the provider refuses.
REASONING_EFFORTS = ("none", "minimal", "low", "medium", "high", "xhigh")
VERBOSITIES = ("low", "medium", "high")


def _is_number(value, low: float, high: float) -> bool:
    return not isinstance(value, bool) and isinstance(value, int | float) and low <= value <= high


def _is_short_text(value) -> bool:
    return isinstance(value, str) and 0 < len(value) <= 200


def _is_stop(value) -> bool:
    if isinstance(value, str):
        return 0 < len(value) <= 200
    return (
        isinstance(value, list)
        and 1 <= len(value) <= 4
        and all(isinstance(v, str) and 0 < len(v) <= 200 for v in value)
    )


PARAMETERS: dict[str, tuple[Callable[[Any], bool], str]] = {
    "reasoning_effort": (
        lambda v: v in REASONING_EFFORTS,
        f"must be one of {', '.join(REASONING_EFFORTS)}",
    ),
    "verbosity": (lambda v: v in VERBOSITIES, f"must be one of {', '.join(VERBOSITIES)}"),
    "top_p": (lambda v: _is_number(v, 0, 1), "must be a number from 0 to 1"),
    "seed": (
        lambda v: not isinstance(v, bool) and isinstance(v, int) and abs(v) < 2**63,
        "must be a whole number",
    ),
    "stop": (_is_stop, "must be a string or a list of 1 to 4 strings"),
    "parallel_tool_calls": (lambda v: isinstance(v, bool), "must be true or false"),
    "frequency_penalty": (lambda v: _is_number(v, -2, 2), "must be a number from -2 to 2"),
    "presence_penalty": (lambda v: _is_number(v, -2, 2), "must be a number from -2 to 2"),
    "service_tier": (_is_short_text, "must be a service tier's name"),
    "store": (lambda v: isinstance(v, bool), "must be true or false"),
    "prompt_cache_key": (_is_short_text, "must be a string of at most 200 characters"),
}
# What Chat Completions takes of them; the Responses API has no stop, seed or penalties
# (runtime.llm.openai_responses).
CHAT_PARAMETERS = frozenset(PARAMETERS)
RESPONSES_PARAMETERS = CHAT_PARAMETERS - {
    "stop",
    "seed",
    "frequency_penalty",
    "presence_penalty",
}
# How ``max_output_tokens`` is sent to Chat Completions: ``max_completion_tokens`` (what
# OpenAI's current models take; gpt-5 and the o-series refuse max_tokens), or ``max_tokens``
# for servers that know only that one.
MAX_TOKENS_FIELDS = ("max_completion_tokens", "max_tokens")
# ``extra_body``: more of the request body, as given. Never what Countersign itself sends or
# what would change how the reply is read.
EXTRA_BODY_RESERVED = frozenset(
    {
        "model",
        "messages",
        "input",
        "instructions",
        "tools",
        "tool_choice",
        "stream",
        "n",
        "functions",
        "function_call",
        "previous_response_id",
        "max_tokens",
        "max_completion_tokens",
        "max_output_tokens",
        "temperature",
    }
)
EXTRA_BODY_MAX_CHARS = 16 * 1024


def validate_model(model: dict) -> None:
    """Check an AGENT.md ``model`` mapping for this provider (``openai`` or
    ``openai-responses``); raise ModelSpecError."""
    responses = model.get("provider") == "openai-responses"
    parameters = RESPONSES_PARAMETERS if responses else CHAT_PARAMETERS
    known = MODEL_KEYS | parameters | {"extra_body"}
    if not responses:
        known = known | {"max_tokens_field"}
    unknown = set(model) - known
    if unknown:
        key = sorted(unknown)[0]
        hint = (
            f"{key} is not a parameter of the Responses API"
            if responses and key in CHAT_PARAMETERS
            else f"unknown field (known: {', '.join(sorted(known))})"
        )
        raise ModelSpecError([key], hint)
    if not isinstance(model.get("model"), str) or not model["model"].strip():
        raise ModelSpecError(["model"], "is required: the model's name at the provider")
    if "base_url" in model:
        if not isinstance(model["base_url"], str):
            raise ModelSpecError(["base_url"], "must be an http(s) URL")
        try:
            url_parse(model["base_url"])
        except OutboundRefused as exc:
            raise ModelSpecError(["base_url"], str(exc)) from None
    credential = model.get("credential", DEFAULT_CREDENTIAL)
    if not isinstance(credential, str) or not CREDENTIAL_NAME_RE.match(credential):
        raise ModelSpecError(
            ["credential"], "must be the name of a credential (letters, digits, _ . -)"
        )
    temperature = model.get("temperature")
    if temperature is not None and not _is_number(temperature, 0, 2):
        raise ModelSpecError(["temperature"], "must be a number from 0 to 2")
    tokens = model.get("max_output_tokens")
    if tokens is not None and (
        isinstance(tokens, bool) or not isinstance(tokens, int) or tokens < 1
    ):
        raise ModelSpecError(["max_output_tokens"], "must be a positive whole number")
    if "max_tokens_field" in model and model["max_tokens_field"] not in MAX_TOKENS_FIELDS:
        raise ModelSpecError(["max_tokens_field"], f"must be one of {', '.join(MAX_TOKENS_FIELDS)}")
    for name in sorted(parameters & set(model)):
        check, must = PARAMETERS[name]
        if not check(model[name]):
            raise ModelSpecError([name], must)
    if "extra_body" in model:
        extra_body_validate(model["extra_body"], parameters)


def extra_body_validate(extra: Any, parameters: frozenset) -> None:
    if not isinstance(extra, dict) or not extra:
        raise ModelSpecError(["extra_body"], "must be a mapping of request fields")
    for key in extra:
        if not isinstance(key, str) or not key:
            raise ModelSpecError(["extra_body"], "its keys must be field names")
        if key in EXTRA_BODY_RESERVED:
            raise ModelSpecError(["extra_body", key], "is set by Countersign; it cannot be given")
        if key in parameters:
            raise ModelSpecError(
                ["extra_body", key], f"give it as model.{key}, where it is checked"
            )
    try:
        # YAML has values JSON has not (dates, sets): the body must be JSON, and small.
        text = json.dumps(extra, allow_nan=False)
    except (TypeError, ValueError):
        raise ModelSpecError(["extra_body"], "must hold only JSON values") from None
    if len(text) > EXTRA_BODY_MAX_CHARS:
        raise ModelSpecError(["extra_body"], f"must be at most {EXTRA_BODY_MAX_CHARS} characters")


def request_parameters(spec: dict, names: frozenset) -> dict:
    """The agent's pass-through parameters (validated at load) as they go into the request."""
    body = {name: spec[name] for name in sorted(names & set(spec))}
    extra = spec.get("extra_body")
    if isinstance(extra, dict):
        # Checked at load; a mapping edited by hand since cannot override what we set.
        body.update({k: v for k, v in extra.items() if k not in EXTRA_BODY_RESERVED})
    return body


DEFAULT_CREDENTIAL = "OPENAI_API_KEY"
MODEL_KEYS = {"provider", "model", "base_url", "credential", "temperature", "max_output_tokens"}
CREDENTIAL_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_.-]{0,127}$")
