"""The syntax of a tool policy entry's ``title`` and ``redact`` (AGENT.md and admin), and the
one place that reads them from an entry (runtime.decisions.summaries renders them)."""

import re
from typing import Any

TITLE_MAX = 200
# A field path: names joined by dots (``target.environment``, ``hosts.0``); no ``!`` or
# ``:`` (a Python format's conversion and spec are not taken).
_NAME = r"[^{}.\s!:\[\]]+"
PATH_RE = re.compile(rf"^{_NAME}(\.{_NAME})*$")
# ``{{`` and ``}}`` are braces; ``{path}`` a value; a lone brace is an error.
TEMPLATE_RE = re.compile(r"\{\{|\}\}|\{([^{}]*)\}|[{}]")


def call_terms(entry: Any) -> dict:
    """The summary terms of a tool's policy entry (as ``runtime.policy.lookup.policy_rule``
    returns it): ``{"title": ..., "redact": [...]}``, each only when the entry gives it."""
    if not isinstance(entry, dict):
        return {}
    terms: dict = {}
    title = entry.get("title")
    if isinstance(title, str) and title.strip():
        terms["title"] = title
    redact = entry.get("redact")
    if isinstance(redact, list):
        fields = [name for name in redact if isinstance(name, str) and name]
        if fields:
            terms["redact"] = fields
    return terms


def title_problem(template: Any) -> str | None:
    """What is wrong with a ``title`` template, or None."""
    if not isinstance(template, str) or not template.strip():
        return "must be a text such as 'Deploy {build} to {environment}'"
    if len(template) > TITLE_MAX:
        return f"must be at most {TITLE_MAX} characters"
    for match in TEMPLATE_RE.finditer(template):
        token = match.group(0)
        if token in ("{{", "}}"):
            continue
        if token in ("{", "}"):
            return (
                f"has an unmatched {token!r} at character {match.start() + 1} "
                f"(write {token * 2} for the brace itself)"
            )
        name = match.group(1).strip()
        if not name or not PATH_RE.match(name):
            return (
                f"{token!r} is not an argument: write {{name}} or {{name.inner}}, "
                "with no format after the name"
            )
    return None


def redact_problem(fields: Any) -> str | None:
    """What is wrong with a ``redact`` list, or None."""
    if not isinstance(fields, list) or not fields:
        return "must be a list of argument names"
    for name in fields:
        if not isinstance(name, str) or not PATH_RE.match(name):
            return f"{name!r} is not an argument name (name, or name.inner)"
    return None
