"""The tool policy (allow, deny, approve), argument checks, undeclared tools, and the built-in
request_connection tool (interactions/v1, kind connection)."""

import pytest

from runtime.models import DemoRecord, Effect, Interaction, Task, TaskEvent
from runtime.services.interactions import interactions_connect_app
from tests.a2a_endpoint.conftest import (
    EXTENSIONS,
    answer_message,
    as_task,
    interaction_metadata,
    interaction_of,
    result_of,
    rpc,
    status_text,
    task_of,
    user_message,
)
from tests.runtime.conftest import DEPLOY_TOOL, REPORT_RESULT

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("eager")]


def deploy_step(environment="staging", tool="deploy_build"):
    return {
        "call": {
            "server": "deploy",
            "tool": tool,
            "args": {"build": "b-1", "environment": environment},
        }
    }


def run(client, token, slug, text="go", tenant="acme"):
    message = user_message(text)
    response = rpc(
        client,
        f"/a2a/{tenant}/{slug}",
        "SendMessage",
        {"message": message},
        token=token,
        headers=EXTENSIONS,
    )
    return task_of(response)


def paused_ever(task_id: str) -> bool:
    return TaskEvent.objects.filter(
        task__public_id=task_id,
        state__in=["TASK_STATE_AUTH_REQUIRED", "TASK_STATE_INPUT_REQUIRED"],
    ).exists()


def test_an_allowed_call_is_sent_without_a_pause(agents, client, make_agent):
    make_agent(
        "allowed",
        [deploy_step(), *REPORT_RESULT],
        tools=[DEPLOY_TOOL],
        tool_policy={"deploy/deploy_build": "allow"},
    )
    task = run(client, agents.a.token, "allowed")
    assert task["status"]["state"] == "TASK_STATE_COMPLETED"
    assert status_text(task).startswith("ok: ")
    assert "deploymentId" in status_text(task)
    assert not paused_ever(task["id"])
    assert not Interaction.objects.exists()
    effect = Effect.objects.get()
    assert (effect.state, effect.approved_by) == (Effect.State.SUCCEEDED, "policy")
    assert DemoRecord.objects.count() == 1


@pytest.mark.parametrize(
    "policy", [{"deploy/deploy_build": "deny"}, {"deploy": "deny"}, {"deploy": {"action": "deny"}}]
)
def test_a_denied_call_is_tool_denied_without_a_pause(agents, client, make_agent, policy):
    make_agent("denied", [deploy_step(), *REPORT_RESULT], tools=[DEPLOY_TOOL], tool_policy=policy)
    task = run(client, agents.a.token, "denied")
    assert task["status"]["state"] == "TASK_STATE_COMPLETED"
    assert status_text(task) == "error: tool.denied"
    assert not paused_ever(task["id"])
    assert not Interaction.objects.exists()
    assert Effect.objects.get().state == Effect.State.DENIED
    assert not DemoRecord.objects.exists()


def test_the_most_specific_policy_rule_wins(agents, client, make_agent):
    make_agent(
        "specific",
        [deploy_step(), *REPORT_RESULT],
        tools=[DEPLOY_TOOL],
        tool_policy={"deploy": "deny", "deploy/deploy_build": "allow"},
    )
    assert status_text(run(client, agents.a.token, "specific")).startswith("ok: ")


def test_an_undeclared_policy_holds_the_call_for_approval(agents, client, make_agent):
    make_agent("default-policy", [deploy_step(), *REPORT_RESULT], tools=[DEPLOY_TOOL])
    task = run(client, agents.a.token, "default-policy")
    assert task["status"]["state"] == "TASK_STATE_AUTH_REQUIRED"
    assert interaction_of(task)["kind"] == "approval"


@pytest.mark.parametrize("policy", ["allow", "approve", "deny"])
def test_invalid_arguments_go_back_to_the_model_and_nothing_is_held(
    agents, client, make_agent, policy
):
    make_agent(
        "strict",
        [deploy_step(environment="moon"), *REPORT_RESULT],
        tools=[DEPLOY_TOOL],
        tool_policy={"deploy/deploy_build": policy},
    )
    task = run(client, agents.a.token, "strict")
    assert task["status"]["state"] == "TASK_STATE_COMPLETED"
    assert status_text(task).startswith("error: invalid arguments at environment:")
    assert "'moon' is not one of" in status_text(task)
    assert not paused_ever(task["id"])
    assert not Effect.objects.exists()
    assert not Interaction.objects.exists()


@pytest.mark.parametrize(
    "step",
    [deploy_step(tool="rollback"), {"call": {"server": "nowhere", "tool": "x", "args": {}}}],
    ids=["undeclared-tool", "unknown-server"],
)
def test_an_undeclared_tool_is_an_error_to_the_model(agents, client, make_agent, step):
    make_agent(
        "undeclared", [step, *REPORT_RESULT], tools=[DEPLOY_TOOL], tool_policy={"deploy": "allow"}
    )
    task = run(client, agents.a.token, "undeclared")
    assert task["status"]["state"] == "TASK_STATE_COMPLETED"
    assert status_text(task).startswith("error: unknown tool ")
    assert not Effect.objects.exists()
    assert not Interaction.objects.exists()


# --- request_connection ------------------------------------------------------------------------


def connect_step(app="github", reason="to open a pull request"):
    return {"connect": {"app": app, "reason": reason}}


def test_request_connection_is_off_unless_loop_connections(agents, client, make_agent):
    make_agent("no-connections", [connect_step(), *REPORT_RESULT])
    task = run(client, agents.a.token, "no-connections")
    assert task["status"]["state"] == "TASK_STATE_COMPLETED"
    assert status_text(task) == "error: unknown tool countersign / request_connection"
    assert not Interaction.objects.exists()


def test_request_connection_pauses_with_a_connection_interaction(agents, client, make_agent):
    make_agent("connector", [connect_step(), *REPORT_RESULT], connections_enabled=True)
    task = run(client, agents.a.token, "connector")
    assert task["status"]["state"] == "TASK_STATE_AUTH_REQUIRED"
    interaction = interaction_of(task)
    assert interaction["kind"] == "connection"
    assert interaction["prompt"] == "Connect github: to open a pull request"
    assert status_text(task) == "Connect github: to open a pull request"
    assert interaction["detail"] == {"app": "github", "reason": "to open a pull request"}


def test_request_connection_cuts_the_app_and_the_reason(agents, client, make_agent):
    app, reason = "a" * 100, "r" * 300
    make_agent("long-connector", [connect_step(app, reason)], connections_enabled=True)
    task = run(client, agents.a.token, "long-connector")
    interaction = interaction_of(task)
    assert interaction["detail"] == {"app": "a" * 80, "reason": "r" * 280}
    assert interaction["prompt"] == f"Connect {'a' * 80}: {'r' * 280}"


@pytest.mark.parametrize(
    "answer, told",
    [
        ({"value": {"connected": True}}, "ok: Connected: github"),
        ({"value": True}, "ok: Connected: github"),
        ({"approved": True}, "ok: Connected: github"),
        ({"value": {"connected": False}}, "error: Not connected: github"),
        ({"approved": False}, "error: Not connected: github"),
        ({"value": "yes"}, "error: Not connected: github"),
        ({"value": {"connected": "true"}}, "error: Not connected: github"),
    ],
)
def test_a_connection_answer_tells_the_model_connected_or_not(
    agents, client, make_agent, answer, told
):
    make_agent("connector", [connect_step(), *REPORT_RESULT], connections_enabled=True)
    asked = run(client, agents.a.token, "connector")
    message = answer_message(
        asked,
        parts=[{"text": "done"}],
        metadata=interaction_metadata(interaction_of(asked)["interactionId"], **answer),
    )
    response = rpc(
        client, "/a2a/acme/connector", "SendMessage", {"message": message}, token=agents.a.token
    )
    done = task_of(response)
    assert done["id"] == asked["id"]
    assert status_text(done) == told


def test_connecting_an_app_answers_its_open_connections_in_that_tenant_only(
    agents, client, make_agent
):
    steps = [
        {"connect": {"app": "{{ text }}", "reason": "needed"}},
        *REPORT_RESULT,
    ]
    make_agent("connector", steps, connections_enabled=True)
    make_agent("connector", steps, connections_enabled=True, tenant=agents.b.tenant)
    github = [run(client, agents.a.token, "connector", "github") for _ in range(2)]
    slack = run(client, agents.a.token, "connector", "slack")
    other_tenant = run(client, agents.b.token, "connector", "github", tenant="globex")

    answered = interactions_connect_app(
        tenant=agents.a.tenant, app="github", by="user:admin@acme.test"
    )

    assert answered == 2
    for task in github:
        got = as_task(
            result_of(
                rpc(
                    client,
                    "/a2a/acme/connector",
                    "GetTask",
                    {"id": task["id"]},
                    token=agents.a.token,
                )
            )
        )
        assert got["status"]["state"] == "TASK_STATE_COMPLETED"
        assert status_text(got) == "ok: Connected: github"
    still_open = Interaction.objects.filter(state=Interaction.State.OPEN)
    assert {i.task.public_id for i in still_open} == {slack["id"], other_tenant["id"]}
    connected = Interaction.objects.filter(state=Interaction.State.ANSWERED)
    assert {(i.answered_by, i.answered_via) for i in connected} == {
        ("user:admin@acme.test", "connection")
    }
    assert Task.objects.get(public_id=other_tenant["id"]).state == "TASK_STATE_AUTH_REQUIRED"
    # Nothing left to answer: a second call is a no-op.
    assert interactions_connect_app(tenant=agents.a.tenant, app="github", by="user:x") == 0
