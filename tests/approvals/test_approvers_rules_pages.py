"""Who may decide and standing rules on the operator pages and the REST channel: "1 of 2"
shown on the inbox, the decision page and in the REST answer; those not allowed see the item
read-only with the reason (403 on REST); "approve and allow similar calls"; the rules page
(tenant-scoped, revoke with CSRF); bulk leaves out what it may not decide."""

from http import HTTPStatus

import pytest
from django.test import Client
from django.urls import reverse

from runtime.decisions.decision_models import Interaction, StandingRule
from runtime.kernel.task_models import AuditEvent, TaskState
from tenants.models import ApproverGroup, Membership
from tests.core import DEPLOY_TOOL, REPORT_RESULT, deploy_step, run, send

pytestmark = pytest.mark.django_db


def bearer(token: str) -> dict:
    return {"HTTP_AUTHORIZATION": f"Bearer {token}"}


def page(interaction) -> str:
    return reverse("approvals:interaction", args=[interaction.public_id])


def test_two_person_rule_on_the_page_inbox_and_rest(agents, held_under):
    side = agents.a
    interaction = held_under(side, {"action": "approve", "required": 2})
    operator = side.client_for(side.operator)
    response = operator.post(page(interaction), {"decision": "approve"})
    assert response.status_code == HTTPStatus.FOUND
    html = operator.get(page(interaction)).content.decode()
    assert "1 of 2" in html and "another person must approve" in html
    assert "user:operator@acme.test" in html
    inbox = operator.get(reverse("approvals:inbox")).content.decode()
    assert "1 of 2 approvals" in inbox

    body = (
        Client()
        .get(
            f"/api/v1/interactions/{interaction.public_id}", **bearer(side.extra["operator_token"])
        )
        .json()
    )
    assert body["state"] == "open" and body["approvalsRequired"] == 2
    assert [a["by"] for a in body["approvals"]] == ["user:operator@acme.test"]

    # The same person again is refused with the reason; nothing changes.
    again = operator.post(page(interaction), {"decision": "approve"})
    assert again.status_code == HTTPStatus.FORBIDDEN
    assert "another person" in again.content.decode()

    # A program with an operator token is not a person: refused, and
    # nothing changes.
    program = Client().post(
        f"/api/v1/interactions/{interaction.public_id}/answer",
        {"approved": True},
        content_type="application/json",
        **bearer(side.extra["operator_token"]),
    )
    assert program.status_code == HTTPStatus.FORBIDDEN
    assert program.json()["reason"] == "DECIDER_NOT_ALLOWED"
    assert "not a person" in program.json()["detail"]
    interaction.refresh_from_db()
    assert interaction.state == "open" and len(interaction.approvals) == 1

    # A second person, over REST with their session, closes it: the REST answer says so.
    second = side.client_for(side.admin).post(
        f"/api/v1/interactions/{interaction.public_id}/answer",
        {"approved": True},
        content_type="application/json",
    )
    assert second.status_code == HTTPStatus.OK
    body = second.json()
    assert body["state"] == "answered" and len(body["approvals"]) == 2
    assert run(interaction.task).state == TaskState.COMPLETED


def test_rest_first_approval_answers_one_of_two(agents, held_under):
    side = agents.a
    interaction = held_under(side, {"action": "approve", "required": 2})
    first = side.client_for(side.operator).post(
        f"/api/v1/interactions/{interaction.public_id}/answer",
        {"approved": True},
        content_type="application/json",
    )
    assert first.status_code == HTTPStatus.OK
    body = first.json()
    assert (body["state"], len(body["approvals"]), body["approvalsRequired"]) == ("open", 1, 2)


def test_those_not_allowed_see_the_item_read_only_with_the_reason(agents, held_under):
    side = agents.a
    interaction = held_under(side, {"action": "approve", "approvers": ["admin"]})
    operator = side.client_for(side.operator)
    html = operator.get(page(interaction)).content.decode()
    assert "you cannot decide it: Only admins may decide this approval." in html
    assert 'value="approve"' not in html and "Who may decide" in html
    refused = operator.post(page(interaction), {"decision": "approve"})
    assert refused.status_code == HTTPStatus.FORBIDDEN
    interaction.refresh_from_db()
    assert interaction.state == "open"

    rest = Client().post(
        f"/api/v1/interactions/{interaction.public_id}/answer",
        {"approved": True},
        content_type="application/json",
        **bearer(side.extra["operator_token"]),
    )
    assert rest.status_code == HTTPStatus.FORBIDDEN
    assert rest.json() == {
        "detail": "Only admins may decide this approval.",
        "reason": "DECIDER_NOT_ALLOWED",
    }
    admin = side.client_for(side.admin)
    assert 'value="approve"' in admin.get(page(interaction)).content.decode()
    assert admin.post(page(interaction), {"decision": "approve"}).status_code == HTTPStatus.FOUND


def test_a_group_member_decides_on_the_page(agents, held_under):
    side = agents.a
    group = ApproverGroup.objects.create(tenant=side.tenant, slug="release")
    group.members.add(Membership.objects.get(tenant=side.tenant, user=side.operator))
    interaction = held_under(side, {"action": "approve", "approvers": ["group:release"]})
    html = side.client_for(side.operator).get(page(interaction)).content.decode()
    assert "members of group release" in html and 'value="approve"' in html
    admin = side.client_for(side.admin).get(page(interaction)).content.decode()
    assert "you cannot decide it" in admin


def test_bulk_leaves_out_two_person_and_not_allowed_items(agents, held_under):
    side = agents.a
    two = held_under(side, {"action": "approve", "required": 2}, slug="two")
    admins = held_under(side, {"action": "approve", "approvers": ["admin"]}, slug="adm")
    plain = held_under(side, "approve", slug="plain")
    response = side.client_for(side.operator).post(
        reverse("approvals:inbox_bulk"),
        {
            "decision": "approve",
            "confirmed": "1",
            "ids": [two.public_id, admins.public_id, plain.public_id],
        },
    )
    html = response.content.decode()
    assert "2 people must approve" in html and "Only admins may decide" in html
    states = dict(Interaction.objects.values_list("public_id", "state"))
    assert states == {two.public_id: "open", admins.public_id: "open", plain.public_id: "answered"}


# --- approve and allow similar calls ---------------------------------------------------------


def allow_similar(client, interaction, **fields):
    data = {"decision": "approve_rule", "rule-duration": "1d", "rule-caller_only": "on"}
    data.update(fields)
    return client.post(page(interaction), data)


def test_allow_similar_from_the_page_makes_a_rule_from_the_schema_form(agents, held_under):
    side = agents.a
    interaction = held_under(side, "approve")
    client = side.client_for(side.operator)
    html = client.get(page(interaction)).content.decode()
    # One condition row per top-level field of the schema, with the held call's values.
    assert 'name="rule-op_build"' in html and 'name="rule-value_environment"' in html
    assert 'value="b-1"' in html and 'value="forever"' not in html
    response = allow_similar(
        client,
        interaction,
        **{
            "rule-op_build": "prefix",
            "rule-value_build": "b-",
            "rule-op_environment": "in",
            "rule-value_environment": "staging, production",
        },
    )
    assert response.status_code == HTTPStatus.FOUND
    rule = StandingRule.objects.get()
    assert rule.conditions == [
        {"field": "build", "op": "prefix", "value": "b-"},
        {"field": "environment", "op": "in", "value": ["staging", "production"]},
    ]
    assert rule.caller == side.subject and rule.created_by == "user:operator@acme.test"
    interaction.refresh_from_db()
    assert interaction.state == "answered" and interaction.answer["approved"] is True
    assert run(interaction.task).state == TaskState.COMPLETED
    # The next matching call runs without a pause; its task page names the rule.
    task = run(send(side, "dep"))
    assert task.state == TaskState.COMPLETED
    assert AuditEvent.objects.filter(action="allowed_by_rule").count() == 1
    html = client.get(reverse("approvals:task", args=[task.public_id])).content.decode()
    assert f"approved by <code>rule:{rule.public_id}</code>" in html
    audit = client.get(reverse("approvals:audit")).content.decode()
    assert f"rule:{rule.public_id}" in audit and "allowed_by_rule" in audit


def test_allow_similar_with_a_bad_condition_approves_nothing(agents, held_under):
    side = agents.a
    interaction = held_under(side, "approve")
    client = side.client_for(side.operator)
    for bad in (
        {"rule-op_build": "prefix", "rule-value_build": ""},
        {"rule-op_environment": "in", "rule-value_environment": " , "},
        {"rule-duration": "90d"},
    ):
        response = allow_similar(client, interaction, **bad)
        assert response.status_code == HTTPStatus.BAD_REQUEST, bad
    interaction.refresh_from_db()
    assert interaction.state == "open" and not StandingRule.objects.exists()
    assert not AuditEvent.objects.exists()


def test_no_rule_form_for_two_person_or_high_risk_tools(agents, held_under):
    side = agents.a
    for slug, rule in (
        ("two", {"action": "approve", "required": 2}),
        ("risky", {"action": "approve", "risk": "high"}),
    ):
        interaction = held_under(side, rule, slug=slug)
        client = side.client_for(side.admin)
        html = client.get(page(interaction)).content.decode()
        assert "Approve and allow similar calls" not in html and "No standing rule" in html
        refused = allow_similar(client, interaction)
        assert refused.status_code == HTTPStatus.BAD_REQUEST
    assert not StandingRule.objects.exists()


def test_admins_may_choose_forever(agents, held_under):
    side = agents.a
    interaction = held_under(side, "approve")
    client = side.client_for(side.admin)
    assert 'value="forever"' in client.get(page(interaction)).content.decode()
    allow_similar(client, interaction, **{"rule-duration": "forever"})
    assert StandingRule.objects.get().expires_at is None
    other = held_under(side, "approve", slug="other")  # the rule above would allow "dep" calls
    refused = allow_similar(side.client_for(side.operator), other, **{"rule-duration": "forever"})
    assert refused.status_code == HTTPStatus.BAD_REQUEST
    assert StandingRule.objects.count() == 1


# --- the rules page ------------------------------------------------------------------------


@pytest.fixture
def rule_of(held_under):
    def make(side):
        interaction = held_under(side, "approve")
        allow_similar(side.client_for(side.operator), interaction)
        return StandingRule.objects.get(tenant=side.tenant, created_from=interaction)

    return make


def test_rules_page_lists_the_tenants_rules_only(agents, rule_of):
    mine, theirs = rule_of(agents.a), rule_of(agents.b)
    html = agents.a.client_for(agents.a.viewer).get(reverse("approvals:rules")).content.decode()
    assert mine.public_id in html and theirs.public_id not in html
    assert "active" in html and "Revoke" not in html  # viewers see, never revoke


def test_revoke_from_the_rules_page_with_csrf(agents, rule_of):
    side = agents.a
    rule = rule_of(side)
    client = Client(enforce_csrf_checks=True)
    client.force_login(side.operator)
    url = reverse("approvals:rule_revoke", args=[rule.public_id])
    assert client.post(url).status_code == HTTPStatus.FORBIDDEN
    html = client.get(reverse("approvals:rules")).content.decode()
    token = html.split('name="csrfmiddlewaretoken" value="')[1].split('"')[0]
    assert client.post(url, {"csrfmiddlewaretoken": token}).status_code == HTTPStatus.FOUND
    rule.refresh_from_db()
    assert rule.revoked_by == "user:operator@acme.test"
    assert "revoked" in client.get(reverse("approvals:rules")).content.decode()
    assert run(send(side, "dep")).state == TaskState.AUTH_REQUIRED


def test_other_tenants_and_viewers_cannot_revoke(agents, rule_of):
    rule = rule_of(agents.a)
    url = reverse("approvals:rule_revoke", args=[rule.public_id])
    assert agents.b.client_for(agents.b.admin).post(url).status_code == HTTPStatus.NOT_FOUND
    assert agents.a.client_for(agents.a.viewer).post(url).status_code == HTTPStatus.FORBIDDEN
    rule.refresh_from_db()
    assert rule.revoked_at is None


def test_rules_over_rest(agents, held_under, rule_of):
    side = agents.a
    auth = bearer(side.extra["operator_token"])
    rule = rule_of(side)
    rule_of(agents.b)
    listed = Client().get("/api/v1/rules", **auth).json()
    assert [r["id"] for r in listed] == [rule.public_id] and listed[0]["active"] is True

    interaction = held_under(side, "approve", slug="other")  # the rule above allows "dep" calls
    made = Client().post(
        f"/api/v1/interactions/{interaction.public_id}/answer",
        {
            "approved": True,
            "allowSimilar": {
                "duration": "1h",
                "callerOnly": False,
                "conditions": [{"field": "environment", "op": "equals", "value": "staging"}],
            },
        },
        content_type="application/json",
        **auth,
    )
    assert made.status_code == HTTPStatus.OK
    assert made.json()["rule"]["caller"] == "" and made.json()["state"] == "answered"

    # A rule that cannot be made is refused before anything is approved.
    other = held_under(side, "approve", slug="third")
    bad = Client().post(
        f"/api/v1/interactions/{other.public_id}/answer",
        {"approved": True, "allowSimilar": {"duration": "forever"}},
        content_type="application/json",
        **auth,
    )
    assert bad.status_code == HTTPStatus.FORBIDDEN
    other.refresh_from_db()
    assert other.state == "open"

    revoked = Client().post(f"/api/v1/rules/{rule.public_id}/revoke", **auth)
    assert revoked.status_code == HTTPStatus.OK and revoked.json()["active"] is False
    assert Client().post(f"/api/v1/rules/{rule.public_id}/revoke", **auth).status_code == 409
    theirs = StandingRule.objects.get(tenant=agents.b.tenant)
    assert Client().post(f"/api/v1/rules/{theirs.public_id}/revoke", **auth).status_code == 404
    partner = Client().get("/api/v1/rules", **bearer(side.token))
    assert partner.status_code == HTTPStatus.FORBIDDEN


def test_rules_page_and_list_read_a_fixed_number_of_queries(agents, rule_of, held_under):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    side = agents.a
    client = side.client_for(side.operator)
    auth = bearer(side.extra["operator_token"])

    def counts():
        with CaptureQueriesContext(connection) as page_queries:
            assert client.get(reverse("approvals:rules")).status_code == HTTPStatus.OK
        with CaptureQueriesContext(connection) as rest_queries:
            assert Client().get("/api/v1/rules", **auth).status_code == HTTPStatus.OK
        return len(page_queries), len(rest_queries)

    rule_of(side)
    counts()  # the first bearer request reads the token; later ones find it cached
    one = counts()
    for slug in ("b", "c", "d"):
        interaction = held_under(side, "approve", slug=slug)
        allow_similar(client, interaction)
    assert StandingRule.objects.filter(tenant=side.tenant).count() == 4
    # Read again after a request that may find the cached token expired (the rules above take
    # longer than the cache's life on a loaded machine) or last_used_at due its write.
    counts()
    assert counts() == one


# --- a rule allows only what its maker could approve now -----------------------------------

# Production deploys are for admins; anything else for the default approvers.
ADMIN_ONLY = [
    {
        "title": "Production",
        "when": [{"field": "environment", "op": "equals", "value": "production"}],
        "action": "approve",
        "approvers": ["admin"],
    },
    {"action": "approve"},
]


@pytest.fixture
def env_deploys(make_agent):
    """The agent "env" under ADMIN_ONLY, deploying to the environment its message names;
    returns a function holding one such call (its open approval)."""
    agent = make_agent(
        "env",
        [deploy_step(environment="{{ text }}"), *REPORT_RESULT],
        tools=[DEPLOY_TOOL],
        tool_policy={"deploy/deploy_build": ADMIN_ONLY},
    )

    def held_call(side, environment):
        task = run(send(side, "env", environment))
        assert task.state == TaskState.AUTH_REQUIRED, environment
        return Interaction.objects.get(task=task, state="open")

    held_call.agent = agent
    return held_call


def tighten_default_to_admins(agent):
    agent.tool_policy = {
        "deploy/deploy_build": [ADMIN_ONLY[0], {"action": "approve", "approvers": ["admin"]}]
    }
    agent.save(update_fields=["tool_policy"])


def test_an_operators_rule_made_on_the_page_never_lets_an_admin_only_call_run(agents, env_deploys):
    side = agents.a
    operator = side.client_for(side.operator)
    production = env_deploys(side, "production")
    refused = operator.post(page(production), {"decision": "approve"})
    assert refused.status_code == HTTPStatus.FORBIDDEN
    assert "Only admins may decide" in refused.content.decode()

    staging = env_deploys(side, "staging")
    assert allow_similar(operator, staging, **{"rule-caller_only": ""}).status_code == (
        HTTPStatus.FOUND
    )
    rule = StandingRule.objects.get()
    assert rule.conditions == [] and rule.caller == ""
    assert run(staging.task).state == TaskState.COMPLETED

    # The next production deploy waits for an admin, as the first one did.
    again = env_deploys(side, "production")
    assert again.approvers == ["admin"]
    assert not AuditEvent.objects.filter(action="allowed_by_rule").exists()
    assert run(send(side, "env", "staging")).state == TaskState.COMPLETED

    # The rule it was made under is tightened to admins: staging deploys wait for one too.
    tighten_default_to_admins(env_deploys.agent)
    held = env_deploys(side, "staging")
    assert held.approvers == ["admin"]
    rule.refresh_from_db()
    assert rule.uses == 1 and "only admins may" in rule.inapplicable_reason
    html = operator.get(reverse("approvals:rules")).content.decode()
    assert 'data-state="inapplicable"' in html and "allows nothing now" in html
    assert "only admins may" in html and "under deploy/deploy_build, rule 2 of 2" in html
    audit = operator.get(reverse("approvals:audit")).content.decode()
    assert "rule_inapplicable" in audit and "only admins may" in audit


def test_a_programs_rule_over_rest_never_lets_an_admin_only_call_run(agents, env_deploys):
    side = agents.a
    auth = bearer(side.extra["operator_token"])

    def answer(interaction, **body):
        return Client().post(
            f"/api/v1/interactions/{interaction.public_id}/answer",
            {"approved": True, **body},
            content_type="application/json",
            **auth,
        )

    refused = answer(env_deploys(side, "production"))
    assert refused.status_code == HTTPStatus.FORBIDDEN
    assert refused.json()["reason"] == "DECIDER_NOT_ALLOWED"
    staging = env_deploys(side, "staging")
    made = answer(staging, allowSimilar={"duration": "1d", "callerOnly": False})
    assert made.status_code == HTTPStatus.OK
    assert run(staging.task).state == TaskState.COMPLETED

    env_deploys(side, "production")
    assert not AuditEvent.objects.filter(action="allowed_by_rule").exists()
    assert made.json()["rule"]["madeUnder"].startswith("deploy/deploy_build, rule 2 of 2")
    tighten_default_to_admins(env_deploys.agent)
    env_deploys(side, "staging")
    listed = Client().get("/api/v1/rules", **auth).json()
    assert listed[0]["active"] is True and "only admins may" in listed[0]["inapplicableReason"]
    assert listed[0]["inapplicableSince"] is not None


def test_a_programs_rule_stops_when_its_token_is_revoked(agents, held_under):
    from tenants.models import ApiToken
    from tenants.tokens import api_token_revoke

    side = agents.a
    interaction = held_under(side, "approve")
    auth = bearer(side.extra["operator_token"])
    made = Client().post(
        f"/api/v1/interactions/{interaction.public_id}/answer",
        {"approved": True, "allowSimilar": {"duration": "1d", "callerOnly": True}},
        content_type="application/json",
        **auth,
    )
    assert made.status_code == HTTPStatus.OK
    assert run(interaction.task).state == TaskState.COMPLETED
    assert run(send(side, "dep")).state == TaskState.COMPLETED
    rule = StandingRule.objects.get()
    api_token_revoke(token=ApiToken.objects.get(pk=rule.maker_token_id), by="user:admin@acme.test")
    assert run(send(side, "dep")).state == TaskState.AUTH_REQUIRED
    rule.refresh_from_db()
    assert "operator token" in rule.inapplicable_reason and rule.uses == 1
