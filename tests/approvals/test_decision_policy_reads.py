"""A decision reads the held call's tool policy once (runtime.decisions.flow: the approval's
needs, with the rule that holds the call and its trust keys), and every later step (who may
decide, step-up, an edit, a quorum, the receipt) asks that reading, on every channel.

Counted at ``runtime.policy.rules.policy_rule_for``, which every reading of the policy goes
through, by the interpreter's profiler: a reader that imported it under another name is
counted as well."""

import json
import sys
from contextlib import contextmanager
from http import HTTPStatus

import pytest

from runtime.agents.agent_models import Agent
from runtime.decisions.decision_models import Interaction
from runtime.policy.rules import policy_rule_for

pytestmark = pytest.mark.django_db


@contextmanager
def policy_reads():
    """The calls of policy_rule_for made in the block (a list, filled as they are made)."""
    made: list[str] = []
    code = policy_rule_for.__code__

    def profile(frame, event, arg):
        if event == "call" and frame.f_code is code:
            made.append(frame.f_back.f_code.co_qualname if frame.f_back else "?")

    previous = sys.getprofile()
    sys.setprofile(profile)
    try:
        yield made
    finally:
        sys.setprofile(previous)


def test_an_approval_over_rest_reads_the_policy_once(agents, client):
    approval = agents.a.extra["make"].approval()
    token = agents.a.extra["operator_token"]

    with policy_reads() as made:
        response = client.post(
            f"/api/v1/interactions/{approval.public_id}/answer",
            {"approved": True},
            content_type="application/json",
            HTTP_AUTHORIZATION=f"Bearer {token}",
        )

    assert response.status_code == HTTPStatus.OK, response.content
    assert response.json()["state"] == Interaction.State.ANSWERED
    assert made == ["policy_for"], made


def test_an_approval_on_its_page_reads_the_policy_once(agents):
    approval = agents.a.extra["make"].approval()
    client = agents.a.client_for(agents.a.operator)

    with policy_reads() as made:
        response = client.post(f"/inbox/{approval.public_id}/", {"decision": "approve"})

    assert response.status_code == HTTPStatus.FOUND
    approval.refresh_from_db()
    assert approval.state == Interaction.State.ANSWERED
    assert made == ["policy_for"], made


def test_an_edited_approval_reads_the_edited_calls_rule_once_more(agents):
    """The edited call is another call: the rule that holds it is read once (the edit must
    stay under the rule that held the call), and its receipt binds that reading."""
    agent = Agent.objects.get(tenant=agents.a.tenant, slug="deployer")
    agent.tool_policy = {"deploy/deploy_build": {"action": "approve", "editable": True}}
    agent.save(update_fields=["tool_policy"])
    approval = agents.a.extra["make"].approval()
    client = agents.a.client_for(agents.a.operator)
    edited = {"build": "2026.10.06-2", "environment": "staging"}

    with policy_reads() as made:
        response = client.post(
            f"/inbox/{approval.public_id}/",
            {"decision": "approve_edited", "source": "json", "arguments_json": json.dumps(edited)},
        )

    assert response.status_code == HTTPStatus.FOUND, response.content[:2000]
    approval.refresh_from_db()
    assert approval.answer["edited"] is True
    # What the page showed (its edit form), the decision's reading, the edited call's rule.
    assert made == ["policy_for", "policy_for", "decision_edit_apply"], made
