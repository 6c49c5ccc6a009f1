"""The one decision flow, and who counts and what a decision needs, through the real
channels: every channel decides through runtime.decisions.flow once
per decision; two-person approvals count people, never programs or the system's subjects;
``risk: high`` on an AGENT.md tool entry asks for a step-up as the policy's does; and the
approvers, the number and the risk are the current policy's when stricter, never less than
the approval showed when it opened."""

import logging
from http import HTTPStatus

import pytest
from django.test import Client
from django.urls import reverse

from runtime.agents.agent_models import Agent, DemoRecord
from runtime.decisions.approvers import Decider
from runtime.decisions.decision_models import Interaction, InteractionApproval, Receipt
from runtime.decisions.decision_selectors import held_call_of
from runtime.decisions.flow import BULK, PAGE, Decision, decision_take
from runtime.kernel.errors import (
    ChannelRefused,
    DecisionMisfit,
    InvalidParams,
    UnsupportedOperation,
)
from runtime.kernel.task_models import AuditEvent, TaskState
from runtime.policy.rules import policy_rule_for
from tenants.models import ApiToken, Membership, User
from tenants.tokens import api_token_create, token_issue
from tests.core import (
    DEPLOY_TOOL,
    REPORT_RESULT,
    caller_may_approve,
    deploy_step,
    in_band,
    reply,
    run,
    send,
)
from tests.world import PASSWORD

pytestmark = pytest.mark.django_db

FLOW_LOGGER = "runtime.decisions.flow"


def page(interaction) -> str:
    return reverse("approvals:interaction", args=[interaction.public_id])


def rest_answer(interaction, token: str, **body):
    return Client().post(
        f"/api/v1/interactions/{interaction.public_id}/answer",
        body,
        content_type="application/json",
        HTTP_AUTHORIZATION=f"Bearer {token}",
    )


def operator_token(side, *, subject: str, step_up: bool = False) -> str:
    _, token = api_token_create(
        tenant=side.tenant,
        subject=subject,
        name=subject,
        kind=ApiToken.Kind.OPERATOR,
        may_step_up=step_up,
    )
    return token


def second_admin(side) -> User:
    user = User.objects.create_user(email="admin2@acme.test", password=PASSWORD)
    Membership.objects.create(tenant=side.tenant, user=user, role="admin")
    return user


def stepped_up_client(user) -> Client:
    """A member who signed in just now (a recent authentication: stepped up)."""
    client = Client()
    client.post(reverse("account_login"), {"login": user.email, "password": PASSWORD})
    return client


def policy_set(rule) -> Agent:
    """The agent's policy changes while its approvals wait (load_agents or admin)."""
    agent = Agent.objects.get(slug="dep")
    agent.tool_policy = {"deploy/deploy_build": rule}
    agent.save()
    return agent


# --- one flow, every channel ----------------------------------------------------------------


def test_every_channel_decides_through_the_one_flow_once_per_decision(agents, caplog):
    side = agents.a
    caller_may_approve(side.tenant)  # the in-band channel needs deciders: either
    make = side.extra["make"]
    on_page, over_rest = make.approval("p-1"), make.approval("r-1")
    in_bulk = [make.approval(f"b-{i}") for i in range(3)]
    in_band_item = make.approval("i-1")
    operator = side.client_for(side.operator)

    with caplog.at_level(logging.INFO, logger=FLOW_LOGGER):
        assert operator.post(page(on_page), {"decision": "approve"}).status_code == 302
        token = side.extra["operator_token"]
        assert rest_answer(over_rest, token, approved=False).status_code == HTTPStatus.OK
        bulk = operator.post(
            reverse("approvals:inbox_bulk"),
            {"decision": "approve", "confirmed": "1", "ids": [i.public_id for i in in_bulk]},
        )
        assert bulk.status_code == HTTPStatus.OK
        reply(in_band_item.task, None, metadata=in_band(in_band_item, approved=True))

    taken = [(r.channel, r.interaction_id) for r in caplog.records if r.name == FLOW_LOGGER]
    assert taken == [
        ("page", on_page.public_id),
        ("rest", over_rest.public_id),
        *[("bulk", i.public_id) for i in in_bulk],
        ("inband", in_band_item.public_id),
    ]
    # And each decision is the flow's close: decided once, through the channel it named.
    for channel, public_id in taken:
        decided = Interaction.objects.get(public_id=public_id)
        assert (decided.state, decided.answered_via) == ("answered", channel)
        assert AuditEvent.objects.filter(interaction=decided).count() == 1


def test_a_decision_that_does_not_fit_its_kind_is_refused_alike_on_every_channel(agents):
    side = agents.a
    approval = side.extra["make"].approval()
    operator = Decider(subject=side.operator.subject)
    for channel in (PAGE, BULK, "rest"):
        with pytest.raises(DecisionMisfit) as refused:
            decision_take(
                tenant=side.tenant,
                interaction_id=approval.public_id,
                decider=operator,
                decision=Decision(value="yes"),
                channel=channel,
            )
        assert (refused.value.field, refused.value.description) == (
            "value",
            "An approval takes approved (and a reason), not value.",
        )
    rest = rest_answer(approval, side.extra["operator_token"], value="yes")
    assert rest.status_code == HTTPStatus.BAD_REQUEST
    assert rest.json() == {
        "detail": "value: An approval takes approved (and a reason), not value.",
        "field": "value",
        "errors": {"value": ["An approval takes approved (and a reason), not value."]},
    }
    approval.refresh_from_db()
    assert approval.state == "open"


def test_text_postgres_cannot_keep_is_refused_by_the_flow_on_every_channel(agents):
    """A NUL or a lone surrogate in a reason or an answer was a DataError mid-decision (the
    decision lost); the flow refuses it whichever channel let it through, and nothing moves."""
    from runtime.decisions.flow import CHANNELS, INBAND

    side = agents.a
    operator = Decider.of_member(Membership.objects.get(tenant=side.tenant, user=side.operator))
    approval, question = side.extra["make"].approval(), side.extra["make"].question()
    for channel in set(CHANNELS) - {INBAND, BULK}:
        for interaction, decision, field, problem in (
            (approval, Decision(approved=False, reason="no\x00way"), "reason", "NUL"),
            (approval, Decision(approved=False, reason="lone \ud800"), "reason", "surrogate"),
            (question, Decision(value="main\x00"), "answer", "NUL"),
        ):
            with pytest.raises(InvalidParams) as refused:
                decision_take(
                    tenant=side.tenant,
                    interaction_id=interaction.public_id,
                    decider=operator,
                    decision=decision,
                    channel=channel,
                )
            assert refused.value.field == field and problem in refused.value.description
    for interaction in (approval, question):
        interaction.refresh_from_db()
        assert interaction.state == "open" and interaction.answer is None


def test_an_id_postgres_cannot_compare_names_no_interaction(agents):
    from runtime.kernel.errors import TaskNotFound

    for interaction_id in ("i_\x00", "i_\ud800"):
        with pytest.raises(TaskNotFound):
            decision_take(
                tenant=agents.a.tenant,
                interaction_id=interaction_id,
                decider=Decider(subject=agents.a.operator.subject),
                decision=Decision(approved=True),
                channel=PAGE,
            )


def test_bulk_refusals_are_the_flows(agents, holder):
    held = holder({"action": "approve", "bulk": False})
    approval = held(agents.a)
    with pytest.raises(ChannelRefused, match="bulk: false"):
        decision_take(
            tenant=agents.a.tenant,
            interaction_id=approval.public_id,
            decider=Decider(subject=agents.a.operator.subject),
            decision=Decision(approved=True),
            channel=BULK,
        )
    approval.refresh_from_db()
    assert approval.state == "open"


def test_the_rest_detail_shows_what_the_page_shows(agents, holder):
    side = agents.a
    held = holder({"action": "approve", "required": 2, "approvers": ["admin"]})
    approval = held(side)
    body = (
        Client()
        .get(
            f"/api/v1/interactions/{approval.public_id}",
            HTTP_AUTHORIZATION=f"Bearer {side.extra['operator_token']}",
        )
        .json()
    )
    assert (body["approvers"], body["approvalsRequired"]) == (["admin"], 2)
    assert body["decision"]["mayDecide"] is False
    assert body["decision"]["refusal"] == "Only admins may decide this approval."
    admin = side.client_for(side.admin).get(f"/api/v1/interactions/{approval.public_id}")
    facts = admin.json()["decision"]
    assert facts["mayDecide"] is True and facts["mayApprove"] is True
    assert facts["next"].startswith("Your approval would be 1 of 2")
    html = side.client_for(side.admin).get(page(approval)).content.decode()
    assert facts["next"] in html


# --- two-person counts people ----------------------------------------------------------------


def test_a_person_and_an_operator_token_never_close_a_two_person_approval(agents, holder):
    side = agents.a
    approval = holder({"action": "approve", "required": 2})(side)
    person = side.client_for(side.operator)
    assert person.post(page(approval), {"decision": "approve"}).status_code == 302

    program = rest_answer(approval, side.extra["operator_token"], approved=True)
    assert program.status_code == HTTPStatus.FORBIDDEN
    assert program.json()["reason"] == "DECIDER_NOT_ALLOWED"
    assert "not a person" in program.json()["detail"]
    approval.refresh_from_db()
    assert approval.state == "open"
    assert [a["by"] for a in approval.approvals] == [side.operator.subject]
    assert not AuditEvent.objects.filter(interaction=approval, action="approved").exists()
    assert run(approval.task).state == TaskState.AUTH_REQUIRED
    assert not DemoRecord.objects.exists()


def test_two_operator_tokens_and_no_person_never_approve_a_two_person_item(agents, holder):
    side = agents.a
    approval = holder({"action": "approve", "required": 2})(side)
    tokens = [side.extra["operator_token"], operator_token(side, subject="program:second")]
    for token in tokens:
        assert rest_answer(approval, token, approved=True).status_code == HTTPStatus.FORBIDDEN
    approval.refresh_from_db()
    assert approval.state == "open" and approval.approvals == []
    assert not InteractionApproval.objects.exists()
    # A program may still deny it: a denial sends nothing.
    denied = rest_answer(approval, tokens[0], approved=False, reason="freeze")
    assert denied.status_code == HTTPStatus.OK and denied.json()["state"] == "answered"


@pytest.mark.parametrize("subject", ["system:expiry", "System:expiry"])
def test_a_token_with_a_reserved_subject_never_decides(agents, holder, subject):
    side = agents.a
    approval = holder("approve")(side)
    # Made before token creation refused such subjects (straight into the table).
    row = ApiToken(tenant=side.tenant, subject=subject, name="old", kind=ApiToken.Kind.OPERATOR)
    plaintext = token_issue(row)
    ApiToken.objects.bulk_create([row])
    response = rest_answer(approval, plaintext, approved=True)
    assert response.status_code == HTTPStatus.FORBIDDEN
    assert response.json()["reason"] == "DECIDER_NOT_ALLOWED"
    assert subject in response.json()["detail"]
    approval.refresh_from_db()
    assert approval.state == "open" and not Receipt.objects.exists()
    assert not AuditEvent.objects.filter(actor=subject).exists()


# --- risk: high on the tool entry ------------------------------------------------------------


def test_risk_high_on_the_agents_tool_entry_asks_for_a_step_up_on_every_channel(agents, holder):
    side = agents.a
    # deciders: either, so that the caller in band meets the step-up, not the deciders.
    held = holder({"action": "approve", "deciders": "either"}, tool={**DEPLOY_TOOL, "risk": "high"})
    approval = held(side)
    assert approval.risk == Interaction.Risk.HIGH

    plain = rest_answer(approval, side.extra["operator_token"], approved=True)
    assert plain.status_code == HTTPStatus.FORBIDDEN
    assert plain.json()["reason"] == "STEP_UP_REQUIRED"
    with pytest.raises(UnsupportedOperation) as in_band_refused:
        reply(approval.task, None, metadata=in_band(approval, approved=True))
    assert in_band_refused.value.reason == "STEP_UP_REQUIRED"
    browser = side.client_for(side.operator).post(page(approval), {"decision": "approve"})
    assert browser["Location"].startswith(reverse("account_reauthenticate"))
    approval.refresh_from_db()
    assert approval.state == "open" and not Receipt.objects.exists()

    stepped = operator_token(side, subject="program:pager", step_up=True)
    assert rest_answer(approval, stepped, approved=True).status_code == HTTPStatus.OK
    assert Receipt.objects.get().stepped_up is True


def test_risk_high_on_a_whole_servers_tool_entry_counts_too(agents, make_agent):
    side = agents.a
    make_agent(
        "dep",
        [deploy_step(), *REPORT_RESULT],
        tools=[DEPLOY_TOOL, {"server": "deploy", "risk": "high"}],
        tool_policy={"deploy/deploy_build": "approve"},
    )
    approval = Interaction.objects.get(task=run(send(side, "dep")), state="open")
    response = rest_answer(approval, side.extra["operator_token"], approved=True)
    assert response.json()["reason"] == "STEP_UP_REQUIRED"


# --- the current policy, never less than the approval showed --------------------------------


def test_a_tightened_policy_reaches_an_open_approval(agents, holder):
    side = agents.a
    approval = holder("approve")(side)
    agent = policy_set({"action": "approve", "required": 2, "risk": "high", "approvers": ["admin"]})

    # An operator (browser) and a plain operator token are no longer approvers.
    refused = side.client_for(side.operator).post(page(approval), {"decision": "approve"})
    assert refused.status_code == HTTPStatus.FORBIDDEN
    assert "Only admins may decide" in refused.content.decode()
    token = rest_answer(approval, side.extra["operator_token"], approved=True)
    assert token.status_code == HTTPStatus.FORBIDDEN
    # An admin who has not stepped up is sent to re-authenticate first.
    lazy = side.client_for(side.admin).post(page(approval), {"decision": "approve"})
    assert lazy["Location"].startswith(reverse("account_reauthenticate"))
    # A program with the step-up right is still not a person.
    stepped_token = operator_token(side, subject="program:pager", step_up=True)
    assert rest_answer(approval, stepped_token, approved=True).status_code == 403

    first = stepped_up_client(side.admin).post(page(approval), {"decision": "approve"})
    assert first.status_code == 302
    approval.refresh_from_db()
    assert (approval.state, approval.approvals_required) == ("open", 2)
    html = side.client_for(side.admin).get(page(approval)).content.decode()
    assert "1 of 2" in html
    assert run(approval.task).state == TaskState.AUTH_REQUIRED

    second = stepped_up_client(second_admin(side)).post(page(approval), {"decision": "approve"})
    assert second.status_code == 302
    approval.refresh_from_db()
    assert approval.state == "answered" and approval.answer["approvals"] == 2
    receipts = list(Receipt.objects.filter(effect_public_id=approval.public_id).order_by("id"))
    assert [(r.decider, r.stepped_up) for r in receipts] == [
        (side.admin.subject, True),
        ("user:admin2@acme.test", True),
    ]
    # Both bound the version of the tool's entry that held the call.
    effect = held_call_of(approval)
    held_by = policy_rule_for(agent, effect.server, effect.tool, effect.arguments)
    assert {r.policy_version for r in receipts} == {held_by.version}
    assert run(approval.task).state == TaskState.COMPLETED
    assert DemoRecord.objects.filter(effect_id=approval.public_id).count() == 1


def test_a_loosened_policy_never_asks_less_than_the_approval_showed(agents, holder):
    side = agents.a
    approval = holder({"action": "approve", "required": 2, "risk": "high", "approvers": ["admin"]})(
        side
    )
    assert (approval.approvers, approval.approvals_required, approval.risk) == (
        ["admin"],
        2,
        "high",
    )
    policy_set({"action": "approve", "deciders": "either"})

    refused = side.client_for(side.operator).post(page(approval), {"decision": "approve"})
    assert refused.status_code == HTTPStatus.FORBIDDEN
    stepped = operator_token(side, subject="program:pager", step_up=True)
    assert rest_answer(approval, stepped, approved=True).status_code == HTTPStatus.FORBIDDEN
    lazy = side.client_for(side.admin).post(page(approval), {"decision": "approve"})
    assert lazy["Location"].startswith(reverse("account_reauthenticate"))
    # The caller could answer in band under the new policy, not under the one it opened with.
    with pytest.raises(UnsupportedOperation, match="cannot answer it in band"):
        reply(approval.task, None, metadata=in_band(approval, approved=True))

    stepped_up_client(side.admin).post(page(approval), {"decision": "approve"})
    approval.refresh_from_db()
    assert approval.state == "open" and len(approval.approvals) == 1
    assert run(approval.task).state == TaskState.AUTH_REQUIRED


def test_a_tool_the_policy_now_denies_is_never_approved_only_denied(agents, holder):
    side = agents.a
    approval = holder("approve")(side)
    policy_set("deny")
    token = rest_answer(approval, side.extra["operator_token"], approved=True)
    assert token.status_code == HTTPStatus.FORBIDDEN
    assert "now denies deploy/deploy_build" in token.json()["detail"]
    operator = side.client_for(side.operator)
    assert "can only be denied" in operator.get(page(approval)).content.decode()
    assert operator.post(page(approval), {"decision": "approve"}).status_code == 403
    with pytest.raises(UnsupportedOperation, match="now denies"):
        reply(approval.task, None, metadata=in_band(approval, approved=True))
    approval.refresh_from_db()
    assert approval.state == "open" and not Receipt.objects.exists()
    denied = operator.post(page(approval), {"decision": "deny", "reason": "policy"})
    assert denied.status_code == 302
    assert run(approval.task).state == TaskState.COMPLETED
    assert not DemoRecord.objects.exists()
