"""Conversation memory: a turn's model sees the earlier turns of its context, bounded
by the agent's budget (``memory: {turns, tokens}``), for provider openai (against the local
OpenAI-compatible stub), http (a real agent server on loopback) and scripted agents that name
the earlier turns. Contexts stay per tenant and per caller."""

import json
import logging

import jsonschema
import pytest

from runtime.agents.agentfile import AgentSpec, agent_upsert
from runtime.decisions.decision_models import Interaction
from runtime.llm.http_agent import schema
from runtime.turn.intake import message_send
from tests.agent_server import AgentServer
from tests.core import (
    DEPLOY_TOOL,
    decide,
    message,
    open_interaction,
    reply,
    run,
    send,
    status_text,
)
from tests.llm_stub import LLMStub, call, completion

pytestmark = pytest.mark.django_db

KEY = "sk-test-" + "m3m0r" * 6
DEPLOY = "deploy__deploy_build"


@pytest.fixture
def llm(settings, monkeypatch):
    stub = LLMStub().start()
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    settings.OPENAI_BASE_URL = stub.url
    settings.MODEL_RETRY_BASE_SECONDS = 0.05
    settings.MODEL_TIMEOUT_SECONDS = 5
    yield stub
    stub.stop()


def hosted_agent(agents, slug="assistant", memory=None, **fields):
    model = {"provider": "openai", "model": "gpt-4o-mini"}
    if memory is not None:
        model["memory"] = memory  # as AGENT.md's memory is kept (runtime.agents.agentfile)
    spec = AgentSpec(
        slug=slug,
        name=slug,
        description="An agent on a hosted model.",
        skills=[{"id": "main", "name": "Main", "description": "d", "tags": [], "examples": []}],
        instructions="You deploy builds.",
        model=model,
        tools=[DEPLOY_TOOL],
        **fields,
    )
    return agent_upsert(tenant=agents.a.tenant, spec=spec)[0]


def turn(side, slug: str, text: str, context_id: str | None = None):
    """Send a message (in the context ``context_id``, else a new one) and run its turn."""
    fields = {"contextId": context_id} if context_id else {}
    return run(send(side, slug, text, **fields))


def test_the_second_turns_request_holds_the_first_turns_messages(agents, llm):
    hosted_agent(agents)
    llm.play(
        completion(calls=[call(DEPLOY, {"build": "b-1", "environment": "staging"}, "c1")]),
        completion("Deployed b-1 to staging."),
        completion("Yes: b-1 went to staging, approved because staging was free."),
    )
    first = turn(agents.a, "assistant", "deploy b-1 to staging")
    decide(open_interaction(first), approved=True, reason="staging is free")
    first = run(first)
    assert first.state == "TASK_STATE_COMPLETED"

    second = turn(agents.a, "assistant", "did that go out?", first.wire_context_id)
    assert second.state == "TASK_STATE_COMPLETED"
    assert (second.turn, len(llm.requests)) == (2, 3)
    messages = llm.requests[2]["body"]["messages"]
    assert [m["role"] for m in messages] == [
        "system",
        "user",  # turn 1: the caller's message
        "assistant",  # what the agent did: its call
        "tool",  # and what came of it, the person's decision with it
        "assistant",  # how turn 1 ended
        "user",  # this turn's message
    ]
    assert messages[1]["content"] == "deploy b-1 to staging"
    replayed = messages[2]["tool_calls"][0]
    assert replayed["function"]["name"] == DEPLOY
    assert json.loads(replayed["function"]["arguments"]) == {
        "build": "b-1",
        "environment": "staging",
    }
    outcome = json.loads(messages[3]["content"])
    assert outcome["ok"] is True and outcome["result"]["build"] == "b-1"
    assert outcome["decision"] == {"approved": True, "reason": "staging is free"}
    assert messages[3]["tool_call_id"] == replayed["id"]
    assert messages[4] == {"role": "assistant", "content": "Deployed b-1 to staging."}
    assert messages[5] == {"role": "user", "content": "did that go out?"}
    # The first turn's own requests held one user message: nothing earlier.
    assert [m["role"] for m in llm.requests[0]["body"]["messages"]] == ["system", "user"]


def test_the_oldest_turns_drop_first_and_the_drop_is_recorded(agents, llm, caplog):
    hosted_agent(agents, memory={"turns": 2})
    llm.fallback = completion("Noted.")
    context = turn(agents.a, "assistant", "message 1").wire_context_id
    for n in (2, 3):
        turn(agents.a, "assistant", f"message {n}", context)
    with caplog.at_level(logging.INFO, logger="runtime.turn.memory"):
        fourth = turn(agents.a, "assistant", "message 4", context)
    messages = llm.requests[-1]["body"]["messages"]
    users = [m["content"] for m in messages if m["role"] == "user"]
    assert users == ["message 2", "message 3", "message 4"]
    assert "1 earlier turn(s) that are not shown" in messages[0]["content"]
    memory = next(e for e in fourth.transcript if e["type"] == "memory")
    assert [t["turn"] for t in memory["turns"]] == [2, 3]
    assert memory["dropped"] == 1
    dropped = [r for r in caplog.records if "dropped, oldest first" in r.getMessage()]
    assert dropped and dropped[0].task_id == fourth.public_id


def test_the_token_budget_keeps_the_newest_turns_that_fit(agents, llm):
    hosted_agent(agents, memory={"tokens": 300})
    llm.fallback = completion("Noted.")
    context = turn(agents.a, "assistant", "x" * 2000).wire_context_id
    turn(agents.a, "assistant", "short one", context)
    third = turn(agents.a, "assistant", "and now?", context)
    users = [m["content"] for m in llm.requests[-1]["body"]["messages"] if m["role"] == "user"]
    # The long first turn does not fit about 300 tokens; the second does.
    assert users == ["short one", "and now?"]
    memory = next(e for e in third.transcript if e["type"] == "memory")
    assert memory["dropped"] == 1 and 0 < memory["tokens"] <= 300


def test_memory_turns_zero_reads_nothing(agents, llm):
    hosted_agent(agents, memory={"turns": 0})
    llm.fallback = completion("Noted.")
    context = turn(agents.a, "assistant", "first").wire_context_id
    second = turn(agents.a, "assistant", "second", context)
    assert [m["role"] for m in llm.requests[-1]["body"]["messages"]] == ["system", "user"]
    assert not [e for e in second.transcript if e["type"] == "memory"]


def test_another_caller_naming_the_same_context_id_sees_nothing_of_it(agents, llm):
    from tenants.tokens import api_token_create

    agent = hosted_agent(agents)
    llm.fallback = completion("Noted.")
    first = turn(agents.a, "assistant", "my secret plan")
    api_token_create(tenant=agents.a.tenant, subject="partner:other", name="other")
    other = message_send(
        tenant=agents.a.tenant,
        agent=agent,
        subject="partner:other",
        message=message("what was the plan?", contextId=first.wire_context_id),
    ).task
    other = run(other)
    # A context of its own: its first turn.
    assert other.turn == 1 and other.context_id != first.context_id
    contents = json.dumps(llm.requests[-1]["body"]["messages"])
    assert "my secret plan" not in contents


def test_a_resumed_turn_asks_with_the_same_memory(agents, llm):
    hosted_agent(agents)
    llm.play(
        completion("Hello."),
        completion(calls=[call(DEPLOY, {"build": "b-2", "environment": "staging"}, "c2")]),
        completion("Done."),
    )
    context = turn(agents.a, "assistant", "hi").wire_context_id
    second = turn(agents.a, "assistant", "deploy b-2 to staging", context)
    assert second.state == "TASK_STATE_AUTH_REQUIRED"
    decide(open_interaction(second), approved=True)
    run(second)
    before, after = (llm.requests[i]["body"]["messages"] for i in (1, 2))
    # The earlier turn, read once: the same in both of this turn's requests.
    assert before[:4] == after[:4]
    assert [m.get("content") for m in after[1:3]] == ["hi", "Hello."]
    assert Interaction.objects.filter(task=second).count() == 1


# --- provider: http (protocol version 2) ------------------------------------------------------


@pytest.fixture
def agent_server(settings, monkeypatch):
    secret = "whsec_" + "bWVtb3J5LXRlc3Qtc2VjcmV0LTMyLWJ5dGVzISE="
    monkeypatch.setenv("MEMORY_AGENT_SECRET", secret)
    settings.CREDENTIAL_ENV_NAMES = [*settings.CREDENTIAL_ENV_NAMES, "MEMORY_AGENT_SECRET"]
    settings.PUSH_ALLOW_PRIVATE_HOSTS = True
    server = AgentServer(secret).start()
    yield server
    server.stop()


def test_an_http_agent_gets_the_context_id_and_the_earlier_turns(agents, agent_server):
    spec = AgentSpec(
        slug="byo",
        name="byo",
        description="My own agent.",
        skills=[{"id": "main", "name": "Main", "description": "d", "tags": [], "examples": []}],
        model={"provider": "http", "url": agent_server.url, "secret": "MEMORY_AGENT_SECRET"},
        tools=[DEPLOY_TOOL],
        tool_policy={"deploy/deploy_build": "allow"},
    )
    agent_upsert(tenant=agents.a.tenant, spec=spec)
    agent_server.script = [
        {"action": "ask", "questionId": "env", "prompt": "Which environment?"},
        {
            "action": "call",
            "server": "deploy",
            "tool": "deploy_build",
            "arguments": {"build": "b-3", "environment": "staging"},
        },
        {"action": "reply", "text": "Deployed b-3."},
        {"action": "reply", "text": "You deployed b-3 to staging."},
    ]
    first = turn(agents.a, "byo", "deploy b-3")
    reply(first, "staging")
    first = run(first)
    assert status_text(first) == "Deployed b-3."
    second = turn(agents.a, "byo", "what did I deploy?", first.wire_context_id)
    assert status_text(second) == "You deployed b-3 to staging."

    document = agent_server.documents[-1]
    jsonschema.Draft202012Validator(schema("request")).validate(document)
    assert document["version"] == 2
    assert (document["contextId"], document["turn"], document["droppedTurns"]) == (
        first.wire_context_id,
        2,
        0,
    )
    earlier = document["history"][0]
    assert earlier["type"] == "turn" and earlier["turn"] == 1
    assert earlier["taskId"] == first.public_id
    assert earlier["state"] == "TASK_STATE_COMPLETED"
    assert earlier["message"]["text"] == "deploy b-3"
    assert earlier["reply"] == "Deployed b-3."
    assert earlier["events"][0] == {
        "type": "question",
        "prompt": "Which environment?",
        "answer": "staging",
    }
    deployed = earlier["events"][1]
    assert (deployed["type"], deployed["tool"], deployed["ok"]) == ("call", "deploy_build", True)
    assert document["history"][1:] == []  # nothing of this turn yet
    # The first turn's requests had no earlier turn.
    assert not [e for d in agent_server.documents[:3] for e in d["history"] if e["type"] == "turn"]


# --- scripted agents that name the earlier turns -------------------------------------------------


def test_the_demo_support_agent_remembers_the_previous_question(agents):
    first = turn(agents.a, "support", "How do I reset my password?")
    second = turn(agents.a, "support", "What did I just ask?", first.wire_context_id)
    assert status_text(second) == (
        'You asked: "How do I reset my password?". I answered: ' + status_text(first)
    )
    alone = turn(agents.a, "support", "What did I just ask?")
    assert status_text(alone).startswith("This is the first message of our conversation")


def test_a_script_that_does_not_name_earlier_turns_reads_none(agents, make_agent):
    make_agent("echo", [{"reply": "{{ text }}"}])
    context = turn(agents.a, "echo", "one").wire_context_id
    second = turn(agents.a, "echo", "two", context)
    assert status_text(second) == "two"
    assert not [e for e in second.transcript if e["type"] == "memory"]
