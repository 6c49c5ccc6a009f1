"""Impact lines: a policy rule's ``impact``, a template over the call's arguments and context
with filters for numbers, money and durations, says in words what approving does; it is
shown under the title on the inbox, the item page, Slack, e-mail and the REST channel, and
kept on the receipt."""

import json
from decimal import Decimal

import pytest
from django.core import mail
from django.urls import reverse

from notifications.channel_settings import channel_save
from runtime.agents.agent_schema import policy_problems
from runtime.decisions.decision_models import Interaction, Receipt
from runtime.decisions.summaries import REDACTED, impact_render
from runtime.policy.template_filters import duration_text
from runtime.policy.title_syntax import impact_problem, title_problem
from tenants.models import ApiToken
from tenants.tokens import api_token_create
from tests.core import REPORT_RESULT, decide, start

pytestmark = pytest.mark.django_db

OPEN_TOOL = {"server": "deploy", "tool": "deploy_build", "schema": {"type": "object"}}
IMPACT = (
    "Replaces what customers run in {environment} with {build}; costs "
    "{amount|money:currency} (about {amount|times:0.0062|money:EUR}); down up to "
    "{window|duration} for {@caller}"
)
SAID = (
    "Replaces what customers run in production with b-42; costs 120,000 JPY (about 744.00 EUR);"
    " down up to 1 h 30 min for partner:acme-client"
)


# --- the template (pure) -------------------------------------------------------------------


def test_filters_say_numbers_money_and_durations_as_people_read_them():
    arguments = {"amount": 120000, "currency": "JPY", "cents": 1999, "n": 1234567.891, "t": 90}
    assert impact_render("{amount|number}", arguments) == "120,000"
    assert impact_render("{n|number:2}", arguments) == "1,234,567.89"
    assert impact_render("{amount|money:currency}", arguments) == "120,000 JPY"
    assert impact_render("{amount|money:EUR}", arguments) == "120,000.00 EUR"
    assert impact_render("{cents|minor:EUR|money:EUR}", arguments) == "19.99 EUR"
    assert impact_render("{amount|times:0.0062|money:EUR}", arguments) == "744.00 EUR"
    assert impact_render("{amount|times:0.0062}", arguments) == "744"
    assert impact_render("{t|duration}", arguments) == "1 min 30 s"
    assert impact_render("{t|duration:min}", arguments) == "1 h 30 min"
    assert impact_render("{t|duration:d}", arguments) == "90 days"
    assert duration_text(Decimal("0.25")) == "250 ms"
    # Text that is a number is read as one; anything else passes through unchanged.
    assert impact_render("{a|money:currency}", {"a": "99.5", "currency": "KWD"}) == ("99.500 KWD")
    assert impact_render("{a|number} {b|duration}", {"a": "lots", "b": None}) == "lots null"
    assert impact_render("{a|money:currency}", {"a": 5, "currency": "not money"}) == "5.00"
    assert impact_render("{missing|number}", {}) == "(no missing)"


def test_the_context_names_the_caller_agent_server_and_tool():
    context = {"caller": "partner:globex", "agent": "payer", "server": "pay", "tool": "send"}
    assert impact_render("{@caller} via {@agent}: {@server}/{@tool}", {}, context) == (
        "partner:globex via payer: pay/send"
    )
    assert impact_render("{@caller}", {}, {}) == "(no @caller)"


def test_a_redacted_value_stays_redacted_through_a_filter():
    assert impact_render("pays {amount|money:EUR}", {"amount": REDACTED}) == f"pays {REDACTED}"


def test_an_impact_is_checked_as_a_title_is_with_its_filters():
    assert impact_problem("Sends {amount|money:currency} to {payee}") is None
    assert impact_problem("{a|number:2} {b|duration:h} {c|times:1.5} {@caller}") is None
    assert "not a filter" in impact_problem("{a|upper}")
    assert "times takes a number" in impact_problem("{a|times:x}")
    assert "money takes a currency" in impact_problem("{a|money}")
    assert "duration takes a unit" in impact_problem("{a|duration:weeks}")
    assert "@caller" in impact_problem("{@nobody}")
    assert "at most 300" in impact_problem("x" * 301)
    assert impact_problem("") and impact_problem(7)
    # A title takes the same filters; a format after the name is still refused.
    assert title_problem("Pay {amount|money:currency}") is None
    assert title_problem("{amount:>10}") is not None
    problems = policy_problems({"pay/send": {"action": "approve", "impact": "{a|nope}"}})
    assert any("impact" in str(problem) and "not a filter" in str(problem) for problem in problems)


# --- every surface -------------------------------------------------------------------------


@pytest.fixture
def payer(make_agent):
    """Deploys, at a price, under a policy rule whose impact says so; its token redacted."""
    return make_agent(
        "payer",
        [
            {
                "call": {
                    "server": "deploy",
                    "tool": "deploy_build",
                    "args": {
                        "build": "b-42",
                        "environment": "production",
                        "amount": 120000,
                        "currency": "JPY",
                        "window": 90,
                        "token": "tok-SECRET",
                    },
                }
            },
            *REPORT_RESULT,
        ],
        tools=[OPEN_TOOL],
        tool_policy={
            "deploy/deploy_build": [
                {
                    "when": [{"field": "environment", "op": "equals", "value": "production"}],
                    "action": "approve",
                    "title": "Deploy {build} to {environment}",
                    "impact": IMPACT.replace("{window|duration}", "{window|duration:min}"),
                    "redact": ["token"],
                },
                {"action": "approve"},
            ]
        },
    )


@pytest.fixture
def held_payment(agents, payer, notify, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        task = start(agents.a, "payer", "go")
    return Interaction.objects.select_related("task__agent").get(task=task, state="open")


def test_the_impact_shows_under_the_title_in_the_inbox_and_on_the_item_page(agents, held_payment):
    assert held_payment.impact == SAID
    client = agents.a.client_for(agents.a.operator)
    inbox = client.get(reverse("approvals:inbox")).content.decode()
    headline = inbox.index("Deploy b-42 to production")
    assert inbox.index(f'<p class="impact" data-impact>{SAID}</p>') > headline
    page = client.get(reverse("approvals:interaction", args=[held_payment.public_id]))
    html = page.content.decode()
    assert html.index(f'<p class="impact" id="call-impact">{SAID}</p>') > html.index(
        'id="call-summary"'
    )


def test_the_rest_channel_carries_the_impact_with_the_held_call(agents, held_payment, client):
    _, token = api_token_create(
        tenant=agents.a.tenant, subject="program:ops", name="ops", kind=ApiToken.Kind.OPERATOR
    )
    auth = {"HTTP_AUTHORIZATION": f"Bearer {token}"}
    [row] = [
        r
        for r in client.get("/api/v1/interactions", **auth).json()["results"]
        if r["id"] == held_payment.public_id
    ]
    assert row["heldCall"]["summary"] == "Deploy b-42 to production"
    assert row["heldCall"]["impact"] == SAID
    detail = client.get(f"/api/v1/interactions/{held_payment.public_id}", **auth).json()
    assert detail["heldCall"]["impact"] == SAID


def test_an_email_says_the_impact_under_the_summary(
    agents, payer, notify, django_capture_on_commit_callbacks
):
    channel_save(tenant=agents.a.tenant, name="ops", kind="email", email_roles=["operator"])
    with django_capture_on_commit_callbacks(execute=True):
        start(agents.a, "payer", "go")
    [message] = [m for m in mail.outbox if m.to == ["operator@acme.test"]]
    assert f"Summary: Deploy b-42 to production\nApproving: {SAID}\n" in message.body
    html = message.alternatives[0][0]
    assert "<td><strong>Replaces what customers run in production with b-42;" in html
    assert "tok-SECRET" not in message.body and "tok-SECRET" not in html


def test_slack_posts_the_impact_under_the_title(
    agents, payer, slack_app, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks(execute=True):
        start(agents.a, "payer", "go")
    [message] = slack_app.called("chat.postMessage")
    title, impact = message["blocks"][:2]
    assert "Deploy b-42 to production" in title["text"]["text"]
    assert impact == {"type": "context", "elements": [{"type": "mrkdwn", "text": SAID}]}
    assert "tok-SECRET" not in json.dumps(message)


def test_the_receipt_keeps_the_impact_the_decider_was_told(agents, held_payment):
    decide(held_payment, approved=True)
    receipt = Receipt.objects.get(interaction_public_id=held_payment.public_id)
    assert receipt.impact == SAID
    client = agents.a.client_for(agents.a.admin)
    export = b"".join(client.get(reverse("approvals:audit_export_jsonl")).streaming_content)
    assert json.loads(export.decode().splitlines()[0])["impact"] == SAID
    page = client.get(reverse("approvals:interaction", args=[held_payment.public_id]))
    assert f'<span class="impact receipt-impact">{SAID}</span>' in page.content.decode()


def test_a_rule_without_impact_shows_none_and_a_redacted_field_never_shows(
    agents, make_agent, notify
):
    make_agent(
        "quiet",
        [
            {
                "call": {
                    "server": "deploy",
                    "tool": "deploy_build",
                    "args": {"build": "b-1", "pin": 4711},
                }
            },
            *REPORT_RESULT,
        ],
        tools=[OPEN_TOOL],
        tool_policy={
            "deploy/deploy_build": {
                "action": "approve",
                "impact": "Uses PIN {pin|number}",
                "redact": ["pin"],
            }
        },
    )
    make_agent(
        "plain",
        [{"call": {"server": "deploy", "tool": "deploy_build", "args": {}}}],
        tools=[OPEN_TOOL],
        tool_policy={"deploy/deploy_build": "approve"},
    )
    quiet = Interaction.objects.get(task=start(agents.a, "quiet", "go"), state="open")
    plain = Interaction.objects.get(task=start(agents.a, "plain", "go"), state="open")
    assert quiet.impact == f"Uses PIN {REDACTED}"
    assert plain.impact == ""
    client = agents.a.client_for(agents.a.operator)
    assert "4,711" not in client.get(reverse("approvals:inbox")).content.decode()
    # The decision page shows exactly what is sent: the value, through its filter.
    page = client.get(reverse("approvals:interaction", args=[quiet.public_id])).content.decode()
    assert "Uses PIN 4,711" in page
