"""Flow 1 (support) and card resolution, through the a2a-sdk client."""

import pytest
from a2a.client import A2ACardResolver
from a2a.types import TaskState

from runtime.kernel import extensions as ext
from tests.sdk_client import status_text, user_message

pytestmark = pytest.mark.django_db(transaction=True)


def test_client_resolves_the_agent_card(partner, agents):
    card = partner.run(
        A2ACardResolver(partner.http, f"{partner.base_url}{agents['support']}").get_agent_card()
    )
    assert card.name == "support"
    assert [s.id for s in card.skills] == ["answer"]
    interface = card.supported_interfaces[0]
    assert interface.url == f"{partner.base_url}{agents['support']}"
    assert (interface.protocol_binding, interface.protocol_version) == ("JSONRPC", "1.0")
    assert card.capabilities.streaming is True
    assert {e.uri for e in card.capabilities.extensions} == set(ext.IMPLEMENTED)
    assert "bearer" in card.security_schemes


def test_blocking_send_returns_the_completed_task(partner, agents):
    task = partner.send(agents["support"], user_message("How do I reset my password?"))
    assert task.status.state == TaskState.TASK_STATE_COMPLETED
    assert "Reset password" in status_text(task)
    assert task.context_id
    assert task.history[0].parts[0].text == "How do I reset my password?"


def test_return_immediately_then_get_task_until_done(partner, agents):
    task = partner.send(agents["support"], user_message("Is the API up?"), polling=True)
    assert task.status.state in (
        TaskState.TASK_STATE_SUBMITTED,
        TaskState.TASK_STATE_WORKING,
        TaskState.TASK_STATE_COMPLETED,
    )
    done = partner.wait_for(agents["support"], task.id)
    assert done.status.state == TaskState.TASK_STATE_COMPLETED
    assert done.id == task.id and done.context_id == task.context_id
    assert '"Is the API up?"' in status_text(done)


def test_second_message_in_a_context_is_a_new_task(partner, agents):
    first = partner.send(agents["support"], user_message("hello"))
    second = partner.send(agents["support"], user_message("again", context_id=first.context_id))
    assert second.context_id == first.context_id
    assert second.id != first.id
    assert second.status.state == TaskState.TASK_STATE_COMPLETED


def test_one_trace_id_follows_a_turn_through_the_web_and_worker_logs(partner, agents, live_stack):
    from runtime.kernel.task_models import Task
    from tests.live import wait_until

    task = partner.send(agents["support"], user_message("trace me"))
    trace_id = Task.objects.get(public_id=task.id).trace_id
    web = live_stack.logdir / "web.log"
    workers = sorted(live_stack.logdir.glob("worker-*.log"))

    def logged(path):
        return any(
            f"task={task.id}" in line and f"trace={trace_id}" in line
            for line in path.read_text(errors="replace").splitlines()
        )

    # wait_until raises when the line never comes; the asserts say what each wait proves.
    assert wait_until(lambda: logged(web), 10, what="the web process's line for the turn")
    assert wait_until(lambda: any(logged(p) for p in workers), 10, what="the worker's line")
