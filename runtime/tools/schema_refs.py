"""Tool schemas never reach the network: only references inside a schema are followed.

A tool's JSON Schema comes from an AGENT.md, Django admin or a tenant's tool server. Given no
registry, jsonschema retrieves a ``$ref`` it does not hold with urllib: no outbound guard, no
timeout, redirects followed, ``file://`` read, and the worker holding the task's row lock
meanwhile. So a reference that points outside its schema is refused where
the schema is taken in (``remote_ref``: AGENT.md, admin, a tool server's discovery), and every
validator is built on ``LOCAL_ONLY``, a registry that holds the JSON Schema meta-schemas
(bundled with jsonschema) and retrieves nothing: a schema cached before these checks existed
fails its call with a clear error (``Unresolvable``), and fetches nothing.
"""

import jsonschema
import referencing
import referencing.exceptions
from jsonschema_specifications import REGISTRY as SPECIFICATIONS

# The keywords whose value is a reference (2020-12, 2019-09 and drafts 4 to 7).
REF_KEYWORDS = ("$ref", "$dynamicRef", "$recursiveRef")
# The keywords that give a subschema an identifier a reference may name.
ID_KEYWORDS = ("$id", "id", "$anchor", "$dynamicAnchor")

Unresolvable = referencing.exceptions.Unresolvable


# referencing types its attrs classes with an early spelling of dataclass_transform that mypy
# does not read, so mypy sees constructors without their fields.
def _retrieve_nothing(uri: str):
    raise referencing.exceptions.NoSuchResource(ref=uri)  # type: ignore[call-arg]


LOCAL_ONLY = SPECIFICATIONS.combine(
    referencing.Registry(retrieve=_retrieve_nothing)  # type: ignore[call-arg]
)


def _walk(schema):
    """(path, mapping) for every mapping inside ``schema``, without recursion (a tool server's
    schema may nest as deep as its JSON does)."""
    stack: list[tuple[list, object]] = [([], schema)]
    while stack:
        path, node = stack.pop()
        if isinstance(node, dict):
            yield path, node
            stack.extend(([*path, key], value) for key, value in reversed(node.items()))
        elif isinstance(node, list):
            stack.extend(
                ([*path, index], value) for index, value in reversed(list(enumerate(node)))
            )


def remote_ref(schema) -> tuple[list, str] | None:
    """The first reference in ``schema`` that points outside it, as (its path, the reference):
    anything but ``#...`` or an identifier the schema itself declares (an embedded ``$id``)."""
    declared = {
        node[key].split("#", 1)[0]
        for _path, node in _walk(schema)
        for key in ID_KEYWORDS
        if isinstance(node.get(key), str) and node[key].split("#", 1)[0]
    }
    for path, node in _walk(schema):
        for key in REF_KEYWORDS:
            ref = node.get(key)
            if not isinstance(ref, str) or ref.startswith("#"):
                continue
            if ref.split("#", 1)[0] not in declared:
                return [*path, key], ref
    return None


def remote_ref_message(ref: str) -> str:
    return (
        f"{ref!r} points outside the schema: only references inside it (#/...) are followed, "
        "nothing is fetched"
    )


def schema_problem(schema) -> tuple[list, str] | None:
    """What keeps ``schema`` from being a tool's schema, as (path inside it, message): not a
    JSON Schema, or a reference outside it. None for a schema that may be used."""
    checker = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
    try:
        checker.check_schema(schema)
    except jsonschema.SchemaError as exc:
        return list(exc.absolute_path), f"is not a valid JSON Schema: {exc.message}"
    found = remote_ref(schema)
    if found is not None:
        return found[0], remote_ref_message(found[1])
    return None


def local_validator(schema: dict):
    """A validator of ``schema`` (checked against its meta-schema first: SchemaError) whose
    references resolve inside the schema or not at all (Unresolvable, when it is used)."""
    cls = jsonschema.validators.validator_for(schema)
    cls.check_schema(schema)
    return cls(schema, registry=LOCAL_ONLY)
