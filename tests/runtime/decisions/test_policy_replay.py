"""Policy replay: a draft tool policy run over an agent's recorded calls says how many it would
have allowed, held (for whom) and refused, beside what happened, and lists exactly the calls
that would change."""

from datetime import timedelta
from io import StringIO

import pytest
from django.core.management import CommandError, call_command
from django.utils import timezone

from runtime.decisions.decision_models import Effect
from runtime.decisions.replay import DraftPolicyError, policy_replay
from tests.core import send

pytestmark = pytest.mark.django_db

IN_FORCE = {
    "deploy/deploy_build": [
        {
            "when": [{"field": "environment", "op": "equals", "value": "production"}],
            "action": "approve",
            "approvers": ["admin"],
            "required": 2,
        },
        {"action": "allow"},
    ],
    "deploy/delete_all": "deny",
}


@pytest.fixture
def recorded(agents, make_agent):
    """Six calls journalled under IN_FORCE (what it did with each), one of another agent."""
    agent = make_agent("dep", [], tool_policy=IN_FORCE)
    make_agent("other", [], tool_policy={"deploy": "allow"})
    task = send(agents.a, "dep")
    calls = [
        ("deploy_build", {"build": "b-1", "environment": "production"}, "held"),
        ("deploy_build", {"build": "b-2", "environment": "staging"}, "allowed"),
        ("deploy_build", {"build": "b-3", "environment": "staging"}, "allowed"),
        ("deploy_build", {"build": "b-4", "environment": "production"}, "held"),
        ("rollback", {"build": "b-0"}, "held"),  # no entry: approve, the default
        ("delete_all", {}, "refused"),
    ]
    effects = {}
    for step, (tool, arguments, outcome) in enumerate(calls, start=1):
        effects[arguments.get("build", tool)] = Effect.objects.create(
            public_id=f"eff_replay{step}",
            tenant=agents.a.tenant,
            task=task,
            step=step,
            server="deploy",
            tool=tool,
            arguments=arguments,
            arguments_hash="0" * 64,
            state={"allowed": "succeeded", "held": "succeeded", "refused": "denied"}[outcome],
            approved_by={"allowed": "policy", "held": "user:admin@acme.test"}.get(outcome, ""),
            outcome={"error": "tool.denied", "reason": "denied by the tool policy"}
            if outcome == "refused"
            else {"ok": True},
        )
    other_task = send(agents.a, "other")
    Effect.objects.create(
        public_id="eff_elsewhere",
        tenant=agents.a.tenant,
        task=other_task,
        step=1,
        server="deploy",
        tool="deploy_build",
        arguments={"environment": "staging"},
        arguments_hash="0" * 64,
        state="succeeded",
        approved_by="policy",
    )
    return agent, effects


def replay(agent, policy):
    now = timezone.now()
    return policy_replay(
        agent=agent, policy=policy, since=now - timedelta(days=30), until=now + timedelta(1)
    )


def test_the_policy_in_force_replayed_changes_nothing(recorded):
    agent, _ = recorded
    report = replay(agent, IN_FORCE)
    assert report.calls == 6  # the other agent's call is not this one's
    assert report.recorded == {"allowed": 2, "held": 3, "refused": 1} == report.draft
    assert report.changed == []
    assert report.held_by == {"admin, 2 people": 2, "operator or admin, 1 person": 1}


def test_a_tightened_policy_lists_exactly_the_calls_it_would_now_hold(recorded):
    agent, effects = recorded
    tightened = {
        **IN_FORCE,
        "deploy/deploy_build": {"action": "approve", "approvers": ["operator"]},
    }
    report = replay(agent, tightened)
    assert report.draft == {"allowed": 0, "held": 5, "refused": 1}
    assert [(c.effect_id, c.was, c.would) for c in report.changed] == [
        (effects["b-2"].public_id, "allowed", "held"),
        (effects["b-3"].public_id, "allowed", "held"),
    ]
    assert report.changed[0].held_by == "operator, 1 person"
    assert report.held_by["operator, 1 person"] == 4


def test_a_loosened_policy_lists_exactly_the_calls_it_would_now_let_through(recorded):
    agent, effects = recorded
    loosened = {"deploy/deploy_build": "allow", "deploy/delete_all": "deny", "deploy": "allow"}
    report = replay(agent, loosened)
    assert report.draft == {"allowed": 5, "held": 0, "refused": 1}
    assert {(c.effect_id, c.was, c.would) for c in report.changed} == {
        (effects["b-1"].public_id, "held", "allowed"),
        (effects["b-4"].public_id, "held", "allowed"),
        (effects["b-0"].public_id, "held", "allowed"),
    }


def test_a_draft_that_would_not_load_is_refused_with_where(recorded):
    agent, _ = recorded
    with pytest.raises(DraftPolicyError) as refused:
        replay(agent, {"deploy/deploy_build": {"action": "approve", "impact": "{a|nope}"}})
    assert "deploy/deploy_build.impact" in str(refused.value)


def test_the_command_prints_the_counts_and_the_changed_calls(recorded, tmp_path):
    agent, effects = recorded
    draft = tmp_path / "draft.yaml"
    draft.write_text(
        "policy:\n"
        "  deploy/deploy_build: {action: approve, approvers: [operator]}\n"
        "  deploy/delete_all: deny\n"
    )
    out = StringIO()
    call_command("policy", "replay", "acme/dep", "--policy", str(draft), stdout=out)
    text = out.getvalue()
    assert "6 recorded calls of acme/dep" in text
    assert "allowed            2         0" in text
    assert "held               3         5" in text
    assert "2 calls would change" in text
    assert f"{effects['b-2'].public_id} deploy/deploy_build" in text
    assert "allowed -> held (operator, 1 person)" in text
    draft.write_text("policy: {deploy/deploy_build: {action: launch}}\n")
    with pytest.raises(CommandError, match="does not load"):
        call_command("policy", "replay", "dep", "--tenant", "acme", "--policy", str(draft))
    with pytest.raises(CommandError, match="No agent"):
        call_command("policy", "replay", "acme/nope", "--policy", str(draft))


SHADOWED = {
    "deploy/deploy_build": [
        {
            "when": [{"field": "environment", "op": "equals", "value": "production"}],
            "action": "approve",
            "approvers": ["admin"],
            "mode": "shadow",
        },
        {"action": "allow"},
    ]
}


def test_a_shadow_rule_holds_nothing_and_records_what_it_would_have_done(agents, make_agent):
    from runtime.kernel.task_models import TaskState
    from tests.admin_pages import tenant_admin_client
    from tests.core import DEPLOY_TOOL, REPORT_RESULT, deploy_step, run

    agent = make_agent(
        "shadowed",
        [deploy_step("production", build="b-9"), *REPORT_RESULT],
        tools=[DEPLOY_TOOL],
        tool_policy=SHADOWED,
    )
    production = run(send(agents.a, "shadowed"))
    # Not held: the shadow rule is enforced nowhere; the call ran under the rule after it.
    assert production.state == TaskState.COMPLETED
    assert not production.interactions.exists()
    effect = production.effects.get()
    assert (effect.state, effect.approved_by) == ("succeeded", "policy")
    assert effect.shadow == {
        "would": "held",
        "rule": "deploy/deploy_build, rule 1 of 2: when environment = production",
        "heldBy": "admin, 1 person",
    }
    # A call no shadow rule matches records nothing.
    make_agent(
        "staging",
        [deploy_step("staging"), *REPORT_RESULT],
        tools=[DEPLOY_TOOL],
        tool_policy=SHADOWED,
    )
    assert run(send(agents.a, "staging")).effects.get().shadow is None
    # The agent's page compares what happened with what the shadow rules would have done.
    client = tenant_admin_client(agents.a)
    page = client.get(f"/admin/runtime/agent/{agent.pk}/change/").content.decode()
    assert "1 of 1 calls would have gone otherwise" in page
    assert f"<code>{effect.public_id}</code> deploy/deploy_build" in page
    assert "allowed → held" in page
    # Replayed as a draft, the shadow rule counts as if it were enforced.
    report = replay(agent, SHADOWED)
    assert [(c.effect_id, c.was, c.would) for c in report.changed] == [
        (effect.public_id, "allowed", "held")
    ]


def test_the_admin_page_replays_a_draft_and_refuses_one_that_would_not_load(agents, recorded):
    from tests.admin_pages import tenant_admin_client

    agent, effects = recorded
    client = tenant_admin_client(agents.a)
    url = f"/admin/runtime/agent/{agent.pk}/replay/"
    page = client.get(url)
    assert page.status_code == 200 and "deploy/deploy_build" in page.content.decode()
    draft = (
        "deploy/deploy_build: {action: approve, approvers: [operator]}\ndeploy/delete_all: deny\n"
    )
    html = client.post(url, {"policy": draft, "days": 30}).content.decode()
    assert "6 recorded calls" in html and "2 calls would change" in html
    assert f"<code>{effects['b-2'].public_id}</code>" in html
    assert "held (operator, 1 person)" in html
    refused = client.post(url, {"policy": "deploy/deploy_build: {action: launch}", "days": 30})
    assert refused.status_code == 400 and "deploy/deploy_build.action" in refused.content.decode()
    assert client.post(url, {"policy": "[1, 2", "days": 30}).status_code == 400
    # Another tenant's admin finds no such agent.
    assert tenant_admin_client(agents.b).get(url).status_code == 404
