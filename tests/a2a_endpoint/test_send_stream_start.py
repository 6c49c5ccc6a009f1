"""A send's stream starts from the task as the message left it (a2a_endpoint.streams), not as
the worker has left it since: its caller sees every update of the turn, down to the one that
ends it, even when the turn was over before the stream read the task."""

import pytest

from runtime.kernel.task_models import Task, TaskState
from tests.a2a_client import rpc, sse_first_result, sse_results, user_message

# eager: the turn runs to its end as the message commits, before the stream reads the task,
# which is the moment a fast worker can win on a live server.
pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("eager")]

SUPPORT = "/a2a/acme/support"
SUBSCRIBE_TASK = "SubscribeToTask"


def results(response) -> list[dict]:
    return [body["result"] for body in sse_results(response)]


def test_a_turn_over_before_its_stream_began_is_streamed_from_its_start(agents, client):
    streamed = results(
        rpc(
            client,
            SUPPORT,
            "SendStreamingMessage",
            {"message": user_message("How do I reset my password?")},
            token=agents.a.token,
        )
    )

    task = Task.objects.get(tenant=agents.a.tenant, public_id=streamed[0]["task"]["id"])
    assert task.state == TaskState.COMPLETED
    assert streamed[0]["task"]["status"]["state"] == TaskState.SUBMITTED
    updates = [r["statusUpdate"]["status"] for r in streamed[1:]]
    assert [status["state"] for status in updates] == [TaskState.WORKING, TaskState.COMPLETED]
    assert "Reset password" in updates[-1]["message"]["parts"][0]["text"]


def test_a_subscriber_gets_the_task_as_it_is_now(agents, client):
    asked = results(
        rpc(
            client,
            "/a2a/acme/code-reviewer",
            "SendStreamingMessage",
            {"message": user_message("Review this diff")},
            token=agents.a.token,
        )
    )
    assert asked[-1]["statusUpdate"]["status"]["state"] == TaskState.INPUT_REQUIRED
    task_id = asked[0]["task"]["id"]

    response = rpc(
        client, "/a2a/acme/code-reviewer", SUBSCRIBE_TASK, {"id": task_id}, token=agents.a.token
    )
    # The task waits for input: the subscriber's first event is the task in that pause.
    first = sse_first_result(response)["result"]
    assert first["task"]["status"]["state"] == TaskState.INPUT_REQUIRED
