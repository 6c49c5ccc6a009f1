"""The deterministic check of a model's summary of a held call: which values the summary
names that the call's arguments do not hold (a number, a quoted text, an identifier such as
a build, a host, an address), so that a page flags them in red beside the summary. No model
judges another here: the values are read from the text and looked for in the arguments.

A number matches an argument number (or a number inside an argument's text) of the same
value whatever its separators (``120,000`` is ``120000``); a text or identifier matches
when an argument's text holds it, case aside. Redacted fields (``•••``) are no values: the
summary is never written from them, and nothing the summary says is found in them.
"""

import re
from decimal import Decimal, InvalidOperation

from runtime.decisions.summaries import REDACTED, redacted

_QUOTED = re.compile(r"[\"“'‘]([^\"”'’]{1,200})[\"”'’]")
# A number as a summary writes it (``120000``, ``120,000``, ``-3.5``), whole.
_WHOLE_NUMBER = re.compile(r"^-?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?$")
# Numbers inside an argument's text.
_NUMBER = re.compile(r"-?\d+(?:\.\d+)?")
# A word that is a value rather than prose: it holds a digit or one of . _ / @ : - inside.
_VALUE_MARK = re.compile(r"\d|[._/@:]|\w-\w")
_EDGES = ".,;:!?()[]{}<>\"'“”‘’"


def _leaves(value, depth: int = 0):
    if depth > 8:
        return
    if isinstance(value, dict):
        for item in value.values():
            yield from _leaves(item, depth + 1)
    elif isinstance(value, list):
        for item in value:
            yield from _leaves(item, depth + 1)
    elif value is not None and value != REDACTED and not isinstance(value, bool):
        yield value


def _number(text: str) -> Decimal | None:
    try:
        return Decimal(text.replace(",", ""))
    except InvalidOperation:
        return None


def summary_unsupported(summary: str, arguments: dict, redact=()) -> list[str]:
    """The values ``summary`` names that ``arguments`` (with ``redact``'s fields as ``•••``)
    do not hold, in the order the summary names them (see the module)."""
    shown = redacted(arguments if isinstance(arguments, dict) else {}, redact)
    texts, numbers = [], set()
    for leaf in _leaves(shown):
        if isinstance(leaf, int | float):
            found = _number(str(leaf))
            if found is not None:
                numbers.add(found.normalize())
        else:
            text = str(leaf)
            texts.append(text.casefold())
            for match in _NUMBER.finditer(text):
                found = _number(match.group(0))
                if found is not None:
                    numbers.add(found.normalize())
    flagged: list[str] = []

    def flag(value: str) -> None:
        if value not in flagged:
            flagged.append(value)

    for match in _QUOTED.finditer(summary):
        value = match.group(1).strip()
        if value and not any(value.casefold() in text for text in texts):
            flag(value)
    for token in _QUOTED.sub(" ", summary).split():
        word = token.strip(_EDGES)
        if not word:
            continue
        if _WHOLE_NUMBER.match(word):
            found = _number(word)
            if found is not None and found.normalize() not in numbers:
                flag(word)
        elif _VALUE_MARK.search(word) and not any(word.casefold() in text for text in texts):
            flag(word)
    return flagged
