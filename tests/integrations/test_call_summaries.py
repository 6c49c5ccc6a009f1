"""AI summaries of held calls: where the tenant turns them on, the agent's model writes a
short summary of a held call in a worker after it is held; every surface shows it labelled
"summary written by a model", beside the arguments, and flagged (red on pages, a plain
warning in Slack and e-mail) when it names a value the arguments do not hold. A redacted
value never reaches the model; the setting off asks no model; a model that is down leaves
the item as it was."""

import json

import pytest
from django.core import mail
from django.urls import reverse

from notifications.channel_settings import channel_save
from runtime.agents.agentfile import AgentSpec, agent_upsert
from runtime.decisions.call_summaries import held_call_summarise
from runtime.decisions.decision_models import CallSummary, Interaction
from runtime.llm.summary_ask import SUMMARY_INSTRUCTIONS
from runtime.tasks import summary_retry_in
from tenants.models import ApiToken, Tenant
from tenants.services import tenant_settings_set
from tenants.tokens import api_token_create
from tests.core import REPORT_RESULT, decide, run, send
from tests.llm_stub import LLMStub, call, completion, error

pytestmark = pytest.mark.django_db

KEY = "sk-test-" + "7hQm2" * 6
SECRET = "tok-SECRET-4711"
ARGUMENTS = {"build": "b-42", "environment": "production", "token": SECRET}
TOOL = {
    "server": "deploy",
    "tool": "deploy_build",
    "description": "Deploy a build to an environment.",
    "schema": {"type": "object"},
}
POLICY = {
    "deploy/deploy_build": {
        "action": "approve",
        "title": "Deploy {build} to {environment}",
        "redact": ["token"],
    }
}
WRITTEN = "Deploys build b-42 to production, as the caller asked."
WRONG = "Deploys build b-43 to production and pays 1,200 EUR."


@pytest.fixture
def llm(settings, monkeypatch):
    server = LLMStub().start()
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    settings.OPENAI_BASE_URL = server.url
    settings.MODEL_RETRY_BASE_SECONDS = 0.01
    settings.MODEL_MAX_ATTEMPTS = 2
    settings.MODEL_TIMEOUT_SECONDS = 5
    yield server
    server.stop()


@pytest.fixture
def summaries_on(agents):
    tenant_settings_set(tenant=agents.a.tenant, actor="user:admin@acme.test", ai_summaries=True)
    return agents.a.tenant


@pytest.fixture
def hosted(agents):
    """``assistant``: an agent on a hosted model (the stub) whose deploy is held, its token
    redacted."""
    spec = AgentSpec(
        slug="assistant",
        name="assistant",
        description="An agent on a hosted model.",
        skills=[{"id": "main", "name": "Main", "description": "d", "tags": [], "examples": []}],
        instructions="You deploy builds.",
        model={"provider": "openai", "model": "gpt-4o-mini"},
        tools=[TOOL],
        tool_policy=POLICY,
    )
    return agent_upsert(tenant=agents.a.tenant, spec=spec)[0]


def hold(agents, llm, text="deploy b-42 to production", *, summary=None, capture):
    """Hold the hosted agent's deploy; its summary (when the stub is to write one) is asked
    for as the turn's transaction commits. Returns the open approval."""
    llm.play(completion(calls=[call("deploy__deploy_build", ARGUMENTS, "call_1")]))
    if summary is not None:
        llm.play(completion(summary))
    with capture(execute=True):
        task = run(send(agents.a, "assistant", text))
    return Interaction.objects.get(task=task, state="open")


def summary_requests(llm) -> list[dict]:
    return [
        r
        for r in llm.requests
        if (r["body"].get("messages") or [{}])[0].get("content") == SUMMARY_INSTRUCTIONS
    ]


def operator_token(agents) -> dict:
    _, token = api_token_create(
        tenant=agents.a.tenant, subject="program:ops", name="ops", kind=ApiToken.Kind.OPERATOR
    )
    return {"HTTP_AUTHORIZATION": f"Bearer {token}"}


# --- written, labelled, checked ------------------------------------------------------------


def test_a_summary_is_shown_labelled_beside_the_arguments_on_every_page_and_the_api(
    agents, llm, hosted, summaries_on, eager, django_capture_on_commit_callbacks, client
):
    held = hold(agents, llm, summary=WRITTEN, capture=django_capture_on_commit_callbacks)
    kept = CallSummary.objects.get(interaction=held)
    assert (kept.text, kept.model, kept.problems) == (WRITTEN, "openai gpt-4o-mini", [])
    [asked] = summary_requests(llm)
    assert asked["body"]["model"] == "gpt-4o-mini" and "tools" not in asked["body"]
    prompt = asked["body"]["messages"][1]["content"]
    assert '"build": "b-42"' in prompt and "caller: deploy b-42 to production" in prompt

    operator = agents.a.client_for(agents.a.operator)
    page = operator.get(reverse("approvals:interaction", args=[held.public_id])).content.decode()
    # Labelled, after the arguments (never in their place), not flagged.
    assert page.index('id="arguments"') < page.index('id="model-summary"')
    assert 'Summary written by a model (<span class="model-name">openai gpt-4o-mini</span>)' in page
    assert WRITTEN.replace(",", ",") in page and "data-flagged" not in page
    inbox = operator.get(reverse("approvals:inbox")).content.decode()
    assert "data-model-summary>" in inbox
    assert f'<span class="muted">Summary written by a model:</span> {WRITTEN}' in inbox

    auth = operator_token(agents)
    detail = client.get(f"/api/v1/interactions/{held.public_id}", **auth).json()
    assert detail["summary"] == {
        "text": WRITTEN,
        "model": "openai gpt-4o-mini",
        "flagged": False,
        "problems": [],
    }
    [row] = [
        r
        for r in client.get("/api/v1/interactions", **auth).json()["results"]
        if r["id"] == held.public_id
    ]
    assert row["summary"]["text"] == WRITTEN
    assert row["heldCall"]["summary"] == "Deploy b-42 to production"  # the title, as before


def test_a_summary_naming_a_value_absent_from_the_arguments_is_flagged(
    agents, llm, hosted, summaries_on, eager, django_capture_on_commit_callbacks, client
):
    held = hold(agents, llm, summary=WRONG, capture=django_capture_on_commit_callbacks)
    kept = CallSummary.objects.get(interaction=held)
    assert kept.flagged and kept.problems == ["b-43", "1,200"]
    operator = agents.a.client_for(agents.a.operator)
    page = operator.get(reverse("approvals:interaction", args=[held.public_id])).content.decode()
    assert 'class="model-summary flagged"' in page and "data-flagged" in page
    assert (
        "<strong>This summary may be wrong:</strong> it names <code>b-43</code>, "
        "<code>1,200</code>, which the arguments do not hold." in page
    )
    inbox = operator.get(reverse("approvals:inbox")).content.decode()
    assert 'class="model-summary-row flagged" data-model-summary data-flagged' in inbox
    detail = client.get(f"/api/v1/interactions/{held.public_id}", **operator_token(agents))
    assert detail.json()["summary"]["flagged"] is True
    assert detail.json()["summary"]["problems"] == ["b-43", "1,200"]


def test_slack_and_email_show_the_summary_labelled_with_a_plain_warning_when_flagged(
    agents, llm, hosted, summaries_on, slack_app, django_capture_on_commit_callbacks
):
    channel_save(tenant=agents.a.tenant, name="ops", kind="email", email_roles=["operator"])
    llm.play(
        completion(calls=[call("deploy__deploy_build", ARGUMENTS, "call_1")]),
        completion(WRONG),
    )
    # The summary first, then the notifications (in a worker they race; both orders are
    # fine: a message sent before the summary is written goes without it).
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        task = run(send(agents.a, "assistant", "deploy b-42 to production"))
    held = Interaction.objects.get(task=task, state="open")
    assert held_call_summarise(interaction_pk=held.pk).flagged
    with django_capture_on_commit_callbacks(execute=True):
        for callback in callbacks:
            callback()
    [posted] = slack_app.called("chat.postMessage")
    said = json.dumps(posted["blocks"])
    assert f"Summary written by a model (openai gpt-4o-mini): {WRONG}" in said
    assert ":warning: *Warning: this summary may be wrong. It names b-43, 1,200" in said
    assert said.index("Summary written by a model") > said.index("b-42")  # after the arguments
    [message] = [m for m in mail.outbox if m.to == ["operator@acme.test"]]
    assert f"Summary written by a model (openai gpt-4o-mini): {WRONG}\n" in message.body
    assert "Warning: this summary may be wrong. It names b-43, 1,200" in message.body
    assert "Summary written by a model" in message.alternatives[0][0]
    for text in (said, message.body, message.alternatives[0][0]):
        assert SECRET not in text


# --- what the model is given -----------------------------------------------------------------


def test_a_redacted_value_never_reaches_the_model(
    agents, llm, hosted, summaries_on, eager, django_capture_on_commit_callbacks
):
    hold(agents, llm, summary=WRITTEN, capture=django_capture_on_commit_callbacks)
    assert len(summary_requests(llm)) == 1
    # The stand-in model server never received the redacted value (the model made it up in
    # its call; the summary's request leaves the field out).
    for request in llm.requests:
        assert SECRET not in request["raw"]
    prompt = summary_requests(llm)[0]["body"]["messages"][1]["content"]
    assert "token" not in prompt


def test_a_redacted_value_said_in_the_conversation_is_blanked_out_of_it(
    agents, llm, hosted, summaries_on, eager, django_capture_on_commit_callbacks
):
    text = f"deploy b-42 to production with token {SECRET}"
    hold(agents, llm, text, summary=WRITTEN, capture=django_capture_on_commit_callbacks)
    [asked] = summary_requests(llm)
    assert SECRET not in asked["raw"]
    assert (
        "caller: deploy b-42 to production with token •••"
        in asked["body"]["messages"][1]["content"]
    )


def test_a_redacted_value_too_short_to_blank_keeps_the_conversation_from_the_model(
    agents, make_agent, summaries_on, eager, django_capture_on_commit_callbacks
):
    make_agent(
        "pinner",
        [{"call": {"server": "deploy", "tool": "deploy_build", "args": {"pin": 42}}}],
        tools=[TOOL],
        tool_policy={"deploy/deploy_build": {"action": "approve", "redact": ["pin"]}},
    )
    from runtime.decisions.call_summaries import summary_ask

    with django_capture_on_commit_callbacks(execute=True):
        task = run(send(agents.a, "pinner", "use pin 42"))
    held = Interaction.objects.get(task=task, state="open")
    ask = summary_ask(
        call=held.request["call"], arguments={"pin": 42}, fields=["pin"], task=held.task
    )
    assert ask.arguments == {} and ask.conversation == ()


def test_a_scripted_model_writes_its_summary_from_its_template(
    agents, make_agent, summaries_on, eager, django_capture_on_commit_callbacks
):
    spec_steps = [
        {"call": {"server": "deploy", "tool": "deploy_build", "args": ARGUMENTS}},
        *REPORT_RESULT,
    ]
    agent = make_agent("scripted-dep", spec_steps, tools=[TOOL], tool_policy=POLICY)
    agent.model = {**agent.model, "summary": "Deploys {{ args.build }}, token {{ args.token }}."}
    agent.save(update_fields=["model"])
    with django_capture_on_commit_callbacks(execute=True):
        task = run(send(agents.a, "scripted-dep", "go"))
    kept = CallSummary.objects.get(interaction__task=task)
    # The template never sees the redacted field: it reads as nothing.
    assert (kept.text, kept.model, kept.problems) == ("Deploys b-42, token .", "scripted", [])


# --- off, down --------------------------------------------------------------------------------


def test_with_the_setting_off_no_model_is_asked(
    agents, llm, hosted, eager, django_capture_on_commit_callbacks
):
    assert not Tenant.objects.get(pk=agents.a.tenant.pk).ai_summaries  # off by default
    held = hold(agents, llm, summary=WRITTEN, capture=django_capture_on_commit_callbacks)
    assert held_call_summarise(interaction_pk=held.pk) is None
    assert len(llm.requests) == 1 and summary_requests(llm) == []  # the turn's own request
    assert not CallSummary.objects.exists()


def test_a_model_that_is_down_leaves_the_item_as_it_was(
    agents, llm, hosted, summaries_on, eager, django_capture_on_commit_callbacks
):
    llm.fallback = error(503, "overloaded")
    held = hold(agents, llm, capture=django_capture_on_commit_callbacks)
    assert len(summary_requests(llm)) == 2  # the provider's own attempts (MODEL_MAX_ATTEMPTS)
    assert not CallSummary.objects.exists()
    held.refresh_from_db()
    assert held.state == "open"
    operator = agents.a.client_for(agents.a.operator)
    page = operator.get(reverse("approvals:interaction", args=[held.public_id]))
    assert page.status_code == 200 and 'id="model-summary"' not in page.content.decode()
    llm.fallback = completion("Deployed.")
    decide(held, approved=True)
    held.refresh_from_db()
    assert held.state == "answered"


def test_a_failed_summary_is_asked_again_a_bounded_number_of_times():
    waits = [summary_retry_in(retries) for retries in range(5)]
    assert waits[:3] == [30, 60, 120] and waits[3:] == [None, None]
