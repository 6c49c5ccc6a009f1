"""A tool server's requested schema as a question's form, and answers read into MCP's
ElicitResult (runtime.decisions.question_forms): what is kept of a schema, what is refused,
and every way an answer may be given."""

import pytest

from runtime.decisions.question_forms import (
    FormError,
    form_answer_read,
    form_clean,
    form_fields,
)
from runtime.kernel.errors import InvalidParams

SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "title": "Name", "description": "Your name", "maxLength": 20},
        "email": {"type": "string", "format": "email"},
        "site": {"type": "string", "format": "uri"},
        "born": {"type": "string", "format": "date"},
        "at": {"type": "string", "format": "date-time"},
        "age": {"type": "integer", "minimum": 1, "maximum": 120, "default": 42},
        "score": {"type": "number", "minimum": 0, "maximum": 10},
        "agree": {"type": "boolean", "default": False},
        "friend": {"type": "string", "enum": ["ann", "bob"], "default": "ann"},
        "hero": {"type": "string", "oneOf": [{"const": "h1", "title": "Superman"}]},
        "pet": {"type": "string", "enum": ["p1", "p2"], "enumNames": ["Cats", "Dogs"]},
        "tools": {
            "type": "array",
            "minItems": 1,
            "maxItems": 2,
            "items": {"type": "string", "enum": ["saw", "drill", "axe"]},
        },
        "fish": {"type": "array", "items": {"anyOf": [{"const": "f1", "title": "Tuna"}]}},
    },
    "required": ["name", "nobody"],
    "$schema": "https://json-schema.org/draft/2020-12/schema",
}


def test_the_schema_is_kept_as_mcps_subset():
    form = form_clean(SCHEMA)
    assert form["required"] == ["name"]  # a name that is no field is left out
    assert "$schema" not in form
    props = form["properties"]
    assert props["name"] == {
        "type": "string",
        "title": "Name",
        "description": "Your name",
        "maxLength": 20,
    }
    assert props["friend"] == {
        "type": "string",
        "oneOf": [{"const": "ann", "title": ""}, {"const": "bob", "title": ""}],
        "default": "ann",
    }
    assert props["pet"]["oneOf"] == [
        {"const": "p1", "title": "Cats"},
        {"const": "p2", "title": "Dogs"},
    ]
    assert props["tools"]["items"] == {
        "anyOf": [
            {"const": "saw", "title": ""},
            {"const": "drill", "title": ""},
            {"const": "axe", "title": ""},
        ]
    }
    fields = {f.name: f for f in form_fields(form)}
    assert fields["pet"].kind == "choice" and fields["pet"].choices == (
        ("p1", "Cats"),
        ("p2", "Dogs"),
    )
    assert fields["tools"].kind == "choices" and fields["tools"].max_items == 2
    assert fields["age"].default == 42 and fields["name"].required
    assert fields["email"].title == "email"  # untitled: its name


@pytest.mark.parametrize(
    "schema, why",
    [
        ([], "the schema must be an object schema"),
        ({"type": "array"}, "the schema must be an object schema"),
        ({"properties": {"a": {"type": "object"}}}, "properties.a: type must be"),
        ({"properties": {"a": {"type": "array", "items": {"type": "string"}}}}, "items need"),
        ({"properties": {"a": {"type": "string", "enum": [1, 2]}}}, "enum must list strings"),
        ({"properties": {f"f{i}": {"type": "boolean"} for i in range(51)}}, "more than 50"),
    ],
)
def test_a_schema_outside_the_subset_is_refused(schema, why):
    with pytest.raises(FormError, match=why.replace("(", r"\(")):
        form_clean(schema)


FORM = form_clean(SCHEMA)


def read(value):
    return form_answer_read(FORM, value, interaction_id="q_1")


def test_an_object_of_the_fields_is_accepted_each_checked():
    answer = {
        "name": "Ann",
        "email": "ann@example.test",
        "site": "https://ann.example.test",
        "born": "1990-02-03",
        "at": "2026-05-01T19:30:00Z",
        "age": 30.0,
        "score": 9.5,
        "agree": True,
        "friend": "bob",
        "pet": "p2",
        "tools": ["saw", "saw", "drill"],
    }
    assert read(answer) == {
        "action": "accept",
        "content": {**answer, "age": 30, "tools": ["saw", "drill"]},
    }
    # MCP's own shape says the same.
    assert read({"action": "accept", "content": {"name": "Ann"}}) == {
        "action": "accept",
        "content": {"name": "Ann"},
    }


@pytest.mark.parametrize(
    "content, field, why",
    [
        ({}, "value.name", "is required"),
        ({"name": "x" * 21}, "value.name", "at most 20 characters"),
        ({"name": "a", "email": "nope"}, "value.email", "e-mail"),
        ({"name": "a", "site": "ann.example.test"}, "value.site", "URI"),
        ({"name": "a", "born": "3 May"}, "value.born", "date"),
        ({"name": "a", "age": 0}, "value.age", "at least 1"),
        ({"name": "a", "age": 1.5}, "value.age", "whole number"),
        ({"name": "a", "score": "9"}, "value.score", "number"),
        ({"name": "a", "agree": "yes"}, "value.agree", "true or false"),
        ({"name": "a", "friend": "cid"}, "value.friend", "one of"),
        ({"name": "a", "tools": ["saw", "drill", "axe"]}, "value.tools", "at most 2"),
        ({"name": "a", "tools": ["hammer"]}, "value.tools", "not one of"),
        ({"name": "a", "extra": 1}, "value.extra", "not a field of the form"),
    ],
)
def test_a_wrong_field_is_refused_by_name(content, field, why):
    with pytest.raises(InvalidParams) as refused:
        read(content)
    assert refused.value.field == field and why in refused.value.description


def test_decline_cancel_and_the_short_answers():
    assert read({"action": "decline"}) == {"action": "decline"}
    assert read({"action": "cancel", "content": {"x": 1}}) == {"action": "cancel"}
    assert read(False) == {"action": "decline"}
    with pytest.raises(InvalidParams, match="action"):
        read({"action": "maybe"})
    with pytest.raises(InvalidParams) as refused:
        read("Ann")  # a bare value only answers a form of one field
    assert refused.value.field == "value"
    with pytest.raises(InvalidParams, match="is required"):
        read(True)  # accept with nothing: this form requires a name
    assert form_answer_read(form_clean({"properties": {}}), True) == {
        "action": "accept",
        "content": {},
    }


@pytest.mark.parametrize(
    "spec, text, value",
    [
        ({"type": "boolean"}, "No", False),
        ({"type": "integer"}, " 12 ", 12),
        ({"type": "number"}, "2.5", 2.5),
        ({"type": "string", "oneOf": [{"const": "h1", "title": "Superman"}]}, "superman", "h1"),
        ({"type": "string"}, "  hello ", "hello"),
    ],
)
def test_a_form_of_one_field_takes_a_plain_text_reply(spec, text, value):
    form = form_clean({"properties": {"only": spec}})
    assert form_answer_read(form, text) == {"action": "accept", "content": {"only": value}}


def test_nul_never_reaches_the_database():
    """PostgreSQL's JSON keeps no NUL: a server's text loses it, a choice or an answer with
    one is refused."""
    form = form_clean({"properties": {"a": {"type": "string", "title": "A\x00b"}}})
    assert form["properties"]["a"]["title"] == "Ab"
    with pytest.raises(FormError):
        form_clean({"properties": {"a": {"type": "string", "enum": ["x\x00"]}}})
    with pytest.raises(InvalidParams, match="must be text"):
        form_answer_read(form, {"a": "x\x00y"})
