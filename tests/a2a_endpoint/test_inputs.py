"""Bad input stops at the edge: each kind of body that an outside probe once turned into a
-32603 is refused with the error that names it, before anything is written.

Most of these pass silently on SQLite, which stores NUL characters and over-long strings;
on PostgreSQL (CI) they were -32603 Internal errors.
"""

import base64
import json

import pytest

from a2a_endpoint import inputs, methods
from runtime.decisions.decision_models import Interaction
from runtime.kernel.push.push_models import PushConfig, PushSettings
from runtime.kernel.task_models import Task
from tests.a2a_client import (
    answer_message,
    assert_error,
    field_violations,
    post,
    result_of,
    rpc,
    task_of,
    user_message,
)

# The view closes its database connection after each request (asyncdb): tests commit.
pytestmark = pytest.mark.django_db(transaction=True)

SUPPORT = "/a2a/acme/support"
REVIEWER = "/a2a/acme/code-reviewer"
HOOK = "https://hooks.example.com/a2a"


def body(method: str, params_json: str, request_id: str = "1") -> str:
    """A JSON-RPC body with params written as JSON text (NaN, escapes, nesting as sent)."""
    return (
        f'{{"jsonrpc": "2.0", "id": {request_id}, "method": "{method}", "params": {params_json}}}'
    )


def send_params(**message_fields) -> dict:
    return {"message": user_message(**message_fields), "configuration": {"returnImmediately": True}}


def invalid_params_field(response) -> str:
    """The one field the -32602 names."""
    error = assert_error(response, -32602, "INVALID_PARAMS")
    [violation] = field_violations(error)
    assert violation["description"]
    return violation["field"]


@pytest.fixture
def task(agents, client) -> dict:
    """A task of acme's partner on the support agent (its turn is not run)."""
    return task_of(rpc(client, SUPPORT, "SendMessage", send_params(), token=agents.a.token))


@pytest.fixture
def any_host(agents):
    PushSettings.objects.update_or_create(tenant=agents.a.tenant, defaults={"allowed_hosts": "*"})


# --- nesting ----------------------------------------------------------------------------------


def test_json_nested_1000_levels_is_an_invalid_request(agents, client):
    deep = "[" * 1000 + "]" * 1000
    response = post(
        client, SUPPORT, body("GetTask", f'{{"id": "t", "x": {deep}}}'), token=agents.a.token
    )
    error = assert_error(response, -32600, "INVALID_REQUEST")
    assert f"more than {inputs.MAX_DEPTH} levels" in error["message"]


def test_json_nested_100000_levels_is_an_invalid_request_not_a_recursion(agents, client):
    deep = "{" + '"a":{' * 100_000 + "}" * 100_001
    response = post(client, SUPPORT, body("GetTask", deep), token=agents.a.token)
    assert_error(response, -32600, "INVALID_REQUEST")


def test_json_nested_to_the_limit_is_read(agents, client):
    # The envelope and params are two levels; the rest is the caller's.
    nested = "[" * (inputs.MAX_DEPTH - 2) + "]" * (inputs.MAX_DEPTH - 2)
    response = post(
        client,
        SUPPORT,
        body("GetTask", f'{{"id": "t1.nope", "x": {nested}}}'),
        token=agents.a.token,
    )
    assert_error(response, -32001, "TASK_NOT_FOUND")


def test_brackets_inside_strings_are_not_nesting(agents, client):
    text = json.dumps("[{" * 500 + '\\"[[[')
    response = post(client, SUPPORT, body("GetTask", f'{{"id": {text}}}'), token=agents.a.token)
    assert_error(response, -32001, "TASK_NOT_FOUND")


def test_a_recursion_error_anywhere_is_an_invalid_request_not_an_internal_error(
    agents, client, monkeypatch
):
    async def recursing(caller, params):
        raise RecursionError("maximum recursion depth exceeded")

    monkeypatch.setitem(methods.HANDLERS, "GetTask", recursing)
    response = rpc(client, SUPPORT, "GetTask", {"id": "t1.x"}, token=agents.a.token)
    assert_error(response, -32600, "INVALID_REQUEST")


# --- NUL characters and lone surrogates ---------------------------------------------------------


def test_nul_in_message_text_is_invalid_params_naming_the_field(agents, client):
    params = send_params(parts=[{"text": "hello"}, {"text": "a\x00b"}])
    response = rpc(client, SUPPORT, "SendMessage", params, token=agents.a.token)
    assert invalid_params_field(response) == "message.parts[1].text"
    assert not Task.objects.exists()


def test_nul_in_a_data_part_value_is_invalid_params_naming_the_field(agents, client):
    params = send_params(parts=[{"data": {"rows": [{"note": "\x00"}]}}])
    response = rpc(client, SUPPORT, "SendMessage", params, token=agents.a.token)
    assert invalid_params_field(response) == "message.parts[0].data.rows[0].note"
    assert not Task.objects.exists()


def test_nul_in_a_metadata_key_is_invalid_params_naming_the_key(agents, client):
    params = send_params(metadata={"bad\x00key": 1})
    response = rpc(client, SUPPORT, "SendMessage", params, token=agents.a.token)
    assert invalid_params_field(response) == 'message.metadata["bad\\u0000key"]'


@pytest.mark.parametrize("method", ["GetTask", "CancelTask"])
def test_nul_in_a_task_id_is_invalid_params_naming_the_field(agents, client, method):
    response = rpc(client, SUPPORT, method, {"id": "t1.\x00"}, token=agents.a.token)
    assert invalid_params_field(response) == "id"


def test_nul_in_a_message_id_is_invalid_params(agents, client):
    params = send_params(messageId="m-\x00")
    response = rpc(client, SUPPORT, "SendMessage", params, token=agents.a.token)
    assert invalid_params_field(response) == "message.messageId"


def test_nul_in_the_request_id_is_an_invalid_request(agents, client):
    response = rpc(
        client, SUPPORT, "GetTask", {"id": "t1.x"}, token=agents.a.token, request_id="r\x00"
    )
    assert_error(response, -32600, "INVALID_REQUEST")
    assert response.json()["id"] is None


def test_a_lone_surrogate_in_message_text_is_invalid_params_naming_the_field(agents, client):
    params = json.dumps(send_params(parts=[{"text": "\ud800"}]))
    assert "\\ud800" in params
    response = post(client, SUPPORT, body("SendMessage", params), token=agents.a.token)
    assert invalid_params_field(response) == "message.parts[0].text"
    assert not Task.objects.exists()


def test_a_lone_surrogate_in_a_context_id_is_invalid_params(agents, client):
    params = json.dumps(send_params(contextId="c-\udfff"))
    response = post(client, SUPPORT, body("SendMessage", params), token=agents.a.token)
    assert invalid_params_field(response) == "message.contextId"


def test_a_lone_surrogate_in_a_list_tasks_filter_is_invalid_params(agents, client):
    response = post(
        client, SUPPORT, body("ListTasks", '{"contextId": "\\ud83d"}'), token=agents.a.token
    )
    assert invalid_params_field(response) == "contextId"


def test_a_surrogate_pair_is_a_character_not_a_lone_surrogate(agents, client):
    params = json.dumps(send_params(parts=[{"text": "\U0001f600"}]))
    assert "\\ud83d\\ude00" in params
    response = post(client, SUPPORT, body("SendMessage", params), token=agents.a.token)
    assert task_of(response)["history"][0]["parts"][0]["text"] == "\U0001f600"


# --- NaN, Infinity and numbers too large -------------------------------------------------------


@pytest.mark.parametrize("literal", ["NaN", "Infinity", "-Infinity"])
def test_nan_and_infinity_in_metadata_are_invalid_params_naming_the_field(agents, client, literal):
    params = json.dumps(send_params(metadata={"score": "SCORE"})).replace('"SCORE"', literal)
    response = post(client, SUPPORT, body("SendMessage", params), token=agents.a.token)
    assert invalid_params_field(response) == "message.metadata.score"
    assert literal in response.json()["error"]["message"]
    assert not Task.objects.exists()


def test_nan_in_a_data_part_is_invalid_params_naming_the_field(agents, client):
    message = json.dumps(user_message(parts=[{"data": {"x": 1.5}}])).replace("1.5", "NaN")
    response = post(
        client,
        SUPPORT,
        body(
            "SendMessage",
            f'{{"message": {message}, "configuration": {{"returnImmediately": true}}}}',
        ),
        token=agents.a.token,
    )
    assert invalid_params_field(response) == "message.parts[0].data.x"


@pytest.mark.parametrize("number", ["1e400", "-1e999", "1" + "0" * 400])
def test_a_number_that_overflows_a_double_in_a_data_part_is_invalid_params(agents, client, number):
    message = json.dumps(user_message(parts=[{"data": {"x": 7}}])).replace("7", number)
    params = f'{{"message": {message}, "configuration": {{"returnImmediately": true}}}}'
    response = post(client, SUPPORT, body("SendMessage", params), token=agents.a.token)
    assert invalid_params_field(response) == "message.parts[0].data.x"
    assert not Task.objects.exists()


# --- lengths of the columns ---------------------------------------------------------------------


def test_a_message_id_over_200_characters_is_invalid_params_naming_the_limit(agents, client):
    params = send_params(messageId="m" * 201)
    response = rpc(client, SUPPORT, "SendMessage", params, token=agents.a.token)
    assert invalid_params_field(response) == "message.messageId"
    assert "200" in response.json()["error"]["message"]
    assert not Task.objects.exists()


def test_a_message_id_of_200_characters_is_taken(agents, client):
    params = send_params(messageId="m" * 200)
    task = task_of(rpc(client, SUPPORT, "SendMessage", params, token=agents.a.token))
    assert task["history"][0]["messageId"] == "m" * 200


@pytest.mark.usefixtures("eager")
def test_answer_message_id_over_200_characters_is_invalid_params(agents, client):
    asked = task_of(
        rpc(client, REVIEWER, "SendMessage", {"message": user_message()}, token=agents.a.token)
    )
    assert asked["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"
    answer = answer_message(asked, parts=[{"text": "main"}], messageId="a" * 201)
    response = rpc(client, REVIEWER, "SendMessage", {"message": answer}, token=agents.a.token)
    assert invalid_params_field(response) == "message.messageId"
    assert Interaction.objects.get().state == Interaction.State.OPEN


def test_a_context_id_with_a_trailing_newline_is_invalid_params(agents, client):
    params = send_params(contextId="c" * 128 + "\n")
    response = rpc(client, SUPPORT, "SendMessage", params, token=agents.a.token)
    assert invalid_params_field(response) == "message.contextId"
    assert not Task.objects.exists()


@pytest.mark.parametrize(
    "config, field, limit",
    [
        ({"url": HOOK, "token": "t" * 1001}, "token", 1000),
        ({"url": HOOK, "authentication": {"scheme": "s" * 101}}, "authentication.scheme", 100),
        ({"url": HOOK + "?" + "q" * 2000}, "url", 2000),
        ({"url": HOOK, "id": "c" * 201}, "id", 200),
    ],
    ids=["token", "scheme", "url", "id"],
)
def test_a_push_config_field_longer_than_its_column_is_invalid_params_naming_the_limit(
    agents, client, task, any_host, config, field, limit
):
    params = {"taskId": task["id"], **config}
    response = rpc(
        client, SUPPORT, "CreateTaskPushNotificationConfig", params, token=agents.a.token
    )
    assert invalid_params_field(response) == field
    assert response.json()["error"]["data"][0]["metadata"] == {"limit": str(limit)}
    assert not PushConfig.objects.exists()


def test_a_push_url_with_a_host_over_253_characters_is_invalid_params(
    agents, client, task, any_host
):
    params = {"taskId": task["id"], "url": f"https://{'h' * 254}.example.com/hook"}
    response = rpc(
        client, SUPPORT, "CreateTaskPushNotificationConfig", params, token=agents.a.token
    )
    assert invalid_params_field(response) == "url"
    assert not PushConfig.objects.exists()


def test_push_config_fields_at_their_limits_are_taken(agents, client, task, any_host):
    params = {
        "taskId": task["id"],
        "id": "c" * 200,
        "url": HOOK + "?" + "q" * (2000 - len(HOOK) - 1),
        "token": "t" * 1000,
        "authentication": {"scheme": "s" * 100, "credentials": "secret"},
    }
    config = result_of(
        rpc(client, SUPPORT, "CreateTaskPushNotificationConfig", params, token=agents.a.token)
    )
    assert len(config["url"]) == 2000
    assert PushConfig.objects.get().token_plaintext() == "t" * 1000


def test_an_inline_push_token_over_1000_characters_changes_nothing(agents, client, any_host):
    params = send_params()
    params["configuration"]["taskPushNotificationConfig"] = {"url": HOOK, "token": "t" * 1001}
    response = rpc(client, SUPPORT, "SendMessage", params, token=agents.a.token)
    assert invalid_params_field(response) == "configuration.taskPushNotificationConfig.token"
    assert not Task.objects.exists()


def test_an_inline_push_config_id_over_200_characters_changes_nothing(agents, client, any_host):
    params = send_params()
    params["configuration"]["taskPushNotificationConfig"] = {"url": HOOK, "id": "c" * 201}
    response = rpc(client, SUPPORT, "SendMessage", params, token=agents.a.token)
    assert invalid_params_field(response) == "configuration.taskPushNotificationConfig.id"
    assert not Task.objects.exists()


# --- enums and page tokens ----------------------------------------------------------------------


@pytest.mark.parametrize("status", [99, -1, 2**31 - 1, "TASK_STATE_NOPE", "working"])
def test_list_tasks_status_outside_the_enum_is_invalid_params(agents, client, status):
    response = rpc(client, SUPPORT, "ListTasks", {"status": status}, token=agents.a.token)
    assert invalid_params_field(response) == "status"


def test_list_tasks_status_by_number_in_the_enum_filters(agents, client, task):
    listed = result_of(rpc(client, SUPPORT, "ListTasks", {"status": 1}, token=agents.a.token))
    assert [t["id"] for t in listed["tasks"]] == [task["id"]]


def _token(raw: str) -> str:
    return base64.urlsafe_b64encode(raw.encode()).decode().rstrip("=")


@pytest.mark.parametrize(
    "raw",
    [
        '{"a": 1}',
        "[" * 5000 + "]" * 5000,
        '["0001-01-01T00:00:00+05:00", 1]',
        '["2020-01-01T00:00:00+00:00", 99999999999999999999999]',
        '["2020-01-01T00:00:00+00:00", NaN]',
        '["2020-01-01T00:00:00+00:00", 1, 2]',
    ],
    ids=["object", "deep", "year-1-east-of-utc", "pk-overflows", "nan", "three"],
)
def test_a_forged_list_tasks_page_token_is_invalid_params(agents, client, raw):
    response = rpc(client, SUPPORT, "ListTasks", {"pageToken": _token(raw)}, token=agents.a.token)
    assert invalid_params_field(response) == "pageToken"


@pytest.mark.parametrize("token", ["²", "٣", "9" * 30])
def test_a_forged_push_config_page_token_is_invalid_params(agents, client, task, token):
    params = {"taskId": task["id"], "pageToken": token}
    response = rpc(client, SUPPORT, "ListTaskPushNotificationConfigs", params, token=agents.a.token)
    assert invalid_params_field(response) == "pageToken"


@pytest.mark.parametrize(
    ("field", "config"),
    [
        ("token", {"token": "secret\r\nX-Injected: 1"}),
        ("token", {"token": "sécret"}),
        (
            "authentication.credentials",
            {"authentication": {"scheme": "Bearer", "credentials": "a\nb"}},
        ),
        ("authentication.scheme", {"authentication": {"scheme": "Bearer x", "credentials": "c"}}),
    ],
)
def test_push_header_values_that_could_never_be_sent_are_invalid_params(
    agents, client, task, any_host, field, config
):
    # Sent as headers: a line break could never be sent, and the HTTP library's error would
    # quote the secret into the delivery's recorded error.
    params = {"taskId": task["id"], "url": HOOK, **config}
    response = rpc(
        client, SUPPORT, "CreateTaskPushNotificationConfig", params, token=agents.a.token
    )
    assert invalid_params_field(response) == field
    assert not PushConfig.objects.exists()
