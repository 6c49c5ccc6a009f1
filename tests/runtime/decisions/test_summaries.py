"""The summary of a held call: a policy entry's ``title`` template and ``redact``
list, checked when the agent loads, recorded on the approval when the call is held, and
rendered by runtime.decisions.summaries from the interaction's own row for every surface."""

from http import HTTPStatus

import pytest
from django.core.management import CommandError

from runtime.agents.agent_models import Agent
from runtime.decisions.decision_models import Effect, Interaction
from runtime.decisions.summaries import (
    REDACTED,
    SUMMARY_MAX,
    held_call_summary,
    held_call_view,
    pairs_summary,
    redacted,
    title_render,
)
from runtime.turn.approval_check import approval_void
from tests.admin_pages import form_data, tenant_admin_client
from tests.core import (
    DEPLOY_TOOL,
    Maker,
    decide,
    deploy_step,
    load_agents,
    open_interaction,
    run,
    send,
)

pytestmark = pytest.mark.django_db

SECRET_TOOL = {
    "server": "deploy",
    "tool": "deploy_build",
    "schema": {"type": "object"},
}


def approval(**request) -> Interaction:
    """An approval as a list reads it: its own row, nothing else."""
    return Interaction(kind=Interaction.Kind.APPROVAL, request=request, detail={})


# --- rendering (pure) ----------------------------------------------------------------------


def test_a_title_fills_its_fields_from_the_arguments_nested_paths_included():
    arguments = {"build": "2026.10.06-1", "target": {"env": "production", "hosts": ["a", "b"]}}
    assert title_render("Deploy {build} to {target.env}", arguments) == (
        "Deploy 2026.10.06-1 to production"
    )
    assert title_render("first host {target.hosts.0}, all {target.hosts}", arguments) == (
        'first host a, all ["a","b"]'
    )
    assert title_render("{{literal}} {build}", arguments) == "{literal} 2026.10.06-1"


def test_a_title_never_raises_on_missing_or_odd_fields():
    assert title_render("Deploy {build} to {environment}", {}) == (
        "Deploy (no build) to (no environment)"
    )
    assert title_render("{a.b.c}", {"a": {"b": 3}}) == "(no a.b.c)"
    assert title_render("{a.9}", {"a": [1]}) == "(no a.9)"
    # Templates that no load would accept still render, as their text.
    assert title_render("odd { brace {x!r}", {"x": 1}) == "odd { brace {x!r}"
    assert title_render("{n} {flag} {none}", {"n": 4.5, "flag": True, "none": None}) == (
        "4.5 true null"
    )


def test_a_title_is_one_line_of_bounded_plain_text():
    value = "line one\nline two\t\u202eevil\u202c" + "x" * 500
    rendered = title_render("Deploy {build}", {"build": value})
    assert "\n" not in rendered and "\u202e" not in rendered and "\u202c" not in rendered
    assert rendered.startswith("Deploy line one line two evil")
    assert rendered.endswith("…") and len(rendered) <= 200


def test_without_a_title_the_summary_is_the_top_level_pairs_by_key():
    assert pairs_summary({"environment": "production", "build": 42}) == (
        'build=42, environment="production"'
    )
    assert pairs_summary({}) == "no arguments"
    assert pairs_summary({"labels": ["a", "b"], "ok": False, "note": None}) == (
        'labels=["a","b"], note=null, ok=false'
    )


def test_the_pairs_are_cut_sensibly():
    long = pairs_summary({"message": "word " * 40})
    assert long.startswith('message="word word') and long.endswith('…"')
    many = pairs_summary({f"field{i:02}": f"value number {i}" for i in range(20)})
    assert len(many) <= SUMMARY_MAX
    assert many.startswith('field00="value number 0", field01="value number 1"')
    assert many.endswith(" more") and "… +" in many
    nested = pairs_summary({"spec": {"replicas": 3, "image": "x" * 100}})
    assert nested.startswith('spec={"image":"xxx') and nested.endswith("…")


def test_redaction_replaces_fields_and_paths_and_leaves_the_arguments_alone():
    arguments = {"token": "s3cret", "auth": {"key": "k", "user": "u"}, "hosts": ["h1", "h2"]}
    shown = redacted(arguments, ["token", "auth.key", "hosts.1", "missing", "auth.nope.deeper"])
    assert shown == {
        "token": REDACTED,
        "auth": {"key": REDACTED, "user": "u"},
        "hosts": ["h1", REDACTED],
    }
    assert arguments["token"] == "s3cret" and arguments["auth"]["key"] == "k"


def test_the_view_redacts_arguments_and_summary_unless_revealed():
    interaction = approval(
        call={
            "server": "vault",
            "tool": "rotate",
            "arguments": {"name": "db", "token": "s3cret", "auth": {"key": "k"}},
            "title": "Rotate {name} with {token} ({auth.key.inner})",
            "redact": ["token", "auth"],
        }
    )
    view = held_call_view(interaction)
    assert view == {
        "server": "vault",
        "tool": "rotate",
        "arguments": {"name": "db", "token": REDACTED, "auth": REDACTED},
        "summary": f"Rotate db with {REDACTED} ({REDACTED})",
        "impact": "",
    }
    assert "s3cret" not in str(view) and "'k'" not in str(view)
    assert held_call_summary(interaction) == view["summary"]
    revealed = held_call_view(interaction, reveal=True)
    assert revealed["arguments"]["token"] == "s3cret"
    assert revealed["summary"] == "Rotate db with s3cret ((no auth.key.inner))"
    untitled = approval(
        call={"server": "s", "tool": "t", "arguments": {"a": 1, "pin": 1234}, "redact": ["pin"]}
    )
    assert held_call_summary(untitled) == f"a=1, pin={REDACTED}"


def test_the_view_is_none_for_questions_and_copes_with_old_rows():
    question = Interaction(kind=Interaction.Kind.QUESTION, request={"questionId": "q"})
    assert held_call_view(question) is None and held_call_summary(question) == ""
    old = Interaction(
        kind=Interaction.Kind.APPROVAL, request={"step": 1}, detail={"server": "s", "tool": "t"}
    )
    assert held_call_view(old) == {
        "server": "s",
        "tool": "t",
        "arguments": {},
        "summary": "no arguments",
        "impact": "",
    }
    broken = approval(
        call={"server": "s", "tool": "t", "arguments": "nope", "title": 7, "redact": "x"}
    )
    assert held_call_view(broken)["summary"] == "no arguments"


# --- recorded when the call is held --------------------------------------------------------


def test_a_held_call_records_its_call_and_its_policy_title_and_redaction(make_agent, agents):
    make_agent(
        "titled",
        [deploy_step("production", build="b-7")],
        tools=[DEPLOY_TOOL],
        tool_policy={
            "deploy/deploy_build": {
                "action": "approve",
                "title": "Deploy {build} to {environment}",
                "redact": ["build"],
            }
        },
    )
    interaction = open_interaction(run(send(agents.a, "titled")))
    assert interaction.request["call"] == {
        "server": "deploy",
        "tool": "deploy_build",
        "arguments": {"build": "b-7", "environment": "production"},
        "title": "Deploy {build} to {environment}",
        "redact": ["build"],
    }
    assert held_call_summary(interaction) == f"Deploy {REDACTED} to production"
    assert held_call_view(interaction, reveal=True)["summary"] == "Deploy b-7 to production"
    # The wire's prompt never carries arguments (interactions/v1: detail is never a call's
    # arguments), a title included.
    assert interaction.prompt == "Approve deploy / deploy_build?"
    # An edit of the policy afterwards does not change what the item was held under.
    agent = Agent.objects.get(slug="titled", tenant=agents.a.tenant)
    agent.tool_policy = {"deploy/deploy_build": "approve"}
    agent.save(update_fields=["tool_policy"])
    interaction.refresh_from_db()
    assert held_call_summary(interaction) == f"Deploy {REDACTED} to production"


def test_a_demo_deployment_is_summarised_by_its_title(agents):
    interaction = Maker(agents.a).approval(build="2026.10.06-1")
    assert held_call_summary(interaction) == "Deploy 2026.10.06-1 to staging"


def test_an_approval_without_a_title_summarises_its_pairs(make_agent, agents):
    make_agent(
        "untitled",
        [deploy_step("staging", build="2026.10.06-1")],
        tools=[DEPLOY_TOOL],
        tool_policy={"deploy/deploy_build": "approve"},
    )
    interaction = open_interaction(run(send(agents.a, "untitled")))
    assert held_call_summary(interaction) == 'build="2026.10.06-1", environment="staging"'


def test_a_voided_approval_is_held_again_under_the_policy_now(make_agent, agents):
    agent = make_agent(
        "voided",
        [deploy_step("staging", build="b-1"), {"reply": "done"}],
        tools=[DEPLOY_TOOL],
        tool_policy={"deploy/deploy_build": "approve"},
    )
    interaction = open_interaction(run(send(agents.a, "voided")))
    decide(interaction, approved=True)
    effect = Effect.objects.get(public_id=interaction.public_id)
    agent.tool_policy = {"deploy/deploy_build": {"action": "approve", "title": "Ship {build}"}}
    agent.save(update_fields=["tool_policy"])
    task = interaction.task
    task.refresh_from_db()
    assert approval_void(task=task, effect=effect, reason="the policy changed") is False
    interaction.refresh_from_db()
    assert interaction.state == Interaction.State.OPEN
    assert interaction.request["step"] == effect.step
    assert held_call_summary(interaction) == "Ship b-1"


# --- checked when the agent loads ----------------------------------------------------------

AGENT = """---
name: helper
description: Helps.
tools:
  - {server: deploy, tool: deploy_build}
policy:
  deploy/deploy_build: ENTRY
---
Be helpful.
"""


def load(tmp_path, entry: str) -> str:
    (tmp_path / "helper.md").write_text(AGENT.replace("ENTRY", entry))
    return load_agents(tmp_path)


def test_an_agent_file_with_a_title_and_redact_loads(world, tmp_path):
    load(
        tmp_path,
        '{action: approve, title: "Deploy {build} to {target.env} {{x}}", redact: [token, auth.key]}',
    )
    entry = Agent.objects.get(slug="helper").tool_policy["deploy/deploy_build"]
    assert entry["title"] == "Deploy {build} to {target.env} {{x}}"
    assert entry["redact"] == ["token", "auth.key"]


@pytest.mark.parametrize(
    "entry, field, message",
    [
        ('{action: approve, title: "Deploy {build"}', "title", "has an unmatched '{' at character 8"),
        ('{action: approve, title: "Deploy build}"}', "title", "has an unmatched '}'"),
        ('{action: approve, title: "Deploy {}"}', "title", "'{}' is not an argument"),
        ('{action: approve, title: "Deploy {build!r}"}', "title", "'{build!r}' is not an argument"),
        ('{action: approve, title: "Deploy {build:>9}"}', "title", "'{build:>9}' is not an argument"),
        ('{action: approve, title: "Deploy {a..b}"}', "title", "'{a..b}' is not an argument"),
        ("{action: approve, title: 12}", "title", "must be a text such as"),
        ('{action: approve, title: ""}', "title", "is required"),
        ('{action: approve, title: "   "}', "title", "must be a text such as"),
        ("{action: approve, title: " + "x" * 201 + "}", "title", "must be at most 200 characters"),
        ("{action: approve, redact: token}", "redact", "must be a list of argument names"),
        ("{action: approve, redact: []}", "redact", "must be a list of argument names"),
        ("{action: approve, redact: [3]}", "redact.0", "must be a string"),
        ('{action: approve, redact: ["a b"]}', "redact", "'a b' is not an argument name"),
        ('{action: approve, redact: ["a."]}', "redact", "'a.' is not an argument name"),
    ],
)  # fmt: skip
def test_a_bad_title_or_redact_fails_the_load_naming_line_and_field(
    world, tmp_path, entry, field, message
):
    with pytest.raises(CommandError) as caught:
        load(tmp_path, entry)
    text = str(caught.value)
    assert f"helper.md:7: policy.deploy/deploy_build.{field}: {message}" in text, text
    assert not Agent.objects.exists()


def test_the_admin_policy_table_edits_title_and_redact_and_checks_them(make_agent, agents):
    agent = make_agent(
        "shipper",
        [deploy_step()],
        tools=[DEPLOY_TOOL],
        tool_policy={"deploy/deploy_build": "approve"},
    )
    client = tenant_admin_client(agents.a)
    url = f"/admin/runtime/agent/{agent.pk}/change/"
    page = client.get(url).content.decode()
    assert ">title</th>" in page and ">redact</th>" in page
    data = form_data(page)
    row = next(
        name[: -len("tool")]
        for name, value in data.items()
        if name.endswith("-tool") and value == "deploy/deploy_build"
    )
    data[f"{row}title"] = "Deploy {build"
    response = client.post(url, data)
    assert response.status_code == HTTPStatus.OK
    assert "has an unmatched" in response.content.decode()
    agent.refresh_from_db()
    assert agent.tool_policy == {"deploy/deploy_build": "approve"}
    data[f"{row}title"] = "Deploy {build} to {environment}"
    data[f"{row}redact"] = "build, token"
    response = client.post(url, data)
    assert response.status_code == HTTPStatus.FOUND
    agent.refresh_from_db()
    assert agent.tool_policy == {
        "deploy/deploy_build": {
            "action": "approve",
            "title": "Deploy {build} to {environment}",
            "redact": ["build", "token"],
        }
    }


def test_the_migration_records_the_held_call_of_approvals_held_before(agents):
    import importlib

    from django.apps import apps

    migration = importlib.import_module("runtime.migrations.0018_interaction_held_call")
    interaction = Maker(agents.a).approval(build="b-9")
    agent = Agent.objects.get(tenant=agents.a.tenant, slug="deployer")
    agent.tool_policy = {"deploy/deploy_build": {"action": "approve", "title": "Ship {build}"}}
    agent.save(update_fields=["tool_policy"])
    Interaction.objects.filter(pk=interaction.pk).update(request={"step": 1})
    question = Maker(agents.a).question()
    migration.held_calls_record(apps, None)
    interaction.refresh_from_db()
    assert interaction.request == {
        "step": 1,
        "call": {
            "server": "deploy",
            "tool": "deploy_build",
            "arguments": {"build": "b-9", "environment": "staging"},
            "title": "Ship {build}",
        },
    }
    assert held_call_summary(interaction) == "Ship b-9"
    question_request = question.request
    question.refresh_from_db()
    assert question.request == question_request
