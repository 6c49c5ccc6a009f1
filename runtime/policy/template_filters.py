"""The filters of a policy rule's ``title`` and ``impact`` templates: ``{amount|money:currency}``
says an amount as people read it (docs/how-to/impact-lines.md).

A field may be followed by filters, each ``|name`` or ``|name:argument``, applied left to
right to its value:

- ``number`` (``number:2``): a number with thousands separators (and that many decimals);
- ``money:CUR``: an amount in a currency, with the currency's minor digits (ISO 4217: JPY
  none, EUR two, KWD three); ``CUR`` is a field (``currency``) or a code written in the
  template (``EUR``);
- ``minor:CUR`` (or ``minor:2``): an amount given in minor units (cents) as major ones;
- ``times:F``: the value times the number ``F`` (a rate written in the policy:
  ``about {amount|times:0.0062|money:EUR}``);
- ``duration`` (``duration:ms``, ``:min``, ``:h``, ``:d``): a number of seconds (or of
  that unit) as ``2 h 30 min``.

A filter given a value that is not a number passes it on unchanged: a template never raises on
what a model or a caller sent.
"""

import re
from decimal import ROUND_HALF_EVEN, Decimal, InvalidOperation
from typing import Any

FILTERS = ("number", "money", "minor", "times", "duration")
# Digits after the point, by ISO 4217 (the codes whose minor unit is not 2).
_MINOR_DIGITS = {
    **dict.fromkeys(
        ("BIF", "CLP", "DJF", "GNF", "ISK", "JPY", "KMF", "KRW", "PYG", "RWF", "UGX", "UYI"),
        0,
    ),
    **dict.fromkeys(("VND", "VUV", "XAF", "XOF", "XPF"), 0),
    **dict.fromkeys(("BHD", "IQD", "JOD", "KWD", "LYD", "OMR", "TND"), 3),
}
CURRENCY_RE = re.compile(r"^[A-Z]{3}$")
_NUMBER_RE = re.compile(r"^-?\d+(\.\d+)?$")
_UNITS: dict[str, Decimal] = {
    "s": Decimal(1),
    "ms": Decimal("0.001"),
    "min": Decimal(60),
    "h": Decimal(3600),
    "d": Decimal(86400),
}
# Values beyond this are shown as they are (a number of 10^40 digits is no amount).
_LIMIT = Decimal(10) ** 18


def filter_problem(name: str, argument: str | None) -> str | None:
    """What is wrong with one filter of a template (its name and argument), or None."""
    if name not in FILTERS:
        return f"{name!r} is not a filter: use one of {', '.join(FILTERS)}"
    if name == "number" and argument is not None and not argument.isdigit():
        return "number takes a count of decimals (number:2)"
    if name in ("money", "minor") and not argument:
        return f"{name} takes a currency, a field or a code: {name}:currency or {name}:EUR"
    if name == "times" and (argument is None or not _NUMBER_RE.match(argument)):
        return "times takes a number: times:0.0062"
    if name == "duration" and argument is not None and argument not in _UNITS:
        return f"duration takes a unit: one of {', '.join(_UNITS)}"
    return None


def _decimal(value) -> Decimal | None:
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, int | float | Decimal):
        try:
            number = Decimal(str(value))
        except InvalidOperation:
            return None
    elif isinstance(value, str) and _NUMBER_RE.match(value.strip()):
        number = Decimal(value.strip())
    else:
        return None
    return number if number.is_finite() and abs(number) < _LIMIT else None


def _grouped(number: Decimal, decimals: int) -> str:
    quantum = Decimal(1).scaleb(-decimals)
    rounded = number.quantize(quantum, rounding=ROUND_HALF_EVEN)
    return f"{rounded:,.{decimals}f}"


def minor_digits(currency: str) -> int:
    return _MINOR_DIGITS.get(currency, 2)


def apply_filter(name: str, argument: str | None, value: Any, resolve) -> Any:
    """``value`` through the filter ``name``; ``resolve(argument)`` reads a field the
    argument names (a currency), returning None when there is none."""
    number = _decimal(value)
    if number is None:
        return value
    if name == "number":
        if argument is None:
            decimals = max(0, -number.as_tuple().exponent) if number % 1 else 0  # type: ignore[operator]
            return _grouped(number, min(decimals, 6))
        return _grouped(number, int(argument))
    if name == "times":
        return number * Decimal(str(argument or "1"))
    if name in ("money", "minor"):
        currency = _currency(argument, resolve)
        if name == "minor":
            digits = int(argument) if argument and argument.isdigit() else minor_digits(currency)
            return number.scaleb(-digits)
        if not currency:
            return _grouped(number, 2)
        return f"{_grouped(number, minor_digits(currency))} {currency}"
    if name == "duration":
        return duration_text(number * _UNITS[argument or "s"])
    return value


def _currency(argument: str | None, resolve) -> str:
    if not argument or argument.isdigit():
        return ""
    found = resolve(argument)
    code = found if isinstance(found, str) else argument
    code = code.strip().upper()
    return code if CURRENCY_RE.match(code) else ""


def duration_text(seconds: Decimal) -> str:
    """A number of seconds as people say it: ``45 s``, ``2 h 30 min``, ``3 days 4 h``."""
    sign = "-" if seconds < 0 else ""
    seconds = abs(seconds)
    if seconds < 1:
        return f"{sign}{int(seconds * 1000)} ms"
    total = int(seconds)
    days, rest = divmod(total, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    parts = []
    if days:
        parts.append(f"{days:,} day" + ("s" if days != 1 else ""))
    if hours:
        parts.append(f"{hours} h")
    if minutes and not days:
        parts.append(f"{minutes} min")
    if secs and not days and not hours:
        parts.append(f"{secs} s")
    return sign + " ".join(parts[:2])
