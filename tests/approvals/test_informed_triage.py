"""Triage that cannot go blind: after a decision the operator moves on to
the next open item of the list they came from; Approve is not offered to the first of two
approvers; bulk approval shows the summaries of what it approves, and binds them; the item
page puts what is decided and the buttons first."""

import re
from http import HTTPStatus
from urllib.parse import urlencode

import pytest
from django.urls import reverse

from runtime.agents.agent_models import Agent
from runtime.decisions.decision_models import Effect, Interaction, Receipt
from runtime.policy.rules import policy_rule_for
from tests.core import open_interaction, start

pytestmark = pytest.mark.django_db


def page(interaction, **query) -> str:
    url = reverse("approvals:interaction", args=[interaction.public_id])
    return f"{url}?{urlencode(query)}" if query else url


def test_after_a_decision_the_next_open_item_opens_older_first_then_the_newest(agents):
    make = agents.a.extra["make"]
    first, second, third = (make.approval(build=f"b-{i}") for i in range(3))  # third is newest
    client = agents.a.client_for(agents.a.operator)
    response = client.post(page(second), {"decision": "approve"})
    assert response.status_code == HTTPStatus.FOUND
    assert response["Location"] == page(first)  # the next one down the inbox
    landed = client.get(response["Location"]).content.decode()
    assert "Approved. (Approve deploy / deploy_build: Deploy b-1 to staging)" in landed
    assert "Next: Approve deploy / deploy_build?" in landed
    assert "Back to the inbox" in landed
    # The last of the list wraps round to the newest still open.
    assert client.post(page(first), {"decision": "deny"})["Location"] == page(third)
    done = client.post(page(third), {"decision": "approve"})
    assert done["Location"] == reverse("approvals:inbox")
    assert "Nothing else is waiting." in client.get(done["Location"]).content.decode()


def test_the_next_item_keeps_to_the_inbox_filters_it_came_from(agents):
    make = agents.a.extra["make"]
    staging = make.approval(build="s-1")
    question = make.question()
    other = make.approval(build="s-2")
    client = agents.a.client_for(agents.a.operator)
    # The inbox carries its filters to each item's page...
    inbox = client.get(reverse("approvals:inbox"), {"q": "s-", "kind": "approval"}).content
    assert f"{page(other, q='s-', kind='approval')}".replace("&", "&amp;") in inbox.decode()
    # ... and deciding there moves on within them (the question is not in that list).
    response = client.post(page(other, q="s-", kind="approval"), {"decision": "approve"})
    assert response["Location"] == page(staging, q="s-", kind="approval")
    last = client.post(page(staging, q="s-", kind="approval"), {"decision": "approve"})
    assert last["Location"] == reverse("approvals:inbox") + "?q=s-&kind=approval"
    assert open_interaction(question.task).pk == question.pk


def two_person(agents, make_agent):
    agent = Agent.objects.get(tenant=agents.a.tenant, slug="deployer")
    agent.tool_policy = {"deploy/deploy_build": {"action": "approve", "required": 2}}
    agent.save(update_fields=["tool_policy"])
    return open_interaction(start(agents.a, "deployer", "deploy build r-1 to production"))


def test_the_first_of_two_approvers_is_not_offered_approve_again(agents, make_agent, client):
    approval = two_person(agents, make_agent)
    later = agents.a.extra["make"].approval(build="r-2")
    operator = agents.a.client_for(agents.a.operator)
    before = operator.get(page(approval)).content.decode()
    assert 'id="approve"' in before
    response = operator.post(page(approval), {"decision": "approve"})
    # Recorded, and on to the next item: this one waits for another person.
    assert response["Location"] == page(later)
    assert (
        "Your approval is recorded (1 of 2)" in operator.get(response["Location"]).content.decode()
    )
    after = operator.get(page(approval)).content.decode()
    assert 'id="approve"' not in after and 'value="approve_rule"' not in after
    assert 'id="approved-already"' in after and 'id="deny"' in after
    # The inbox marks it theirs, and moving on skips it.
    assert "you approved" in operator.get(reverse("approvals:inbox")).content.decode()
    assert operator.post(page(later), {"decision": "deny"})["Location"] == reverse(
        "approvals:inbox"
    )
    # Over REST (their session) the decision block says the same.
    detail = operator.get(f"/api/v1/interactions/{approval.public_id}").json()["decision"]
    assert detail["approvedAlready"] is True and detail["mayApprove"] is False
    # Another admin or operator is still offered Approve.
    admin = agents.a.client_for(agents.a.admin)
    assert 'id="approve"' in admin.get(page(approval)).content.decode()


def test_an_approval_a_policy_edit_voided_is_no_longer_marked_yours_in_the_inbox(
    agents, make_agent
):
    approval = two_person(agents, make_agent)
    operator = agents.a.client_for(agents.a.operator)
    operator.post(page(approval), {"decision": "approve"})
    inbox = operator.get(reverse("approvals:inbox")).content.decode()
    assert "you approved" in inbox and "1 of 2 approvals" in inbox
    # The rule that holds the call is edited: the approval given under it no longer counts.
    agent = Agent.objects.get(tenant=agents.a.tenant, slug="deployer")
    agent.tool_policy = {
        "deploy/deploy_build": {"action": "approve", "required": 2, "title": "Deploy {build}"}
    }
    agent.save(update_fields=["tool_policy"])
    detail = operator.get(f"/api/v1/interactions/{approval.public_id}").json()
    assert detail["decision"]["approvedAlready"] is False and detail["progress"] == "0 of 2"
    inbox = operator.get(reverse("approvals:inbox")).content.decode()
    assert "you approved" not in inbox and "data-approved-by-me" not in inbox
    assert "0 of 2 approvals" in inbox
    # Moving on after another item no longer skips it: it needs their approval again.
    later = agents.a.extra["make"].approval(build="r-3")
    assert operator.post(page(later), {"decision": "deny"})["Location"] == page(approval)


def test_held_by_says_the_rule_that_holds_the_call_now_after_an_edit_voided_its_approvals(
    agents, make_agent
):
    approval = two_person(agents, make_agent)
    operator = agents.a.client_for(agents.a.operator)
    opened = operator.get(f"/api/v1/interactions/{approval.public_id}").json()
    assert opened["heldBy"]["version"] == approval.request["policyRule"]["version"]
    operator.post(page(approval), {"decision": "approve"})
    agent = Agent.objects.get(tenant=agents.a.tenant, slug="deployer")
    agent.tool_policy = {
        "deploy/deploy_build": {"action": "approve", "required": 2, "title": "Deploy {build}"}
    }
    agent.save(update_fields=["tool_policy"])
    now = policy_rule_for(agent, "deploy", "deploy_build", {"build": "r-1"}).version
    assert now != opened["heldBy"]["version"]
    detail = operator.get(f"/api/v1/interactions/{approval.public_id}").json()
    # What an approval binds now (and its receipt will name), and the rule it opened under.
    assert detail["heldBy"]["version"] == now
    assert detail["progress"] == "0 of 2"
    assert detail["openedUnder"]["version"] == opened["heldBy"]["version"]
    assert opened["openedUnder"] is None


def test_the_item_page_shows_the_call_and_the_buttons_before_the_facts(agents):
    approval = agents.a.extra["make"].approval(build="p-1")
    html = agents.a.client_for(agents.a.operator).get(page(approval)).content.decode()
    order = [
        html.index('id="call-summary"'),
        html.index('id="arguments"'),
        html.index('id="approve"'),
        html.index("<dt>Caller</dt>"),
        html.index("<dt>Asked</dt>"),
    ]
    assert order == sorted(order)
    assert "Deploy p-1 to staging" in html
    # The form posts the hash of the arguments shown beside it.
    shown = re.search(r'id="arguments-hash">([0-9a-f]{64})<', html).group(1)
    assert f'name="shown_hash" value="{shown}"' in html
    assert shown == Effect.objects.get(public_id=approval.public_id).arguments_hash


def test_bulk_approval_shows_the_summaries_first_and_approves_only_those(agents):
    make = agents.a.extra["make"]
    approvals = [make.approval(build=f"bulk-{i}") for i in range(3)]
    question = make.question()
    client = agents.a.client_for(agents.a.operator)
    ids = [a.public_id for a in approvals] + [question.public_id]
    shown = client.post(
        reverse("approvals:inbox_bulk"), {"decision": "approve", "reason": "train", "ids": ids}
    )
    assert shown.status_code == HTTPStatus.OK
    html = shown.content.decode()
    for i in range(3):
        assert f"Deploy bulk-{i} to staging" in html
    assert "A question is answered on its own page." in html
    # Nothing is decided until the person confirms.
    assert Interaction.objects.filter(state=Interaction.State.OPEN).count() == 4
    assert not Receipt.objects.exists()
    confirm = dict(re.findall(r'name="(shown-[^"]+)" value="([0-9a-f]{64})"', html))
    assert len(confirm) == 3
    # One call's arguments change after it was shown: that one is refused, the rest approved.
    changed = approvals[0]
    Effect.objects.filter(public_id=changed.public_id).update(arguments_hash="f" * 64)
    result = client.post(
        reverse("approvals:inbox_bulk"),
        {
            "decision": "approve",
            "confirmed": "1",
            "reason": "train",
            "ids": [a.public_id for a in approvals],
            **confirm,
        },
    ).content.decode()
    outcomes = {
        pid: outcome
        for outcome, pid in re.findall(r'data-outcome="(\w+)" data-id="([^"]+)"', result)
    }
    assert outcomes[changed.public_id] == "error"
    assert {outcomes[a.public_id] for a in approvals[1:]} == {"decided"}
    # Each result says what it was about.
    assert "Deploy bulk-1 to staging" in result and "Deploy bulk-2 to staging" in result
    receipts = Receipt.objects.filter(channel="bulk")
    assert {r.arguments_hash for r in receipts} == {
        confirm[f"shown-{a.public_id}"] for a in approvals[1:]
    }


def test_bulk_approval_of_a_filter_lists_what_the_filter_holds(agents):
    make = agents.a.extra["make"]
    # A term no random id can hold by chance ("f-" matched a task id's "F-" now and then).
    wanted = [make.approval(build=f"filtered-build-{i}") for i in range(2)]
    make.approval(build="other-1")
    client = agents.a.client_for(agents.a.operator)
    html = client.post(
        reverse("approvals:inbox_bulk"),
        {"decision": "approve", "all": "1", "q": "filtered-build-", "state": "open"},
    ).content.decode()
    listed = re.findall(r'name="ids" value="([^"]+)"', html)
    assert sorted(listed) == sorted(a.public_id for a in wanted)
    assert "other-1" not in html
