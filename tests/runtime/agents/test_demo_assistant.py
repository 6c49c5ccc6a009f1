"""The demo's `assistant` on a real model: seeded only when a key is
configured, with the deployer's and the coder's tools under their policies; `make run`'s
banner says how to turn it on."""

import json
from io import StringIO

import pytest
from django.core.management import call_command

from runtime.agents.agent_models import Agent
from runtime.llm.credentials import credential_set
from tenants.models import Tenant
from tests.test_run_debug_off import load_run_script

pytestmark = pytest.mark.django_db

KEY = "sk-demo-0123456789abcdefghijklmnopqrstuvwxyz"


@pytest.fixture(autouse=True)
def _offline_environment(monkeypatch, settings):
    settings.DEBUG = True  # seed_demo refuses the documented password with DEBUG off
    for name in ("OPENAI_API_KEY", "OPENAI_API_KEY_FILE", "OPENAI_BASE_URL", "OPENAI_MODEL"):
        monkeypatch.delenv(name, raising=False)


def seed() -> dict:
    out = StringIO()
    call_command("seed_demo", "--json", stdout=out)
    return json.loads(out.getvalue())


def test_without_a_key_there_is_no_assistant():
    summary = seed()
    assert "assistant" not in summary["agents"]
    assert "deployer" in summary["agents"] and "coder" in summary["agents"]
    assert not Agent.objects.filter(slug="assistant").exists()


def test_with_a_key_seed_demo_adds_the_assistant_on_that_model(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:11434/v1")
    monkeypatch.setenv("OPENAI_MODEL", "llama3.2")
    summary = seed()
    assert summary["agents"]["assistant"] == "/a2a/demo/assistant"
    assistant = Agent.objects.get(tenant__slug="demo", slug="assistant")
    # The base URL stays the installer's environment, never the agent's (tenant-editable) row.
    assert assistant.model == {
        "provider": "openai",
        "model": "llama3.2",
        "credential": "OPENAI_API_KEY",
    }
    assert KEY not in json.dumps(assistant.model) and KEY not in assistant.instructions
    assert assistant.connections_enabled
    assert "deploy_build" in assistant.instructions
    assert "create_pull_request" in assistant.instructions


def test_the_assistant_has_the_deployer_and_coder_tools_under_their_policies(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    seed()
    demo = Tenant.objects.get(slug="demo")
    assistant = Agent.objects.get(tenant=demo, slug="assistant")
    deployer = Agent.objects.get(tenant=demo, slug="deployer")
    coder = Agent.objects.get(tenant=demo, slug="coder")
    assert assistant.tools == deployer.tools + coder.tools
    assert {(t["server"], t["tool"]) for t in assistant.tools} == {
        ("deploy", "deploy_build"),
        ("github", "create_pull_request"),
    }
    # The deployer's conditional entry (production needs two people), as the deployer has it.
    assert assistant.tool_policy == {
        "deploy/deploy_build": deployer.tool_policy["deploy/deploy_build"],
        "github/create_pull_request": "approve",
    }
    assert [rule["action"] for rule in assistant.tool_policy["deploy/deploy_build"]] == [
        "approve",
        "approve",
    ]
    assert assistant.model["model"] == "gpt-4o-mini"  # the default without OPENAI_MODEL


def test_a_tenant_credential_in_admin_turns_it_on_too():
    seed()
    demo = Tenant.objects.get(slug="demo")
    credential_set(tenant=demo, name="OPENAI_API_KEY", secret=KEY)
    assert "assistant" in seed()["agents"]


def test_seeding_again_without_the_key_leaves_the_assistant_as_it_was(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    monkeypatch.setenv("OPENAI_MODEL", "gpt-4.1-mini")
    seed()
    before = Agent.objects.get(tenant__slug="demo", slug="assistant")
    monkeypatch.delenv("OPENAI_API_KEY")
    monkeypatch.delenv("OPENAI_MODEL")
    summary = seed()
    # Kept (its tasks and audit stay) and unchanged, but not offered: it has no key to run on.
    assert "assistant" not in summary["agents"]
    after = Agent.objects.get(tenant__slug="demo", slug="assistant")
    assert after.model == before.model and after.updated_at == before.updated_at


def test_seeding_twice_with_the_key_changes_nothing(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    seed()
    first = Agent.objects.get(tenant__slug="demo", slug="assistant").updated_at
    assert "assistant" in seed()["agents"]
    assert Agent.objects.get(tenant__slug="demo", slug="assistant").updated_at == first


DEMO = {
    "token": "cs_partner_token",
    "agents": {"support": "/a2a/demo/support"},
    "logins": {
        "operator": {"email": "operator@demo.test", "password": "pw"},
        "admin": {"email": "admin@demo.test", "password": "pw"},
    },
}


def test_the_banner_says_how_to_turn_the_assistant_on_without_a_key():
    text = load_run_script().banner(DEMO, "http://127.0.0.1:8000", environ={})
    assert "export OPENAI_API_KEY=" in text
    assert "OPENAI_BASE_URL" in text and "OPENAI_MODEL" in text
    assert "/a2a/demo/support" in text


def test_the_banner_shows_how_to_call_the_assistant_with_a_key():
    demo = {**DEMO, "agents": {**DEMO["agents"], "assistant": "/a2a/demo/assistant"}}
    environ = {"OPENAI_API_KEY": KEY, "OPENAI_BASE_URL": "http://127.0.0.1:11434/v1"}
    text = load_run_script().banner(demo, "http://127.0.0.1:8000", environ=environ)
    assert "http://127.0.0.1:8000/a2a/demo/assistant" in text
    assert "deploy build" in text and "http://127.0.0.1:11434/v1" in text
    assert "export OPENAI_API_KEY" not in text
    assert KEY not in text  # the key itself is never printed


@pytest.mark.django_db(transaction=True)
def test_the_banners_assistant_command_runs_the_assistant_on_its_model(
    monkeypatch, settings, client, eager
):
    """The banner's command names no skill and the assistant has several (the deployer's and
    the coder's): its default skill takes the message, and the model is asked."""
    from config.banner import curl_command
    from runtime.kernel.task_models import Task
    from tests.llm_stub import LLMStub, completion

    stub = LLMStub().start()
    try:
        stub.play(completion("Which environment: staging or production?"))
        monkeypatch.setenv("OPENAI_API_KEY", KEY)
        settings.OPENAI_BASE_URL = stub.url
        summary = seed()
        command = curl_command(
            "", "/a2a/demo/assistant", summary["token"], "deploy build 2026.10.06-1", "a-1"
        )
        body = command.split("-d ", 1)[1].strip().strip("'")
        response = client.post(
            "/a2a/demo/assistant",
            data=body,
            content_type="application/json",
            headers={"Authorization": f"Bearer {summary['token']}", "A2A-Version": "1.0"},
        )
        result = response.json()
        assert "error" not in result, result
        task = Task.objects.get(public_id=result["result"]["task"]["id"])
        assert task.skill_id == "deploy"
        assert len(stub.requests) == 1  # the model was asked
    finally:
        stub.stop()
