"""Decisions people can trust on the operator's channels: the edit form on the
decision page, step-up through allauth's re-authentication, the REST channel's 403 and
token right, receipts on the pages, and their CSV / JSON Lines export."""

import csv
import io
import json
from http import HTTPStatus

import pytest
from django.core.management import call_command
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from approvals import audit_views
from runtime.agents.agent_models import Agent, DemoRecord
from runtime.decisions.decision_models import Effect, Interaction, Receipt
from runtime.decisions.signing import jws_claims
from runtime.kernel.task_models import Task, TaskState
from tenants.models import ApiToken
from tenants.tokens import api_token_create
from tests.core import DEPLOY_TOOL, decide, held_approval, open_interaction, run
from tests.world import PASSWORD

pytestmark = pytest.mark.django_db


def shipper(make_agent, policy, tenant=None):
    return make_agent(
        "shipper",
        [
            {
                "call": {
                    "server": "deploy",
                    "tool": "deploy_build",
                    "args": {"build": "b-1", "environment": "staging"},
                }
            },
            {"if": {"result": "ok"}, "reply": "deployed"},
            {"if": {"result": "error"}, "reply": "not deployed"},
        ],
        tools=[DEPLOY_TOOL],
        tool_policy={"deploy/deploy_build": policy},
        tenant=tenant,
    )


def page(interaction) -> str:
    return reverse("approvals:interaction", args=[interaction.public_id])


# --- edit then approve on the page ------------------------------------------------------------


def test_the_decision_page_offers_a_form_made_from_the_tools_schema(agents, make_agent):
    shipper(make_agent, {"action": "approve", "editable": True})
    approval = held_approval(agents.a, "shipper")
    html = agents.a.client_for(agents.a.operator).get(page(approval)).content.decode()
    effect = Effect.objects.get(public_id=approval.public_id)
    assert "Edit the arguments, then approve" in html
    assert 'name="arg__build"' in html and 'value="b-1"' in html
    assert '<select name="arg__environment"' in html and "production" in html
    assert 'name="arguments_json"' in html  # the raw JSON fallback
    assert f'name="shown_hash" value="{effect.arguments_hash}"' in html


def test_no_edit_form_for_a_tool_that_is_not_editable(agents, make_agent):
    shipper(make_agent, "approve")
    approval = held_approval(agents.a, "shipper")
    client = agents.a.client_for(agents.a.operator)
    assert "Edit the arguments" not in client.get(page(approval)).content.decode()
    response = client.post(page(approval), {"decision": "approve_edited", "arg__build": "x"})
    assert response.status_code == HTTPStatus.BAD_REQUEST
    assert open_interaction(approval.task).pk == approval.pk


def test_edited_arguments_that_fail_the_schema_are_a_form_error_and_change_nothing(
    agents, make_agent
):
    shipper(make_agent, {"action": "approve", "editable": True})
    approval = held_approval(agents.a, "shipper")
    client = agents.a.client_for(agents.a.operator)
    response = client.post(
        page(approval),
        {
            "decision": "approve_edited",
            "source": "json",
            "arguments_json": json.dumps({"build": "b-2", "environment": "moon"}),
        },
    )
    assert response.status_code == HTTPStatus.BAD_REQUEST
    html = response.content.decode()
    assert "do not fit the tool&#x27;s schema" in html and "environment" in html
    approval.refresh_from_db()
    assert approval.state == Interaction.State.OPEN
    assert Effect.objects.get(public_id=approval.public_id).arguments["build"] == "b-1"
    response = client.post(
        page(approval), {"decision": "approve_edited", "source": "json", "arguments_json": "{"}
    )
    assert response.status_code == HTTPStatus.BAD_REQUEST
    assert "Not valid JSON." in response.content.decode()
    assert not Receipt.objects.exists()


def test_edit_then_approve_from_the_fields_sends_the_edited_call(agents, make_agent):
    shipper(make_agent, {"action": "approve", "editable": True})
    approval = held_approval(agents.a, "shipper")
    effect = Effect.objects.get(public_id=approval.public_id)
    client = agents.a.client_for(agents.a.operator)
    response = client.post(
        page(approval),
        {
            "decision": "approve_edited",
            "source": "form",
            "arg__build": "b-7",
            "arg__environment": "production",
            "arg__durationSeconds": "",
            "shown_hash": effect.arguments_hash,
        },
    )
    assert response.status_code == HTTPStatus.FOUND
    receipt = Receipt.objects.get()
    assert receipt.edited and receipt.arguments_hash == effect.arguments_hash
    assert run(approval.task).state == TaskState.COMPLETED
    assert DemoRecord.objects.get().data == {"build": "b-7", "environment": "production"}
    html = client.get(page(approval)).content.decode()
    assert f'id="receipt-{receipt.public_id}"' in html and "edited" in html
    assert receipt.jws and f'<code class="jws">{receipt.jws}</code>' in html  # signed
    task_html = client.get(reverse("approvals:task", args=[approval.task.public_id]))
    assert receipt.public_id in task_html.content.decode()
    assert receipt.policy_version[:16] in task_html.content.decode()


# --- step-up ----------------------------------------------------------------------------------


def test_a_high_risk_approval_asks_to_re_authenticate_then_takes_the_decision(agents, make_agent):
    shipper(make_agent, {"action": "approve", "risk": "high"})
    approval = held_approval(agents.a, "shipper")
    client = agents.a.client_for(agents.a.operator)  # force_login: no recent authentication
    response = client.post(page(approval), {"decision": "approve"})
    assert response.status_code == HTTPStatus.FOUND
    assert response["Location"].startswith(reverse("account_reauthenticate"))
    approval.refresh_from_db()
    assert approval.state == Interaction.State.OPEN  # refused: nothing decided
    assert not Receipt.objects.exists()
    # allauth's re-authentication, then it replays the decision.
    response = client.post(response["Location"], {"password": PASSWORD})
    assert response.status_code == HTTPStatus.FOUND
    approval.refresh_from_db()
    assert approval.state == Interaction.State.ANSWERED
    assert approval.answer == {"approved": True}
    assert Receipt.objects.get().stepped_up is True
    assert run(approval.task).state == TaskState.COMPLETED


def test_a_recent_sign_in_counts_and_an_old_one_does_not(agents, make_agent, settings):
    shipper(make_agent, {"action": "approve", "risk": "high"})
    first, second = held_approval(agents.a, "shipper"), held_approval(agents.a, "shipper")
    client = agents.a.client_for(agents.a.operator)
    client.logout()
    client.post(reverse("account_login"), {"login": agents.a.operator.email, "password": PASSWORD})
    # Approved, the operator moves on to the next open item.
    assert client.post(page(first), {"decision": "approve"})["Location"] == page(second)
    assert Receipt.objects.get().stepped_up
    settings.STEP_UP_SECONDS = 0
    response = client.post(page(second), {"decision": "approve"})
    assert response["Location"].startswith(reverse("account_reauthenticate"))
    assert open_interaction(second.task).pk == second.pk


def test_bulk_leaves_out_high_risk_approvals_without_step_up(agents, make_agent):
    shipper(make_agent, {"action": "approve", "risk": "high"})
    approval = held_approval(agents.a, "shipper")
    client = agents.a.client_for(agents.a.operator)
    response = client.post(
        reverse("approvals:inbox_bulk"),
        {"decision": "approve", "confirmed": "1", "ids": [approval.public_id]},
    )
    assert "needs a recent re-authentication" in response.content.decode()
    assert open_interaction(approval.task).pk == approval.pk


def test_a_bulk_decision_stores_its_receipt_with_the_bulk_channel(agents, make_agent):
    shipper(make_agent, "approve")
    approval = held_approval(agents.a, "shipper")
    client = agents.a.client_for(agents.a.operator)
    client.post(
        reverse("approvals:inbox_bulk"),
        {"decision": "approve", "confirmed": "1", "ids": [approval.public_id]},
    )
    receipt = Receipt.objects.get()
    assert (receipt.channel, receipt.decision) == ("bulk", "approved")
    assert receipt.decider == f"user:{agents.a.operator.email}"


# --- the REST channel -------------------------------------------------------------------------


def rest_answer(client, interaction, body, token):
    return client.post(
        reverse("approvals:api_interaction_answer", args=[interaction.public_id]),
        data=json.dumps(body),
        content_type="application/json",
        HTTP_AUTHORIZATION=f"Bearer {token}",
    )


def test_rest_refuses_a_high_risk_approval_by_a_token_without_the_step_up_right(
    agents, make_agent, client
):
    shipper(make_agent, {"action": "approve", "risk": "high"})
    approval = held_approval(agents.a, "shipper")
    response = rest_answer(client, approval, {"approved": True}, agents.a.extra["operator_token"])
    assert response.status_code == HTTPStatus.FORBIDDEN
    assert response.json()["reason"] == "STEP_UP_REQUIRED"
    assert "risk: high" in response.json()["detail"]
    assert open_interaction(approval.task).pk == approval.pk
    _, stepping = api_token_create(
        tenant=agents.a.tenant,
        subject="program:pager",
        name="pager",
        kind=ApiToken.Kind.OPERATOR,
        may_step_up=True,
    )
    response = rest_answer(client, approval, {"approved": True}, stepping)
    assert response.status_code == HTTPStatus.OK
    assert Receipt.objects.get().stepped_up is True


def test_rest_edits_arguments_and_shows_their_hash(agents, make_agent, client):
    shipper(make_agent, {"action": "approve", "editable": True})
    approval = held_approval(agents.a, "shipper")
    token = agents.a.extra["operator_token"]
    detail = client.get(
        reverse("approvals:api_interaction", args=[approval.public_id]),
        HTTP_AUTHORIZATION=f"Bearer {token}",
    ).json()
    shown = detail["heldCall"]["argumentsHash"]
    bad = rest_answer(
        client,
        approval,
        {"approved": True, "arguments": {"build": ""}, "argumentsHash": shown},
        token,
    )
    assert bad.status_code == HTTPStatus.BAD_REQUEST and bad.json()["field"] == "arguments"
    edited = {"build": "b-3", "environment": "staging"}
    ok = rest_answer(
        client, approval, {"approved": True, "arguments": edited, "argumentsHash": shown}, token
    )
    assert ok.status_code == HTTPStatus.OK
    assert ok.json()["heldCall"]["arguments"] == edited
    assert ok.json()["answer"] == {"approved": True, "edited": True}
    assert Receipt.objects.get().channel == "rest"


def test_the_step_up_right_is_given_only_to_operator_tokens(agents, capsys):
    call_command(
        "tokens",
        "create",
        "--tenant",
        agents.a.tenant.slug,
        "--subject",
        "program:pager",
        "--kind",
        "operator",
        "--step-up",
    )
    assert ApiToken.objects.get(subject="program:pager").may_step_up is True
    call_command("tokens", "list", "--tenant", agents.a.tenant.slug)
    assert "[step-up]" in capsys.readouterr().out
    with pytest.raises(Exception, match="Only operator tokens"):
        call_command(
            "tokens",
            "create",
            "--tenant",
            agents.a.tenant.slug,
            "--subject",
            "partner:x",
            "--step-up",
        )


# --- export -----------------------------------------------------------------------------------


def _decide_some(side, count):
    for _ in range(count):
        decide(
            held_approval(side, "shipper"),
            approved=False,
            by=f"user:operator@{side.tenant.slug}.test",
        )


def test_receipts_export_as_csv_and_json_lines_streamed_by_keyset_for_the_tenant_only(
    agents, make_agent, monkeypatch
):
    shipper(make_agent, "approve")
    shipper(make_agent, "approve", tenant=agents.b.tenant)
    _decide_some(agents.a, 5)
    _decide_some(agents.b, 2)
    monkeypatch.setattr(audit_views, "EXPORT_PAGE", 2)  # three keyset pages for five rows
    client = agents.a.client_for(agents.a.viewer)
    mine = set(Receipt.objects.filter(tenant=agents.a.tenant).values_list("public_id", flat=True))
    with CaptureQueriesContext(connection) as queries:
        response = client.get(reverse("approvals:audit_export_jsonl"))
        rows = [json.loads(line) for line in b"".join(response.streaming_content).splitlines()]
    assert response.streaming and response["Content-Type"].startswith("application/jsonl")
    assert "attachment" in response["Content-Disposition"]
    assert {r["receipt"] for r in rows} == mine and len(rows) == 5
    assert [r["createdAt"] for r in rows] == sorted((r["createdAt"] for r in rows), reverse=True)
    assert {"argumentsSha256", "policyVersion", "decider", "channel"} <= set(rows[0])
    # Each row carries its signed receipt, whose claims are the row's.
    assert all(r["jws"].count(".") == 2 for r in rows)
    assert jws_claims(rows[0]["jws"])["receipt_id"] == rows[0]["receipt"]
    receipt_queries = [q for q in queries.captured_queries if "runtime_receipt" in q["sql"]]
    assert len(receipt_queries) == 3
    response = client.get(reverse("approvals:audit_export_csv"))
    table = list(csv.DictReader(io.StringIO(b"".join(response.streaming_content).decode())))
    assert {r["receipt"] for r in table} == mine
    assert table[0]["decision"] == "denied" and table[0]["edited"] == "false"
    assert {r["jws"] for r in table} == {r["jws"] for r in rows}
    assert "export as CSV" in client.get(reverse("approvals:audit")).content.decode()


def test_a_reason_that_looks_like_a_formula_is_exported_as_text(agents, make_agent):
    shipper(make_agent, "approve")
    decide(held_approval(agents.a, "shipper"), approved=False, reason="=HYPERLINK(1)")
    client = agents.a.client_for(agents.a.operator)
    body = b"".join(client.get(reverse("approvals:audit_export_csv")).streaming_content)
    assert "'=HYPERLINK(1)" in body.decode()


def test_the_audit_page_still_shows_decisions_on_a_deleted_task(agents, make_agent):
    shipper(make_agent, "approve")
    approval = held_approval(agents.a, "shipper")
    decide(approval, approved=False)
    Task.objects.filter(pk=approval.task_id).delete()
    response = agents.a.client_for(agents.a.operator).get(reverse("approvals:audit"))
    assert response.status_code == HTTPStatus.OK and "denied" in response.content.decode()
    assert Agent.objects.filter(slug="shipper").exists()


def test_a_member_with_totp_steps_up_with_their_code_not_only_their_password(agents, make_agent):
    from allauth.mfa.totp.internal.auth import (
        TOTP,
        format_hotp_value,
        generate_totp_secret,
        hotp_value,
        yield_hotp_counters_from_time,
    )

    shipper(make_agent, {"action": "approve", "risk": "high"})
    approval = held_approval(agents.a, "shipper")
    secret = generate_totp_secret()
    TOTP.activate(agents.a.operator, secret)
    client = agents.a.client_for(agents.a.operator)
    response = client.post(page(approval), {"decision": "approve"})
    assert response["Location"].startswith(reverse("mfa_reauthenticate"))
    # The password alone is not enough for a member who has TOTP.
    client.post(reverse("account_reauthenticate"), {"password": PASSWORD})
    response = client.post(page(approval), {"decision": "approve"})
    assert response["Location"].startswith(reverse("mfa_reauthenticate"))
    assert open_interaction(approval.task).pk == approval.pk
    counters = list(yield_hotp_counters_from_time())
    counter = counters[len(counters) // 2]  # the current period
    code = format_hotp_value(hotp_value(secret, counter))
    response = client.post(response["Location"], {"code": code})
    assert response.status_code == HTTPStatus.FOUND
    approval.refresh_from_db()
    assert approval.state == Interaction.State.ANSWERED
    assert Receipt.objects.get().stepped_up is True


@pytest.mark.parametrize(
    "raw",
    ['{"build": "b", "environment": "staging", "durationSeconds": 1e999}', '{"build": "\\u0000"}'],
)
def test_edited_arguments_postgresql_cannot_store_are_a_form_error_not_a_500(
    agents, make_agent, raw, client
):
    shipper(make_agent, {"action": "approve", "editable": True})
    approval = held_approval(agents.a, "shipper")
    response = agents.a.client_for(agents.a.operator).post(
        page(approval), {"decision": "approve_edited", "source": "json", "arguments_json": raw}
    )
    assert response.status_code == HTTPStatus.BAD_REQUEST
    body = json.dumps({"approved": True, "arguments": json.loads(raw)})
    response = client.post(
        reverse("approvals:api_interaction_answer", args=[approval.public_id]),
        data=body.replace("Infinity", "1e999"),
        content_type="application/json",
        HTTP_AUTHORIZATION=f"Bearer {agents.a.extra['operator_token']}",
    )
    assert response.status_code == HTTPStatus.BAD_REQUEST
    assert open_interaction(approval.task).pk == approval.pk
