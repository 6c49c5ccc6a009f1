"""Bad input stops at the edge: the JSON body's depth, and the text and numbers of params.

What the parser or the database would choke on is refused here with a JSON-RPC error that
names the field, before any handler runs (never a 500, nothing written): JSON nested deeper than
MAX_DEPTH (json.loads recurses, and ~1,000 levels raise RecursionError), NUL characters
(PostgreSQL keeps them neither in text columns nor in jsonb), lone surrogates (not UTF-8,
so not storable anywhere), NaN and Infinity (Python's json accepts them, JSON and jsonb do
not), and integers too large to be a JSON number (a google.protobuf.Value is a double).
Column lengths are checked by the handlers (a2a_endpoint.methods), which know the fields.
"""

import json
import math
import re
import sys
from itertools import accumulate

from a2a_endpoint import errors

MAX_DEPTH = 64

# A JSON string, escapes included, up to its closing quote or to the end of an unterminated
# one. Possessive, so that an unterminated string costs one pass, not one per quote.
_STRING = re.compile(r'"(?:[^"\\]++|\\.?)*+"?', re.S)
_NOT_BRACKETS = re.compile(r"[^\[\]{}]+")
_STEP = {"[": 1, "{": 1, "]": -1, "}": -1}
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_FLOAT_MAX = sys.float_info.max


def json_depth(text: str) -> int:
    """How deeply the arrays and objects of a JSON text nest, counted without recursion."""
    brackets = _NOT_BRACKETS.sub("", _STRING.sub("", text))
    if not brackets:
        return 0
    # accumulate and max run in C: a body of four million brackets is counted in a blink.
    return max(accumulate(map(_STEP.__getitem__, brackets)))


class _NonFinite:
    """NaN, Infinity or -Infinity as sent: kept so that the walk can name its field."""

    def __init__(self, literal: str):
        self.literal = literal


def _non_finite(literal: str) -> _NonFinite:
    return _NonFinite(literal)


def json_read(raw: bytes) -> object:
    """The JSON body as Python values, or raise an RpcError (-32700, or -32600 when it
    nests deeper than MAX_DEPTH); NaN and Infinity come back as markers for params_check."""
    try:
        text = raw.decode(json.detect_encoding(raw), "surrogatepass")
    except (UnicodeDecodeError, LookupError) as exc:
        raise errors.parse_error(str(exc)) from None
    # Measured before parsing: json.loads recurses once per level.
    if json_depth(text) > MAX_DEPTH:
        raise too_deep()
    try:
        return json.loads(text, parse_constant=_non_finite)
    except RecursionError:
        raise too_deep() from None
    except ValueError as exc:
        raise errors.parse_error(str(exc)) from None


def too_deep() -> errors.RpcError:
    return errors.invalid_request(f"the JSON body nests more than {MAX_DEPTH} levels deep")


def _path(node: tuple | None) -> str:
    """The field path of a walk node ((parent, key) links): message.parts[0].text."""
    keys = []
    while node is not None:
        node, key = node
        keys.append(key)
    out = ""
    for key in reversed(keys):
        if isinstance(key, int):
            out += f"[{key}]"
        elif _IDENTIFIER.fullmatch(key):
            out += f".{key}" if out else key
        else:
            out += f"[{json.dumps(key)}]"
    return out


def text_problem(value: str) -> str | None:
    """Why a string cannot be stored (a NUL, a lone surrogate), or None."""
    if "\x00" in value:
        return "must not contain NUL characters (U+0000)"
    if not value.isascii():
        try:
            value.encode("utf-8")
        except UnicodeEncodeError as exc:
            return f"must not contain lone surrogates (U+{ord(value[exc.start]):04X})"
    return None


def _value_problem(value) -> str | None:
    if isinstance(value, str):
        return text_problem(value)
    if isinstance(value, _NonFinite):
        return f"must be a finite number ({value.literal} is not JSON)"
    if isinstance(value, float) and not math.isfinite(value):
        return "must be a finite number (it overflows a double)"
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) > _FLOAT_MAX:
        return "is too large a number (it overflows a double)"
    return None


def value_check(value, where: str) -> None:
    """Refuse one envelope value (the request id) the way params_check refuses params."""
    problem = _value_problem(value)
    if problem:
        raise errors.invalid_request(f"{where} {problem}")


def params_check(params: dict) -> None:
    """Refuse params with a NUL, a lone surrogate, NaN, Infinity or an overflowing number
    in any key or value, naming the first such field (-32602)."""
    # Iterative, like json_depth: nothing here recurses on the caller's nesting.
    stack: list[tuple[object, tuple | None]] = [(params, None)]
    while stack:
        value, node = stack.pop()
        if isinstance(value, dict):
            # Reversed, so that the first bad field in the body is the one named.
            for key, item in reversed(value.items()):
                child = (node, key)
                problem = text_problem(key)
                if problem:
                    raise errors.invalid_params(_path(child), f"its name {problem}")
                stack.append((item, child))
        elif isinstance(value, list):
            stack.extend((value[i], (node, i)) for i in range(len(value) - 1, -1, -1))
        else:
            problem = _value_problem(value)
            if problem:
                raise errors.invalid_params(_path(node) or "params", problem)


def length_check(field: str, value: str, limit: int) -> None:
    """Refuse a text longer than the column it will be stored in (-32602)."""
    if len(value) > limit:
        raise errors.invalid_params(
            field, f"must be at most {limit} characters (it has {len(value)})", limit=limit
        )
