"""Property: whatever params a 0.3 caller sends to any 0.3 method, the endpoint answers with
a JSON-RPC body, never a 5xx and never -32603 (as tests/a2a_endpoint/test_fuzz.py asks of
1.0). The translation layer (a2a_endpoint.dialect03) reads the caller's shapes before the
1.0 parser does, so it is fuzzed on its own: valid 0.3 shapes, each with one member made
hostile, and arbitrary JSON."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from a2a_endpoint.dialect03 import HANDLERS
from tests.a2a_client import post
from tests.a2a_endpoint.test_fuzz import (
    CONTEXT_ID,
    FUZZ,
    JSON,
    NUMBER,
    REQUEST_ID,
    SAFE_ID,
    SAFE_JSON,
    SAFE_TEXT,
    TASK_ID,
    TEXT,
    URL,
    assert_json_rpc,
    body_text,
    ids,  # noqa: F401 (the fixture: a task to aim at, push allowed)
    maybe,
    one_field_hostile,
)

pytestmark = pytest.mark.django_db(transaction=True)

SUPPORT = "/a2a/acme/support"

PART = st.one_of(
    st.fixed_dictionaries(
        {"kind": st.just("text"), "text": maybe(SAFE_TEXT)}, optional={"metadata": SAFE_JSON}
    ),
    st.fixed_dictionaries(
        {"kind": st.just("data"), "data": maybe(st.dictionaries(SAFE_TEXT, SAFE_JSON, max_size=3))},
        optional={"metadata": st.one_of(SAFE_JSON, st.just({"data_part_compat": True}))},
    ),
    st.fixed_dictionaries(
        {
            "kind": st.just("file"),
            "file": st.one_of(
                st.fixed_dictionaries(
                    {"bytes": st.sampled_from(["aGk=", "not base64!", ""])},
                    optional={"mimeType": maybe(SAFE_TEXT), "name": maybe(SAFE_TEXT)},
                ),
                st.fixed_dictionaries(
                    {"uri": maybe(URL)},
                    optional={"mimeType": maybe(SAFE_TEXT), "name": maybe(SAFE_TEXT)},
                ),
                JSON,
            ),
        }
    ),
    st.fixed_dictionaries({"kind": TEXT}),
)
MESSAGE = st.fixed_dictionaries(
    {
        "kind": st.sampled_from(["message", "task"]),
        "messageId": maybe(SAFE_ID),
        "role": st.sampled_from(["user", "agent", "ROLE_USER"]),
        "parts": maybe(st.lists(PART, max_size=3)),
    },
    optional={
        "taskId": maybe(TASK_ID),
        "contextId": maybe(CONTEXT_ID),
        "metadata": maybe(st.fixed_dictionaries({}, optional={"skillId": maybe(SAFE_TEXT)})),
    },
)
PUSH = st.fixed_dictionaries(
    {"url": maybe(URL)},
    optional={
        "id": maybe(TEXT),
        "token": maybe(TEXT),
        "authentication": maybe(
            st.fixed_dictionaries(
                {"schemes": maybe(st.lists(maybe(TEXT), max_size=2))},
                optional={"credentials": maybe(TEXT)},
            )
        ),
    },
)
VALID = {
    "message/send": st.fixed_dictionaries(
        {"message": MESSAGE},
        optional={
            "configuration": maybe(
                st.fixed_dictionaries(
                    {},
                    optional={
                        "blocking": maybe(st.just(False)),
                        "historyLength": maybe(NUMBER),
                        "acceptedOutputModes": maybe(st.lists(TEXT, max_size=2)),
                        "pushNotificationConfig": maybe(PUSH),
                    },
                )
            ),
            "metadata": maybe(SAFE_JSON),
        },
    ),
    "tasks/get": st.fixed_dictionaries(
        {"id": maybe(TASK_ID)}, optional={"historyLength": maybe(NUMBER)}
    ),
    "tasks/cancel": st.fixed_dictionaries({"id": maybe(TASK_ID)}),
    "tasks/pushNotificationConfig/set": st.fixed_dictionaries(
        {"taskId": maybe(TASK_ID), "pushNotificationConfig": maybe(PUSH)}
    ),
    "tasks/pushNotificationConfig/get": st.fixed_dictionaries(
        {"id": maybe(TASK_ID)}, optional={"pushNotificationConfigId": maybe(TEXT)}
    ),
    "tasks/pushNotificationConfig/list": st.fixed_dictionaries({"id": maybe(TASK_ID)}),
    "tasks/pushNotificationConfig/delete": st.fixed_dictionaries(
        {"id": maybe(TASK_ID), "pushNotificationConfigId": maybe(TEXT)}
    ),
}
PARAMS = {
    method: st.one_of(valid, one_field_hostile(valid), one_field_hostile(valid), JSON)
    for method, valid in VALID.items()
}


def with_ids(value, found: dict):
    if isinstance(value, str):
        return found.get(value, value)
    if isinstance(value, list):
        return [with_ids(v, found) for v in value]
    if isinstance(value, dict):
        return {with_ids(k, found): with_ids(v, found) for k, v in value.items()}
    return value


@pytest.mark.parametrize("method", sorted(PARAMS))
@FUZZ
@given(data=st.data())
def test_no_params_make_a_0_3_method_fail(agents, client, ids, method, data):  # noqa: F811
    request_id = data.draw(REQUEST_ID)
    params = with_ids(data.draw(PARAMS[method]), ids)
    envelope = {"jsonrpc": "2.0", "id": request_id, "method": method, "params": params}
    response = post(
        client, SUPPORT, body_text(envelope), token=agents.a.token, headers={"A2A-Version": None}
    )
    assert_json_rpc(response, request_id if isinstance(request_id, int | str) else None)


def test_the_0_3_methods_are_the_fuzzed_methods():
    assert set(PARAMS) == set(HANDLERS)
