"""Property: whatever params a caller sends to any method, the A2A endpoint answers with a
JSON-RPC body, never a 5xx and never -32603 Internal error.

The strategies mix valid shapes (so that requests get past parsing, to the services and the
database) with hostile values: NUL characters, lone surrogates, strings longer than their
columns, deep nesting, NaN and Infinity, wrong types, integers that overflow. Examples are
derandomized, so CI sees the same bodies on every run; bench/fuzz_a2a.py sends many more
against a live server.
"""

import base64
import json
import re

import pytest
from hypothesis import HealthCheck, event, given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st

from a2a_endpoint.methods import HANDLERS
from runtime.kernel import extensions as ext
from runtime.kernel.push.push_models import PushSettings
from tests.a2a_client import post, rpc, task_of, user_message

# The view closes its database connection after each request (asyncdb): tests commit.
pytestmark = pytest.mark.django_db(transaction=True)

SUPPORT = "/a2a/acme/support"
EXAMPLES_PER_METHOD = 40
FUZZ = hypothesis_settings(
    max_examples=EXAMPLES_PER_METHOD,
    derandomize=True,
    database=None,
    deadline=None,
    # One world per method, shared by its examples: the requests are what varies.
    suppress_health_check=[
        HealthCheck.function_scoped_fixture,
        HealthCheck.too_slow,
        HealthCheck.data_too_large,
    ],
)

# --- values ----------------------------------------------------------------------------------

HOSTILE_TEXT = st.sampled_from(
    [
        "",
        "\x00",
        "a\x00b",
        "\ud800",
        "x\udfffy",
        "\ud83d",
        "\n",
        "c" * 128 + "\n",
        "m" * 201,
        "t" * 1001,
        "x" * 2001,
        "y" * 70_000,
        "²",
        "٣",
        "\U0001f600",
        "TASK_STATE_WORKING",
        "ROLE_USER",
        "NaN",
        "%00",
        "\\u0000",
        "'; drop table runtime_task; --",
    ]
)
# Control characters, surrogates, digits of other scripts, symbols.
ODD_CHARACTERS = st.characters(categories=["Cc", "Cs", "Nd", "No", "So", "Zs", "Lo"])
TEXT = st.one_of(st.text(max_size=30), st.text(ODD_CHARACTERS, max_size=12), HOSTILE_TEXT)
NUMBER = st.one_of(
    st.integers(min_value=-(2**70), max_value=2**70),
    st.sampled_from([0, -1, 2**31, 2**63, -(2**63) - 1, 10**308, 10**400, -(10**400)]),
    st.floats(allow_nan=True, allow_infinity=True),
)


class Deep:
    """Arrays nested ``levels`` deep, written into the body after json.dumps (which would
    itself recurse on them)."""

    def __init__(self, levels: int):
        self.levels = levels


DEEP = st.integers(min_value=60, max_value=5_000).map(Deep)
SCALAR = st.one_of(st.none(), st.booleans(), NUMBER, TEXT)
JSON = st.recursive(
    st.one_of(SCALAR, DEEP),
    lambda children: st.one_of(
        st.lists(children, max_size=3), st.dictionaries(TEXT, children, max_size=3)
    ),
    max_leaves=8,
)


def maybe(strategy):
    """The field's strategy, or any JSON at all (a wrong type), now and then."""
    return st.one_of(strategy, strategy, strategy, JSON)


# The placeholders become the fixture task's ids, so that requests reach existing rows.
TASK_ID = st.one_of(st.just("@task"), TEXT)
CONTEXT_ID = st.one_of(st.just("@context"), st.just("ctx-1"), TEXT)
URL = st.one_of(
    st.just("https://hooks.example.com/a2a"),
    st.builds(lambda host, path: f"https://{host}/{path}", TEXT, TEXT),
    st.just("https://" + "h" * 300 + ".example.com/"),
    st.just("https://hooks.example.com/" + "q" * 2100),
    st.just("http://127.0.0.1:99999/x"),
    st.just("https://user:pw@hooks.example.com/"),
    TEXT,
)
TIMESTAMP = st.one_of(
    st.sampled_from(
        [
            "2020-01-01T00:00:00Z",
            "0001-01-01T00:00:00Z",
            "9999-12-31T23:59:59.999999999Z",
            "0001-01-01T00:00:00+05:00",
            "10000-01-01T00:00:00Z",
        ]
    ),
    TEXT,
)


def _page_token(raw: str) -> str:
    return base64.urlsafe_b64encode(raw.encode("utf-8", "surrogatepass")).decode().rstrip("=")


PAGE_TOKEN = st.one_of(
    TEXT,
    st.builds(_page_token, st.one_of(TEXT, JSON.map(lambda v: json.dumps(v, default=str)))),
    st.sampled_from(["1", "0", "9" * 30, "-1", "1e3"]),
)
PUSH_CONFIG = st.fixed_dictionaries(
    {"url": maybe(URL)},
    optional={
        "id": maybe(TEXT),
        "token": maybe(TEXT),
        "authentication": maybe(
            st.fixed_dictionaries({"scheme": maybe(TEXT)}, optional={"credentials": maybe(TEXT)})
        ),
    },
)

# --- params of each method -------------------------------------------------------------------

# Valid values, some at their columns' limits, so that requests reach the database.
SAFE_TEXT = st.one_of(
    st.text(st.characters(categories=["L", "N", "P", "Zs"]), min_size=1, max_size=20),
    st.sampled_from(["hello", "main", "x" * 200, "\U0001f600 ok"]),
)
SAFE_ID = st.one_of(
    st.from_regex(r"[A-Za-z0-9][A-Za-z0-9._:-]{0,20}", fullmatch=True),
    st.sampled_from(["c" * 128, "m" * 200]),
)
SAFE_JSON = st.recursive(
    st.one_of(
        st.none(),
        st.booleans(),
        st.integers(min_value=-(2**60), max_value=2**60),
        st.floats(allow_nan=False, allow_infinity=False),
        SAFE_TEXT,
    ),
    lambda children: st.one_of(
        st.lists(children, max_size=3), st.dictionaries(SAFE_TEXT, children, max_size=3)
    ),
    max_leaves=6,
)
SAFE_PUSH_CONFIG = st.fixed_dictionaries(
    {"url": st.sampled_from(["https://hooks.example.com/a2a", "https://b.example.org/h?x=1"])},
    optional={
        "id": st.one_of(SAFE_ID, st.just("hook")),
        "token": st.one_of(SAFE_TEXT, st.just("t" * 1000)),
        "authentication": st.fixed_dictionaries(
            {"scheme": st.sampled_from(["Bearer", "s" * 100])},
            optional={"credentials": SAFE_TEXT},
        ),
    },
)
SAFE_PART = st.one_of(
    st.fixed_dictionaries({"text": SAFE_TEXT}, optional={"metadata": SAFE_JSON}),
    st.fixed_dictionaries({"data": SAFE_JSON}),
    st.fixed_dictionaries(
        {"url": st.just("https://files.example.com/a.txt")}, optional={"mediaType": SAFE_TEXT}
    ),
)
SAFE_STATUS = st.sampled_from(
    ["TASK_STATE_SUBMITTED", "TASK_STATE_WORKING", "TASK_STATE_UNSPECIFIED"]
)
VALID = {
    "SendMessage": st.fixed_dictionaries(
        {
            "message": st.fixed_dictionaries(
                {
                    "messageId": SAFE_ID,
                    "role": st.just("ROLE_USER"),
                    "parts": st.lists(SAFE_PART, min_size=1, max_size=3),
                },
                optional={
                    "contextId": st.one_of(st.just("@context"), SAFE_ID),
                    "taskId": st.just("@task"),
                    "metadata": st.one_of(
                        SAFE_JSON, st.fixed_dictionaries({"delivery": st.just("reject")})
                    ),
                },
            ),
            "configuration": st.fixed_dictionaries(
                {"returnImmediately": st.booleans()},
                optional={
                    "historyLength": st.integers(min_value=0, max_value=20),
                    "taskPushNotificationConfig": SAFE_PUSH_CONFIG,
                },
            ),
        },
    ),
    "GetTask": st.fixed_dictionaries(
        {"id": st.one_of(st.just("@task"), SAFE_ID)},
        optional={"historyLength": st.integers(min_value=0, max_value=20)},
    ),
    "CancelTask": st.fixed_dictionaries({"id": st.one_of(st.just("@task"), SAFE_ID)}),
    "ListTasks": st.fixed_dictionaries(
        {},
        optional={
            "contextId": st.just("@context"),
            "status": SAFE_STATUS,
            "pageSize": st.integers(min_value=1, max_value=100),
            "historyLength": st.integers(min_value=0, max_value=20),
            "statusTimestampAfter": st.just("2020-01-01T00:00:00Z"),
            "includeArtifacts": st.booleans(),
        },
    ),
    "CreateTaskPushNotificationConfig": st.builds(
        lambda config: {**config, "taskId": "@task"}, SAFE_PUSH_CONFIG
    ),
    "GetTaskPushNotificationConfig": st.fixed_dictionaries(
        {"taskId": st.just("@task"), "id": st.one_of(st.just("hook"), SAFE_ID)}
    ),
    "ListTaskPushNotificationConfigs": st.fixed_dictionaries(
        {"taskId": st.just("@task")},
        optional={
            "pageSize": st.integers(min_value=1, max_value=100),
            "pageToken": st.sampled_from(["", "1", "2"]),
        },
    ),
    "DeleteTaskPushNotificationConfig": st.fixed_dictionaries(
        {"taskId": st.just("@task"), "id": st.one_of(st.just("hook"), SAFE_ID)}
    ),
}

# Hostile shapes: every field may be anything.
PART = st.one_of(
    st.fixed_dictionaries({"text": maybe(TEXT)}, optional={"metadata": JSON}),
    st.fixed_dictionaries({"data": JSON}),
    st.fixed_dictionaries(
        {"url": maybe(URL)}, optional={"mediaType": maybe(TEXT), "filename": maybe(TEXT)}
    ),
    st.fixed_dictionaries({"raw": st.one_of(st.just("aGVsbG8="), TEXT)}),
    JSON,
)
METADATA = st.one_of(
    JSON,
    st.fixed_dictionaries(
        {},
        optional={
            "skillId": maybe(TEXT),
            "delivery": maybe(st.sampled_from(["reject", "queue"])),
            ext.INTERACTIONS: maybe(
                st.fixed_dictionaries(
                    {"interactionId": maybe(TEXT)},
                    optional={"approved": maybe(st.booleans()), "value": JSON},
                )
            ),
        },
    ),
)
MESSAGE = st.fixed_dictionaries(
    {
        "messageId": maybe(TEXT),
        "role": maybe(st.sampled_from(["ROLE_USER", "ROLE_USER", "ROLE_AGENT", "ROLE_NOPE"])),
        "parts": maybe(st.lists(PART, min_size=1, max_size=3)),
    },
    optional={
        "contextId": maybe(CONTEXT_ID),
        "taskId": maybe(TASK_ID),
        "metadata": METADATA,
        "extensions": maybe(st.lists(TEXT, max_size=2)),
        "referenceTaskIds": maybe(st.lists(TASK_ID, max_size=2)),
    },
)
HOSTILE = {
    "SendMessage": st.fixed_dictionaries(
        {"message": maybe(MESSAGE)},
        optional={
            "configuration": maybe(
                st.fixed_dictionaries(
                    {},
                    optional={
                        "returnImmediately": maybe(st.booleans()),
                        "historyLength": maybe(NUMBER),
                        "acceptedOutputModes": maybe(st.lists(TEXT, max_size=2)),
                        "taskPushNotificationConfig": maybe(PUSH_CONFIG),
                    },
                )
            ),
            "metadata": JSON,
        },
    ),
    "GetTask": st.fixed_dictionaries(
        {"id": maybe(TASK_ID)}, optional={"historyLength": maybe(NUMBER)}
    ),
    "CancelTask": st.fixed_dictionaries({"id": maybe(TASK_ID)}, optional={"metadata": JSON}),
    "ListTasks": st.fixed_dictionaries(
        {},
        optional={
            "contextId": maybe(CONTEXT_ID),
            "status": maybe(
                st.one_of(st.sampled_from(["TASK_STATE_SUBMITTED", "TASK_STATE_NOPE"]), NUMBER)
            ),
            "pageSize": maybe(NUMBER),
            "pageToken": maybe(PAGE_TOKEN),
            "historyLength": maybe(NUMBER),
            "statusTimestampAfter": maybe(TIMESTAMP),
            "includeArtifacts": maybe(st.booleans()),
        },
    ),
    "CreateTaskPushNotificationConfig": st.builds(
        lambda config, task_id: {**config, "taskId": task_id}, PUSH_CONFIG, maybe(TASK_ID)
    ),
    "GetTaskPushNotificationConfig": st.fixed_dictionaries(
        {"taskId": maybe(TASK_ID), "id": maybe(TEXT)}
    ),
    "ListTaskPushNotificationConfigs": st.fixed_dictionaries(
        {"taskId": maybe(TASK_ID)},
        optional={"pageSize": maybe(NUMBER), "pageToken": maybe(PAGE_TOKEN)},
    ),
    "DeleteTaskPushNotificationConfig": st.fixed_dictionaries(
        {"taskId": maybe(TASK_ID), "id": maybe(TEXT)}
    ),
}
HOSTILE_VALUE = st.one_of(HOSTILE_TEXT, st.text(ODD_CHARACTERS, max_size=8), NUMBER, DEEP, JSON)


def _paths(value, path=()):
    """Every place in ``value`` a hostile value can go (its containers' members)."""
    items = value.items() if isinstance(value, dict) else enumerate(value)
    for key, item in items:
        yield (*path, key)
        if isinstance(item, dict | list):
            yield from _paths(item, (*path, key))


def _replaced(value, path, new):
    if not path:
        return new
    head, *rest = path
    if isinstance(value, dict):
        return {**value, head: _replaced(value[head], rest, new)}
    return [_replaced(v, rest, new) if i == head else v for i, v in enumerate(value)]


@st.composite
def one_field_hostile(draw, valid):
    """A valid request with one member, at any depth, made hostile."""
    params = draw(valid)
    paths = list(_paths(params))
    if not paths:
        return params
    return _replaced(params, draw(st.sampled_from(paths)), draw(HOSTILE_VALUE))


PARAMS = {
    method: st.one_of(
        VALID[method],
        one_field_hostile(VALID[method]),
        one_field_hostile(VALID[method]),
        HOSTILE[method],
        JSON,
    )
    for method in VALID
}
UNKNOWN_METHOD = st.one_of(
    TEXT, st.sampled_from(["sendStreamingMessage", "GetExtendedAgentCard", "sendMessage"])
).filter(lambda name: name not in HANDLERS)
REQUEST_ID = st.one_of(st.just(1), st.just(1), st.integers(), TEXT, st.none(), NUMBER)

# --- the body --------------------------------------------------------------------------------

_DEEP = re.compile(r'"@deep(\d+)"')


def _with_ids(value, ids: dict):
    """``value`` with the placeholders (@task, @context) replaced, at any depth."""
    if isinstance(value, str):
        return ids.get(value, value)
    if isinstance(value, list):
        return [_with_ids(v, ids) for v in value]
    if isinstance(value, dict):
        return {_with_ids(k, ids): _with_ids(v, ids) for k, v in value.items()}
    return value


def body_text(envelope: dict) -> str:
    """The envelope as JSON text: NaN and Infinity as Python writes them, Deep as brackets."""
    text = json.dumps(envelope, default=lambda deep: f"@deep{deep.levels}")
    return _DEEP.sub(lambda m: "[" * int(m.group(1)) + "]" * int(m.group(1)), text)


def _refuse_constant(literal: str):
    raise AssertionError(f"the response carries {literal}, which is not JSON")


def assert_json_rpc(response, request_id) -> None:
    """A JSON-RPC 2.0 response: never a 5xx, never -32603."""
    assert response.status_code < 500, (response.status_code, response.content[:500])
    body = json.loads(response.content, parse_constant=_refuse_constant)
    assert body["jsonrpc"] == "2.0", body
    assert ("result" in body) != ("error" in body), body
    assert body["id"] in (request_id, None), body
    # What the examples reached, for --hypothesis-show-statistics.
    event(
        f"HTTP {response.status_code} "
        + (f"error {body['error'].get('code')}" if "error" in body else "result")
    )
    if "error" in body:
        error = body["error"]
        assert isinstance(error["code"], int) and isinstance(error["message"], str), body
        assert error["code"] != -32603, body


@pytest.fixture
def ids(agents, client, settings) -> dict:
    """A task to aim at, push allowed to any public host, and a short blocking wait."""
    settings.A2A_WAIT_MS = 20
    PushSettings.objects.update_or_create(tenant=agents.a.tenant, defaults={"allowed_hosts": "*"})
    params = {"message": user_message(), "configuration": {"returnImmediately": True}}
    task = task_of(rpc(client, SUPPORT, "SendMessage", params, token=agents.a.token))
    config = {"taskId": task["id"], "id": "hook", "url": "https://hooks.example.com/a2a"}
    rpc(client, SUPPORT, "CreateTaskPushNotificationConfig", config, token=agents.a.token)
    return {"@task": task["id"], "@context": task["contextId"]}


def _send(client, agents, ids, method, params, request_id):
    envelope = {"jsonrpc": "2.0", "id": request_id, "method": method, "params": params}
    response = post(client, SUPPORT, body_text(_with_ids(envelope, ids)), token=agents.a.token)
    assert_json_rpc(response, request_id if isinstance(request_id, int | str) else None)
    return response


@pytest.mark.parametrize("method", sorted(PARAMS))
@FUZZ
@given(data=st.data())
def test_no_params_make_a_method_fail(agents, client, ids, method, data):
    params = data.draw(PARAMS[method])
    response = _send(client, agents, ids, method, params, data.draw(REQUEST_ID))
    assert response.status_code < 500  # and every rule of assert_json_rpc


@FUZZ
@given(method=UNKNOWN_METHOD, params=JSON, request_id=REQUEST_ID)
def test_no_params_make_an_unknown_method_fail(agents, client, ids, method, params, request_id):
    response = _send(client, agents, ids, method, params, request_id)
    assert response.status_code < 500  # and every rule of assert_json_rpc


def test_the_served_methods_are_the_fuzzed_methods():
    # A method added to the endpoint without a strategy here would go unfuzzed.
    assert set(PARAMS) == set(HANDLERS)
