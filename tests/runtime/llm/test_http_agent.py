"""``provider: http``: the turn loop driving an agent over HTTP (runtime.llm.http_agent), against
a real agent server on loopback that verifies each request's Standard Webhooks signature
(tests/agent_server.py). What the agent received is asserted on, request by request.
"""

import base64
import json
import logging
import re
import secrets
import threading
import time
from datetime import timedelta
from http.server import ThreadingHTTPServer
from pathlib import Path

import jsonschema
import pytest
from django.db import connection
from django.utils import timezone

from runtime.agents.agent_models import DemoRecord
from runtime.agents.agentfile import AgentFileError, AgentSpec, agent_upsert, parse_agent_file
from runtime.decisions.decision_models import Effect, Interaction
from runtime.kernel.task_models import Task, TaskState
from runtime.llm import http_agent
from runtime.llm.http_agent import PARTNER_MESSAGE, schema
from tests.agent_server import AgentServer
from tests.core import DEPLOY_TOOL, decide, open_interaction, reply, run, send, status_text

pytestmark = pytest.mark.django_db

SECRET_NAME = "HTTP_AGENT_TEST_SECRET"
CALL_DEPLOY = {
    "action": "call",
    "server": "deploy",
    "tool": "deploy_build",
    "arguments": {"build": "b-7", "environment": "staging"},
}


@pytest.fixture
def secret(monkeypatch, settings) -> str:
    value = "whsec_" + base64.b64encode(secrets.token_bytes(32)).decode()
    # A single-tenant install names the credentials that may come from the environment.
    settings.CREDENTIAL_ENV_NAMES = [
        *settings.CREDENTIAL_ENV_NAMES,
        SECRET_NAME,
        "DEPLOYER_AGENT_SECRET",
    ]
    monkeypatch.setenv(SECRET_NAME, value)
    return value


@pytest.fixture
def server(secret, settings, monkeypatch):
    # The agent listens on loopback, which the outbound guard allows only when told to.
    settings.PUSH_ALLOW_PRIVATE_HOSTS = True
    monkeypatch.setattr(http_agent, "RETRY_BASE_SECONDS", 0.01)
    found = AgentServer(secret).start()
    yield found
    found.stop()


@pytest.fixture
def http_agent_for(agents, server):
    """Make an http agent in tenant A (acme) pointing at the test's agent server."""

    def make(slug: str = "byo", timeout: float = 5, **fields):
        spec = AgentSpec(
            slug=slug,
            name="Bring your own",
            description="An agent behind a URL.",
            instructions="Deploy what you are asked to.",
            model={
                "provider": "http",
                "url": server.url,
                "secret": SECRET_NAME,
                "timeout": timeout,
            },
            tools=[DEPLOY_TOOL],
            tool_policy={"deploy/deploy_build": "approve"},
            **fields,
        )
        agent, _ = agent_upsert(tenant=agents.a.tenant, spec=spec)
        return agent

    return make


def entries(document: dict, kind: str) -> list[dict]:
    return [e for e in document["history"] if e["type"] == kind]


def assert_failed_for_admin_only(task, detail: str) -> None:
    """The partner reads only that the agent failed; the admin finds what went wrong on the
    transcript's last action."""
    assert task.state == TaskState.FAILED
    assert status_text(task) == PARTNER_MESSAGE
    assert detail not in str(task.status_message) and detail not in str(task.history)
    last = task.transcript[-1]
    assert last["type"] == "action" and last["action"]["kind"] == "fail"
    assert detail in last["action"]["error"]


def test_a_turn_that_replies_gets_the_documented_signed_request(agents, server, http_agent_for):
    http_agent_for()
    server.script = [{"action": "reply", "text": "Hello from my own agent."}]
    task = run(send(agents.a, "byo", "hello there", skillId="main"))

    assert task.state == TaskState.COMPLETED
    assert status_text(task) == "Hello from my own agent."
    assert server.bad_signatures == 0 and len(server.requests) == 1
    document = server.documents[0]
    jsonschema.Draft202012Validator(schema("request")).validate(document)
    assert document["version"] == 2
    assert document["taskId"] == task.public_id
    # Version 2: the context, and no earlier turns for its first message.
    assert (document["contextId"], document["turn"]) == (task.wire_context_id, 1)
    assert document["droppedTurns"] == 0
    assert document["agent"] == {
        "slug": "byo",
        "name": "Bring your own",
        "instructions": "Deploy what you are asked to.",
    }
    assert document["message"]["text"] == "hello there"
    assert (document["step"], document["history"], document["answers"]) == (0, [], {})
    assert [(t["server"], t["tool"]) for t in document["tools"]] == [("deploy", "deploy_build")]
    assert document["tools"][0]["schema"] == DEPLOY_TOOL["schema"]
    headers = server.requests[0]["headers"]
    assert headers["content-type"] == "application/json"
    assert headers["webhook-id"] == f"msg_{task.public_id}_1"


def test_a_question_is_answered_on_the_same_task_and_the_agent_sees_the_answer(
    agents, server, http_agent_for
):
    http_agent_for()

    def answer_or_ask(document):
        if "env" in document["answers"]:
            return {"action": "reply", "text": f"Going to {document['answers']['env']}."}
        return {
            "action": "ask",
            "questionId": "env",
            "prompt": "Which environment?",
            "choices": ["staging", "production"],
            "cursor": 1,
        }

    server.script = [answer_or_ask, answer_or_ask]
    task = run(send(agents.a, "byo", "deploy it"))
    assert task.state == TaskState.INPUT_REQUIRED
    asked = open_interaction(task)
    assert (asked.kind, asked.prompt) == (Interaction.Kind.QUESTION, "Which environment?")
    assert asked.detail == {"choices": ["staging", "production"], "allowCustom": False}

    assert reply(task, "production").task.pk == task.pk
    task = run(task)

    assert task.state == TaskState.COMPLETED
    assert status_text(task) == "Going to production."
    second = server.documents[1]
    assert second["answers"] == {"env": "production"}
    assert second["step"] == 1
    [asked_entry] = entries(second, "action")
    assert asked_entry["action"]["kind"] == "ask" and asked_entry["cursor"] == 1
    [answer] = entries(second, "answer")
    assert answer == {
        "type": "answer",
        "kind": "question",
        "questionId": "env",
        "value": "production",
    }


def test_a_held_call_approved_is_sent_once_and_its_result_is_in_the_next_request(
    agents, server, http_agent_for
):
    http_agent_for()
    server.script = [CALL_DEPLOY, {"action": "reply", "text": "Deployed."}]
    task = run(send(agents.a, "byo", "deploy b-7"))
    assert task.state == TaskState.AUTH_REQUIRED
    held = open_interaction(task)
    assert held.kind == Interaction.Kind.APPROVAL
    assert not DemoRecord.objects.exists()

    decide(held, approved=True)
    task = run(task)

    assert task.state == TaskState.COMPLETED and status_text(task) == "Deployed."
    effect = Effect.objects.get(task=task)
    assert effect.state == Effect.State.SUCCEEDED
    assert DemoRecord.objects.filter(effect_id=effect.public_id).count() == 1
    assert len(server.requests) == 2
    second = server.documents[1]
    [result] = entries(second, "tool_result")
    assert result["ok"] is True
    assert result["result"]["deploymentId"] == effect.outcome["result"]["deploymentId"]
    [call] = entries(second, "action")
    assert call["step"] == result["step"]
    assert call["action"] == {"kind": "call", **{k: CALL_DEPLOY[k] for k in ("server", "tool")}} | {
        "arguments": CALL_DEPLOY["arguments"]
    }
    # Running the finished turn again sends nothing more.
    run(task)
    assert DemoRecord.objects.count() == 1 and len(server.requests) == 2


def test_a_denial_reason_reaches_the_next_request(agents, server, http_agent_for):
    http_agent_for()

    def after_denial(document):
        [result] = entries(document, "tool_result")
        return {"action": "fail", "text": f"Not deployed: {result['reason']}"}

    server.script = [CALL_DEPLOY, after_denial]
    task = run(send(agents.a, "byo", "deploy b-7"))
    decide(open_interaction(task), approved=False, reason="no deploys on Fridays")
    task = run(task)

    assert task.state == TaskState.FAILED
    assert status_text(task) == "Not deployed: no deploys on Fridays"
    [result] = entries(server.documents[1], "tool_result")
    assert result == {
        "type": "tool_result",
        "step": result["step"],
        "ok": False,
        "error": "tool.denied",
        "reason": "no deploys on Fridays",
    }
    assert not DemoRecord.objects.exists()


def test_an_unknown_tool_comes_back_as_a_tool_error_in_the_next_request(
    agents, server, http_agent_for
):
    http_agent_for()
    server.script = [
        {"action": "call", "server": "nowhere", "tool": "launch", "arguments": {}},
        lambda document: {
            "action": "reply",
            "text": entries(document, "tool_result")[0]["error"],
        },
    ]
    task = run(send(agents.a, "byo", "launch"))

    assert task.state == TaskState.COMPLETED
    assert status_text(task) == "unknown tool nowhere / launch"
    assert not Effect.objects.exists()


def test_an_agent_that_keeps_calling_what_it_cannot_is_stopped_after_its_bad_replies(
    agents, server, http_agent_for
):
    http_agent_for()
    bad_arguments = {**CALL_DEPLOY, "arguments": {"build": "b-7", "environment": "mars"}}
    unknown = {"action": "call", "server": "nowhere", "tool": "launch", "arguments": {}}
    server.script = [unknown, bad_arguments, unknown]
    task = run(send(agents.a, "byo", "launch"))
    # Two went back as the calls' errors (the default loop.limits.bad_replies); the third
    # ended the task.
    assert len(server.requests) == 3
    assert task.state == TaskState.FAILED
    assert status_text(task) == (
        "The model's reply could not be used 3 times in a row (loop.limits.bad_replies is 2), "
        "and the turn was stopped. The last problem: unknown tool nowhere / launch"
    )
    second = entries(server.documents[2], "tool_result")
    assert [r["error"] for r in second] == [
        "unknown tool nowhere / launch",
        "invalid arguments at environment: 'mars' is not one of ['staging', 'production']",
    ]
    assert not Effect.objects.exists()


@pytest.mark.parametrize(
    ("answer", "detail"),
    [
        ({"action": "reply"}, "'text' is a required property"),
        ({"action": "deploy", "build": "b-7"}, "'deploy' is not one of"),
        ({**CALL_DEPLOY, "arguments": ["b-7"]}, "at arguments: ['b-7'] is not of type 'object'"),
        ((200, b"<html>Sure, deploying now!</html>"), "the reply is not JSON"),
        ((404, {"error": "no such agent"}), "the agent answered HTTP 404"),
    ],
    ids=["schema", "unknown-action", "bad-arguments", "not-json", "http-404"],
)
def test_an_unusable_reply_fails_the_task_with_the_error_kept_for_the_admin(
    agents, server, http_agent_for, caplog, answer, detail
):
    http_agent_for()
    server.script = [answer]
    with caplog.at_level(logging.WARNING, logger="runtime.turn.runner"):
        task = run(send(agents.a, "byo", "deploy b-7"))

    assert_failed_for_admin_only(task, detail)
    # Retrying cannot fix what the agent said: it was asked once.
    assert len(server.requests) == 1
    assert not Effect.objects.exists() and not DemoRecord.objects.exists()
    logged = [r.getMessage() for r in caplog.records if detail in r.getMessage()]
    assert logged and task.public_id in logged[0]


def test_a_500_is_retried_and_the_retry_succeeds(agents, server, http_agent_for):
    http_agent_for()
    server.script = [(500, b"busy"), (429, b"slow down"), {"action": "reply", "text": "Done."}]
    task = run(send(agents.a, "byo", "go"))

    assert task.state == TaskState.COMPLETED and status_text(task) == "Done."
    assert len(server.requests) == 3
    # The same step is the same message, so that the agent may recognise a retry.
    assert len({r["headers"]["webhook-id"] for r in server.requests}) == 1
    assert server.documents[0] == server.documents[2]


def test_5xx_until_the_attempts_run_out_fails_the_task(agents, server, http_agent_for):
    http_agent_for()
    server.script = [(503, b"down")] * http_agent.ATTEMPTS
    task = run(send(agents.a, "byo", "go"))

    assert_failed_for_admin_only(task, f"no usable answer after {http_agent.ATTEMPTS} attempts")
    assert "HTTP 503" in task.transcript[-1]["action"]["error"]
    assert len(server.requests) == http_agent.ATTEMPTS


def test_an_agent_that_does_not_answer_in_time_fails_the_task(
    agents, server, http_agent_for, monkeypatch
):
    monkeypatch.setattr(http_agent, "ATTEMPTS", 2)
    http_agent_for(timeout=0.3)
    server.script = [("sleep", 5), ("sleep", 5)]
    task = run(send(agents.a, "byo", "go"))

    assert_failed_for_admin_only(task, "timed out after 0.3s")
    assert len(server.requests) == 2


def test_a_timeout_then_an_answer_completes_the_turn(agents, server, http_agent_for):
    http_agent_for(timeout=0.3)
    server.script = [("sleep", 5), {"action": "reply", "text": "Second time lucky."}]
    task = run(send(agents.a, "byo", "go"))

    assert task.state == TaskState.COMPLETED and status_text(task) == "Second time lucky."


def test_the_secret_never_appears_in_a_request(agents, server, http_agent_for, secret):
    http_agent_for()
    server.script = [CALL_DEPLOY, {"action": "reply", "text": "ok"}]
    task = run(send(agents.a, "byo", f"deploy b-7, the secret is in {SECRET_NAME}"))
    decide(open_interaction(task), approved=True)
    run(task)

    assert len(server.requests) == 2 and server.bad_signatures == 0
    key = secret.removeprefix("whsec_")
    for request in server.requests:
        assert key.encode() not in request["raw"] and secret.encode() not in request["raw"]
        assert not any(key in value for value in request["headers"].values())


def test_a_missing_credential_fails_the_task_naming_it_for_the_admin(
    agents, server, http_agent_for, monkeypatch
):
    http_agent_for()
    monkeypatch.delenv(SECRET_NAME)
    server.script = [{"action": "reply", "text": "never asked"}]
    task = run(send(agents.a, "byo", "go"))

    assert_failed_for_admin_only(task, f"the credential {SECRET_NAME!r} is not set")
    assert server.requests == []


def test_a_private_agent_address_is_refused_unless_allowed(
    agents, server, http_agent_for, settings
):
    http_agent_for()
    settings.PUSH_ALLOW_PRIVATE_HOSTS = False
    server.script = [{"action": "reply", "text": "never asked"}]
    task = run(send(agents.a, "byo", "go"))

    assert_failed_for_admin_only(task, "the agent URL is refused")
    assert server.requests == []


def test_plan_progress_and_an_artifact_from_the_agent_reach_the_task(
    agents, server, http_agent_for
):
    http_agent_for()
    server.script = [
        {"action": "plan", "steps": [{"label": "Build"}, {"label": "Ship"}]},
        {"action": "progress", "step": 0, "state": "completed", "note": "built"},
        {
            "action": "artifact",
            "name": "report.json",
            "parts": [{"data": {"ok": True}, "mediaType": "application/json"}],
        },
        lambda document: {"action": "reply", "text": f"{len(document['plan'])} steps planned."},
    ]
    task = run(send(agents.a, "byo", "go"))

    assert task.state == TaskState.COMPLETED and status_text(task) == "2 steps planned."
    assert [s["state"] for s in task.plan] == ["completed", "pending"]
    assert task.artifacts[0]["name"] == "report.json"
    assert task.artifacts[0]["parts"][0]["data"] == {"ok": True}
    assert server.documents[3]["plan"][0] == {
        "label": "Build",
        "state": "completed",
        "note": "built",
    }
    assert [d["step"] for d in server.documents] == [0, 1, 2, 3]


# --- AGENT.md: the http model mapping -------------------------------------------------------

AGENT_FILE = """---
name: byo
description: An agent behind a URL.
model:
  provider: http
  url: https://agents.example.com/byo
  secret: BYO_SECRET
  timeout: 20
---
Instructions.
"""


def test_an_agent_file_declares_an_http_agent(tmp_path):
    path = tmp_path / "byo.md"
    path.write_text(AGENT_FILE)
    spec = parse_agent_file(path)
    assert spec.model == {
        "provider": "http",
        "url": "https://agents.example.com/byo",
        "secret": "BYO_SECRET",
        "timeout": 20,
    }


@pytest.mark.parametrize(
    ("old", "new", "line", "field", "message"),
    [
        ("  url: https://agents.example.com/byo\n", "", 5, "model.url", "there is no URL"),
        (
            "https://agents.example.com/byo",
            "ftp://agents.example.com/byo",
            6,
            "model.url",
            "must be http or https",
        ),
        (
            "https://agents.example.com/byo",
            "https://user:pw@agents.example.com/byo",
            6,
            "model.url",
            "must not carry credentials",
        ),
        ("  secret: BYO_SECRET\n", "", 5, "model.secret", "is required"),
        ("secret: BYO_SECRET", "secret: [a, b]", 7, "model.secret", "is required"),
        ("timeout: 20", "timeout: soon", 8, "model.timeout", "must be a number of seconds"),
        ("timeout: 20", "timeout: 0", 8, "model.timeout", "more than 0"),
        ("timeout: 20", "timeout: 20\n  retries: 9", 9, "model.retries", "is not a field"),
    ],
    ids=[
        "no-url",
        "not-http",
        "url-credentials",
        "no-secret",
        "secret-not-a-name",
        "timeout-not-a-number",
        "timeout-zero",
        "unknown-field",
    ],
)
def test_a_broken_http_model_names_its_line_and_field(tmp_path, old, new, line, field, message):
    assert old in AGENT_FILE
    path = tmp_path / "byo.md"
    path.write_text(AGENT_FILE.replace(old, new, 1))
    with pytest.raises(AgentFileError) as caught:
        parse_agent_file(path)
    assert (caught.value.line, caught.value.field) == (line, field)
    assert message in caught.value.message


@pytest.mark.parametrize(
    ("model", "error"),
    [
        ({"provider": "http", "url": "https://agents.example.com/a", "secret": "S"}, None),
        ({"provider": "http", "url": "https://agents.example.com/a"}, "secret: is required"),
        ({"provider": "http", "url": "gopher://x", "secret": "S"}, "url: the URL must be http"),
    ],
)
def test_admin_checks_an_http_model_as_agent_files_do(model, error):
    from django import forms

    from runtime.admin.agent_admin import AgentForm

    form = AgentForm()
    form.cleaned_data = {"model": model}
    if error is None:
        assert form.clean_model() == model
    else:
        with pytest.raises(forms.ValidationError, match=error):
            form.clean_model()


# --- the protocol's document ------------------------------------------------------------------

PROTOCOL_DOC = Path(__file__).resolve().parents[3] / "docs" / "agent-http-protocol.md"


def fenced(language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", PROTOCOL_DOC.read_text(), re.DOTALL)


def test_the_protocol_document_shows_the_schemas_replies_are_validated_against():
    shown = []
    for block in fenced("json"):
        try:
            shown.append(json.loads(block))
        except ValueError:
            continue  # an excerpt, not a whole document
    assert schema("request") in shown and schema("action") in shown


def test_the_example_agent_in_the_protocol_document_runs_a_held_call_to_the_end(
    agents, server, http_agent_for, secret, monkeypatch, settings
):
    """The example agent, as printed, against a real turn: it calls the tool, and tells the
    caller what became of it."""
    [example] = fenced("python")
    monkeypatch.setenv("DEPLOYER_AGENT_SECRET", secret)
    code, serve = example.rstrip().rsplit("\n", 1)
    assert "serve_forever" in serve
    scope: dict = {}
    exec(compile(code, str(PROTOCOL_DOC), "exec"), scope)
    example_server = ThreadingHTTPServer(("127.0.0.1", 0), scope["Agent"])
    threading.Thread(target=example_server.serve_forever, daemon=True).start()
    try:
        agent = http_agent_for()
        agent.model = {**agent.model, "url": f"http://127.0.0.1:{example_server.server_port}/"}
        agent.save(update_fields=["model"])
        task = run(send(agents.a, "byo", "deploy build b-42"))
        decide(open_interaction(task), approved=True)
        task = run(task)
    finally:
        example_server.shutdown()
        example_server.server_close()
    effect = Effect.objects.get(task=task)
    assert effect.arguments == {"build": "b-42", "environment": "staging"}
    assert task.state == TaskState.COMPLETED
    assert status_text(task) == f"Deployed: {effect.outcome['result']['deploymentId']}"


def test_a_connection_requested_then_connected_is_in_the_next_request(
    agents, server, http_agent_for, django_capture_on_commit_callbacks
):
    from connections.models import App
    from connections.services import connection_connect_token

    http_agent_for(connections_enabled=True)
    server.script = [
        {
            "action": "call",
            "server": "countersign",
            "tool": "request_connection",
            "arguments": {"app": "github", "reason": "to open the pull request"},
        },
        {"action": "reply", "text": "Connected, thanks."},
    ]
    task = run(send(agents.a, "byo", "open a pull request"))
    assert task.state == TaskState.AUTH_REQUIRED
    assert open_interaction(task).kind == Interaction.Kind.CONNECTION
    first = server.documents[0]
    assert ("countersign", "request_connection") in [
        (t["server"], t["tool"]) for t in first["tools"]
    ]
    assert first["connectedApps"] == []

    # The connection answers the task's open request once it commits (connections.signals).
    with django_capture_on_commit_callbacks(execute=True):
        connection_connect_token(
            tenant=agents.a.tenant,
            app=App.objects.get_or_create(slug="github", defaults={"name": "GitHub"})[0],
            token="ghp_test_token_1234567890",
            by=agents.a.operator,
        )
    task = run(task)

    assert task.state == TaskState.COMPLETED
    second = server.documents[1]
    assert second["connectedApps"] == ["github"]
    [result] = entries(second, "tool_result")
    assert (result["ok"], result["result"]) == (True, "Connected: github")
    assert "ghp_test_token_1234567890" not in server.requests[1]["raw"].decode()


def test_a_name_that_resolves_to_a_private_address_is_refused_at_connect(
    agents, server, http_agent_for, settings
):
    agent = http_agent_for()
    agent.model = {**agent.model, "url": server.url.replace("127.0.0.1", "localhost")}
    agent.save(update_fields=["model"])
    settings.PUSH_ALLOW_PRIVATE_HOSTS = False
    server.script = [{"action": "reply", "text": "never asked"}]
    task = run(send(agents.a, "byo", "go"))

    assert_failed_for_admin_only(task, "the agent URL is refused")
    assert server.requests == []


@pytest.mark.django_db(transaction=True)
def test_the_lease_is_kept_while_the_agent_takes_longer_than_the_lease(
    agents, server, http_agent_for, settings
):
    settings.TURN_LEASE_SECONDS = 1  # renewed every half second while the agent thinks
    http_agent_for()
    leases = []

    def slow(document):
        # On the agent server's thread, with its own database connection: the lease as the
        # sweep would see it, after the agent took longer than a whole lease.
        try:
            asked_at = timezone.now()
            time.sleep(2.5)
            task = Task.objects.get(public_id=document["taskId"])
            leases.append((asked_at, task.lease_owner, task.lease_expires_at, timezone.now()))
        finally:
            connection.close()
        return {"action": "reply", "text": "Slow but sure."}

    server.script = [slow]
    task = run(send(agents.a, "byo", "go"), worker_id="w-slow")

    assert task.state == TaskState.COMPLETED and status_text(task) == "Slow but sure."
    [(asked_at, owner, expires, read_at)] = leases
    assert owner == "w-slow"
    assert expires > read_at > asked_at + timedelta(seconds=2)
