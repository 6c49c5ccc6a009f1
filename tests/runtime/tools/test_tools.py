"""The tool policy (allow, deny, approve), argument checks, undeclared tools, and the built-in
request_connection tool (interactions/v1, kind connection)."""

import pytest

from runtime.agents.agent_models import DemoRecord
from runtime.decisions.decision_models import Effect, Interaction
from runtime.decisions.flow import interactions_connect_app
from runtime.kernel.task_models import Task
from runtime.tools.demo_servers import SERVERS
from runtime.tools.protocol import CallContext
from tests.core import (
    DEPLOY_TOOL,
    REPORT_RESULT,
    deploy_step,
    in_band,
    open_interaction,
    reply,
    run,
    start,
    states,
    status_text,
)

pytestmark = pytest.mark.django_db


def paused_ever(task: Task) -> bool:
    return bool({"TASK_STATE_AUTH_REQUIRED", "TASK_STATE_INPUT_REQUIRED"} & set(states(task)))


def test_an_allowed_call_is_sent_without_a_pause(agents, make_agent):
    make_agent(
        "allowed",
        [deploy_step(), *REPORT_RESULT],
        tools=[DEPLOY_TOOL],
        tool_policy={"deploy/deploy_build": "allow"},
    )
    task = start(agents.a, "allowed", "go")
    assert task.state == "TASK_STATE_COMPLETED"
    assert status_text(task).startswith("ok: ")
    assert "deploymentId" in status_text(task)
    assert not paused_ever(task)
    assert not Interaction.objects.exists()
    effect = Effect.objects.get()
    assert (effect.state, effect.approved_by) == (Effect.State.SUCCEEDED, "policy")
    assert DemoRecord.objects.count() == 1


@pytest.mark.parametrize(
    "policy", [{"deploy/deploy_build": "deny"}, {"deploy": "deny"}, {"deploy": {"action": "deny"}}]
)
def test_a_denied_call_is_tool_denied_without_a_pause(agents, make_agent, policy):
    make_agent("denied", [deploy_step(), *REPORT_RESULT], tools=[DEPLOY_TOOL], tool_policy=policy)
    task = start(agents.a, "denied", "go")
    assert task.state == "TASK_STATE_COMPLETED"
    assert status_text(task) == "error: tool.denied"
    assert not paused_ever(task)
    assert not Interaction.objects.exists()
    assert Effect.objects.get().state == Effect.State.DENIED
    assert not DemoRecord.objects.exists()


def test_the_most_specific_policy_rule_wins(agents, make_agent):
    make_agent(
        "specific",
        [deploy_step(), *REPORT_RESULT],
        tools=[DEPLOY_TOOL],
        tool_policy={"deploy": "deny", "deploy/deploy_build": "allow"},
    )
    assert status_text(start(agents.a, "specific", "go")).startswith("ok: ")


def test_an_undeclared_policy_holds_the_call_for_approval(agents, make_agent):
    make_agent("default-policy", [deploy_step(), *REPORT_RESULT], tools=[DEPLOY_TOOL])
    task = start(agents.a, "default-policy", "go")
    assert task.state == "TASK_STATE_AUTH_REQUIRED"
    assert open_interaction(task).kind == "approval"


@pytest.mark.parametrize("policy", ["allow", "approve", "deny"])
def test_invalid_arguments_go_back_to_the_model_and_nothing_is_held(agents, make_agent, policy):
    make_agent(
        "strict",
        [deploy_step(environment="moon"), *REPORT_RESULT],
        tools=[DEPLOY_TOOL],
        tool_policy={"deploy/deploy_build": policy},
    )
    task = start(agents.a, "strict", "go")
    assert task.state == "TASK_STATE_COMPLETED"
    assert status_text(task).startswith("error: invalid arguments at environment:")
    assert "'moon' is not one of" in status_text(task)
    assert not paused_ever(task)
    assert not Effect.objects.exists()
    assert not Interaction.objects.exists()


@pytest.mark.parametrize(
    "step",
    [deploy_step(tool="rollback"), {"call": {"server": "nowhere", "tool": "x", "args": {}}}],
    ids=["undeclared-tool", "unknown-server"],
)
def test_an_undeclared_tool_is_an_error_to_the_model(agents, make_agent, step):
    make_agent(
        "undeclared", [step, *REPORT_RESULT], tools=[DEPLOY_TOOL], tool_policy={"deploy": "allow"}
    )
    task = start(agents.a, "undeclared", "go")
    assert task.state == "TASK_STATE_COMPLETED"
    assert status_text(task).startswith("error: unknown tool ")
    assert not Effect.objects.exists()
    assert not Interaction.objects.exists()


# --- request_connection ------------------------------------------------------------------------


def connect_step(app="github", reason="to open a pull request"):
    return {"connect": {"app": app, "reason": reason}}


def test_request_connection_is_off_unless_loop_connections(agents, make_agent):
    make_agent("no-connections", [connect_step(), *REPORT_RESULT])
    task = start(agents.a, "no-connections", "go")
    assert task.state == "TASK_STATE_COMPLETED"
    assert status_text(task) == "error: unknown tool countersign / request_connection"
    assert not Interaction.objects.exists()


def test_request_connection_pauses_with_a_connection_interaction(agents, make_agent):
    make_agent("connector", [connect_step(), *REPORT_RESULT], connections_enabled=True)
    task = start(agents.a, "connector", "go")
    assert task.state == "TASK_STATE_AUTH_REQUIRED"
    interaction = open_interaction(task)
    assert interaction.kind == "connection"
    assert interaction.prompt == "Connect github: to open a pull request"
    assert status_text(task) == "Connect github: to open a pull request"
    assert interaction.detail == {"app": "github", "reason": "to open a pull request"}


def test_request_connection_cuts_the_app_and_the_reason(agents, make_agent):
    app, reason = "a" * 100, "r" * 300
    make_agent("long-connector", [connect_step(app, reason)], connections_enabled=True)
    task = start(agents.a, "long-connector", "go")
    interaction = open_interaction(task)
    assert interaction.detail == {"app": "a" * 80, "reason": "r" * 280}
    assert interaction.prompt == f"Connect {'a' * 80}: {'r' * 280}"


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
def test_a_connection_answer_tells_the_model_connected_or_not(agents, make_agent, answer, told):
    make_agent("connector", [connect_step(), *REPORT_RESULT], connections_enabled=True)
    asked = start(agents.a, "connector", "go")
    sent = reply(asked, "done", metadata=in_band(open_interaction(asked), **answer))
    assert sent.task.pk == asked.pk
    assert status_text(run(asked)) == told


def test_connecting_an_app_answers_its_open_connections_in_that_tenant_only(agents, make_agent):
    steps = [
        {"connect": {"app": "{{ text }}", "reason": "needed"}},
        *REPORT_RESULT,
    ]
    make_agent("connector", steps, connections_enabled=True)
    make_agent("connector", steps, connections_enabled=True, tenant=agents.b.tenant)
    github = [start(agents.a, "connector", "github") for _ in range(2)]
    slack = start(agents.a, "connector", "slack")
    other_tenant = start(agents.b, "connector", "github")

    answered = interactions_connect_app(
        tenant=agents.a.tenant, app="github", by="user:admin@acme.test"
    )

    assert answered == 2
    for task in github:
        run(task)
        assert task.state == "TASK_STATE_COMPLETED"
        assert status_text(task) == "ok: Connected: github"
    still_open = Interaction.objects.filter(state=Interaction.State.OPEN)
    assert {i.task for i in still_open} == {slack, other_tenant}
    connected = Interaction.objects.filter(state=Interaction.State.ANSWERED)
    assert {(i.answered_by, i.answered_via) for i in connected} == {
        ("user:admin@acme.test", "connection")
    }
    other_tenant.refresh_from_db()
    assert other_tenant.state == "TASK_STATE_AUTH_REQUIRED"
    # Nothing left to answer: a second call is a no-op.
    assert interactions_connect_app(tenant=agents.a.tenant, app="github", by="user:x") == 0


def test_a_policy_may_forbid_bulk_decisions_and_allows_them_otherwise():
    from types import SimpleNamespace

    from runtime.policy.lookup import policy_for

    agent = SimpleNamespace(
        tool_policy={
            "deploy/deploy_build": {"action": "approve", "bulk": False},
            "deploy": {"action": "approve", "deciders": "operators"},
            "github": "approve",
        }
    )
    assert policy_for(agent, "deploy", "deploy_build", {}).bulk is False
    assert policy_for(agent, "deploy", "rollback", {}).bulk is True
    assert policy_for(agent, "github", "open_pr", {}).bulk is True
    assert policy_for(agent, "other", "x", {}).bulk is True


def test_a_demo_deployment_sent_again_finds_its_first_record(agents):
    # An idempotent resend (runtime.turn.calls: a call found "sending") reaches the server
    # again with the same effect id: one record, the same deployment id.
    server = SERVERS["deploy"]
    ctx = CallContext(tenant=agents.a.tenant, effect_id="eff_again", subject=agents.a.subject)
    first = server.call("deploy_build", {"build": "b-1", "environment": "staging"}, ctx)
    again = server.call("deploy_build", {"build": "b-1", "environment": "staging"}, ctx)

    assert first == again
    record = DemoRecord.objects.get(effect_id="eff_again")
    assert first["deploymentId"] == f"dep-{record.pk}"
    assert (record.tenant, record.server, record.kind) == (agents.a.tenant, "deploy", "deployment")
    assert record.data == {"build": "b-1", "environment": "staging"}
    assert record.created_at is not None


# --- arguments against the tool's schema ---------------------------------------------------


def test_arguments_are_judged_as_jsonschema_validate_judges_them():
    import jsonschema

    from runtime.tools.catalog import validate_arguments

    schema = {
        "type": "object",
        "properties": {"env": {"enum": ["staging", "production"]}, "n": {"type": "integer"}},
        "required": ["env"],
        "additionalProperties": False,
    }
    cases = [{"env": "staging"}, {"env": "moon"}, {"n": 1}, {"env": "staging", "x": 1}, {}]
    for arguments in cases:
        try:
            jsonschema.validate(arguments, schema)
            expected = None
        except jsonschema.ValidationError as exc:
            where = "/".join(str(p) for p in exc.absolute_path) or "arguments"
            expected = f"invalid arguments at {where}: {exc.message}"
        assert validate_arguments(schema, arguments) == expected
    assert validate_arguments(schema, {"env": "moon"}) == (
        "invalid arguments at env: 'moon' is not one of ['staging', 'production']"
    )
    assert validate_arguments(schema, ["env"]) == "arguments must be an object"


def test_a_schema_is_checked_once_and_a_bad_one_every_time(monkeypatch):
    import jsonschema

    from runtime.tools import catalog as tools

    tools._validator.cache_clear()
    checked = []
    check_schema = jsonschema.Draft202012Validator.check_schema

    def counting(schema, *args, **kwargs):
        checked.append(schema)
        return check_schema(schema, *args, **kwargs)

    monkeypatch.setattr(jsonschema.Draft202012Validator, "check_schema", counting)
    schema = {"type": "object", "properties": {"n": {"type": "integer"}}}
    for n in range(5):
        assert tools.validate_arguments(schema, {"n": n}) is None
    assert tools.validate_arguments(dict(reversed(schema.items())), {"n": "x"}) == (
        "invalid arguments at n: 'x' is not of type 'integer'"
    )
    assert len(checked) == 1  # the same schema, keys in any order

    bad = {"type": "object", "properties": {"n": {"type": "no-such-type"}}}
    for _ in range(2):
        assert tools.validate_arguments(bad, {"n": 1}).startswith("the tool's schema is invalid")
    assert len(checked) == 3


def test_a_very_large_schema_is_judged_but_not_kept():
    import json

    from runtime.tools import catalog as tools

    tools._validator.cache_clear()
    big = {
        "type": "object",
        "properties": {f"p{i}": {"type": "string", "description": "x" * 100} for i in range(700)},
    }
    assert len(json.dumps(big)) > tools.SCHEMA_CACHE_MAX_CHARS
    assert (
        tools.validate_arguments(big, {"p1": 1})
        == "invalid arguments at p1: 1 is not of type 'string'"
    )
    assert tools.validate_arguments(big, {"p1": "ok"}) is None
    assert tools._validator.cache_info().currsize == 0
