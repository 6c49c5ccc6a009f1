"""Every operator page and REST route answers 404 to the other tenant's people and tokens."""

from http import HTTPStatus

import pytest
from django.urls import reverse

from runtime.decisions.decision_models import Interaction
from tests.core import run

pytestmark = pytest.mark.django_db


@pytest.fixture
def a_things(agents):
    make = agents.a.extra["make"]
    question = make.question()
    answered = make.question()
    agents.a.client_for(agents.a.operator).post(
        reverse("approvals:interaction", args=[answered.public_id]),
        {"decision": "answer", "custom": "main"},
    )
    task = run(answered.task)
    return {
        "approval": make.approval(),
        "question": question,
        "effect": make.uncertain(),
        "task": task,
        "artifact": task.artifacts[0]["artifactId"],
    }


def test_other_tenants_operator_gets_404_on_every_page(agents, a_things):
    client = agents.b.client_for(agents.b.operator)
    approval, question, effect, task = (
        a_things["approval"],
        a_things["question"],
        a_things["effect"],
        a_things["task"],
    )
    urls = [
        reverse("approvals:interaction", args=[approval.public_id]),
        reverse("approvals:interaction", args=[question.public_id]),
        reverse("approvals:effect", args=[effect.public_id]),
        reverse("approvals:task", args=[task.public_id]),
        reverse("approvals:artifact_download", args=[task.public_id, a_things["artifact"]]),
    ]
    for url in urls:
        assert client.get(url).status_code == HTTPStatus.NOT_FOUND, url
    posts = [
        (urls[0], {"decision": "approve"}),
        (urls[1], {"decision": "answer", "custom": "main"}),
        (urls[2], {"resolution": "fail"}),
    ]
    for url, data in posts:
        assert client.post(url, data).status_code == HTTPStatus.NOT_FOUND, url
    # Their lists show none of it either.
    for name in (
        "approvals:inbox",
        "approvals:inbox_fragment",
        "approvals:tasks",
        "approvals:audit",
    ):
        html = client.get(reverse(name)).content.decode()
        for thing in (approval.public_id, question.public_id, effect.public_id, task.public_id):
            assert thing not in html
    approval.refresh_from_db()
    assert approval.state == Interaction.State.OPEN


def test_other_tenants_operator_token_gets_404_on_every_route(agents, a_things, client):
    auth = {"HTTP_AUTHORIZATION": f"Bearer {agents.b.extra['operator_token']}"}
    for key in ("approval", "question"):
        public_id = a_things[key].public_id
        assert client.get(f"/api/v1/interactions/{public_id}", **auth).status_code == 404
        response = client.post(
            f"/api/v1/interactions/{public_id}/answer",
            {"approved": True} if key == "approval" else {"value": "main"},
            content_type="application/json",
            **auth,
        )
        assert response.status_code == HTTPStatus.NOT_FOUND
    listed = client.get("/api/v1/interactions", **auth).json()["results"]
    assert listed == []
    session = agents.b.client_for(agents.b.operator)
    public_id = a_things["approval"].public_id
    assert session.get(f"/api/v1/interactions/{public_id}").status_code == 404
    response = session.post(
        f"/api/v1/interactions/{public_id}/answer",
        {"approved": True},
        content_type="application/json",
    )
    assert response.status_code == HTTPStatus.NOT_FOUND
    a_things["approval"].refresh_from_db()
    assert a_things["approval"].state == Interaction.State.OPEN
