"""An operator's stop: Cancel on the task page (with a reason, audited) and
``POST /api/v1/tasks/{id}/cancel`` for operator tokens. The task ends CANCELED with the
reason, which the partner reads on GetTask; its open interactions and held calls close."""

from http import HTTPStatus

import pytest
from django.test import Client
from django.urls import reverse

from runtime.agents.agent_models import DemoRecord
from runtime.decisions.decision_models import Effect, Interaction
from runtime.kernel.errors import AlreadyDecided
from runtime.kernel.task_models import AuditEvent, Task, TaskState
from tests.a2a_client import result_of, rpc
from tests.core import decide, run, send, start, status_text

pytestmark = pytest.mark.django_db


def bearer(token: str) -> dict:
    return {"HTTP_AUTHORIZATION": f"Bearer {token}"}


def cancel_over_rest(client, task, body, token):
    return client.post(
        f"/api/v1/tasks/{task.public_id}/cancel",
        body,
        content_type="application/json",
        **bearer(token),
    )


@pytest.mark.django_db(transaction=True)  # GetTask goes through the async A2A view
@pytest.mark.usefixtures("eager")
def test_the_rest_cancel_ends_the_task_canceled_and_the_partner_sees_the_reason(agents, client):
    approval = agents.a.extra["make"].approval()
    task = approval.task
    response = cancel_over_rest(
        client, task, {"reason": "the agent loops"}, agents.a.extra["operator_token"]
    )
    assert response.status_code == HTTPStatus.OK, response.content
    body = response.json()
    assert (body["id"], body["state"], body["agent"]) == (
        task.public_id,
        TaskState.CANCELED,
        "deployer",
    )
    assert body["message"] == "Canceled by an operator: the agent loops"

    # The partner reads it on GetTask.
    got = result_of(
        rpc(
            Client(),
            "/a2a/acme/deployer",
            "GetTask",
            {"id": task.public_id},
            token=agents.a.token,
        )
    )
    assert got["status"]["state"] == "TASK_STATE_CANCELED"
    assert got["status"]["message"]["parts"][0]["text"] == (
        "Canceled by an operator: the agent loops"
    )
    # The held call and its approval are closed; nothing is ever sent.
    approval.refresh_from_db()
    assert (approval.state, approval.answered_by, approval.answered_via) == (
        Interaction.State.CANCELED,
        "program:acme-ops",
        "cancel",
    )
    effect = Effect.objects.get(task=task)
    assert effect.state == Effect.State.DENIED
    assert effect.outcome["error"] == "tool.canceled"
    assert run(task).state == TaskState.CANCELED
    assert not DemoRecord.objects.exists()
    # Audited, with the reason.
    event = AuditEvent.objects.get(action="task_canceled")
    assert (event.actor, event.via, event.task_id) == ("program:acme-ops", "rest", task.pk)
    assert event.detail == {"reason": "the agent loops", "interactionsClosed": 1, "callsClosed": 1}


def test_an_operator_cannot_approve_a_call_of_a_task_stopped_since(agents, client):
    approval = agents.a.extra["make"].approval()
    cancel_over_rest(client, approval.task, {"reason": "stop"}, agents.a.extra["operator_token"])
    with pytest.raises(AlreadyDecided):
        decide(approval, approved=True)


@pytest.mark.parametrize(
    "body, field",
    [({}, "reason"), ({"reason": "   "}, "reason"), ({"reason": "x" * 1001}, "reason")],
    ids=["missing", "blank", "too-long"],
)
def test_a_cancel_without_a_usable_reason_is_refused_and_changes_nothing(
    agents, client, body, field
):
    task = agents.a.extra["make"].question().task
    response = cancel_over_rest(client, task, body, agents.a.extra["operator_token"])
    assert response.status_code == HTTPStatus.BAD_REQUEST
    assert response.json()["field"] == field
    task.refresh_from_db()
    assert task.state == TaskState.INPUT_REQUIRED
    assert not AuditEvent.objects.exists()


def test_the_rest_cancel_refuses_partners_other_tenants_and_ended_tasks(agents, client):
    task = agents.a.extra["make"].question().task
    auth = agents.a.extra["operator_token"]
    # A partner token is not an operator's.
    refused = cancel_over_rest(client, task, {"reason": "x"}, agents.a.token)
    assert refused.status_code == HTTPStatus.FORBIDDEN
    # Another tenant's operator: the same answer as for a task that does not exist.
    other = cancel_over_rest(client, task, {"reason": "x"}, agents.b.extra["operator_token"])
    missing = client.post(
        "/api/v1/tasks/t1.nope/cancel",
        {"reason": "x"},
        content_type="application/json",
        **bearer(auth),
    )
    assert other.status_code == missing.status_code == HTTPStatus.NOT_FOUND
    assert other.json() == {"detail": f"Task {task.public_id} was not found."}
    assert missing.json() == {"detail": "Task t1.nope was not found."}
    task.refresh_from_db()
    assert task.state == TaskState.INPUT_REQUIRED
    # Not JSON.
    not_json = client.post(
        f"/api/v1/tasks/{task.public_id}/cancel",
        "reason=x",
        content_type="text/plain",
        **bearer(auth),
    )
    assert not_json.status_code == HTTPStatus.UNSUPPORTED_MEDIA_TYPE
    # Once ended, it cannot be canceled again: 409, saying why.
    assert cancel_over_rest(client, task, {"reason": "x"}, auth).status_code == HTTPStatus.OK
    again = cancel_over_rest(client, task, {"reason": "x"}, auth)
    assert again.status_code == HTTPStatus.CONFLICT
    assert "can no longer be canceled" in again.json()["detail"]
    assert AuditEvent.objects.filter(action="task_canceled").count() == 1


def test_a_viewer_session_cannot_cancel_over_rest(agents):
    task = agents.a.extra["make"].question().task
    client = agents.a.client_for(agents.a.viewer)
    response = client.post(
        f"/api/v1/tasks/{task.public_id}/cancel", {"reason": "x"}, content_type="application/json"
    )
    assert response.status_code == HTTPStatus.FORBIDDEN
    task.refresh_from_db()
    assert task.state == TaskState.INPUT_REQUIRED


# --- the task page ------------------------------------------------------------------------------


def page_client(user) -> Client:
    client = Client(enforce_csrf_checks=True)
    client.force_login(user)
    return client


def csrf_of(client: Client, task: Task) -> str:
    page = client.get(reverse("approvals:task", args=[task.public_id]))
    assert page.status_code == HTTPStatus.OK
    assert b'action="' + reverse("approvals:task_cancel", args=[task.public_id]).encode() in (
        page.content
    )
    return client.cookies["csrftoken"].value


def test_cancel_on_the_task_page_with_a_reason_is_audited(agents):
    task = agents.a.extra["make"].question().task
    client = page_client(agents.a.operator)
    token = csrf_of(client, task)
    url = reverse("approvals:task_cancel", args=[task.public_id])
    response = client.post(url, {"reason": "wrong repository", "csrfmiddlewaretoken": token})
    assert response.status_code == HTTPStatus.FOUND
    task.refresh_from_db()
    assert task.state == TaskState.CANCELED
    assert status_text(task) == "Canceled by an operator: wrong repository"
    question = Interaction.objects.get(task=task)
    assert question.state == Interaction.State.CANCELED
    event = AuditEvent.objects.get(action="task_canceled")
    assert (event.actor, event.via) == ("user:operator@acme.test", "page")
    assert event.detail["reason"] == "wrong repository"
    page = client.get(response["Location"]).content.decode()
    assert "Canceled by an operator: wrong repository" in page
    assert "Stop this task" not in page  # an ended task has no Cancel
    audit = client.get(reverse("approvals:audit")).content.decode()
    assert "task_canceled" in audit and "(wrong repository)" in audit


def test_the_page_cancel_needs_csrf_a_reason_and_a_decider(agents):
    task = agents.a.extra["make"].question().task
    url = reverse("approvals:task_cancel", args=[task.public_id])
    client = page_client(agents.a.operator)
    token = csrf_of(client, task)
    # Without the CSRF token.
    assert client.post(url, {"reason": "x"}).status_code == HTTPStatus.FORBIDDEN
    # Without a reason: nothing changes, and the page says why.
    blank = client.post(url, {"reason": "  ", "csrfmiddlewaretoken": token}, follow=True)
    assert "Not canceled: Say why the task is stopped" in blank.content.decode()
    # A viewer sees no Cancel, and cannot post one.
    viewer = page_client(agents.a.viewer)
    page = viewer.get(reverse("approvals:task", args=[task.public_id])).content.decode()
    assert "Stop this task" not in page
    viewer_token = viewer.cookies["csrftoken"].value
    refused = viewer.post(url, {"reason": "x", "csrfmiddlewaretoken": viewer_token})
    assert refused.status_code == HTTPStatus.FORBIDDEN
    # Another tenant's operator: 404.
    other = page_client(agents.b.operator)
    other.get(reverse("approvals:inbox"))
    other_token = other.cookies["csrftoken"].value
    missing = other.post(url, {"reason": "x", "csrfmiddlewaretoken": other_token})
    assert missing.status_code == HTTPStatus.NOT_FOUND
    task.refresh_from_db()
    assert task.state == TaskState.INPUT_REQUIRED
    assert not AuditEvent.objects.exists()


def test_a_stop_while_the_model_is_asked_leaves_the_task_canceled(agents, make_agent, monkeypatch):
    from runtime.llm.actions import Reply
    from runtime.turn.cancel import task_stop

    make_agent("hosted", [{"reply": "never used"}])
    task = send(agents.a, "hosted", "go")

    class Hosted:
        def next_action(self, view):
            task_stop(
                tenant=agents.a.tenant,
                task_id=task.public_id,
                by="user:operator@acme.test",
                via="page",
                reason="runaway",
            )
            return Reply("Done.")

    monkeypatch.setattr("runtime.turn.runner.model_for", lambda agent: Hosted())
    task = run(task)
    assert task.state == TaskState.CANCELED
    assert status_text(task) == "Canceled by an operator: runaway"
    assert not [e for e in task.transcript if e["type"] == "action"]


def test_a_callers_cancel_closes_held_calls_and_is_audited_too(agents):
    from runtime.turn.cancel import task_cancel

    task = start(agents.a, "deployer", "deploy build b-9 to staging")
    task_cancel(
        tenant=agents.a.tenant, agent=task.agent, subject=agents.a.subject, task_id=task.public_id
    )
    task.refresh_from_db()
    assert status_text(task) == "Canceled by the caller."
    assert Effect.objects.get(task=task).state == Effect.State.DENIED
    event = AuditEvent.objects.get(action="task_canceled")
    assert (event.actor, event.via) == (agents.a.subject, "inband")
