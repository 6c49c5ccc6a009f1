"""An approval group on the operator channels: one inbox item listing every
call of a model reply with its arguments, decided call by call and at once on the page, over
REST and in bulk, each through the one decision flow; bad input is a 4xx that changes nothing,
another tenant's group a 404."""

import html
import json
import re
from http import HTTPStatus

import pytest
from django.urls import reverse

from runtime.decisions.decision_models import Effect, Interaction, Receipt
from runtime.kernel import extensions as ext
from runtime.kernel.task_models import Task
from tests.core import decide
from tests.groups import held_group, model_stub, planner

pytestmark = pytest.mark.django_db


@pytest.fixture
def llm(settings, monkeypatch):
    with model_stub(settings, monkeypatch) as stub:
        yield stub


@pytest.fixture
def group(agents, llm):
    """A task of tenant A paused on a group of two held deploys (staging, then production)."""
    planner(agents.a.tenant)
    task, calls = held_group(agents.a, llm)
    return task, calls


def hashes(task) -> dict[str, str]:
    return dict(Effect.objects.filter(task=task).values_list("public_id", "arguments_hash"))


def states_of(calls) -> list[str]:
    return [Interaction.objects.get(pk=c.pk).state for c in calls]


def api(client, token, method, path, body=None):
    kwargs = {"HTTP_AUTHORIZATION": f"Bearer {token}"}
    if method == "get":
        return client.get(path, **kwargs)
    return client.post(path, body, content_type="application/json", **kwargs)


# --- the inbox and the page ---------------------------------------------------------------


def test_the_inbox_shows_a_group_as_one_item_listing_each_call(agents, group):
    task, (staging, production) = group
    client = agents.a.client_for(agents.a.operator)
    page = html.unescape(client.get(reverse("approvals:inbox")).content.decode())
    items = re.findall(r'id="item-([^"]+)"', page)
    assert items == [staging.public_id]  # one item, the group's
    assert "Approve 2 calls of one reply" in page
    assert 'build="b-1", environment="staging"' in page
    assert 'build="b-1", environment="production"' in page
    # The counts say one approval waits; the search finds the group by either call.
    assert 'data-kind-count="approval">1<' in page
    for q in ("production", "staging"):
        found = client.get(reverse("approvals:inbox"), {"q": q}).content.decode()
        assert re.findall(r'id="item-([^"]+)"', found) == [staging.public_id], q


def test_a_calls_page_shows_every_call_of_its_group_with_its_arguments(agents, group):
    task, (staging, production) = group
    client = agents.a.client_for(agents.a.operator)
    for call in (staging, production):
        page = html.unescape(
            client.get(reverse("approvals:interaction", args=[call.public_id])).content.decode()
        )
        assert 'id="group"' in page
        for other, value in ((staging, "staging"), (production, "production")):
            assert f'id="group-call-{other.public_id}"' in page
            assert f'"environment": "{value}"' in page
        for public_id, digest in hashes(task).items():
            assert f'name="shown-{public_id}" value="{digest}"' in page
        assert 'id="approve-group"' in page and "Approve all 2" in page
    # A viewer sees the group but gets no form.
    viewer = agents.a.client_for(agents.a.viewer)
    page = viewer.get(reverse("approvals:interaction", args=[staging.public_id])).content.decode()
    assert 'id="group-calls"' in page and 'id="group-form"' not in page


def test_decided_call_by_call_on_the_page_the_operator_moves_on_to_the_next_call(agents, group):
    task, (staging, production) = group
    client = agents.a.client_for(agents.a.operator)
    url = reverse("approvals:interaction", args=[staging.public_id])
    response = client.post(
        url, {"decision": "approve", "shown_hash": hashes(task)[staging.public_id]}
    )
    assert response.status_code == HTTPStatus.FOUND
    # The next item of the inbox is the group again: its call still open.
    assert response["Location"].startswith(
        reverse("approvals:interaction", args=[production.public_id])
    )
    task.refresh_from_db()
    assert task.state == "TASK_STATE_AUTH_REQUIRED"
    page = client.get(response["Location"]).content.decode()
    assert "Approve all 1" in page  # the group form now takes the call left
    response = client.post(
        reverse("approvals:interaction", args=[production.public_id]),
        {"decision": "deny", "reason": "not today"},
    )
    assert response.status_code == HTTPStatus.FOUND
    task.refresh_from_db()
    assert task.state == "TASK_STATE_WORKING"
    assert states_of([staging, production]) == ["answered", "answered"]


def test_deciding_one_call_moves_on_to_the_groups_next_call_before_older_items(agents, llm):
    """An older item waits too: the inbox's next older item is not the group's call left."""
    older = agents.a.extra["make"].approval(build="older-1")
    planner(agents.a.tenant)
    task, (staging, production) = held_group(agents.a, llm)
    client = agents.a.client_for(agents.a.operator)
    response = client.post(
        reverse("approvals:interaction", args=[staging.public_id]) + "?kind=approval",
        {"decision": "approve", "shown_hash": hashes(task)[staging.public_id]},
    )
    assert response.status_code == HTTPStatus.FOUND
    assert response["Location"] == (
        reverse("approvals:interaction", args=[production.public_id]) + "?kind=approval"
    )
    told = [str(m) for m in response.wsgi_request._messages]
    assert any("Next: call 2 of 2 of the same reply" in m for m in told), told
    # The group's last call decided, the older item is next.
    response = client.post(
        reverse("approvals:interaction", args=[production.public_id]),
        {"decision": "deny", "reason": "not today"},
    )
    assert response["Location"].startswith(reverse("approvals:interaction", args=[older.public_id]))


def test_decided_at_once_on_the_page(agents, group):
    task, calls = group
    client = agents.a.client_for(agents.a.operator)
    url = reverse("approvals:interaction", args=[calls[1].public_id])
    body = {"decision": "approve_group", "reason": "the plan is fine"}
    body |= {f"shown-{k}": v for k, v in hashes(task).items()}
    response = client.post(url, body)
    assert response.status_code == HTTPStatus.FOUND
    task.refresh_from_db()
    assert task.state == "TASK_STATE_WORKING"
    for call in calls:
        call.refresh_from_db()
        assert (call.answered_via, call.answer) == (
            "page",
            {"approved": True, "reason": "the plan is fine"},
        )
    assert Receipt.objects.filter(decision="approved").count() == 2
    # Decided: the page shows the group and no form.
    page = client.get(url).content.decode()
    assert 'id="group-calls"' in page and 'id="group-form"' not in page


def test_a_group_decision_on_the_page_that_does_not_read_changes_nothing(agents, group):
    task, (staging, production) = group
    client = agents.a.client_for(agents.a.operator)
    url = reverse("approvals:interaction", args=[staging.public_id])
    digests = hashes(task)
    # Only one call shown: refused, neither decided.
    response = client.post(
        url, {"decision": "approve_group", f"shown-{staging.public_id}": digests[staging.public_id]}
    )
    assert response.status_code == HTTPStatus.BAD_REQUEST
    # A hash that is not the call's.
    body = {"decision": "approve_group", **{f"shown-{k}": "0" * 64 for k in digests}}
    assert client.post(url, body).status_code == HTTPStatus.BAD_REQUEST
    body = {"decision": "approve_group", "reason": "x" * 1001}
    body |= {f"shown-{k}": v for k, v in digests.items()}
    assert client.post(url, body).status_code == HTTPStatus.BAD_REQUEST
    assert states_of([staging, production]) == ["open", "open"]
    # A viewer may not decide; another tenant's member finds nothing.
    body = {"decision": "deny_group", **{f"shown-{k}": v for k, v in digests.items()}}
    assert agents.a.client_for(agents.a.viewer).post(url, body).status_code == HTTPStatus.FORBIDDEN
    assert (
        agents.b.client_for(agents.b.operator).post(url, body).status_code == HTTPStatus.NOT_FOUND
    )
    assert states_of([staging, production]) == ["open", "open"]
    # Someone decided a call since the page was shown: 409, the other call left open.
    decide(production, by="user:admin@acme.test", approved=False)
    response = client.post(url, body)
    assert response.status_code == HTTPStatus.CONFLICT
    assert "decided by user:admin@acme.test meanwhile" in response.content.decode()
    assert states_of([staging, production]) == ["open", "answered"]


def test_a_risk_high_call_sends_the_group_decision_through_step_up(agents, llm):
    planner(agents.a.tenant, policy={"deploy/deploy_build": {"action": "approve", "risk": "high"}})
    task, calls = held_group(agents.a, llm)
    client = agents.a.client_for(agents.a.operator)
    body = {"decision": "approve_group", **{f"shown-{k}": v for k, v in hashes(task).items()}}
    response = client.post(reverse("approvals:interaction", args=[calls[0].public_id]), body)
    assert response.status_code == HTTPStatus.FOUND
    assert "reauthenticate" in response["Location"]
    assert states_of(calls) == ["open", "open"]


# --- REST -----------------------------------------------------------------------------------


def test_rest_reads_the_group_and_decides_it_at_once(agents, group, client):
    task, calls = group
    token = agents.a.extra["operator_token"]
    group_id = calls[0].group_id
    listed = api(client, token, "get", "/api/v1/interactions?state=open").json()["results"]
    assert sorted(r["id"] for r in listed) == sorted(c.public_id for c in calls)
    assert {r["groupId"] for r in listed} == {group_id}
    body = api(client, token, "get", f"/api/v1/groups/{group_id}").json()
    assert (body["id"], body["state"], body["taskId"]) == (group_id, "open", task.public_id)
    assert [i["id"] for i in body["interactions"]] == [c.public_id for c in calls]
    assert [i["heldCall"]["arguments"]["environment"] for i in body["interactions"]] == [
        "staging",
        "production",
    ]
    assert body["decision"]["mayDecide"] is True
    assert body["interactions"][0]["decision"]["mayDecide"] is True
    shown = {i["id"]: i["heldCall"]["argumentsHash"] for i in body["interactions"]}
    answered = api(
        client,
        token,
        "post",
        f"/api/v1/groups/{group_id}/answer",
        {"approved": True, "reason": "ok", "argumentsHashes": shown},
    )
    assert answered.status_code == HTTPStatus.OK, answered.content
    body = answered.json()
    assert body["state"] == "decided"
    assert [i["answeredVia"] for i in body["interactions"]] == ["rest", "rest"]
    task.refresh_from_db()
    assert task.state == "TASK_STATE_WORKING"
    again = api(client, token, "post", f"/api/v1/groups/{group_id}/answer", {"approved": False})
    assert again.status_code == HTTPStatus.CONFLICT


def test_rest_decides_a_group_call_by_call(agents, group, client):
    task, (staging, production) = group
    token = agents.a.extra["operator_token"]
    detail = api(client, token, "get", f"/api/v1/interactions/{staging.public_id}").json()
    assert detail["groupId"] == staging.group_id
    answer = api(
        client,
        token,
        "post",
        f"/api/v1/interactions/{staging.public_id}/answer",
        {"approved": True},
    )
    assert answer.status_code == HTTPStatus.OK
    task.refresh_from_db()
    assert task.state == "TASK_STATE_AUTH_REQUIRED"
    assert task.status_ext[ext.INTERACTIONS]["interactionId"] == production.public_id
    group = api(client, token, "get", f"/api/v1/groups/{staging.group_id}").json()
    assert [i["state"] for i in group["interactions"]] == ["answered", "open"]
    answer = api(
        client,
        token,
        "post",
        f"/api/v1/interactions/{production.public_id}/answer",
        {"approved": False, "reason": "no"},
    )
    assert answer.status_code == HTTPStatus.OK
    assert Task.objects.get(pk=task.pk).state == "TASK_STATE_WORKING"


def test_rest_refuses_what_does_not_read_and_changes_nothing(agents, group, client):
    task, (staging, production) = group
    token = agents.a.extra["operator_token"]
    group_id = staging.group_id
    path = f"/api/v1/groups/{group_id}/answer"
    digests = hashes(task)
    for body, field in (
        ({"approved": "yes"}, "approved"),
        ({}, "approved"),
        ({"approved": True, "argumentsHashes": {staging.public_id: "nothex"}}, "argumentsHashes"),
        ({"approved": True, "argumentsHashes": {}}, "argumentsHashes"),
        (
            {"approved": True, "argumentsHashes": {staging.public_id: digests[staging.public_id]}},
            "argumentsHashes",
        ),
        (
            {"approved": True, "argumentsHashes": {**digests, "eff_nope": "0" * 64}},
            "argumentsHashes",
        ),
    ):
        response = api(client, token, "post", path, body)
        assert response.status_code == HTTPStatus.BAD_REQUEST, (body, response.content)
        assert response.json()["field"].startswith(field), response.json()
    wrong = {k: "0" * 64 for k in digests}
    response = api(client, token, "post", path, {"approved": True, "argumentsHashes": wrong})
    assert response.status_code == HTTPStatus.BAD_REQUEST
    assert (
        client.post(
            path, "x", content_type="text/plain", HTTP_AUTHORIZATION=f"Bearer {token}"
        ).status_code
        == HTTPStatus.UNSUPPORTED_MEDIA_TYPE
    )
    assert states_of([staging, production]) == ["open", "open"]
    # Another tenant's group, and a missing one, are 404 whatever the body.
    other = agents.b.extra["operator_token"]
    assert (
        api(client, other, "get", f"/api/v1/groups/{group_id}").status_code == HTTPStatus.NOT_FOUND
    )
    assert api(client, other, "post", path, {"approved": True}).status_code == HTTPStatus.NOT_FOUND
    assert api(client, other, "post", path, {"approved": "yes"}).status_code == HTTPStatus.NOT_FOUND
    assert (
        api(client, token, "post", "/api/v1/groups/grp_nope/answer", {}).status_code
        == HTTPStatus.NOT_FOUND
    )
    # A partner token is refused here, as on every /api/v1/ endpoint.
    assert (
        api(client, agents.a.token, "get", f"/api/v1/groups/{group_id}").status_code
        == HTTPStatus.FORBIDDEN
    )
    assert states_of([staging, production]) == ["open", "open"]


def test_a_program_may_deny_a_group_that_needs_two_people_but_not_approve_it(agents, llm, client):
    planner(agents.a.tenant, policy={"deploy/deploy_build": {"action": "approve", "required": 2}})
    task, calls = held_group(agents.a, llm)
    token = agents.a.extra["operator_token"]
    path = f"/api/v1/groups/{calls[0].group_id}/answer"
    response = api(client, token, "post", path, {"approved": True})
    assert response.status_code == HTTPStatus.FORBIDDEN
    assert response.json()["reason"] == "DECIDER_NOT_ALLOWED"
    assert states_of(calls) == ["open", "open"]
    assert not Receipt.objects.exists()
    assert api(client, token, "post", path, {"approved": False}).status_code == HTTPStatus.OK
    assert states_of(calls) == ["answered", "answered"]


# --- bulk -----------------------------------------------------------------------------------


def test_bulk_approves_a_group_at_once_after_listing_each_call(agents, group):
    task, (staging, production) = group
    client = agents.a.client_for(agents.a.operator)
    confirm = client.post(
        reverse("approvals:inbox_bulk"), {"decision": "approve", "ids": [staging.public_id]}
    )
    page = confirm.content.decode()
    assert confirm.status_code == HTTPStatus.OK
    assert "Approve 2 of the 2 calls of one reply" in page
    digests = hashes(task)
    for public_id, digest in digests.items():
        assert f'name="shown-{public_id}" value="{digest}"' in page
    body = {"decision": "approve", "confirmed": "1", "ids": [staging.public_id]}
    body |= {f"shown-{k}": v for k, v in digests.items()}
    result = client.post(reverse("approvals:inbox_bulk"), body)
    assert "Approved 2 calls." in result.content.decode()
    assert [Interaction.objects.get(pk=c.pk).answered_via for c in (staging, production)] == [
        "bulk",
        "bulk",
    ]
    assert Task.objects.get(pk=task.pk).state == "TASK_STATE_WORKING"


def test_bulk_denies_every_open_call_of_a_group(agents, group):
    task, (staging, production) = group
    decide(staging, approved=True)
    client = agents.a.client_for(agents.a.operator)
    listed = Interaction.objects.get(task=task, listed=True)
    assert listed.pk == production.pk
    result = client.post(
        reverse("approvals:inbox_bulk"),
        {"decision": "deny", "ids": [listed.public_id], "reason": "stop"},
    )
    assert "Denied 1 call." in result.content.decode()
    production.refresh_from_db()
    assert production.answer == {"approved": False, "reason": "stop"}
    assert Task.objects.get(pk=task.pk).state == "TASK_STATE_WORKING"


def test_bulk_says_up_front_that_a_group_it_cannot_approve_is_left_out(agents, llm):
    planner(agents.a.tenant, policy={"deploy/deploy_build": {"action": "approve", "required": 2}})
    task, (staging, production) = held_group(agents.a, llm)
    client = agents.a.client_for(agents.a.operator)
    page = client.post(
        reverse("approvals:inbox_bulk"), {"decision": "approve", "ids": [staging.public_id]}
    ).content.decode()
    assert "<h1>Nothing selected can be approved in bulk</h1>" in page
    assert "1 of the 1 selected is left out" in page
    assert (
        "Every call of the group: call 1 (deploy / deploy_build): 2 people must approve it" in page
    )
    assert 'id="bulk-confirm-form"' not in page
    assert states_of([staging, production]) == ["open", "open"]


def test_bulk_denial_of_a_group_the_flow_refuses_says_so_for_every_call(agents, llm):
    planner(agents.a.tenant, policy={"deploy/deploy_build": {"action": "approve", "bulk": False}})
    task, (staging, production) = held_group(agents.a, llm)
    client = agents.a.client_for(agents.a.operator)
    result = client.post(
        reverse("approvals:inbox_bulk"),
        {"decision": "deny", "ids": [staging.public_id], "reason": "stop"},
    )
    page = html.unescape(result.content.decode())
    assert "Left out (every call): " in page
    assert states_of([staging, production]) == ["open", "open"]


def test_another_tenants_group_and_an_id_that_names_no_group_are_404_both_ways(agents, llm, client):
    planner(agents.a.tenant)
    task, calls = held_group(agents.a, llm)
    llm.script.clear()  # the first reply's follow-up: the next group plays its own
    planner(agents.b.tenant)
    theirs_task, theirs = held_group(agents.b, llm)
    mine = agents.a.extra["operator_token"]
    answer = {"approved": True}
    for group_id in (theirs[0].group_id, calls[0].public_id, theirs[0].public_id):
        for body in (answer, {"approved": "yes"}, {}):
            response = api(client, mine, "post", f"/api/v1/groups/{group_id}/answer", body)
            assert response.status_code == HTTPStatus.NOT_FOUND, (group_id, body)
            assert response.json() == {"detail": "No such group."}
        assert api(client, mine, "get", f"/api/v1/groups/{group_id}").status_code == 404
    # Tenant B's operator, by token and signed in, finds nothing of tenant A's.
    path = f"/api/v1/groups/{calls[0].group_id}"
    session = agents.b.client_for(agents.b.operator)
    assert session.get(path).status_code == HTTPStatus.NOT_FOUND
    response = session.post(f"{path}/answer", answer, content_type="application/json")
    assert response.status_code == HTTPStatus.NOT_FOUND
    # A partner's token (a caller, not an operator) is refused whichever tenant's group.
    for token in (agents.a.token, agents.b.token):
        assert api(client, token, "post", f"{path}/answer", answer).status_code == 403
    assert states_of(calls) == ["open", "open"] and states_of(theirs) == ["open", "open"]
    assert not Receipt.objects.exists()


@pytest.mark.parametrize(
    ("body", "field", "says"),
    [
        ({"approved": True, "value": "yes"}, "value", "not value"),
        ({"approved": True, "arguments": {"build": "b-2"}}, "arguments", "edit a call's"),
        ({"approved": True, "allowSimilar": {"duration": "1d"}}, "allowSimilar", "one call's"),
        ({"approved": True, "argumentsHash": "0" * 64}, "argumentsHash", "argumentsHashes"),
        ({"approved": True, "aproved": True}, "aproved", "is not a field of a group's answer"),
        ('{"approved": true, "approved": false}', None, "the key 'approved' is given twice"),
        ("[true]", "", "Expected a dictionary"),
        ("null", "", "No data provided"),
        ({"approved": True, "reason": ["why"]}, "reason", "Not a valid string"),
    ],
)
def test_a_group_answer_that_asks_what_a_group_does_not_take_is_400_and_decides_nothing(
    agents, group, client, body, field, says
):
    """An edit, a standing rule or a one-call binding sent to a group would be dropped
    silently, and the group approved as it stands: each is refused, saying where it goes."""
    task, calls = group
    token = agents.a.extra["operator_token"]
    response = client.post(
        f"/api/v1/groups/{calls[0].group_id}/answer",
        body if isinstance(body, str) else json.dumps(body),
        content_type="application/json",
        HTTP_AUTHORIZATION=f"Bearer {token}",
    )
    assert response.status_code == HTTPStatus.BAD_REQUEST, response.content
    error = response.json()
    assert says in error["detail"]
    if field:
        assert error["field"] == field
    assert states_of(calls) == ["open", "open"]
    assert not Receipt.objects.exists()
    assert Task.objects.get(pk=task.pk).state == "TASK_STATE_AUTH_REQUIRED"
