"""An agent's skills, model settings and tools as forms in Django admin
(runtime.admin.agent_fields): every demo agent's page saved as shown changes nothing; a model's
credential is chosen from the tenant's own; rows are added and removed; a scripted model's
script is YAML with line numbers; errors are shown next to the field they name."""

import html as htmllib
import re
from http import HTTPStatus

import pytest

from runtime.admin.agent_fields import ModelField
from runtime.agents.agent_models import Agent
from runtime.kernel.task_models import AuditEvent
from runtime.llm.credentials import credential_set
from tests.admin_pages import form_data, read_form, tenant_admin_client
from tests.runtime.admin.agent_forms import model_fields

pytestmark = pytest.mark.django_db


def page_of(client, agent) -> str:
    response = client.get(f"/admin/runtime/agent/{agent.pk}/change/")
    assert response.status_code == HTTPStatus.OK
    return response.content.decode()


def save(client, agent, data):
    return client.post(f"/admin/runtime/agent/{agent.pk}/change/", data)


def error_after(html: str, name: str) -> str:
    start = html.index(f'name="{name}"')
    found = re.search(r'<ul class="errorlist policy-errors">(.*?)</ul>', html[start:], re.S)
    assert found and found.start() < 1500, f"no error next to {name}"
    return htmllib.unescape(re.sub(r"<[^>]+>", " ", found.group(1)))


def stored(agent) -> tuple:
    a = Agent.objects.get(pk=agent.pk)
    return (a.skills, a.model, a.tools, a.tool_policy, a.ladder, a.default_skill)


def test_every_demo_agent_saved_as_shown_changes_nothing(agents):
    client = tenant_admin_client(agents.a)
    for agent in Agent.objects.filter(tenant=agents.a.tenant).order_by("slug"):
        html = page_of(client, agent)
        # No JSON textareas for skills, model or tools: fields.
        assert 'name="skills"' not in html and 'name="tools"' not in html
        assert 'name="model"' not in html
        before = stored(agent)
        response = save(client, agent, form_data(html))
        assert response.status_code == HTTPStatus.FOUND, (agent.slug, response.content[:2000])
        assert stored(agent) == before, agent.slug
    assert not AuditEvent.objects.filter(action="policy.changed").exists()


def test_a_scripted_models_script_is_yaml_with_line_numbers(agents):
    client = tenant_admin_client(agents.a)
    agent = Agent.objects.get(tenant=agents.a.tenant, slug="deployer")
    html = page_of(client, agent)
    script = form_data(html)["model-script"]
    assert script.startswith("- when:\n    text: ") and "deploy_build" in script
    gutter = re.search(r'<pre class="yaml-gutter"[^>]*>(.*?)</pre>', html, re.S).group(1)
    assert gutter.split() == [str(n) for n in range(1, len(script.splitlines()) + 1)]


def test_a_models_credential_is_chosen_from_the_tenants_own(agents):
    credential_set(tenant=agents.a.tenant, name="OPENAI_ACME", secret="sk-" + "a" * 40)
    credential_set(tenant=agents.b.tenant, name="OPENAI_GLOBEX", secret="sk-" + "b" * 40)
    client = tenant_admin_client(agents.a)
    agent = Agent.objects.get(tenant=agents.a.tenant, slug="support")
    form = read_form(page_of(client, agent))
    assert form.options["model-credential"] == ["", "OPENAI_ACME"]
    assert form.options["model-provider"] == [
        "gate",
        "gateway",
        "http",
        "openai",
        "openai-responses",
        "scripted",
    ]
    data = model_fields(
        form_data(page_of(client, agent)),
        {
            "provider": "openai-responses",
            "model": "gpt-5-mini",
            "credential": "OPENAI_ACME",
            "reasoning_effort": "low",
            "top_p": 0.5,
            "limits": {"steps": 4},
            "memory": {"turns": 3},
        },
    )
    # A field of another provider, left filled, is not that provider's.
    data["model-url"] = "https://agent.example/"
    assert save(client, agent, data).status_code == HTTPStatus.FOUND
    agent.refresh_from_db()
    assert agent.model == {
        "provider": "openai-responses",
        "model": "gpt-5-mini",
        "credential": "OPENAI_ACME",
        "reasoning_effort": "low",
        "top_p": 0.5,
        "limits": {"steps": 4},
        "memory": {"turns": 3},
    }
    # Shown again as set, and saved as shown: the same.
    data = form_data(page_of(client, agent))
    assert data["model-credential"] == "OPENAI_ACME" and data["model-top_p"] == "0.5"
    assert save(client, agent, data).status_code == HTTPStatus.FOUND
    assert Agent.objects.get(pk=agent.pk).model == agent.model


@pytest.mark.parametrize(
    "model",
    [
        {"provider": "openai", "model": "m", "stop": ["\n", "END"], "seed": 5, "store": False},
        {"provider": "openai", "model": "m", "extra_body": {"x": 1}, "service_tier": "5"},
        {"provider": "http", "url": "https://a.example/", "secret": "WH", "timeout": 2.5},
        {"provider": "gateway", "maxWaitSeconds": 600, "limits": {"steps": 3, "other": 1}},
    ],
)
def test_a_model_goes_to_fields_and_back_unchanged(model):
    field = ModelField()
    field.widget.providers = ["gateway", "http", "openai", "scripted"]
    data = form_data(field.widget.render("model", model))
    assert field.clean(field.widget.value_from_datadict(data, None, "model")) == model
    rows_only = {**data, "model-orig": ""}
    assert field.clean(field.widget.value_from_datadict(rows_only, None, "model")) == model


def test_skills_and_tools_are_rows_added_and_removed(agents):
    client = tenant_admin_client(agents.a)
    agent = Agent.objects.get(tenant=agents.a.tenant, slug="deployer")
    data = form_data(page_of(client, agent))
    assert data["skills-0-id"] == "deploy" and data["skills-0-tags"] == "deploy, release"
    assert data["tools-0-server"] == "deploy" and "environment:" in data["tools-0-schema"]
    # The spare rows: a skill and a tool server offering all its tools.
    data.update(
        {
            "skills-1-id": "rollback",
            "skills-1-name": "Roll back",
            "skills-1-description": "Rolls back a deployment.",
            "skills-1-examples": "roll back payments-api\nroll back web",
            "tools-1-server": "github",
            "tools-1-risk": "high",
        }
    )
    assert save(client, agent, data).status_code == HTTPStatus.FOUND
    agent.refresh_from_db()
    assert agent.skills[1] == {
        "id": "rollback",
        "name": "Roll back",
        "description": "Rolls back a deployment.",
        "examples": ["roll back payments-api", "roll back web"],
    }
    assert agent.tools[1] == {"server": "github", "risk": "high"}
    data = form_data(page_of(client, agent))
    data["skills-0-delete"] = "on"
    assert save(client, agent, data).status_code == HTTPStatus.FOUND
    agent.refresh_from_db()
    assert [s["id"] for s in agent.skills] == ["rollback"]


@pytest.mark.parametrize(
    ("edit", "near", "message"),
    [
        ({"skills-0-name": ""}, "skills-0-name", "is required"),
        ({"tools-0-schema": "type: [object\n"}, "tools-0-schema", "not YAML"),
        (
            {"tools-0-schema": "type: object\nproperties:\n  a: {$ref: 'https://x.test/s'}\n"},
            "tools-0-schema",
            "points outside",
        ),
        ({"tools-1-risk": "high"}, "tools-1-server", "is required"),
        ({"model-script": "- steps: []\n"}, "model-script", "line 1: 0: each rule needs"),
        ({"model-limits.steps": "0"}, "model-limits.bad_replies", "steps"),
    ],
)
def test_an_error_is_shown_next_to_its_field_and_changes_nothing(agents, edit, near, message):
    client = tenant_admin_client(agents.a)
    agent = Agent.objects.get(tenant=agents.a.tenant, slug="deployer")
    data = form_data(page_of(client, agent))
    data.update(edit)
    before = stored(agent)
    response = save(client, agent, data)
    assert response.status_code == HTTPStatus.OK
    assert message in error_after(response.content.decode(), near)
    assert stored(agent) == before


def test_an_openai_models_error_is_next_to_its_field(agents):
    client = tenant_admin_client(agents.a)
    agent = Agent.objects.get(tenant=agents.a.tenant, slug="support")
    data = model_fields(
        form_data(page_of(client, agent)),
        {"provider": "openai", "model": "m", "base_url": "ftp://x"},
    )
    response = save(client, agent, data)
    assert response.status_code == HTTPStatus.OK
    assert "http" in error_after(response.content.decode(), "model-base_url")
