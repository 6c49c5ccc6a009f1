"""SendMessage, GetTask, ListTasks and CancelTask over the wire: contexts, queues, skills,
history, paging, cancel. Every task in a response must parse as an A2A 1.0 Task."""

from datetime import UTC, datetime, timedelta

import pytest

from config.celery import app
from runtime.agents.agentfile import AgentSpec, agent_upsert
from runtime.decisions.decision_models import Interaction
from runtime.kernel.task_models import Context, Task, TaskEvent
from runtime.turn.runner import turn_run
from tenants.tokens import api_token_create
from tests.a2a_client import (
    answer_message,
    as_task,
    assert_error,
    error_info,
    field_violations,
    result_of,
    rpc,
    status_text,
    task_of,
    user_message,
)

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("eager")]

SUPPORT = "/a2a/acme/support"
REVIEWER = "/a2a/acme/code-reviewer"
TCK = "/a2a/acme/tck"


def send(client, path, token, text="hello", *, message=None, configuration=None, **fields):
    params = {"message": message or user_message(text, **fields)}
    if configuration is not None:
        params["configuration"] = configuration
    return rpc(client, path, "SendMessage", params, token=token)


# --- contexts ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "context_id", ["has space", "x" * 129, "-leading-dash", "../up", "ticket/4821", "é"]
)
def test_a_context_id_outside_the_bounded_charset_is_invalid_params(agents, client, context_id):
    response = send(client, SUPPORT, agents.a.token, contextId=context_id)
    error = assert_error(response, -32602, "INVALID_PARAMS")
    assert field_violations(error)[0]["field"] == "message.contextId"
    assert not Task.objects.exists()
    assert not Context.objects.exists()


@pytest.mark.parametrize("context_id", ["ticket-4821", "a", "A.b_c:d-9", "x" * 128])
def test_a_client_context_id_is_accepted_and_echoed(agents, client, context_id):
    task = task_of(send(client, SUPPORT, agents.a.token, contextId=context_id))
    assert task["contextId"] == context_id
    assert task["status"]["message"]["contextId"] == context_id
    assert task["history"][0]["contextId"] == context_id


def test_without_a_context_id_the_server_makes_one(agents, client):
    first = task_of(send(client, SUPPORT, agents.a.token))
    second = task_of(send(client, SUPPORT, agents.a.token))
    assert first["contextId"] and second["contextId"]
    assert first["contextId"] != second["contextId"]
    assert first["id"] != second["id"]


def test_a_task_id_with_another_context_id_is_invalid_params(agents, client):
    task = task_of(send(client, REVIEWER, agents.a.token, contextId="c-one"))
    mismatched = user_message("main", taskId=task["id"], contextId="c-two")
    response = send(client, REVIEWER, agents.a.token, message=mismatched)
    error = assert_error(response, -32602, "INVALID_PARAMS")
    assert field_violations(error)[0]["field"] == "message.contextId"
    assert Interaction.objects.get().state == Interaction.State.OPEN


def test_a_message_to_an_unknown_task_is_task_not_found(agents, client):
    response = send(client, SUPPORT, agents.a.token, taskId="t1.unknown")
    error = assert_error(response, -32001, "TASK_NOT_FOUND")
    assert error_info(error)["metadata"] == {"taskId": "t1.unknown"}


def test_a_message_to_a_terminal_task_is_unsupported(agents, client):
    done = task_of(send(client, SUPPORT, agents.a.token))
    assert done["status"]["state"] == "TASK_STATE_COMPLETED"
    response = send(client, SUPPORT, agents.a.token, message=answer_message(done))
    assert_error(response, -32004, "UNSUPPORTED_OPERATION")
    assert Task.objects.count() == 1


def test_a_message_in_a_busy_context_is_queued_as_a_submitted_task(agents, client):
    first = task_of(send(client, REVIEWER, agents.a.token, contextId="review-7"))
    assert first["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"
    queued = task_of(send(client, REVIEWER, agents.a.token, "next diff", contextId="review-7"))
    assert queued["status"]["state"] == "TASK_STATE_SUBMITTED"
    assert queued["id"] != first["id"]
    assert queued["contextId"] == "review-7"


def test_a_busy_context_with_delivery_reject_is_context_busy(agents, client):
    task_of(send(client, REVIEWER, agents.a.token, contextId="review-8"))
    message = user_message(contextId="review-8", metadata={"delivery": "reject"})
    response = send(client, REVIEWER, agents.a.token, message=message)
    error = assert_error(response, -32004, "CONTEXT_BUSY")
    assert error_info(error)["metadata"] == {"contextId": "review-8"}
    assert Task.objects.count() == 1


def test_delivery_reject_in_an_idle_context_starts_the_turn(agents, client):
    message = user_message(contextId="idle", metadata={"delivery": "reject"})
    task = task_of(send(client, SUPPORT, agents.a.token, message=message))
    assert task["status"]["state"] == "TASK_STATE_COMPLETED"


def test_turns_of_one_context_run_in_order(agents, client):
    first = task_of(send(client, REVIEWER, agents.a.token, contextId="ordered"))
    second = task_of(send(client, REVIEWER, agents.a.token, "second", contextId="ordered"))
    second_pk = Task.objects.get(public_id=second["id"]).pk
    # A worker that picks the queued turn up early leaves it alone.
    turn_run(task_pk=second_pk, worker_id="test")
    assert Task.objects.get(pk=second_pk).state == "TASK_STATE_SUBMITTED"

    answered = task_of(
        send(
            client,
            REVIEWER,
            agents.a.token,
            message=answer_message(first, parts=[{"text": "main"}]),
        )
    )
    assert answered["status"]["state"] == "TASK_STATE_COMPLETED"
    after = as_task(
        result_of(rpc(client, REVIEWER, "GetTask", {"id": second["id"]}, token=agents.a.token))
    )
    assert after["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"
    first_done = TaskEvent.objects.get(task__public_id=first["id"], state="TASK_STATE_COMPLETED")
    second_started = TaskEvent.objects.get(task__public_id=second["id"], state="TASK_STATE_WORKING")
    assert first_done.pk < second_started.pk


# --- skills -----------------------------------------------------------------------------------


def test_an_unknown_skill_id_is_invalid_params_before_any_turn(agents, client):
    message = user_message(metadata={"skillId": "nope"})
    response = send(client, SUPPORT, agents.a.token, message=message)
    error = assert_error(response, -32602, "INVALID_PARAMS")
    assert field_violations(error)[0]["field"] == "metadata.skillId"
    assert not Task.objects.exists()


def test_a_skill_id_that_is_not_a_string_is_invalid_params(agents, client):
    response = send(client, SUPPORT, agents.a.token, message=user_message(metadata={"skillId": 3}))
    assert_error(response, -32602, "INVALID_PARAMS")
    assert not Task.objects.exists()


def test_the_only_skill_is_chosen_when_omitted_and_a_named_skill_is_kept(agents, client):
    task_of(send(client, SUPPORT, agents.a.token))
    task_of(
        send(client, SUPPORT, agents.a.token, message=user_message(metadata={"skillId": "answer"}))
    )
    assert list(Task.objects.values_list("skill_id", flat=True)) == ["answer", "answer"]


def test_an_agent_with_several_skills_needs_a_skill_id(agents, client):
    skill = {"name": "S", "description": "d", "tags": [], "examples": []}
    agent_upsert(
        tenant=agents.a.tenant,
        spec=AgentSpec(
            slug="multi",
            name="multi",
            description="two skills",
            skills=[{**skill, "id": "one"}, {**skill, "id": "two"}],
            model={"provider": "scripted", "script": [{"steps": [{"reply": "ok"}]}]},
        ),
    )
    response = send(client, "/a2a/acme/multi", agents.a.token)
    assert_error(response, -32602, "INVALID_PARAMS")
    assert not Task.objects.exists()
    chosen = send(
        client, "/a2a/acme/multi", agents.a.token, message=user_message(metadata={"skillId": "two"})
    )
    assert task_of(chosen)["status"]["state"] == "TASK_STATE_COMPLETED"
    assert Task.objects.get().skill_id == "two"


def test_an_agent_with_several_skills_and_a_default_runs_it_when_none_is_named(agents, client):
    skill = {"name": "S", "description": "d", "tags": [], "examples": []}
    agent_upsert(
        tenant=agents.a.tenant,
        spec=AgentSpec(
            slug="multi",
            name="multi",
            description="two skills, one the default",
            skills=[{**skill, "id": "one"}, {**skill, "id": "two"}],
            default_skill="two",
            model={"provider": "scripted", "script": [{"steps": [{"reply": "ok"}]}]},
        ),
    )
    task_of(send(client, "/a2a/acme/multi", agents.a.token))
    named = user_message(metadata={"skillId": "one"})
    task_of(send(client, "/a2a/acme/multi", agents.a.token, message=named))
    assert list(Task.objects.order_by("pk").values_list("skill_id", flat=True)) == ["two", "one"]


# --- history ----------------------------------------------------------------------------------


def _answered_review(client, token) -> dict:
    """A completed code review: history = [request, question, answer]."""
    asked = task_of(send(client, REVIEWER, token))
    done = task_of(
        send(client, REVIEWER, token, message=answer_message(asked, parts=[{"text": "main"}]))
    )
    assert done["status"]["state"] == "TASK_STATE_COMPLETED"
    assert [m["role"] for m in done["history"]] == ["ROLE_USER", "ROLE_AGENT", "ROLE_USER"]
    return done


@pytest.mark.parametrize("length, kept", [(0, 0), (1, 1), (2, 2), (3, 3), (50, 3)])
def test_history_length_on_get_task(agents, client, length, kept):
    done = _answered_review(client, agents.a.token)
    task = as_task(
        result_of(
            rpc(
                client,
                REVIEWER,
                "GetTask",
                {"id": done["id"], "historyLength": length},
                token=agents.a.token,
            )
        )
    )
    assert task.get("history", []) == done["history"][len(done["history"]) - kept :]
    assert ("history" in task) == (kept > 0)


@pytest.mark.parametrize("length, kept", [(0, 0), (1, 1), (5, 1)])
def test_history_length_on_send_message(agents, client, length, kept):
    task = task_of(send(client, SUPPORT, agents.a.token, configuration={"historyLength": length}))
    assert len(task.get("history", [])) == kept


def test_a_negative_history_length_is_invalid_params(agents, client):
    done = task_of(send(client, SUPPORT, agents.a.token))
    response = rpc(
        client, SUPPORT, "GetTask", {"id": done["id"], "historyLength": -1}, token=agents.a.token
    )
    assert_error(response, -32602, "INVALID_PARAMS")
    response = send(client, SUPPORT, agents.a.token, configuration={"historyLength": -1})
    assert_error(response, -32602, "INVALID_PARAMS")


def test_return_immediately_answers_before_the_turn_ran(agents, client, settings):
    # No worker consumes this run's queue (tests/conftest.py): the turn stays queued, and
    # the answer comes at once, SUBMITTED; then a worker's run completes it.
    app.conf.update(task_always_eager=False)
    task = task_of(send(client, SUPPORT, agents.a.token, configuration={"returnImmediately": True}))
    assert task["status"]["state"] == "TASK_STATE_SUBMITTED"
    turn_run(task_pk=Task.objects.get(public_id=task["id"]).pk, worker_id="test")
    got = as_task(
        result_of(rpc(client, SUPPORT, "GetTask", {"id": task["id"]}, token=agents.a.token))
    )
    assert got["status"]["state"] == "TASK_STATE_COMPLETED"


# --- ListTasks --------------------------------------------------------------------------------


@pytest.fixture
def listed(agents, client):
    """Five support tasks of A's partner with known status timestamps, plus tasks that must
    never show: another agent's, another subject's, another tenant's."""
    token = agents.a.token
    ids = []
    for i in range(5):
        ids.append(task_of(send(client, SUPPORT, token, f"q{i}", contextId=f"ctx-{i % 2}"))["id"])
    t0 = datetime(2030, 1, 1, tzinfo=UTC)
    for i, public_id in enumerate(ids):
        Task.objects.filter(public_id=public_id).update(status_timestamp=t0 + timedelta(minutes=i))
    task_of(send(client, REVIEWER, token))  # another agent
    _, other = api_token_create(tenant=agents.a.tenant, subject="partner:other", name="o")
    task_of(send(client, SUPPORT, other))  # another subject
    task_of(send(client, "/a2a/globex/support", agents.b.token))  # another tenant
    return {"ids": ids, "t0": t0, "token": token}


def list_tasks(client, token, path=SUPPORT, **params):
    return rpc(client, path, "ListTasks", params, token=token)


def test_list_tasks_shows_only_the_callers_tasks_on_this_agent_latest_first(listed, client):
    page = result_of(list_tasks(client, listed["token"]))
    assert [t["id"] for t in page["tasks"]] == listed["ids"][::-1]
    assert page["totalSize"] == 5
    assert page["pageSize"] == 50
    assert page["nextPageToken"] == ""
    for task in page["tasks"]:
        as_task(task)


def test_list_tasks_filters_by_context_status_and_timestamp(listed, client):
    token, ids = listed["token"], listed["ids"]
    by_context = result_of(list_tasks(client, token, contextId="ctx-1"))
    assert [t["id"] for t in by_context["tasks"]] == [ids[3], ids[1]]
    assert by_context["totalSize"] == 2
    Task.objects.filter(public_id=ids[2]).update(state="TASK_STATE_FAILED")
    failed = result_of(list_tasks(client, token, status="TASK_STATE_FAILED"))
    assert [t["id"] for t in failed["tasks"]] == [ids[2]]
    working = result_of(list_tasks(client, token, status="TASK_STATE_WORKING"))
    assert working == {"tasks": [], "nextPageToken": "", "pageSize": 50, "totalSize": 0}
    after = (listed["t0"] + timedelta(minutes=3)).strftime("%Y-%m-%dT%H:%M:%SZ")
    recent = result_of(list_tasks(client, token, statusTimestampAfter=after))
    assert [t["id"] for t in recent["tasks"]] == [ids[4], ids[3]]


@pytest.mark.parametrize("page_size", [0, -1, 101, 1000])
def test_page_size_out_of_bounds_is_invalid_params(listed, client, page_size):
    error = assert_error(list_tasks(client, listed["token"], pageSize=page_size), -32602)
    assert field_violations(error)[0]["field"] == "pageSize"


@pytest.mark.parametrize("token", ["garbage", "!!!", "eyJ4Ijog", "WzEsMl0"])
def test_a_page_token_the_server_did_not_issue_is_invalid_params(listed, client, token):
    error = assert_error(list_tasks(client, listed["token"], pageToken=token), -32602)
    assert field_violations(error)[0]["field"] == "pageToken"


@pytest.mark.parametrize("page_size", [1, 2, 3, 5, 100])
def test_keyset_paging_visits_every_task_once(listed, client, page_size):
    seen, token, pages = [], "", 0
    while True:
        page = result_of(list_tasks(client, listed["token"], pageSize=page_size, pageToken=token))
        pages += 1
        assert page["totalSize"] == 5
        assert page["pageSize"] == page_size
        assert len(page["tasks"]) <= page_size
        seen += [t["id"] for t in page["tasks"]]
        token = page["nextPageToken"]
        if token == "":
            break
        assert pages < 10
    assert seen == listed["ids"][::-1]
    assert pages == -(-5 // page_size)


def test_paging_with_equal_timestamps_has_no_duplicates_or_gaps(listed, client):
    Task.objects.filter(public_id__in=listed["ids"]).update(status_timestamp=listed["t0"])
    seen, token = [], ""
    while True:
        page = result_of(list_tasks(client, listed["token"], pageSize=2, pageToken=token))
        seen += [t["id"] for t in page["tasks"]]
        token = page["nextPageToken"]
        if not token:
            break
    assert sorted(seen) == sorted(listed["ids"])
    assert len(seen) == 5


def test_include_artifacts_false_omits_the_key(agents, client):
    message = user_message(messageId="tck-artifact-text-1")
    made = task_of(send(client, TCK, agents.a.token, message=message))
    assert made["artifacts"][0]["artifactId"] == "artifact-text"
    for params in ({}, {"includeArtifacts": False}):
        (task,) = result_of(list_tasks(client, agents.a.token, path=TCK, **params))["tasks"]
        assert "artifacts" not in as_task(task)
    (task,) = result_of(list_tasks(client, agents.a.token, path=TCK, includeArtifacts=True))[
        "tasks"
    ]
    assert as_task(task)["artifacts"] == made["artifacts"]


def test_list_tasks_history_length(listed, client):
    (task,) = result_of(list_tasks(client, listed["token"], pageSize=1, historyLength=0))["tasks"]
    assert "history" not in task
    (task,) = result_of(list_tasks(client, listed["token"], pageSize=1, historyLength=1))["tasks"]
    assert len(task["history"]) == 1


# --- CancelTask -------------------------------------------------------------------------------


def test_cancel_closes_open_interactions_and_is_idempotent(agents, client):
    asked = task_of(send(client, REVIEWER, agents.a.token))
    first = as_task(
        result_of(rpc(client, REVIEWER, "CancelTask", {"id": asked["id"]}, token=agents.a.token))
    )
    assert first["status"]["state"] == "TASK_STATE_CANCELED"
    interaction = Interaction.objects.get()
    assert interaction.state == Interaction.State.CANCELED
    assert interaction.answered_by == agents.a.subject
    again = as_task(
        result_of(rpc(client, REVIEWER, "CancelTask", {"id": asked["id"]}, token=agents.a.token))
    )
    assert again["status"] == first["status"]
    # A canceled task takes no answer.
    response = send(
        client, REVIEWER, agents.a.token, message=answer_message(asked, parts=[{"text": "main"}])
    )
    assert_error(response, -32004)


def test_cancelling_a_terminal_task_is_not_cancelable(agents, client):
    done = task_of(send(client, SUPPORT, agents.a.token))
    response = rpc(client, SUPPORT, "CancelTask", {"id": done["id"]}, token=agents.a.token)
    error = assert_error(response, -32002, "TASK_NOT_CANCELABLE")
    assert error_info(error)["metadata"] == {"taskId": done["id"]}


def test_cancelling_an_unknown_task_is_task_not_found(agents, client):
    response = rpc(client, SUPPORT, "CancelTask", {"id": "t1.nope"}, token=agents.a.token)
    assert_error(response, -32001, "TASK_NOT_FOUND")
    response = rpc(client, SUPPORT, "CancelTask", {}, token=agents.a.token)
    assert_error(response, -32602, "INVALID_PARAMS")


def test_cancelling_the_running_turn_starts_the_queued_one(agents, client):
    first = task_of(send(client, REVIEWER, agents.a.token, contextId="cq"))
    queued = task_of(send(client, REVIEWER, agents.a.token, contextId="cq"))
    result_of(rpc(client, REVIEWER, "CancelTask", {"id": first["id"]}, token=agents.a.token))
    got = as_task(
        result_of(rpc(client, REVIEWER, "GetTask", {"id": queued["id"]}, token=agents.a.token))
    )
    assert got["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"
    assert "base branch" in status_text(got)
