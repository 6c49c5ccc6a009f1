"""An inbox row read at a glance: the held call's summary is its headline (the prompt naming
the tool, and the agent, after it), its risk a badge and the colour of its edge (``risk:
high``, more than one person, in stages), and the list's fragment carries the tabs' counts
for the page's poll to keep them live."""

import html
import re

import pytest
from django.urls import reverse

from runtime.decisions.decision_models import Interaction
from tests.core import DEPLOY_TOOL, REPORT_RESULT, deploy_step, run, send

pytestmark = pytest.mark.django_db

RULES = {
    "plain": {"action": "approve", "title": "Deploy {build} to {environment}"},
    "high": {"action": "approve", "risk": "high", "title": "Deploy {build}, high"},
    "two": {"action": "approve", "required": 2, "title": "Deploy {build}, two"},
    "staged": {
        "action": "approve",
        "title": "Deploy {build}, staged",
        "stages": [
            {"approvers": ["operator"], "required": 1},
            {"approvers": ["admin"], "required": 1},
        ],
    },
}


@pytest.fixture
def held(agents, make_agent):
    """One open approval per rule of RULES, each held by its own agent."""
    for name, rule in RULES.items():
        make_agent(
            f"dep-{name}",
            [deploy_step(build=f"b-{name}"), *REPORT_RESULT],
            tools=[DEPLOY_TOOL],
            tool_policy={"deploy/deploy_build": rule},
        )
        run(send(agents.a, f"dep-{name}"))
    return {i.task.agent.slug.removeprefix("dep-"): i for i in Interaction.objects.all()}


def row_of(page: str, interaction: Interaction) -> str:
    start = page.index(f'data-id="{interaction.public_id}"')
    return page[page.rindex("<li", 0, start) : page.index("</li>", start)]


def test_a_rows_headline_is_the_summary_and_its_risk_a_badge(agents, held):
    page = html.unescape(
        agents.a.client_for(agents.a.operator).get(reverse("approvals:inbox")).content.decode()
    )
    plain = row_of(page, held["plain"])
    headline = re.search(r'class="inbox-headline"[^>]*>([^<]+)</a>', plain)[1]
    assert headline == "Deploy b-plain to staging"
    meta = plain[plain.index('class="inbox-meta') :]
    assert "dep-plain" in meta and "Approve deploy / deploy_build?" in meta
    assert "badge risk-high" not in plain and "tone-" not in plain.split(">")[0]

    high = row_of(page, held["high"])
    assert '<span class="badge risk-high">risk: high</span>' in high
    assert "tone-high" in high.split(">")[0]
    two = row_of(page, held["two"])
    assert '<span class="badge two-person">2 people</span>' in two
    assert "tone-people" in two.split(">")[0]
    staged = row_of(page, held["staged"])
    assert '<span class="badge staged">2 people in stages</span>' in staged
    assert "two-person" not in staged


def test_the_list_fragment_carries_the_tabs_counts(agents, held):
    client = agents.a.client_for(agents.a.operator)
    fragment = client.get(reverse("approvals:inbox_fragment"), {"kind": "question"})
    body = fragment.content.decode()
    # Filtered to questions, the list is empty; the counts are the tabs', of all open items.
    assert 'class="inbox-item' not in body
    assert '<span data-count-of="approval">4</span>' in body
    assert '<span data-count-of="all">4</span>' in body
