"""provider: openai against a local OpenAI-compatible server (tests/llm_stub.py, real HTTP):
the conversation it is sent, tool calls held and decided, several calls in one reply, questions,
connections, limits, bad input from the model, and provider errors."""

import json
import logging
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from django.db import connection
from django.urls import reverse
from django.utils import timezone

from runtime.agents.agent_models import DemoRecord
from runtime.agents.agentfile import AgentSpec, agent_upsert
from runtime.decisions.decision_models import Effect, Interaction
from runtime.decisions.flow import interactions_connect_app
from runtime.kernel import extensions as ext
from runtime.kernel.task_models import Task
from runtime.llm import openai_chat
from runtime.llm.credentials import credential_set
from runtime.llm.openai_chat import CLIENTS, ClientCache
from tests.core import DEPLOY_TOOL, decide, open_interaction, run, send, status_text
from tests.llm_stub import LLMStub, Respond, call, completion, error, reply_with, response

pytestmark = pytest.mark.django_db

KEY = "sk-test-" + "9f3Kq" * 6
INSTRUCTIONS = "You deploy builds for the release team. Be brief."
DEPLOY = "deploy__deploy_build"
STAGING = {"build": "b-1", "environment": "staging"}


@pytest.fixture
def stub():
    server = LLMStub().start()
    yield server
    server.stop()


@pytest.fixture
def llm(settings, monkeypatch, stub):
    """The stub as the installer's model server (OPENAI_BASE_URL), the key in the environment."""
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    settings.OPENAI_BASE_URL = stub.url
    settings.MODEL_RETRY_BASE_SECONDS = 0.05
    settings.MODEL_MAX_ATTEMPTS = 3
    settings.MODEL_TIMEOUT_SECONDS = 5
    yield stub
    # No request carried the key anywhere but in its Authorization header.
    for request in stub.requests:
        assert KEY not in request["raw"]
        assert request["headers"]["authorization"] == f"Bearer {KEY}"


@pytest.fixture
def make_llm_agent(agents):
    def make(slug="assistant", *, tools=(DEPLOY_TOOL,), policy=None, connections=False, **model):
        spec = AgentSpec(
            slug=slug,
            name=slug,
            description="An agent on a hosted model.",
            skills=[{"id": "main", "name": "Main", "description": "d", "tags": [], "examples": []}],
            instructions=INSTRUCTIONS,
            model={"provider": "openai", "model": "gpt-4o-mini", **model},
            tools=list(tools),
            tool_policy=policy or {},
            connections_enabled=connections,
        )
        return agent_upsert(tenant=agents.a.tenant, spec=spec)[0]

    return make


def start(agents, text="deploy b-1 to staging", slug="assistant", **fields) -> Task:
    return run(send(agents.a, slug, text, **fields))


def tool_messages(body: dict) -> dict[str, dict]:
    """The tool results a request carried, by tool call id, parsed."""
    return {
        m["tool_call_id"]: json.loads(m["content"]) for m in body["messages"] if m["role"] == "tool"
    }


def tool_names(body: dict) -> set[str]:
    return {t["function"]["name"] for t in body["tools"]}


# --- the conversation and a held call ----------------------------------------------------------


def test_a_held_call_approved_is_sent_once_and_its_result_reaches_the_model(
    agents, llm, make_llm_agent
):
    make_llm_agent(temperature=0.2, max_output_tokens=300)
    llm.play(
        completion(calls=[call(DEPLOY, STAGING, "call_dep")], usage=(120, 30)),
        completion("Deployed b-1 to staging.", usage=(200, 10)),
    )
    task = start(agents, "deploy b-1 to staging")
    assert task.state == "TASK_STATE_AUTH_REQUIRED"
    assert len(llm.requests) == 1
    first = llm.requests[0]
    assert first["path"] == "/v1/chat/completions"
    body = first["body"]
    assert body["model"] == "gpt-4o-mini"
    # Current OpenAI models take max_completion_tokens (gpt-5 and the o-series refuse
    # max_tokens); max_tokens_field switches it back for servers that know only max_tokens.
    assert (body["temperature"], body["max_completion_tokens"]) == (0.2, 300)
    assert "max_tokens" not in body
    assert body["messages"][0] == {"role": "system", "content": INSTRUCTIONS}
    assert body["messages"][1] == {"role": "user", "content": "deploy b-1 to staging"}
    assert tool_names(body) == {DEPLOY, "ask_question", "emit_artifact", "update_plan"}
    deploy = next(t for t in body["tools"] if t["function"]["name"] == DEPLOY)
    assert deploy["function"]["parameters"] == DEPLOY_TOOL["schema"]

    interaction = open_interaction(task)
    assert interaction.kind == Interaction.Kind.APPROVAL
    assert not DemoRecord.objects.exists()
    decide(interaction, approved=True)
    task = run(task)
    assert task.state == "TASK_STATE_COMPLETED", status_text(task)
    assert status_text(task) == "Deployed b-1 to staging."
    assert DemoRecord.objects.count() == 1
    assert Effect.objects.get().state == Effect.State.SUCCEEDED
    assert len(llm.requests) == 2
    second = llm.requests[1]["body"]
    assert second["messages"][2]["tool_calls"][0]["id"] == "call_dep"
    result = tool_messages(second)["call_dep"]
    assert result["ok"] is True
    assert result["result"]["deploymentId"] == f"dep-{DemoRecord.objects.get().pk}"
    # Usage and cost (gpt-4o-mini: $0.15 / $0.60 per million) in telemetry/v1.
    assert task.tokens == 360
    assert float(task.cost_usd) == pytest.approx((320 * 0.15 + 40 * 0.60) / 1e6)
    telemetry = task.status_ext[ext.TELEMETRY]
    assert telemetry["tokens"] == 360
    assert telemetry["costUsd"] == pytest.approx(float(task.cost_usd))


def test_a_denial_reason_reaches_the_next_request(agents, llm, make_llm_agent):
    make_llm_agent()
    llm.play(
        completion(calls=[call(DEPLOY, STAGING, "call_dep")]),
        completion("I did not deploy: not on a Friday."),
    )
    task = start(agents)
    decide(open_interaction(task), approved=False, reason="no deploys on a Friday")
    task = run(task)
    assert task.state == "TASK_STATE_COMPLETED"
    assert not DemoRecord.objects.exists()
    result = tool_messages(llm.requests[1]["body"])["call_dep"]
    assert result["ok"] is False
    assert result["reason"] == "no deploys on a Friday"
    assert "denied" in result["error"]


def test_several_calls_in_one_reply_are_held_each_and_the_model_is_asked_once(
    agents, llm, make_llm_agent
):
    make_llm_agent()
    llm.play(
        completion(
            calls=[
                call("ask_question", {"prompt": "Which build?", "choices": ["b-1", "b-2"]}, "q1"),
                call("update_plan", {"steps": [{"label": "deploy"}, {"label": "report"}]}, "p1"),
                call(DEPLOY, STAGING, "d1"),
                call("emit_artifact", {"name": "notes.txt", "text": "release notes"}, "a1"),
            ]
        ),
        completion("Done."),
    )
    task = start(agents, "ship it")
    assert task.state == "TASK_STATE_INPUT_REQUIRED"
    question = open_interaction(task)
    assert question.prompt == "Which build?"
    assert question.detail == {"choices": ["b-1", "b-2"], "allowCustom": False}
    # The same task takes the answer; the queued plan runs, then the call is held.
    decide(question, value="b-2")
    task = run(task)
    assert task.state == "TASK_STATE_AUTH_REQUIRED"
    assert [s["label"] for s in task.plan] == ["deploy", "report"]
    assert len(llm.requests) == 1  # not asked again while actions of its reply are queued
    decide(open_interaction(task), approved=True)
    task = run(task)
    assert task.state == "TASK_STATE_COMPLETED", status_text(task)
    assert [a["artifactId"] for a in task.artifacts] == ["notes.txt"]
    assert len(llm.requests) == 2
    results = tool_messages(llm.requests[1]["body"])
    assert list(results) == ["q1", "p1", "d1", "a1"]
    assert results["q1"] == {"answer": "b-2"}
    assert results["p1"] == {"ok": True}
    assert results["d1"]["ok"] is True
    assert results["a1"] == {"ok": True, "artifactId": "notes.txt"}
    assert DemoRecord.objects.count() == 1
    # Each action was its own step of the journal.
    kinds = [e["action"]["kind"] for e in task.transcript if e["type"] == "action"]
    assert kinds == ["ask", "plan", "call", "artifact", "reply"]


def test_a_connection_requested_then_connected(agents, llm, make_llm_agent):
    make_llm_agent(connections=True)
    llm.play(
        completion(calls=[call("request_connection", {"app": "github", "reason": "PRs"}, "c1")]),
        completion("github is connected now."),
    )
    task = start(agents, "open a pull request")
    assert "request_connection" in tool_names(llm.requests[0]["body"])
    assert (
        "Apps connected for this tenant: none." in llm.requests[0]["body"]["messages"][0]["content"]
    )
    assert task.state == "TASK_STATE_AUTH_REQUIRED"
    interaction = open_interaction(task)
    assert (interaction.kind, interaction.detail["app"]) == ("connection", "github")
    assert interactions_connect_app(tenant=agents.a.tenant, app="github", by="user:x") == 1
    task = run(task)
    assert task.state == "TASK_STATE_COMPLETED"
    assert tool_messages(llm.requests[1]["body"])["c1"] == {
        "ok": True,
        "result": "Connected: github",
    }


def test_request_connection_is_not_offered_without_loop_connections(agents, llm, make_llm_agent):
    make_llm_agent()
    llm.play(
        completion(calls=[call("request_connection", {"app": "github"}, "c1")]),
        completion("I cannot connect apps."),
    )
    task = start(agents)
    assert "request_connection" not in tool_names(llm.requests[0]["body"])
    assert task.state == "TASK_STATE_COMPLETED"
    assert (
        "unknown tool 'request_connection'" in tool_messages(llm.requests[1]["body"])["c1"]["error"]
    )
    assert not Interaction.objects.exists()


def test_the_message_data_and_fetched_files_are_shown_and_the_model_asked_once(
    agents, llm, make_llm_agent, settings
):
    settings.PUSH_ALLOW_PRIVATE_HOSTS = True  # the file is on the stub, on loopback
    llm.files["/notes.txt"] = (b"line one\nline two", "text/plain")
    make_llm_agent()
    llm.play(completion("Read it."))
    task = start(
        agents,
        parts=[
            {"text": "summarise"},
            {"data": {"ticket": 42}},
            {"url": f"{llm.base}/notes.txt", "mediaType": "text/plain", "filename": "notes.txt"},
            {"url": f"{llm.base}/missing.txt", "mediaType": "text/plain", "filename": "gone.txt"},
        ],
    )
    assert task.state == "TASK_STATE_COMPLETED"
    assert len(llm.requests) == 1  # once, though the inputs were fetched in the same run
    content = llm.requests[0]["body"]["messages"][1]["content"]
    assert content.startswith("summarise")
    assert '{"ticket": 42}' in content
    assert "notes.txt (text/plain, 17 bytes):\n```\nline one\nline two\n```" in content
    assert "gone.txt (text/plain): could not be fetched" in content


# --- limits ------------------------------------------------------------------------------------


def test_the_step_limit_fails_the_turn_and_bounds_a_model_that_never_stops(
    agents, llm, make_llm_agent
):
    make_llm_agent(limits={"steps": 3})
    # Usable replies, each a step, that never finish.
    llm.fallback = completion(calls=[call("update_plan", {"steps": [{"label": "again"}]})])
    task = start(agents)
    assert task.state == "TASK_STATE_FAILED"
    assert "limit of 3 steps" in status_text(task)
    assert task.steps == 3
    assert len(llm.requests) == 3
    assert not Effect.objects.exists()


def test_the_tool_call_limit_fails_the_turn(agents, llm, make_llm_agent):
    make_llm_agent(limits={"tool_calls": 1}, policy={"deploy/deploy_build": "allow"})
    llm.play(completion(calls=[call(DEPLOY, STAGING), call(DEPLOY, STAGING)]))
    task = start(agents)
    assert task.state == "TASK_STATE_FAILED"
    assert "limit of 1 tool calls (loop.limits.tool_calls)" in status_text(task)
    assert DemoRecord.objects.count() == 1


def test_the_token_limit_fails_the_turn(agents, llm, make_llm_agent):
    make_llm_agent(limits={"tokens": 1000}, policy={"deploy/deploy_build": "allow"})
    llm.play(completion(calls=[call(DEPLOY, STAGING)], usage=(900, 200)))
    task = start(agents)
    assert task.state == "TASK_STATE_FAILED"
    assert "used 1100 model tokens, over its limit of 1000" in status_text(task)
    assert not DemoRecord.objects.exists()  # the reply over the limit is not acted on
    assert task.status_ext[ext.TELEMETRY]["tokens"] == 1100


# --- bad input from the model ------------------------------------------------------------------


def test_bad_tool_calls_go_back_to_the_model_as_tool_errors_and_nothing_is_sent(
    agents, llm, make_llm_agent
):
    make_llm_agent(policy={"deploy/deploy_build": "allow"})
    llm.play(
        completion(
            calls=[
                call(DEPLOY, '{"build": "b-1", "environment": ', "broken"),
                call("deploy__launch_rocket", {}, "unknown"),
                call(DEPLOY, {"build": "b-1", "environment": "mars"}, "schema"),
                call(DEPLOY, "[1, 2]", "not_object"),
                call("ask_question", {"choices": ["a"]}, "no_prompt"),
                call("emit_artifact", {"name": "x", "text": "t", "data": {}}, "both"),
                call(DEPLOY, '{"build": NaN, "environment": "staging"}', "nan"),
                call(DEPLOY, "[" * 100_000 + "]" * 100_000, "deep"),
            ]
        ),
        completion("Sorry, I could not do it."),
    )
    task = start(agents)
    assert task.state == "TASK_STATE_COMPLETED", status_text(task)
    results = tool_messages(llm.requests[1]["body"])
    assert all(r["ok"] is False for r in results.values())
    assert results["broken"]["error"].startswith("the arguments are not valid JSON")
    assert results["unknown"]["error"].startswith("unknown tool 'deploy__launch_rocket'")
    assert "invalid arguments at environment" in results["schema"]["error"]
    assert results["not_object"]["error"] == "the arguments must be a JSON object"
    assert "'prompt' is a required property" in results["no_prompt"]["error"]
    assert results["both"]["error"] == "give exactly one of text or data"
    assert results["nan"]["error"] == "the arguments are not valid JSON: NaN is not a JSON value"
    assert results["deep"]["error"].startswith("the arguments are not valid JSON")
    assert not Effect.objects.exists()
    assert not DemoRecord.objects.exists()
    assert not Interaction.objects.exists()
    assert not task.artifacts


# --- provider errors ---------------------------------------------------------------------------


def test_a_429_is_retried_and_then_succeeds(agents, llm, make_llm_agent):
    make_llm_agent()
    llm.play(
        error(429, "slow down", headers={"retry-after-ms": "50"}),
        completion("Fine."),
    )
    task = start(agents)
    assert task.state == "TASK_STATE_COMPLETED"
    assert status_text(task) == "Fine."
    assert len(llm.requests) == 2
    assert llm.requests[0]["body"] == llm.requests[1]["body"]


def test_a_500_storm_fails_the_turn_after_its_attempts(agents, llm, make_llm_agent):
    make_llm_agent()
    llm.fallback = error(500, "upstream on fire")
    task = start(agents)
    assert task.state == "TASK_STATE_FAILED"
    assert status_text(task) == (
        "The model provider did not answer after 3 attempts (last: HTTP 500)."
    )
    assert len(llm.requests) == 3


def test_a_model_that_does_not_answer_in_time_fails_the_turn(agents, llm, make_llm_agent, settings):
    settings.MODEL_TIMEOUT_SECONDS = 0.3
    settings.MODEL_MAX_ATTEMPTS = 2
    make_llm_agent()
    llm.fallback = completion("too late", delay=1.5)
    task = start(agents)
    assert task.state == "TASK_STATE_FAILED"
    assert status_text(task) == (
        "The model provider did not answer after 2 attempts (last: no answer within 0.3s)."
    )
    assert len(llm.requests) == 2


def test_a_timeout_then_an_answer_completes(agents, llm, make_llm_agent, settings):
    settings.MODEL_TIMEOUT_SECONDS = 0.3
    make_llm_agent()
    llm.play(completion("too late", delay=1.5), completion("On time."))
    task = start(agents)
    assert task.state == "TASK_STATE_COMPLETED"
    assert status_text(task) == "On time."


def test_a_4xx_fails_the_turn_at_once_with_the_provider_message(agents, llm, make_llm_agent):
    make_llm_agent()
    llm.fallback = error(400, "The model `gpt-4o-mini` does not support tools.")
    task = start(agents)
    assert task.state == "TASK_STATE_FAILED"
    assert status_text(task) == (
        "The model provider refused the request (HTTP 400): "
        "The model `gpt-4o-mini` does not support tools."
    )
    assert len(llm.requests) == 1


def test_a_refused_key_is_named_never_shown(agents, llm, make_llm_agent, caplog):
    caplog.set_level(logging.DEBUG)
    make_llm_agent()
    llm.fallback = error(401, f"Incorrect API key provided: {KEY}.")
    task = start(agents)
    assert task.state == "TASK_STATE_FAILED"
    assert (
        status_text(task)
        == "The model provider refused the credential 'OPENAI_API_KEY' (HTTP 401)."
    )
    assert KEY not in json.dumps(task.status_message)
    assert KEY not in json.dumps(task.transcript)
    assert KEY not in caplog.text
    assert len(llm.requests) == 1


def test_a_4xx_message_that_echoes_the_key_is_redacted(agents, llm, make_llm_agent):
    make_llm_agent()
    llm.fallback = error(422, f"bad request made with {KEY} and sk-other-123456789")
    task = start(agents)
    assert task.state == "TASK_STATE_FAILED"
    assert KEY not in status_text(task)
    assert "sk-other" not in status_text(task)
    assert "[credential]" in status_text(task)


def test_a_missing_credential_fails_the_turn_naming_it(agents, llm, make_llm_agent, monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY")
    make_llm_agent(credential="ACME_LLM_KEY")
    task = start(agents)
    assert task.state == "TASK_STATE_FAILED"
    assert status_text(task) == "The model's credential 'ACME_LLM_KEY' is not set for this tenant."
    assert not llm.requests


def test_a_tenant_base_url_on_loopback_is_refused_unless_private_hosts_are_allowed(
    agents, llm, make_llm_agent, settings
):
    settings.OPENAI_BASE_URL = ""
    settings.PUSH_ALLOW_PRIVATE_HOSTS = False
    # A tenant's own server gets the tenant's own key (the installer's stays home: below).
    credential_set(tenant=agents.a.tenant, name="OPENAI_API_KEY", secret=KEY)
    make_llm_agent(base_url=llm.url)
    task = start(agents)
    assert task.state == "TASK_STATE_FAILED"
    assert status_text(task).startswith("The model's base_url is refused:")
    assert not llm.requests

    make_llm_agent(base_url=f"http://localhost:{llm.server.server_address[1]}/v1")
    task = start(agents)
    assert task.state == "TASK_STATE_FAILED"
    assert status_text(task).startswith("The model's base_url is refused:")
    assert not llm.requests

    settings.PUSH_ALLOW_PRIVATE_HOSTS = True
    llm.play(completion("Reached."))
    task = start(agents)
    assert task.state == "TASK_STATE_COMPLETED"
    assert len(llm.requests) == 1


def test_the_installers_key_is_never_sent_to_a_tenants_base_url(
    agents, llm, make_llm_agent, settings
):
    """OPENAI_API_KEY in the environment is for OPENAI_BASE_URL (or OpenAI's own): an agent
    that names its own base_url must bring its tenant's own credential."""
    settings.PUSH_ALLOW_PRIVATE_HOSTS = True
    make_llm_agent(base_url=llm.url)
    task = start(agents)
    assert task.state == "TASK_STATE_FAILED"
    assert (
        status_text(task) == "The model's credential 'OPENAI_API_KEY' is not set for this tenant."
    )
    assert not llm.requests


def test_characters_postgresql_cannot_store_are_cleaned_from_the_reply(agents, llm, make_llm_agent):
    make_llm_agent()
    llm.play(completion("Done\u0000 \ud800."))
    task = start(agents)
    assert task.state == "TASK_STATE_COMPLETED"
    assert status_text(task) == "Done ?."


@pytest.mark.django_db(transaction=True)
def test_the_turn_keeps_its_lease_while_a_call_waits_to_be_retried(
    agents, llm, make_llm_agent, settings
):
    settings.TURN_LEASE_SECONDS = 2
    make_llm_agent()
    llm.play(error(429, "slow down", headers={"retry-after": "3"}), completion("Fine."))
    task = send(agents.a, "assistant", "go")

    def worker():
        try:
            run(task, worker_id="w1")
        finally:
            connection.close()

    thread = threading.Thread(target=worker)
    thread.start()
    try:
        llm.wait_for_requests(1)
        time.sleep(2.5)  # longer than the lease the claim took
        waiting = Task.objects.get(pk=task.pk)
        assert waiting.lease_owner == "w1"
        assert waiting.lease_expires_at > timezone.now()
    finally:
        thread.join(30)
    task.refresh_from_db()
    assert task.state == "TASK_STATE_COMPLETED"
    assert len(llm.requests) == 2


def test_an_expired_question_and_approval_reach_the_model_as_such(agents, llm, make_llm_agent):
    from datetime import timedelta

    from runtime.decisions.interaction_state import interactions_expire

    make_llm_agent()
    llm.play(
        completion(calls=[call("ask_question", {"prompt": "Which build?"}, "q1")]),
        completion(calls=[call(DEPLOY, STAGING, "d1")]),
        completion("Nobody answered; nothing deployed."),
    )
    task = start(agents)
    assert task.state == "TASK_STATE_INPUT_REQUIRED"
    assert interactions_expire(now=timezone.now() + timedelta(days=2)) == 1
    task = run(task)
    assert task.state == "TASK_STATE_AUTH_REQUIRED"
    assert tool_messages(llm.requests[1]["body"])["q1"] == {
        "error": "The question expired without an answer."
    }
    assert interactions_expire(now=timezone.now() + timedelta(days=4)) == 1
    task = run(task)
    assert task.state == "TASK_STATE_COMPLETED"
    denied = tool_messages(llm.requests[2]["body"])["d1"]
    assert (denied["ok"], denied["reason"]) == (False, "expired")
    assert not DemoRecord.objects.exists()


def test_two_held_calls_in_one_reply_open_together_and_are_decided_each_on_its_own(
    agents, llm, make_llm_agent
):
    make_llm_agent()
    production = {"build": "b-1", "environment": "production"}
    llm.play(
        completion(calls=[call(DEPLOY, STAGING, "d_staging"), call(DEPLOY, production, "d_prod")]),
        completion("Staging yes, production no."),
    )
    task = start(agents)
    # One approval group: both calls held at once, one pause.
    first, second = Interaction.objects.filter(task=task).order_by("group_position")
    assert first.group_id and first.group_id == second.group_id
    assert second.state == Interaction.State.OPEN
    decide(first, approved=True)
    task = run(task)
    assert task.state == "TASK_STATE_AUTH_REQUIRED"  # the turn waits for the second decision
    assert not DemoRecord.objects.exists()  # nothing is sent before the group is decided
    assert len(llm.requests) == 1
    decide(second, approved=False, reason="not production")
    task = run(task)
    assert task.state == "TASK_STATE_COMPLETED"
    results = tool_messages(llm.requests[1]["body"])
    assert results["d_staging"]["ok"] is True
    assert (results["d_prod"]["ok"], results["d_prod"]["reason"]) == (False, "not production")
    effects = Effect.objects.order_by("step")
    assert [(e.arguments["environment"], e.state) for e in effects] == [
        ("staging", Effect.State.SUCCEEDED),
        ("production", Effect.State.DENIED),
    ]
    assert DemoRecord.objects.count() == 1


# --- one client per process: reuse, keys, dropped connections ------------------------------


@pytest.fixture
def fresh_clients():
    """The process's client cache emptied before and after (other tests' stubs are gone)."""
    CLIENTS.clear()
    yield CLIENTS
    CLIENTS.clear()


def test_calls_reuse_the_process_client_and_its_connection(
    agents, llm, make_llm_agent, fresh_clients
):
    make_llm_agent()
    llm.play(completion("One."), completion("Two."), completion("Three."))
    for _ in range(3):
        assert start(agents, "hello").state == "TASK_STATE_COMPLETED"
    assert len(fresh_clients.entries) == 1
    # One kept-alive connection carried the three calls.
    assert len({r["client_port"] for r in llm.requests}) == 1


def test_two_tenants_with_their_own_keys_each_send_their_own(agents, stub, settings, fresh_clients):
    """The same base_url, two tenants, two keys, calls interleaved: each request carries its
    tenant's key, never the other's; the key is not in the cache's key."""
    settings.OPENAI_BASE_URL = ""
    settings.PUSH_ALLOW_PRIVATE_HOSTS = True
    settings.MODEL_TIMEOUT_SECONDS = 5
    keys = {"a": "sk-tenant-a-" + "x1" * 12, "b": "sk-tenant-b-" + "y2" * 12}
    for side_name, secret in keys.items():
        side = getattr(agents, side_name)
        credential_set(tenant=side.tenant, name="OPENAI_API_KEY", secret=secret)
        spec = AgentSpec(
            slug="assistant",
            name="assistant",
            description="An agent on a hosted model.",
            skills=[{"id": "main", "name": "Main", "description": "d", "tags": [], "examples": []}],
            instructions=INSTRUCTIONS,
            model={"provider": "openai", "model": "gpt-4o-mini", "base_url": stub.url},
            tools=[],
        )
        agent_upsert(tenant=side.tenant, spec=spec)
    order = ["a", "b", "a", "b", "b", "a"]
    stub.play(*[completion(f"Hello {side_name}.") for side_name in order])
    for side_name in order:
        task = run(send(getattr(agents, side_name), "assistant", "hello"))
        assert task.state == "TASK_STATE_COMPLETED", status_text(task)
    sent = [r["headers"]["authorization"] for r in stub.requests]
    assert sent == [f"Bearer {keys[side_name]}" for side_name in order]
    assert len(fresh_clients.entries) == 2
    for cache_key in fresh_clients.entries:
        assert not any(secret in str(cache_key) for secret in keys.values())


class DroppingServer:
    """A model server that answers the first request of each connection and keeps it alive,
    then does to the next request on that connection what ``on_reuse`` says: 'close' (read it
    and close the connection without an answer, as a server whose idle timeout fires just as
    the request arrives) or 'hang' (read it and never answer, as a connection a NAT or load
    balancer dropped without telling anyone)."""

    def __init__(self, on_reuse: str):
        self.on_reuse = on_reuse
        self.requests: list[int] = []  # the client port of each request
        self.release = threading.Event()
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def do_POST(self):
                self.rfile.read(int(self.headers.get("Content-Length", "0")))
                server.requests.append(self.client_address[1])
                self.served = getattr(self, "served", 0) + 1
                if self.served > 1:
                    if server.on_reuse == "hang":
                        server.release.wait(30)
                    self.close_connection = True
                    return
                data = json.dumps(completion("Answered.").body).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"

    def stop(self):
        self.release.set()
        self.server.shutdown()
        self.server.server_close()


def test_a_kept_alive_connection_closed_by_the_server_is_retried_at_once(
    agents, make_llm_agent, settings, monkeypatch, fresh_clients
):
    server = DroppingServer("close")
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    settings.OPENAI_BASE_URL = server.url
    settings.MODEL_TIMEOUT_SECONDS = 5
    settings.MODEL_RETRY_BASE_SECONDS = 5  # a backoff would show in the time taken
    settings.MODEL_MAX_ATTEMPTS = 1  # the immediate retry is not an attempt
    make_llm_agent(tools=())
    try:
        assert start(agents, "first").state == "TASK_STATE_COMPLETED"
        began = time.monotonic()
        task = start(agents, "second")
        took = time.monotonic() - began
    finally:
        server.stop()
    assert task.state == "TASK_STATE_COMPLETED", status_text(task)
    assert took < 2, took
    # The second call went on the first connection, was dropped, and went again on a new one.
    assert len(server.requests) == 3
    assert server.requests[1] == server.requests[0] != server.requests[2]


def test_an_idle_connection_is_not_reused_after_the_keepalive_expiry(
    agents, make_llm_agent, settings, monkeypatch, fresh_clients
):
    """A connection dropped silently on the way (nothing tells us) would hold the call until
    its timeout: idle connections are given up after KEEPALIVE_SECONDS instead."""
    server = DroppingServer("hang")
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    monkeypatch.setattr(openai_chat, "KEEPALIVE_SECONDS", 0.3)
    settings.OPENAI_BASE_URL = server.url
    settings.MODEL_TIMEOUT_SECONDS = 5
    settings.MODEL_MAX_ATTEMPTS = 1
    make_llm_agent(tools=())
    try:
        assert start(agents, "first").state == "TASK_STATE_COMPLETED"
        time.sleep(0.6)
        began = time.monotonic()
        task = start(agents, "second")
        took = time.monotonic() - began
    finally:
        server.stop()
    assert task.state == "TASK_STATE_COMPLETED", status_text(task)
    assert took < 2, took
    assert len(server.requests) == 2 and server.requests[0] != server.requests[1]


def test_the_client_cache_is_bounded_and_closes_what_it_drops_once_unused():
    made: list = []

    class FakeClient:
        closed = False

        def close(self):
            self.closed = True

    def make():
        made.append(FakeClient())
        return made[-1]

    cache = ClientCache(size=2)
    with cache.lease(("a",), make) as held:
        with cache.lease(("b",), make), cache.lease(("c",), make):
            pass
        assert list(cache.entries) == [("b",), ("c",)]
        assert not held.closed  # dropped from the cache but still in use
    assert held.closed
    with cache.lease(("b",), make), cache.lease(("d",), make):
        pass
    assert [c.closed for c in made] == [True, False, True, False]
    assert list(cache.entries) == [("b",), ("d",)]


# --- replies that cannot be used: back to the model, a bounded number of times ---------------


def bad_reply_notes(body: dict) -> list[str]:
    """The notes a request carried that the model's last reply could not be used."""
    return [
        m["content"]
        for m in body["messages"]
        if m["role"] == "user" and m["content"].startswith("Your last reply could not be used")
    ]


def test_a_model_that_always_answers_with_empty_choices_gets_three_calls_then_the_task_fails(
    agents, llm, make_llm_agent
):
    make_llm_agent()
    llm.fallback = reply_with(None, choices=[])
    task = start(agents)
    # The default loop.limits.bad_replies is 2: two errors go back, the third reply fails it.
    assert len(llm.requests) == 3
    assert task.state == "TASK_STATE_FAILED"
    text = status_text(task)
    assert text == (
        "The model's reply could not be used 3 times in a row (loop.limits.bad_replies is 2), "
        "and the turn was stopped. The last problem: the reply has no choices"
    )
    # Each retry told the model why, as the next message of the conversation.
    assert bad_reply_notes(llm.requests[0]["body"]) == []
    assert (
        bad_reply_notes(llm.requests[2]["body"])
        == [
            "Your last reply could not be used: the reply has no choices. Reply again: answer "
            "with text, or call one of the tools offered."
        ]
        * 2
    )
    assert [e["streak"] for e in task.transcript if e["type"] == "unusable"] == [1, 2, 3]
    # In Django admin, the transcript's last entry says why.
    assert task.transcript[-1]["action"] == {
        "kind": "fail",
        "text": text,
        "error": "the reply has no choices",
    }
    assert not Effect.objects.exists()
    # The reason is on the task page, for operators.
    client = agents.a.client_for(agents.a.operator)
    page = client.get(reverse("approvals:task", args=[task.public_id])).content.decode()
    assert "could not be used 3 times in a row" in page


def test_a_model_that_always_sends_garbage_arguments_is_bounded_too(agents, llm, make_llm_agent):
    make_llm_agent(limits={"bad_replies": 1}, policy={"deploy/deploy_build": "allow"})
    llm.fallback = completion(calls=[call(DEPLOY, '{"build": "b-1", "environment": ')])
    task = start(agents)
    assert len(llm.requests) == 2
    assert task.state == "TASK_STATE_FAILED"
    assert "could not be used 2 times in a row (loop.limits.bad_replies is 1)" in status_text(task)
    assert "the arguments are not valid JSON" in status_text(task)
    # The first went back as the call's tool error; nothing was ever sent.
    assert tool_messages(llm.requests[1]["body"])
    assert not Effect.objects.exists() and not DemoRecord.objects.exists()


def test_arguments_that_fail_the_schema_count_as_a_bad_reply(agents, llm, make_llm_agent):
    make_llm_agent(limits={"bad_replies": 0}, policy={"deploy/deploy_build": "allow"})
    llm.fallback = completion(calls=[call(DEPLOY, {"build": "b-1", "environment": "mars"})])
    task = start(agents)
    assert len(llm.requests) == 1
    assert task.state == "TASK_STATE_FAILED"
    assert "invalid arguments at environment" in status_text(task)


def test_a_usable_reply_ends_a_run_of_bad_ones(agents, llm, make_llm_agent):
    make_llm_agent(policy={"deploy/deploy_build": "allow"})
    llm.play(
        reply_with(None, choices=[]),
        completion(calls=[call("nope", {})]),
        completion(calls=[call("update_plan", {"steps": [{"label": "deploy"}]})]),
        Respond(body="not json", headers={"Content-Type": "text/plain"}),
        reply_with({"role": "assistant", "content": ""}),
        completion("Done."),
    )
    task = start(agents)
    # 2 bad, 1 good (the streak ends), 2 bad: never 3 in a row.
    assert (task.state, status_text(task)) == ("TASK_STATE_COMPLETED", "Done.")
    assert len(llm.requests) == 6
    notes = bad_reply_notes(llm.requests[5]["body"])
    assert [n.split(": ", 1)[1].split(". Reply")[0] for n in notes] == [
        "the reply has no choices",
        "the reply is not a chat completion (a JSON object)",
        "the reply was empty: it had neither text nor a tool call",
    ]


# --- what real providers send ----------------------------------------------------------------


def test_content_as_a_list_of_parts_and_arguments_as_an_object_complete_normally(
    agents, llm, make_llm_agent
):
    make_llm_agent()
    llm.play(
        # ai-mock sends the arguments as a JSON object, not a string.
        reply_with(
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": "call_obj",
                        "type": "function",
                        "function": {"name": DEPLOY, "arguments": STAGING},
                    }
                ],
            }
        ),
        # Mistral's reasoning models send content as a list of parts.
        reply_with(
            {
                "role": "assistant",
                "content": [
                    {"type": "thinking", "thinking": [{"type": "text", "text": "hmm"}]},
                    {"type": "text", "text": "Deployed "},
                    {"type": "text", "text": "b-1."},
                ],
            },
            usage=None,  # and some servers send no usage
        ),
    )
    task = start(agents)
    assert task.state == "TASK_STATE_AUTH_REQUIRED"
    assert Effect.objects.get().arguments == STAGING
    decide(open_interaction(task), approved=True)
    task = run(task)
    assert (task.state, status_text(task)) == ("TASK_STATE_COMPLETED", "Deployed b-1.")
    assert DemoRecord.objects.count() == 1
    # The call is shown back as the API defines it: arguments as a JSON string.
    shown = llm.requests[1]["body"]["messages"][2]["tool_calls"][0]
    assert json.loads(shown["function"]["arguments"]) == STAGING
    assert task.tokens == 120  # the first reply's usage; the second had none


def test_a_refusal_rejects_the_task_with_the_models_words(agents, llm, make_llm_agent):
    make_llm_agent()
    llm.play(reply_with({"role": "assistant", "content": None, "refusal": "I can't help."}))
    task = start(agents)
    assert (task.state, status_text(task)) == ("TASK_STATE_REJECTED", "I can't help.")


# --- current model APIs ----------------------------------------------------------------------


def test_the_request_carries_max_completion_tokens_and_the_allow_listed_parameters(
    agents, llm, make_llm_agent
):
    make_llm_agent(
        max_output_tokens=700,
        reasoning_effort="low",
        top_p=0.5,
        seed=7,
        stop=["END"],
        parallel_tool_calls=False,
        extra_body={"metadata": {"team": "release"}},
    )
    llm.play(completion("Hi."))
    assert start(agents).state == "TASK_STATE_COMPLETED"
    body = llm.requests[0]["body"]
    assert body["max_completion_tokens"] == 700 and "max_tokens" not in body
    assert {k: body[k] for k in ("reasoning_effort", "top_p", "seed", "stop")} == {
        "reasoning_effort": "low",
        "top_p": 0.5,
        "seed": 7,
        "stop": ["END"],
    }
    assert body["parallel_tool_calls"] is False
    assert body["metadata"] == {"team": "release"}
    assert "extra_body" not in body


def test_max_tokens_field_sends_max_tokens_to_servers_that_know_only_it(
    agents, llm, make_llm_agent
):
    make_llm_agent(max_output_tokens=300, max_tokens_field="max_tokens")
    llm.play(completion("Hi."))
    start(agents)
    body = llm.requests[0]["body"]
    assert body["max_tokens"] == 300 and "max_completion_tokens" not in body


def test_the_approval_reason_reaches_the_model_with_the_result(agents, llm, make_llm_agent):
    make_llm_agent()
    llm.play(completion(calls=[call(DEPLOY, STAGING, "call_dep")]), completion("Done."))
    task = start(agents)
    decide(open_interaction(task), approved=True, reason="staging is free")
    run(task)
    result = tool_messages(llm.requests[1]["body"])["call_dep"]
    assert (result["ok"], result["approvalReason"]) == (True, "staging is free")


# --- provider: openai-responses --------------------------------------------------------------


def test_the_responses_api_provider_holds_a_call_and_completes(agents, llm, make_llm_agent):
    make_llm_agent(
        provider="openai-responses",
        model="gpt-5-mini",
        max_output_tokens=900,
        reasoning_effort="medium",
        verbosity="low",
        store=False,
    )
    llm.play(
        response(
            {"type": "reasoning", "id": "rs_1", "summary": []},
            {
                "type": "function_call",
                "id": "fc_1",
                "call_id": "call_r1",
                "name": DEPLOY,
                "arguments": json.dumps(STAGING),
            },
        ),
        response(
            {
                "type": "message",
                "role": "assistant",
                "content": [{"type": "output_text", "text": "Deployed b-1.", "annotations": []}],
            },
            usage=(300, 12),
        ),
    )
    task = start(agents)
    assert task.state == "TASK_STATE_AUTH_REQUIRED"
    first = llm.requests[0]
    assert first["path"] == "/v1/responses"
    body = first["body"]
    assert body["instructions"] == INSTRUCTIONS
    assert body["input"] == [{"role": "user", "content": "deploy b-1 to staging"}]
    assert body["max_output_tokens"] == 900
    assert body["reasoning"] == {"effort": "medium"} and body["text"] == {"verbosity": "low"}
    assert body["store"] is False
    deploy = next(t for t in body["tools"] if t["name"] == DEPLOY)
    assert deploy["type"] == "function" and deploy["parameters"] == DEPLOY_TOOL["schema"]

    decide(open_interaction(task), approved=True, reason="go")
    task = run(task)
    assert (task.state, status_text(task)) == ("TASK_STATE_COMPLETED", "Deployed b-1.")
    assert DemoRecord.objects.count() == 1
    items = llm.requests[1]["body"]["input"]
    assert items[1] == {
        "type": "function_call",
        "call_id": "call_r1",
        "name": DEPLOY,
        "arguments": json.dumps(STAGING),
    }
    output = json.loads(items[2]["output"])
    assert items[2]["type"] == "function_call_output" and items[2]["call_id"] == "call_r1"
    assert (output["ok"], output["approvalReason"]) == (True, "go")
    assert task.tokens == 120 + 312


def test_the_responses_api_provider_bounds_unusable_responses(agents, llm, make_llm_agent):
    make_llm_agent(provider="openai-responses", model="gpt-5-mini", limits={"bad_replies": 1})
    llm.fallback = response(status="failed", error={"code": "server_error", "message": "boom"})
    task = start(agents)
    assert len(llm.requests) == 2
    assert task.state == "TASK_STATE_FAILED"
    assert "the response failed: boom" in status_text(task)
