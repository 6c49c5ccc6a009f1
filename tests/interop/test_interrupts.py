"""Flows 3 (a held deploy) and 4 (a connection, then a held pull request) through the a2a-sdk
client: the pause in-band with interactions/v1 on and off, text never approving, and the
held call's arguments never on the wire."""

import json

import pytest
from a2a.types import TaskState
from a2a.utils.errors import InvalidParamsError, UnsupportedOperationError

from connections.models import App
from connections.services import connection_connect_token
from runtime.agents.agent_models import DemoRecord
from runtime.decisions.decision_models import Effect, Interaction
from runtime.kernel import extensions as ext
from runtime.kernel.task_models import Task
from tenants.models import Tenant, User
from tests.core import caller_may_approve, flow_answer
from tests.sdk_client import as_dict, status_text, user_message

pytestmark = pytest.mark.django_db(transaction=True)

BUILD = "2026.10.06-1"
DEPLOY = f"deploy build {BUILD} to staging"
ON = [ext.INTERACTIONS]


def held_deploy(partner, agents, extensions):
    task = partner.send(agents["deployer"], user_message(DEPLOY), extensions=extensions)
    assert task.status.state == TaskState.TASK_STATE_AUTH_REQUIRED
    assert status_text(task) == "Approve deploy / deploy_build?"
    # The held call's arguments stay on the server: the pause names the tool, not the build.
    assert BUILD not in json.dumps(as_dict(task.status))
    return task


def answer(task, *, approved, text="ok", interaction_id=None):
    return user_message(
        text,
        task_id=task.id,
        context_id=task.context_id,
        metadata={
            ext.INTERACTIONS: {
                "interactionId": interaction_id or interaction_of(task).public_id,
                "approved": approved,
            }
        },
    )


def interaction_of(task) -> Interaction:
    return Interaction.objects.filter(task__public_id=task.id).latest("created_at")


def test_held_deploy_with_the_extension_carries_the_approval_and_approves_in_band(
    partner, agents, demo
):
    caller_may_approve(Tenant.objects.get(slug=demo["tenant"]))
    task = held_deploy(partner, agents, ON)
    status = as_dict(task.status)
    pause = status["message"]["metadata"][ext.INTERACTIONS]
    assert pause["kind"] == "approval"
    assert pause["prompt"] == "Approve deploy / deploy_build?"
    assert pause["detail"]["server"] == "deploy" and pause["detail"]["tool"] == "deploy_build"
    assert pause["interactionId"] == interaction_of(task).public_id
    assert ext.INTERACTIONS in status["message"]["extensions"]
    # GetTask shows the same pause.
    again = partner.get(agents["deployer"], task.id, extensions=ON)
    assert as_dict(again.status)["message"]["metadata"][ext.INTERACTIONS] == pause

    with pytest.raises(UnsupportedOperationError):
        partner.send(
            agents["deployer"],
            user_message("yes, approved", task_id=task.id, context_id=task.context_id),
            extensions=ON,
        )
    assert interaction_of(task).state == Interaction.State.OPEN

    done = partner.send(agents["deployer"], answer(task, approved=True), extensions=ON)
    assert done.id == task.id
    assert done.status.state == TaskState.TASK_STATE_COMPLETED
    assert status_text(done) == f"Deployed build {BUILD} to staging."
    record = DemoRecord.objects.get(kind="deployment")
    assert record.data == {"build": BUILD, "environment": "staging"}
    assert interaction_of(task).answered_via == "inband"


def test_held_deploy_without_the_extension_is_plain_text_and_an_operator_approves(
    partner, agents, demo
):
    task = held_deploy(partner, agents, ())
    assert not task.status.message.metadata
    assert list(task.status.message.extensions) == []
    with pytest.raises(UnsupportedOperationError):
        partner.send(
            agents["deployer"], user_message("approve", task_id=task.id, context_id=task.context_id)
        )

    flow_answer(
        tenant=Tenant.objects.get(slug=demo["tenant"]),
        interaction_id=interaction_of(task).public_id,
        answer={"approved": True},
        by="user:operator@demo.test",
        via="page",
    )
    # No client message: the task resumes on its own.
    done = partner.wait_for(agents["deployer"], task.id)
    assert done.status.state == TaskState.TASK_STATE_COMPLETED
    assert status_text(done) == f"Deployed build {BUILD} to staging."


def test_denied_deploy_tells_the_model_and_the_turn_completes_without_deploying(
    partner, agents, demo
):
    caller_may_approve(Tenant.objects.get(slug=demo["tenant"]))
    task = held_deploy(partner, agents, ON)
    done = partner.send(agents["deployer"], answer(task, approved=False), extensions=ON)
    assert done.status.state == TaskState.TASK_STATE_COMPLETED
    assert status_text(done).startswith(f"Build {BUILD} was not deployed to staging")
    row = Task.objects.get(public_id=task.id)
    assert {"type": "tool_result", "ok": False, "error": "tool.denied"}.items() <= next(
        e for e in row.transcript if e["type"] == "tool_result"
    ).items()
    assert Effect.objects.get(task=row).state == Effect.State.DENIED
    assert not DemoRecord.objects.exists()


def test_in_band_answer_naming_another_interaction_is_invalid_params(partner, agents):
    task = held_deploy(partner, agents, ON)
    with pytest.raises(InvalidParamsError):
        partner.send(
            agents["deployer"],
            answer(task, approved=True, interaction_id="eff_notthisone"),
            extensions=ON,
        )
    assert interaction_of(task).state == Interaction.State.OPEN


@pytest.mark.parametrize("extensions", [ON, ()], ids=["extension-on", "extension-off"])
def test_pull_request_asks_for_github_resumes_when_connected_then_waits_for_approval(
    partner, agents, demo, extensions
):
    coder = agents["coder"]
    task = partner.send(
        coder,
        user_message("open a pull request on payments-api: fix rounding"),
        extensions=extensions,
    )
    assert task.status.state == TaskState.TASK_STATE_AUTH_REQUIRED
    assert status_text(task).startswith("Connect github")
    if extensions:
        pause = as_dict(task.status)["message"]["metadata"][ext.INTERACTIONS]
        assert pause["kind"] == "connection" and pause["detail"]["app"] == "github"
    else:
        assert not task.status.message.metadata

    connection_connect_token(
        tenant=Tenant.objects.get(slug=demo["tenant"]),
        app=App.objects.get(slug="github"),
        token="ghp_x",
        by=User.objects.get(email="operator@demo.test"),
    )
    # The task resumes with no client message, up to the held pull request.
    held = partner.wait_for(
        coder,
        task.id,
        states={TaskState.TASK_STATE_AUTH_REQUIRED},
        extensions=extensions,
        predicate=lambda t: status_text(t) == "Approve github / create_pull_request?",
    )
    assert "payments-api" not in json.dumps(as_dict(held.status))
    assert "fix rounding" not in json.dumps(as_dict(held.status))
    if extensions:
        pause = as_dict(held.status)["message"]["metadata"][ext.INTERACTIONS]
        assert pause["kind"] == "approval"
        done = partner.send(coder, answer(held, approved=True), extensions=extensions)
    else:
        assert not held.status.message.metadata
        flow_answer(
            tenant=Tenant.objects.get(slug=demo["tenant"]),
            interaction_id=interaction_of(held).public_id,
            answer={"approved": True},
            by="user:operator@demo.test",
            via="page",
        )
        done = partner.wait_for(coder, task.id)
    assert done.status.state == TaskState.TASK_STATE_COMPLETED
    assert status_text(done).startswith("Opened pull request https://github.example/payments-api/")
    assert DemoRecord.objects.get(kind="pull_request").data == {
        "repo": "payments-api",
        "title": "fix rounding",
    }
