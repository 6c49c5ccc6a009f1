"""What is being approved, on every surface: the held call's
summary on inbox rows, search results, the REST list and detail, bulk results, the audit,
the task page and receipts; search over its arguments; and a redacted field that never
appears outside the decision page."""

import json
import re
from http import HTTPStatus

import pytest
from django.db import connection
from django.urls import reverse

from runtime.decisions.decision_models import Interaction, Receipt
from runtime.decisions.summaries import REDACTED
from tests.approvals.test_inbox_scale import MAX_QUERIES
from tests.core import decide, held_approval, open_interaction, run, send

pytestmark = pytest.mark.django_db

SECRET = "tok-SECRET-4711"
OPEN_TOOL = {"server": "deploy", "tool": "deploy_build", "schema": {"type": "object"}}


def bearer(token: str) -> dict:
    return {"HTTP_AUTHORIZATION": f"Bearer {token}"}


@pytest.fixture
def shipper(make_agent):
    """Deploys "<build> to <environment>" with a token its policy redacts, under a title."""
    agent = make_agent(
        "shipper",
        [
            {
                "call": {
                    "server": "deploy",
                    "tool": "deploy_build",
                    "args": {
                        "build": "{{ match.build }}",
                        "environment": "{{ match.env }}",
                        "token": SECRET,
                    },
                }
            },
            {"if": {"result": "ok"}, "reply": "shipped"},
            {"if": {"result": "error"}, "reply": "not shipped"},
        ],
        tools=[OPEN_TOOL],
        tool_policy={
            "deploy/deploy_build": {
                "action": "approve",
                "title": "Deploy {build} to {environment}",
                "redact": ["token"],
            }
        },
    )
    script = agent.model["script"]
    script[0]["when"] = {"text": r"(?P<build>\S+) to (?P<env>\w+)"}
    agent.model = {**agent.model, "script": script}
    agent.save(update_fields=["model"])
    return agent


def inbox_ids(client, params) -> list[str]:
    html = client.get(reverse("approvals:inbox"), params).content.decode()
    return re.findall(r'class="card inbox-item" data-id="([^"]+)"', html)


def test_inbox_rows_show_the_summary_and_search_finds_argument_values(agents, shipper):
    staging = held_approval(agents.a, "shipper", "2026.12.01-7 to staging")
    production = held_approval(agents.a, "shipper", "2026.12.01-8 to production")
    theirs = agents.b.extra["make"].approval(build="2026.12.01-8")  # same build, other tenant
    client = agents.a.client_for(agents.a.operator)
    html = client.get(reverse("approvals:inbox")).content.decode()
    assert "Deploy 2026.12.01-7 to staging" in html
    assert "Deploy 2026.12.01-8 to production" in html
    # Two deployments differ by what they deploy, not only by their task ids.
    assert inbox_ids(client, {"q": "production"}) == [production.public_id]
    assert inbox_ids(client, {"q": "PRODUCTION"}) == [production.public_id]
    assert inbox_ids(client, {"q": "2026.12.01-7"}) == [staging.public_id]
    assert inbox_ids(client, {"q": "environment=staging"}) == [staging.public_id]
    assert theirs.public_id not in inbox_ids(client, {"q": "2026.12.01-8"})
    # The old fields still find items: task id, agent, caller.
    assert inbox_ids(client, {"q": staging.task.public_id}) == [staging.public_id]
    assert set(inbox_ids(client, {"q": "shipper"})) == {staging.public_id, production.public_id}
    # A redacted value is never found: nobody sees it on the list, so nobody finds by it.
    assert inbox_ids(client, {"q": SECRET}) == []
    assert inbox_ids(client, {"q": "tok-SECRET"}) == []
    # LIKE's own characters are text to find, not patterns.
    assert inbox_ids(client, {"q": "%"}) == [] and inbox_ids(client, {"q": "b_ild"}) == []


def test_search_by_argument_value_stays_within_the_query_budget(
    agents, shipper, django_assert_max_num_queries
):
    for i in range(3):
        held_approval(agents.a, "shipper", f"b-{i} to staging")
    client = agents.a.client_for(agents.a.operator)
    for params in ({"q": "b-1"}, {"q": "staging", "kind": "approval"}, {"q": "nothing"}):
        with django_assert_max_num_queries(MAX_QUERIES):
            response = client.get(reverse("approvals:inbox"), params)
        assert response.status_code == HTTPStatus.OK


def test_the_rest_list_and_detail_carry_the_held_call_redacted(agents, shipper, client):
    approval = held_approval(agents.a, "shipper", "2026.12.01-9 to production")
    question = agents.a.extra["make"].question()
    auth = bearer(agents.a.extra["operator_token"])
    rows = {r["id"]: r for r in client.get("/api/v1/interactions", **auth).json()["results"]}
    assert rows[approval.public_id]["heldCall"] == {
        "server": "deploy",
        "tool": "deploy_build",
        "arguments": {"build": "2026.12.01-9", "environment": "production", "token": REDACTED},
        "summary": "Deploy 2026.12.01-9 to production",
        "impact": "",
    }
    assert rows[question.public_id]["heldCall"] is None
    detail = client.get(f"/api/v1/interactions/{approval.public_id}", **auth).json()
    effect_hash = approval.task.effects.get().arguments_hash
    assert detail["heldCall"]["arguments"]["token"] == REDACTED
    assert detail["heldCall"]["summary"] == "Deploy 2026.12.01-9 to production"
    # The hash is of the call itself: a program approving it binds what will be sent.
    assert detail["heldCall"]["argumentsHash"] == effect_hash
    assert SECRET not in json.dumps(rows) and SECRET not in json.dumps(detail)
    answer = client.post(
        f"/api/v1/interactions/{approval.public_id}/answer",
        {"approved": True, "argumentsHash": effect_hash},
        content_type="application/json",
        **auth,
    )
    assert answer.status_code == HTTPStatus.OK, answer.content
    assert SECRET not in answer.content.decode()


def test_a_redacted_value_appears_on_the_decision_page_and_nowhere_else(agents, shipper, client):
    approval = held_approval(agents.a, "shipper", "2026.12.02-1 to production")
    other = held_approval(agents.a, "shipper", "2026.12.02-2 to staging")
    operator = agents.a.client_for(agents.a.operator)
    page = operator.get(reverse("approvals:interaction", args=[approval.public_id]))
    assert SECRET in page.content.decode()  # the decision page shows exactly what is sent
    decide(approval, approved=True)
    run(approval.task)
    auth = bearer(agents.a.extra["operator_token"])
    elsewhere = {
        "inbox": operator.get(reverse("approvals:inbox")),
        "inbox decided": operator.get(reverse("approvals:inbox"), {"state": "decided"}),
        "fragment": operator.get(reverse("approvals:inbox_fragment")),
        "task page": operator.get(reverse("approvals:task", args=[approval.task.public_id])),
        "audit": operator.get(reverse("approvals:audit")),
        "receipts.csv": operator.get(reverse("approvals:audit_export_csv")),
        "receipts.jsonl": operator.get(reverse("approvals:audit_export_jsonl")),
        "REST list": client.get("/api/v1/interactions", **auth),
        "REST detail": client.get(f"/api/v1/interactions/{approval.public_id}", **auth),
        "bulk confirm": operator.post(
            reverse("approvals:inbox_bulk"), {"decision": "approve", "ids": [other.public_id]}
        ),
    }
    for name, response in elsewhere.items():
        assert response.status_code == HTTPStatus.OK, name
        body = b"".join(response.streaming_content) if response.streaming else response.content
        assert SECRET.encode() not in body, name
    # The summaries are there, redacted.
    assert "Deploy 2026.12.02-1 to production" in elsewhere["audit"].content.decode()
    assert "Deploy 2026.12.02-1 to production" in elsewhere["task page"].content.decode()
    assert "Deploy 2026.12.02-2 to staging" in elsewhere["bulk confirm"].content.decode()


def test_receipts_keep_the_arguments_shown_and_sent_after_redact(agents, shipper):
    approval = held_approval(agents.a, "shipper", "2026.12.03-1 to staging")
    decide(approval, approved=True)
    receipt = Receipt.objects.get(interaction_public_id=approval.public_id)
    shown = {"build": "2026.12.03-1", "environment": "staging", "token": REDACTED}
    assert (receipt.arguments, receipt.sent_arguments) == (shown, shown)
    client = agents.a.client_for(agents.a.operator)
    jsonl = b"".join(client.get(reverse("approvals:audit_export_jsonl")).streaming_content)
    line = json.loads(jsonl.decode().splitlines()[0])
    assert line["arguments"] == shown and line["sentArguments"] == shown
    csv = b"".join(client.get(reverse("approvals:audit_export_csv")).streaming_content).decode()
    header, row = csv.splitlines()[:2]
    assert "arguments" in header.split(",") and "sentArguments" in header.split(",")
    assert '"{""build"":""2026.12.03-1"",""environment"":""staging"",""token"":""•••""}"' in row


def test_an_edited_approval_receipt_keeps_both_and_the_model_is_told(agents, make_agent):
    from tests.core import DEPLOY_TOOL, edit_approve

    make_agent(
        "editable",
        [
            {
                "call": {
                    "server": "deploy",
                    "tool": "deploy_build",
                    "args": {"build": "b-1", "environment": "production"},
                }
            },
            {
                "if": {"result": "ok"},
                "reply": "Deployed build {{ last.result.build }} to {{ last.result.environment }}.",
            },
        ],
        tools=[DEPLOY_TOOL],
        tool_policy={"deploy/deploy_build": {"action": "approve", "editable": True}},
    )
    approval = open_interaction(run(send(agents.a, "editable")))
    edit_approve(agents.a, approval, {"build": "b-1", "environment": "staging"})
    receipt = Receipt.objects.get(interaction_public_id=approval.public_id)
    assert receipt.edited
    assert receipt.arguments == {"build": "b-1", "environment": "production"}
    assert receipt.sent_arguments == {"build": "b-1", "environment": "staging"}
    approval.refresh_from_db()
    # The item's record follows the call: its summary and search say what was sent.
    assert approval.summary == 'build="b-1", environment="staging"'
    assert "environment=staging" in approval.search_text


@pytest.mark.skipif(connection.vendor != "postgresql", reason="PostgreSQL's trigram index")
def test_the_search_can_be_read_through_the_trigram_index(agents, shipper):
    """The LIKE the inbox's search compiles to is one the trigram index serves (at 10,000
    open items the planner takes it for a rare term: bench/README.md, "Search")."""
    from runtime.decisions.search import search_query

    held_approval(agents.a, "shipper", "2026.12.04-1 to production")
    rows = Interaction.objects.filter(search_text__contains=search_query("2026.12.04-1"))
    sql, params = rows.values("pk").query.sql_with_params()
    with connection.cursor() as cursor:
        cursor.execute("SET LOCAL enable_seqscan = off")
        cursor.execute(f"EXPLAIN {sql}", params)
        plan = "\n".join(line for (line,) in cursor.fetchall())
        cursor.execute(f"SELECT COUNT(*) FROM ({sql}) found", params)
        assert cursor.fetchone()[0] == 1
    assert "interaction_search_trgm" in plan, plan


def test_the_migration_fills_in_search_text_and_summary_of_items_there_were(agents, shipper):
    import importlib

    from django.apps import apps

    migration = importlib.import_module("runtime.migrations.0021_interaction_search_text")
    approval = held_approval(agents.a, "shipper", "2026.12.07-1 to production")
    question = agents.a.extra["make"].question()
    Interaction.objects.update(search_text="", summary="")
    migration.search_texts_fill(apps, None)
    approval.refresh_from_db()
    question.refresh_from_db()
    assert approval.summary == "Deploy 2026.12.07-1 to production"
    assert "environment=production" in approval.search_text
    assert SECRET.casefold() not in approval.search_text
    assert question.summary == "" and question.prompt.casefold() in question.search_text


def test_django_admin_shows_a_redacted_value_nowhere(agents, shipper, staff):
    """Admin's read-only pages of the item, its call and its task: the redacted field is
    ``•••`` there too, the edited and the shown arguments alike."""
    from tests.core import edit_approve

    policy = shipper.tool_policy["deploy/deploy_build"]
    shipper.tool_policy = {"deploy/deploy_build": {**policy, "editable": True}}
    shipper.save(update_fields=["tool_policy"])
    approval = held_approval(agents.a, "shipper", "2026.12.04-1 to production")
    edit_approve(
        agents.a, approval, {"build": "2026.12.04-1", "environment": "staging", "token": SECRET}
    )
    run(approval.task)
    approval.refresh_from_db()
    effect = approval.task.effects.get()
    pages = {
        "interaction": reverse("admin:runtime_interaction_change", args=[approval.pk]),
        "effect": reverse("admin:runtime_effect_change", args=[effect.pk]),
        "task": reverse("admin:runtime_task_change", args=[approval.task.pk]),
    }
    for name, url in pages.items():
        response = staff.get(url)
        assert response.status_code == HTTPStatus.OK, name
        body = response.content.decode()
        assert SECRET not in body, name
        assert "2026.12.04-1" in body and "\\u2022\\u2022\\u2022" in body, name
    # What the model was told and what was sent are kept whole, for the runtime's use.
    assert approval.request["call"]["arguments"]["token"] == SECRET
