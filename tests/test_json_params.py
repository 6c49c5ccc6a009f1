"""config.json_params: JSON parameters written by orjson on PostgreSQL, stored as the standard
library's json.dumps would have them stored."""

import json

import pytest
from django.core.serializers.json import DjangoJSONEncoder
from django.db import connection
from psycopg.types.json import Jsonb

from config.json_params import json_dumps

pytestmark = [pytest.mark.django_db, pytest.mark.postgres]

VALUES = [
    {"text": "plain", "n": 1, "f": 2.5, "none": None, "yes": True, "list": [1, "two", [3]]},
    {"accents": "é ü ß", "emoji": "🙂", "separators": "\u2028\u2029", "quote": '"\\'},
    {1: "int key", "nested": {"deep": {"deeper": [{}, []]}}},
    {"big": 2**70},  # beyond orjson's 64 bits: the standard library writes it
    [],
    "a string",
    17,
]


def stored(adapted) -> str:
    with connection.cursor() as cursor:
        cursor.execute("SELECT %s::jsonb::text", [adapted])
        return cursor.fetchone()[0]


def test_a_connections_json_parameters_go_through_orjson(postgres_only):
    connection.ensure_connection()
    adapted = connection.ops.adapt_json_value({"a": 1}, None)
    assert adapted.dumps is json_dumps
    # A field with an encoder of its own keeps Django's way.
    assert connection.ops.adapt_json_value({"a": 1}, DjangoJSONEncoder).dumps is not json_dumps


@pytest.mark.parametrize("value", VALUES, ids=range(len(VALUES)))
def test_what_is_stored_is_what_json_dumps_stored(postgres_only, value):
    connection.ensure_connection()
    assert stored(connection.ops.adapt_json_value(value, None)) == stored(
        Jsonb(value, dumps=json.dumps)
    )


def test_what_neither_can_write_fails_as_before():
    with pytest.raises(TypeError):
        json_dumps({"when": object()})
