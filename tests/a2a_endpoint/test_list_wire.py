"""ListTasks' page on PostgreSQL (a2a_endpoint.asyncdb.tasks_page_read): its tasks are written
from the stored JSON text (wire.stored_task_wire), and the JSON on the wire is task_wire's for
every kind of task and every option a caller has."""

import asyncio
import itertools
import json
from datetime import UTC, datetime
from unittest import mock

import orjson
import pytest

from a2a_endpoint import wire
from a2a_endpoint.asyncdb import pool_close, tasks_page_read
from a2a_endpoint.jsonrpc import json_bytes
from runtime.agents.agent_models import Agent
from runtime.kernel import extensions as ext
from runtime.kernel.files import FILE_REF_PREFIX
from runtime.kernel.task_models import Task
from tests.a2a_client import result_of, rpc, task_of, user_message

SUPPORT = "/a2a/acme/support"

pytestmark = pytest.mark.django_db(transaction=True)

MESSAGE = {
    "messageId": "m-1",
    "role": "ROLE_AGENT",
    # Text that looks like the JSON around it, non-ASCII, numbers beyond 64 bits and floats.
    "parts": [
        {"text": 'a "quoted", {braced}: [listed] résumé \u2028 \\ end'},
        {"data": {"big": 2**70, "negative": -(2**65), "float": 1.5e-7, "zero": 0, "pi": 3.14}},
    ],
    "metadata": {"nested": {"deep": [1, [2, [3, {}]]], "empty": []}},
}
ARTIFACT_WITH_FILE = {
    "artifactId": "report",
    "parts": [{"url": f"{FILE_REF_PREFIX}file-1", "filename": "r.txt"}, {"text": "see file"}],
}
PLAIN_ARTIFACT = {"artifactId": "note", "parts": [{"text": "n"}]}
HISTORY = [
    {"messageId": f"h-{i}", "role": "ROLE_USER", "parts": [{"text": f"turn {i} ü"}]}
    for i in range(4)
]

# Each a task as the runtime may store it: what it shows, and what only some callers see.
KINDS = [
    {},
    {"status_message": None, "history": []},
    # The timestamp's milliseconds are truncated, its year has four digits.
    {"status_timestamp": datetime(2026, 1, 1, 23, 59, 59, 999_999, tzinfo=UTC)},
    {"status_timestamp": datetime(999, 1, 2, 3, 4, 5, 500, tzinfo=UTC)},
    {"status_message": MESSAGE, "history": HISTORY},
    {"status_message": None, "status_ext": {ext.PROGRESS: {"step": 2, "of": 3}}},
    {"status_message": MESSAGE, "status_ext": {ext.TELEMETRY: {"tokens": 2**64 + 1}}},
    {"status_ext": {"https://example.com/not-implemented": {"x": 1}}},
    {"artifacts": [PLAIN_ARTIFACT], "artifact_ext": {}},
    {
        "artifacts": [ARTIFACT_WITH_FILE, PLAIN_ARTIFACT],
        "artifact_ext": {"report": {ext.FILES: {"version": 2}}},
        "history": HISTORY[:1],
    },
    {"status_message": {}, "history": [], "status_ext": {}, "artifacts": []},
]
OPTIONS = {
    "activated": [frozenset(), frozenset({ext.TELEMETRY}), frozenset(ext.IMPLEMENTED)],
    "history_length": [None, 0, 1, 3, 10_000],
    "include_artifacts": [False, True],
    "files_base": ["", "https://gw.example/a2a/acme/support/files/"],
}


def page_read(cursor=None, **scope):
    async def run():
        try:
            return await tasks_page_read(
                **scope,
                context_id=None,
                state=None,
                status_after=None,
                cursor=cursor,
                page_size=50,
            )
        finally:
            await pool_close()

    return asyncio.run(run())


def on_the_wire(body) -> object:
    """The JSON the endpoint writes for ``body``, read back (the standard library's reader
    keeps 2**70 an integer)."""
    return json.loads(json_bytes(body))


@pytest.mark.postgres
def test_the_stored_text_page_is_task_wires_json_for_every_task_and_option(
    agents, client, postgres_only
):
    params = {"configuration": {"returnImmediately": True}}
    for _ in KINDS:
        message = {"message": user_message(), **params}
        task_of(rpc(client, SUPPORT, "SendMessage", message, token=agents.a.token))
    stored_tasks = Task.objects.filter(subject=agents.a.subject).order_by("pk")
    for task, kind in zip(stored_tasks, KINDS, strict=True):
        Task.objects.filter(pk=task.pk).update(**kind)
    agent = Agent.objects.get(tenant=agents.a.tenant, slug="support")
    scope = {"tenant": agents.a.tenant, "agent": agent, "subject": agents.a.subject}
    page, total, _ = page_read(**scope)
    assert total == len(page) == len(KINDS)
    orm = {t.public_id: t for t in Task.objects.filter(subject=agents.a.subject)}
    fast = 0
    # Download links are signed with the time (django.core.signing): one second for both.
    with mock.patch("time.time", return_value=1_900_000_000.0):
        for stored in page:
            for values in itertools.product(*OPTIONS.values()):
                options = dict(zip(OPTIONS, values, strict=True))
                got = wire.stored_task_wire(stored, **options)
                expected = wire.task_wire(orm[stored.public_id], **options)
                assert on_the_wire(got) == on_the_wire(expected), (stored.public_id, options)
                fast += isinstance(got.get("history"), orjson.Fragment)
    # Not only the parsing fallback: tasks with a history went out as stored.
    assert fast > 0
    # A page past the last task has no row to carry the total: it is counted all the same.
    beyond = (datetime(900, 1, 1, tzinfo=UTC), 1)
    assert page_read(**scope, cursor=beyond) == ([], len(KINDS), False)


@pytest.mark.postgres
def test_list_tasks_on_the_live_server_is_the_in_process_answer(
    live_stack, demo, client, postgres_only
):
    """The live server reads the page as stored text; the test client the ORM's Tasks."""
    import urllib.request

    url = f"{live_stack.url}{demo['agents']['support']}"
    headers = {
        "Authorization": f"Bearer {demo['token']}",
        "A2A-Version": "1.0",
        "Content-Type": "application/json",
    }
    for text in ("one", "two ü"):
        body = {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "SendMessage",
            "params": {"message": user_message(text)},  # blocking: the tasks are settled
        }
        request = urllib.request.Request(url, json.dumps(body).encode(), headers)
        with urllib.request.urlopen(request, timeout=30) as response:
            answered = json.loads(response.read())["result"]["task"]
        # The blocking send's answer is read as GetTask reads it (asyncdb.SettledTask).
        got = {"id": answered["id"]}
        in_process = rpc(client, demo["agents"]["support"], "GetTask", got, token=demo["token"])
        assert answered == result_of(in_process)
        assert answered["status"]["state"] == "TASK_STATE_COMPLETED"
    # A JSON-RPC id beyond 64 bits: the response is written by the standard library, stored
    # text and all.
    listed = {"jsonrpc": "2.0", "id": 2**70, "method": "ListTasks", "params": {}}
    request = urllib.request.Request(url, json.dumps(listed).encode(), headers)
    with urllib.request.urlopen(request, timeout=30) as response:
        live = json.loads(response.read())
    assert live["id"] == 2**70
    path = demo["agents"]["support"]
    in_process = result_of(rpc(client, path, "ListTasks", {}, token=demo["token"]))
    assert live["result"] == in_process
    assert live["result"]["totalSize"] == 2 and len(live["result"]["tasks"]) == 2


def test_json_bytes_writes_a_fragment_with_the_standard_library_too():
    fragment = orjson.Fragment('{"a": [1, 2.5, "x"], "b": 123456789012345678901234}')
    body = {"id": 2**70, "task": fragment}  # orjson refuses the id
    assert json.loads(json_bytes(body)) == {
        "id": 2**70,
        "task": {"a": [1, 2.5, "x"], "b": 123456789012345678901234},
    }
