"""The syntax of a tool policy entry's ``title``, ``impact`` and ``redact`` (AGENT.md and
admin), and the one place that reads them from an entry (runtime.decisions.summaries renders
them).

``title`` and ``impact`` are templates over the call's arguments: ``{path}`` a value,
``{@caller}``, ``{@agent}``, ``{@server}``, ``{@tool}`` the call's context, each optionally
followed by filters (runtime.policy.template_filters): ``{amount|money:currency}``."""

import re
from typing import Any

from runtime.policy.template_filters import filter_problem

TITLE_MAX = 200
IMPACT_MAX = 300
# What ``{@name}`` reads: the call's context, recorded with it when it is held.
CONTEXT_NAMES = ("caller", "agent", "server", "tool")
# A field path: names joined by dots (``target.environment``, ``hosts.0``); no ``!`` or
# ``:`` (a Python format's conversion and spec are not taken).
_NAME = r"[^{}.\s!:\[\]]+"
PATH_RE = re.compile(rf"^{_NAME}(\.{_NAME})*$")
# ``{{`` and ``}}`` are braces; ``{path}`` a value; a lone brace is an error.
TEMPLATE_RE = re.compile(r"\{\{|\}\}|\{([^{}]*)\}|[{}]")


def call_terms(entry: Any) -> dict:
    """The summary terms of a tool's policy entry (as ``runtime.policy.lookup.policy_rule``
    returns it): ``{"title": ..., "impact": ..., "redact": [...]}``, each only when the entry
    gives it."""
    if not isinstance(entry, dict):
        return {}
    terms: dict = {}
    for name in ("title", "impact"):
        text = entry.get(name)
        if isinstance(text, str) and text.strip():
            terms[name] = text
    redact = entry.get("redact")
    if isinstance(redact, list):
        fields = [name for name in redact if isinstance(name, str) and name]
        if fields:
            terms["redact"] = fields
    return terms


def field_parse(token: str) -> tuple[str, list[tuple[str, str | None]]]:
    """``path|filter:argument|...`` (the inside of a template's braces) as the path and its
    filters, each (name, argument or None). Checks nothing (see template_problem)."""
    path, *rest = token.split("|")
    filters = []
    for part in rest:
        name, colon, argument = part.partition(":")
        filters.append((name.strip(), argument.strip() if colon else None))
    return path.strip(), filters


def title_problem(template: Any) -> str | None:
    """What is wrong with a ``title`` template, or None."""
    return template_problem(template, limit=TITLE_MAX, example="'Deploy {build} to {environment}'")


def impact_problem(template: Any) -> str | None:
    """What is wrong with an ``impact`` template, or None."""
    return template_problem(
        template, limit=IMPACT_MAX, example="'Sends {amount|money:currency} to {payee}'"
    )


def template_problem(template: Any, *, limit: int, example: str) -> str | None:
    """What is wrong with a template of a call (``title``, ``impact``), or None."""
    if not isinstance(template, str) or not template.strip():
        return f"must be a text such as {example}"
    if len(template) > limit:
        return f"must be at most {limit} characters"
    for match in TEMPLATE_RE.finditer(template):
        token = match.group(0)
        if token in ("{{", "}}"):
            continue
        if token in ("{", "}"):
            return (
                f"has an unmatched {token!r} at character {match.start() + 1} "
                f"(write {token * 2} for the brace itself)"
            )
        name, filters = field_parse(match.group(1))
        if not name or not PATH_RE.match(name):
            return (
                f"{token!r} is not an argument: write {{name}} or {{name.inner}}, "
                "then filters if any ({name|number})"
            )
        if name.startswith("@") and name[1:] not in CONTEXT_NAMES:
            return f"{token!r}: the call's context is one of " + ", ".join(
                f"@{c}" for c in CONTEXT_NAMES
            )
        for filter_name, argument in filters:
            problem = filter_problem(filter_name, argument)
            if problem:
                return f"{token!r}: {problem}"
    return None


def redact_problem(fields: Any) -> str | None:
    """What is wrong with a ``redact`` list, or None."""
    if not isinstance(fields, list) or not fields:
        return "must be a list of argument names"
    for name in fields:
        if not isinstance(name, str) or not PATH_RE.match(name):
            return f"{name!r} is not an argument name (name, or name.inner)"
    return None
