"""JSON parameters written by orjson on PostgreSQL connections.

Django's ``JSONField`` hands psycopg each value with the standard library's ``json.dumps``
(``DatabaseOperations.adapt_json_value``): a turn writes its events, its status and its
history that way, and the encoder was 4-5% of a worker's CPU per turn (py-spy,
bench/cpu_per_send.sh). orjson writes the same JSON several times faster. PostgreSQL stores
``jsonb`` parsed, so what is stored is the same either way; the text differs only in spacing
and escapes. A value orjson refuses (an integer beyond 64 bits, text that is not valid
UTF-8, a type neither knows) goes to ``json.dumps`` as before, with its error if it has one.
One difference stays: orjson writes a float NaN or infinity as ``null``, where PostgreSQL
refused the ``NaN`` that ``json.dumps`` wrote.

Connected to ``connection_created`` (runtime.apps): each connection's operations take it; a
field with an encoder of its own keeps Django's way.
"""

import json

import orjson
from psycopg.types.json import Jsonb

_OPTIONS = orjson.OPT_NON_STR_KEYS


def json_dumps(value) -> bytes | str:
    try:
        return orjson.dumps(value, option=_OPTIONS)
    except TypeError:
        return json.dumps(value)


def _adapt_json_value(original):
    def adapt_json_value(value, encoder):
        if encoder is not None:
            return original(value, encoder)
        return Jsonb(value, dumps=json_dumps)

    adapt_json_value.json_params_fast = True  # type: ignore[attr-defined]
    return adapt_json_value


def json_params_fast(sender, connection, **kwargs) -> None:
    """``connection_created``'s receiver: the connection's JSON parameters go through
    ``json_dumps``."""
    if connection.vendor != "postgresql":
        return
    ops = connection.ops
    if not getattr(ops.adapt_json_value, "json_params_fast", False):
        ops.adapt_json_value = _adapt_json_value(ops.adapt_json_value)
