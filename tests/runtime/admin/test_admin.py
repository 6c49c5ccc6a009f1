import json
import re
from http import HTTPStatus

import pytest

from runtime.agents.agent_models import Agent
from tests.admin_pages import form_data
from tests.runtime.admin.agent_forms import model_fields, rows_fields

pytestmark = pytest.mark.django_db


def test_staff_edit_an_agent_in_admin(demo, staff):
    agent = Agent.objects.get(tenant__slug="demo", slug="support")
    page = staff.get(f"/admin/runtime/agent/{agent.pk}/change/")
    assert page.status_code == HTTPStatus.OK
    data = form_data(page.content.decode())
    data["description"] = "Now with a new description."
    data.pop("public", None)
    response = staff.post(f"/admin/runtime/agent/{agent.pk}/change/", data)
    assert response.status_code == HTTPStatus.FOUND, response.content[:3000]
    agent.refresh_from_db()
    assert agent.description == "Now with a new description."


def test_a_broken_script_is_a_form_error_and_changes_nothing(demo, staff):
    agent = Agent.objects.get(tenant__slug="demo", slug="support")
    page = staff.get(f"/admin/runtime/agent/{agent.pk}/change/")
    data = form_data(page.content.decode())
    data["model-script"] = "- steps:\n    - reply: hi\n- steps:\n    - nonsense: 1\n"
    response = staff.post(f"/admin/runtime/agent/{agent.pk}/change/", data)
    assert response.status_code == HTTPStatus.OK
    assert b"script" in response.content and b"errorlist" in response.content
    # Next to the script, with the line of the YAML it names.
    html = response.content.decode()
    after = html[html.index('name="model-script"') :]
    assert re.search(r'class="errorlist policy-errors"><li>line 4: 1\.steps\.0', after)
    agent.refresh_from_db()
    assert agent.model["script"][0]["steps"][0] != {"nonsense": 1}


def test_runtime_records_are_read_only_in_admin(demo, staff):
    assert staff.get("/admin/runtime/task/").status_code == HTTPStatus.OK
    assert staff.get("/admin/runtime/task/add/").status_code == HTTPStatus.FORBIDDEN


@pytest.mark.parametrize(
    "model, error",
    [
        ('{"provider": "openai", "model": "gpt-4o-mini", "limits": {"steps": 5}}', None),
        ('{"provider": "openai", "model": "gpt-4o-mini", "base_url": "ftp://x"}', b"base_url"),
        ('{"provider": "openai"}', b"model: model: is required"),
        ('{"provider": "openai", "model": "m", "limits": {"steps": 0}}', b"limits: steps"),
        ('{"provider": "nonesuch"}', b"provider"),
        (
            '{"provider": "openai-responses", "model": "gpt-5-mini", "reasoning_effort": "low",'
            ' "memory": {"turns": 3, "tokens": 1000}}',
            None,
        ),
        ('{"provider": "openai", "model": "m", "memory": {"turns": -1}}', b"memory: turns"),
        ('{"provider": "openai", "model": "m", "top_p": 7}', b"top_p"),
    ],
    ids=[
        "valid",
        "bad-base-url",
        "no-model",
        "bad-limit",
        "unknown-provider",
        "responses-with-memory",
        "bad-memory",
        "bad-parameter",
    ],
)
def test_an_openai_model_is_checked_in_admin(demo, staff, model, error):
    agent = Agent.objects.get(tenant__slug="demo", slug="support")
    page = staff.get(f"/admin/runtime/agent/{agent.pk}/change/")
    data = form_data(page.content.decode())
    data = model_fields(data, json.loads(model))
    response = staff.post(f"/admin/runtime/agent/{agent.pk}/change/", data)
    agent.refresh_from_db()
    if error is None:
        assert response.status_code == HTTPStatus.FOUND, response.content[:3000]
        assert agent.model == json.loads(model)
    else:
        assert response.status_code == HTTPStatus.OK
        assert error in response.content and b"errorlist" in response.content
        assert agent.model["provider"] == "scripted"


def test_the_default_skill_must_be_one_of_the_agents_skills(demo, staff):
    agent = Agent.objects.get(tenant__slug="demo", slug="support")
    page = staff.get(f"/admin/runtime/agent/{agent.pk}/change/")
    data = form_data(page.content.decode())
    data["default_skill"] = "nope"
    refused = staff.post(f"/admin/runtime/agent/{agent.pk}/change/", data)
    assert refused.status_code == HTTPStatus.OK
    assert b"is not one of the skills" in refused.content
    agent.refresh_from_db()
    assert agent.default_skill == ""
    data["default_skill"] = agent.skills[0]["id"]
    saved = staff.post(f"/admin/runtime/agent/{agent.pk}/change/", data)
    assert saved.status_code == HTTPStatus.FOUND
    agent.refresh_from_db()
    assert agent.default_skill == agent.skills[0]["id"]


def test_a_default_skill_not_among_skills_with_a_number_for_an_id_is_refused_with_their_ids(
    demo, staff
):
    agent = Agent.objects.get(tenant__slug="demo", slug="support")
    page = staff.get(f"/admin/runtime/agent/{agent.pk}/change/")
    data = form_data(page.content.decode())
    data = rows_fields(data, "skills", [{"id": "7", "name": "Seven", "description": "A numbered."}])
    data["default_skill"] = "nope"

    refused = staff.post(f"/admin/runtime/agent/{agent.pk}/change/", data)

    assert refused.status_code == HTTPStatus.OK
    assert b"is not one of the skills (7)" in refused.content
    agent.refresh_from_db()
    assert agent.default_skill == ""
