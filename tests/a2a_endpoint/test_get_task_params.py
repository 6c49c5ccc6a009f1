"""GetTask's params: the common ones read without protobuf's parser give what the parser gives,
and everything else still goes through it (a2a_endpoint.methods._get_task_params)."""

import pytest
from a2a import types as a2a

from a2a_endpoint import errors, methods, wire

CASES = [
    {"id": "task-1"},
    {"id": "task-1", "historyLength": 0},
    {"id": "task-1", "historyLength": 3},
    {"id": "task-1", "historyLength": 10**6},
    {"id": "task-1", "historyLength": 2**31 - 1},
    {"id": "task-1", "historyLength": 2**31},
    {"id": "task-1", "historyLength": -1},
    {"id": "task-1", "historyLength": "4"},
    {"id": "task-1", "historyLength": True},
    {"id": "task-1", "historyLength": 2.0},
    {"id": "task-1", "historyLength": None},
    {"id": "task-1", "tenant": "acme"},
    {"id": "task-1", "unknown": {"x": 1}},
    {"id": ""},
    {"id": 7},
    {"id": None},
    {"id": ["task-1"]},
    {},
    [],
    "task-1",
    None,
]


def parsed_by_protobuf(params):
    request = wire.parse(params, a2a.GetTaskRequest)
    return methods._require_id(request), methods._history_length(request)


def outcome(read, params):
    try:
        return ("ok", read(params))
    except errors.RpcError as exc:
        return ("error", exc.code, exc.body(None)["error"]["message"])


@pytest.mark.parametrize("params", CASES, ids=[repr(c) for c in CASES])
def test_the_fast_read_answers_as_protobufs_parser(params):
    assert outcome(methods._get_task_params, params) == outcome(parsed_by_protobuf, params)


def test_the_usual_params_skip_the_parser(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("parsed by protobuf")

    monkeypatch.setattr(wire, "parse", refuse)
    assert methods._get_task_params({"id": "t"}) == ("t", None)
    assert methods._get_task_params({"id": "t", "historyLength": 2}) == ("t", 2)
