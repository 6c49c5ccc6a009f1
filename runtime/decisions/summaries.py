"""What a held call is, in one line, for every surface that shows an approval: the inbox and
its search, the REST list and detail, bulk results, the audit, the task page, notifications.

A tool's policy entry may give ``title``, a template over the call's arguments
(``Deploy {build} to {environment}``), ``impact``, one over the same that says what approving
does (``Sends {amount|money:currency} to {payee}``, shown under the title), and ``redact``,
the argument fields whose values are shown as ``•••`` everywhere but the decision page. They
are recorded on the interaction when the call is held (``held_call_record``, under ``request["call"]``, with the arguments), so
that a list renders a page of summaries from the rows it read, with no query per row, and
an item keeps the title it was held under. ``runtime.policy.title_syntax.call_terms`` is the
one place that reads them from a policy entry (and checks them, for AGENT.md and admin).

Everything returned is plain text: each surface escapes it for its medium (HTML, Slack
mrkdwn, e-mail). Nothing here raises on what a model or a policy wrote.
"""

import json
import re
import unicodedata
from collections.abc import Callable
from decimal import Decimal
from typing import Any

from runtime.decisions.decision_models import Interaction
from runtime.policy.lookup import Policy, policy_for
from runtime.policy.rules import policy_rule_for
from runtime.policy.template_filters import apply_filter
from runtime.policy.title_syntax import (
    CONTEXT_NAMES,
    IMPACT_MAX,
    PATH_RE,
    TEMPLATE_RE,
    TITLE_MAX,
    call_terms,
    field_parse,
)

REDACTED = "•••"
# How long a summary and one value in it may get (characters).
SUMMARY_MAX = 160
VALUE_MAX = 40
# Bidirectional overrides and isolates would let a value reorder the line it is shown in
# ("Trojan source"); control characters would break it.
_INVISIBLE = {0x200E, 0x200F, *range(0x202A, 0x202F), *range(0x2066, 0x206A)}


def held_call_record(
    *,
    server: str,
    tool: str,
    arguments: Any,
    policy: Policy,
    context: Callable[[], dict] | None = None,
) -> dict:
    """What an approval of a held call records as ``request["call"]`` when it opens: the
    call, and the title, impact and redaction of the policy rule that holds it now (of a
    conditional entry, the rule that matched: runtime.policy.rules.policy_rule_for), with
    the call's ``context`` (``caller``, ``agent``: read only when a template names it)."""
    rule = policy.rule.rule if policy.rule is not None else {}
    record = {
        "server": server,
        "tool": tool,
        "arguments": arguments if isinstance(arguments, dict) else {},
        **call_terms(rule),
    }
    if context and any("{@" in record.get(name, "") for name in ("title", "impact")):
        found = context()
        record["context"] = {k: str(v) for k, v in found.items() if k in CONTEXT_NAMES}
    return record


def call_context(call: dict) -> dict:
    """What ``{@name}`` reads in a recorded call's templates."""
    recorded = call.get("context")
    context = dict(recorded) if isinstance(recorded, dict) else {}
    context.update(server=str(call.get("server") or ""), tool=str(call.get("tool") or ""))
    return context


# --- the view ------------------------------------------------------------------------------


def held_call_view(
    interaction: Interaction, *, reveal: bool = False, arguments: dict | None = None
) -> dict | None:
    """``{"server", "tool", "arguments", "summary", "impact"}`` of an approval of a held
    call, None for any other interaction (``impact``: "" when its rule gives none). Redacted
    fields are ``•••`` in the arguments, the summary and the impact unless ``reveal`` (the
    decision page only). Reads the interaction's own row; a surface
    that shows the held call's effect beside it (its hash) passes the effect's
    ``arguments``, summarised under the terms the interaction recorded."""
    if interaction.kind != Interaction.Kind.APPROVAL:
        return None
    request = interaction.request if isinstance(interaction.request, dict) else {}
    call = request.get("call")
    if not isinstance(call, dict):
        # An approval held before calls were recorded: what its detail says.
        detail = interaction.detail if isinstance(interaction.detail, dict) else {}
        if not detail.get("server"):
            return None
        call = {"server": detail.get("server"), "tool": detail.get("tool", "")}
    return _call_view(call, reveal=reveal, arguments=arguments)


def _call_view(call: dict, *, reveal: bool = False, arguments: dict | None = None) -> dict:
    if arguments is None:
        arguments = call.get("arguments")
    arguments = arguments if isinstance(arguments, dict) else {}
    terms = call_terms(call)
    if not reveal:
        arguments = redacted(arguments, terms.get("redact", ()))
    title, impact = terms.get("title"), terms.get("impact")
    context = call_context(call)
    summary = title_render(title, arguments, context) if title else pairs_summary(arguments)
    return {
        "server": str(call.get("server") or ""),
        "tool": str(call.get("tool") or ""),
        "arguments": arguments,
        "summary": summary,
        "impact": impact_render(impact, arguments, context) if impact else "",
    }


def effect_call_view(effect, *, agent, interaction: Interaction | None = None) -> dict:
    """``held_call_view`` of any journalled call (a task page's effects): under the terms
    its approval recorded, or, for a call no person was asked about (the policy or a
    standing rule allowed it), those of the tool's policy entry now."""
    if interaction is not None and interaction.kind == Interaction.Kind.APPROVAL:
        view = held_call_view(interaction, arguments=effect.arguments)
        if view is not None:
            return view
    call = held_call_record(
        server=effect.server,
        tool=effect.tool,
        arguments=effect.arguments,
        policy=policy_for(agent, effect.server, effect.tool, effect.arguments),
    )
    return _call_view(call)


def held_call_summary(interaction: Interaction) -> str:
    """The one-line summary of an approval's held call, redacted ("" for other kinds)."""
    view = held_call_view(interaction)
    return view["summary"] if view else ""


def held_call_impact(interaction: Interaction) -> str:
    """What approving the held call does, in words, redacted ("": its rule says nothing)."""
    view = held_call_view(interaction)
    return view["impact"] if view else ""


def redacted(arguments: dict, fields) -> dict:
    """``arguments`` with the value at each of ``fields`` (a name or a dotted path) replaced
    by ``•••``; the original is left as it was."""
    result = arguments
    for name in fields:
        if name in arguments:
            result = {**result, name: REDACTED}
            continue
        result = _redact_path(result, name.split("."))
    return result


def _redact_path(value, path: list[str]):
    key, rest = path[0], path[1:]
    if isinstance(value, dict) and key in value:
        inner = _redact_path(value[key], rest) if rest else REDACTED
        return {**value, key: inner}
    if isinstance(value, list) and key.isdigit() and int(key) < len(value):
        index = int(key)
        inner = _redact_path(value[index], rest) if rest else REDACTED
        return [*value[:index], inner, *value[index + 1 :]]
    return value


def title_render(template: str, arguments: dict, context: dict | None = None) -> str:
    """The title with each ``{path}`` filled from ``arguments`` (``{@name}`` from the call's
    ``context``), through its filters (runtime.policy.template_filters): text as it is
    (shortened), other values as JSON, ``(no path)`` where the arguments have none;
    ``{{``/``}}`` are braces. Never raises: a template that does not check renders its text."""
    return _render(template, arguments, context or {}, TITLE_MAX)


def impact_render(template: str, arguments: dict, context: dict | None = None) -> str:
    """The impact line: rendered as the title is, up to IMPACT_MAX characters."""
    return _render(template, arguments, context or {}, IMPACT_MAX)


def _render(template: str, arguments: dict, context: dict, limit: int) -> str:
    def read(name: str) -> tuple[bool, Any]:
        if name.startswith("@"):
            key = name[1:]
            return (key in context, context.get(key))
        return _lookup(arguments, name)

    def fill(match: re.Match) -> str:
        token = match.group(0)
        if token in ("{{", "}}"):
            return token[0]
        name, filters = field_parse(match.group(1) or "")
        if not name or not PATH_RE.match(name):
            return token
        found, value = read(name)
        if not found:
            return f"(no {name})"
        if value != REDACTED:
            for filter_name, argument in filters:
                try:
                    value = apply_filter(filter_name, argument, value, lambda n: read(n)[1])
                except (ArithmeticError, ValueError, TypeError):
                    break  # a value beyond what a filter says: shown as it is
            if isinstance(value, Decimal):  # ``times`` last: a plain number
                value = apply_filter("number", None, value, lambda n: None)
        return _plain(value if isinstance(value, str) else _json(value), VALUE_MAX * 2)

    return _plain(TEMPLATE_RE.sub(fill, template), limit)


def pairs_summary(arguments: dict) -> str:
    """The top-level ``key=value`` pairs, by key, within SUMMARY_MAX: text quoted, long
    values shortened, what does not fit counted ("… +2 more")."""
    if not arguments:
        return "no arguments"
    pairs = [f"{_plain(str(key), VALUE_MAX)}={_value(arguments[key])}" for key in sorted(arguments)]
    shown: list[str] = []
    length = 0
    for index, pair in enumerate(pairs):
        left = len(pairs) - index - 1
        tail = len(f", … +{left} more") if left else 0
        if shown and length + 2 + len(pair) + tail > SUMMARY_MAX:
            return ", ".join(shown) + f", … +{len(pairs) - index} more"
        shown.append(pair)
        length += len(pair) + (2 if len(shown) > 1 else 0)
    return _shorten(", ".join(shown), SUMMARY_MAX)


def _value(value) -> str:
    if value == REDACTED:
        return REDACTED
    if isinstance(value, str):
        return json.dumps(_plain(value, VALUE_MAX), ensure_ascii=False)
    return _plain(_json(value), VALUE_MAX)


def _lookup(arguments, name: str) -> tuple[bool, Any]:
    if isinstance(arguments, dict) and name in arguments:
        return True, arguments[name]
    value = arguments
    for key in name.split("."):
        if value == REDACTED:
            break  # inside a redacted field: nothing of it shows
        if isinstance(value, dict) and key in value:
            value = value[key]
        elif isinstance(value, list) and key.isdigit() and int(key) < len(value):
            value = value[int(key)]
        else:
            return False, None
    return True, value


def _json(value) -> str:
    try:
        return json.dumps(value, ensure_ascii=False, separators=(",", ":"), sort_keys=True)
    except (TypeError, ValueError):
        return str(value)


def _plain(text: str, limit: int) -> str:
    """One line of visible text, cut at ``limit`` with an ellipsis."""
    return _shorten(_clean(text), limit)


def _clean(text: str) -> str:
    """Whitespace runs become one space; controls and direction overrides go."""
    kept = []
    for char in text:
        if char.isspace():
            kept.append(" ")
        elif ord(char) in _INVISIBLE or unicodedata.category(char) == "Cc":
            continue
        else:
            kept.append(char)
    return re.sub(r" {2,}", " ", "".join(kept)).strip()


def _shorten(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


def message_calls_redacted(agent, message: dict) -> dict:
    """A caller's message to an approval gate or an MCP gateway as operators' pages show it:
    each data part that describes a call (a gate's ``{"tool", "arguments"}``, a gateway's
    ``{"mcpCall": {"server", "tool", "arguments"}}``) with the fields its rule redacts as
    ``•••``, as on every surface but the decision page. Any other message is returned as it
    is; so is one of an agent with no such calls."""
    if not (agent.is_gate or agent.is_gateway):
        return message
    parts = message.get("parts") or []
    shown = [_part_redacted(agent, part) for part in parts]
    if all(new is old for new, old in zip(shown, parts, strict=True)):
        return message
    return {**message, "parts": shown}


def _part_redacted(agent, part: dict) -> dict:
    data = part.get("data") if isinstance(part, dict) else None
    if not isinstance(data, dict):
        return part
    if isinstance(data.get("mcpCall"), dict):
        inner = data["mcpCall"]
        server, tool = str(inner.get("server") or ""), str(inner.get("tool") or "")
        call = _call_redacted(agent, server, tool, inner)
        return part if call is inner else {**part, "data": {**data, "mcpCall": call}}
    name = data.get("tool")
    if isinstance(name, str) and "/" in name:
        server, tool = name.split("/", 1)
        call = _call_redacted(agent, server, tool, data)
        return part if call is data else {**part, "data": call}
    return part


def _call_redacted(agent, server: str, tool: str, call: dict) -> dict:
    arguments = call.get("arguments")
    if not isinstance(arguments, dict):
        return call
    fields = call_terms(policy_rule_for(agent, server, tool, arguments).rule).get("redact")
    if not fields:
        return call
    return {**call, "arguments": redacted(arguments, fields)}
