"""Bulk triage: many approvals, one reason, each decided on its own through
the one decision flow, with its own audit entry and its own race."""

import re
import threading
from http import HTTPStatus

import pytest
from django.db import connections
from django.test import Client
from django.urls import reverse

from approvals import bulk_views
from runtime.agents.agent_models import DemoRecord
from runtime.decisions.decision_models import Effect, Interaction
from runtime.kernel.task_models import AuditEvent, TaskState
from tests.core import flow_answer, open_interaction, run, start

OUTCOME = re.compile(r'data-outcome="([a-z_]+)" data-id="([^"]+)"')


def outcomes(response) -> dict[str, str]:
    assert response.status_code == HTTPStatus.OK, response.content[:500]
    return {pid: outcome for outcome, pid in OUTCOME.findall(response.content.decode())}


def bulk_post(client, **data):
    """A bulk decision; an approval as confirmed on the page of summaries it shows first."""
    if data.get("decision") == "approve":
        data.setdefault("confirmed", "1")
    return client.post(reverse("approvals:inbox_bulk"), data)


@pytest.mark.postgres
def test_hundred_approvals_twenty_decided_meanwhile_by_another_operator(
    postgres_only, transactional_db, agents, monkeypatch
):
    side = agents.a
    made = [side.extra["make"].approval(build=f"b{i}") for i in range(100)]
    ids = [i.public_id for i in made]
    contested = set(ids[::5])  # 20 of them
    real_read = bulk_views.interactions_for_bulk
    raced = []

    def read_then_race(**kwargs):
        # The bulk action has read the items (all open); another operator now decides 20 of
        # them on another connection, before the bulk action reaches them.
        found = real_read(**kwargs)
        if raced:
            return found
        raced.append(True)
        assert all(row.state == Interaction.State.OPEN for row in found.values())
        errors = []

        def other_operator():
            try:
                for public_id in contested:
                    flow_answer(
                        tenant=side.tenant,
                        interaction_id=public_id,
                        answer={"approved": True, "reason": "mine"},
                        by="user:other@acme.test",
                        via="page",
                    )
            except Exception as exc:  # noqa: BLE001 - reported below
                errors.append(exc)
            finally:
                connections.close_all()

        thread = threading.Thread(target=other_operator)
        thread.start()
        thread.join(120)
        assert not errors, errors
        return found

    monkeypatch.setattr(bulk_views, "interactions_for_bulk", read_then_race)
    client = side.client_for(side.operator)
    result = outcomes(bulk_post(client, decision="approve", reason="release train 42", ids=ids))
    assert len(result) == 100
    assert sorted(p for p, o in result.items() if o == "already") == sorted(contested)
    assert sorted(p for p, o in result.items() if o == "decided") == sorted(set(ids) - contested)
    body = bulk_post(client, decision="approve", ids=ids[:1]).content.decode()
    assert "Already decided by" in body
    for interaction in Interaction.objects.filter(public_id__in=ids):
        assert interaction.state == Interaction.State.ANSWERED
        if interaction.public_id in contested:
            assert interaction.answered_by == "user:other@acme.test"
            assert interaction.answer == {"approved": True, "reason": "mine"}
        else:
            assert interaction.answered_by == side.operator.subject
            assert interaction.answered_via == "bulk"
            assert interaction.answer == {"approved": True, "reason": "release train 42"}
        assert AuditEvent.objects.filter(interaction=interaction).count() == 1
    # Every resumed turn sends its deployment exactly once, however often it runs.
    for interaction in made:
        task = run(interaction.task)
        assert task.state == TaskState.COMPLETED
        run(task)
    for public_id in ids:
        assert DemoRecord.objects.filter(effect_id=public_id).count() == 1
    assert Effect.objects.filter(public_id__in=ids, state=Effect.State.SUCCEEDED).count() == 100


def test_bulk_deny_leaves_out_bulk_false_policies_and_non_approvals(transactional_db, agents):
    side = agents.a
    make = side.extra["make"]
    approvals = [make.approval(build=f"d{i}") for i in range(3)]
    question = make.question()
    client = side.client_for(side.operator)
    first = outcomes(
        bulk_post(
            client,
            decision="deny",
            reason="freeze",
            ids=[approvals[0].public_id, question.public_id, "no-such-id"],
        )
    )
    assert first == {
        approvals[0].public_id: "decided",
        question.public_id: "left_out",
        "no-such-id": "missing",
    }
    denied = Interaction.objects.get(pk=approvals[0].pk)
    assert denied.answer == {"approved": False, "reason": "freeze"}
    assert Interaction.objects.get(pk=question.pk).state == Interaction.State.OPEN
    # The deploy tool now says bulk: false: the rest stay open and the page says why.
    agent = approvals[1].task.agent
    agent.tool_policy = {"deploy/deploy_build": {"action": "approve", "bulk": False}}
    agent.save(update_fields=["tool_policy"])
    response = bulk_post(client, decision="deny", ids=[a.public_id for a in approvals[1:]])
    assert set(outcomes(response).values()) == {"left_out"}
    assert "bulk: false" in response.content.decode()
    assert (
        Interaction.objects.filter(pk__in=[a.pk for a in approvals[1:]], state="open").count() == 2
    )
    assert AuditEvent.objects.filter(interaction__in=approvals[1:]).count() == 0


def test_select_all_matching_the_filter_decides_only_what_matches(transactional_db, agents):
    side = agents.a
    make = side.extra["make"]
    wanted = [make.approval(build=f"w{i}") for i in range(3)]
    others = [make.approval(build=f"o{i}") for i in range(2)]
    for interaction in others:
        # What the search looks in is written when an item opens (runtime.decisions.search).
        Interaction.objects.filter(pk=interaction.pk).update(
            prompt="something else entirely", search_text="something else entirely"
        )
    theirs = agents.b.extra["make"].approval(build="w9")
    client = side.client_for(side.operator)
    result = outcomes(
        bulk_post(client, decision="deny", all="1", q="approve DEPLOY /", state="open", ids=[])
    )
    assert sorted(result) == sorted(i.public_id for i in wanted)
    assert set(result.values()) == {"decided"}
    assert Interaction.objects.filter(pk__in=[o.pk for o in others], state="open").count() == 2
    assert Interaction.objects.get(pk=theirs.pk).state == Interaction.State.OPEN


def test_viewers_other_tenants_and_forged_requests_are_refused(transactional_db, agents):
    side = agents.a
    mine = side.extra["make"].approval()
    theirs = agents.b.extra["make"].approval()
    viewer = side.client_for(side.viewer)
    assert bulk_post(viewer, decision="approve", ids=[mine.public_id]).status_code == 403
    body = viewer.get(reverse("approvals:inbox")).content.decode()
    assert "bulk-form" not in body and 'name="ids"' not in body
    strict = Client(enforce_csrf_checks=True)
    strict.force_login(side.operator)
    assert bulk_post(strict, decision="approve", ids=[mine.public_id]).status_code == 403
    operator = side.client_for(side.operator)
    assert outcomes(bulk_post(operator, decision="approve", ids=[theirs.public_id])) == {
        theirs.public_id: "missing"
    }
    for data in ({"decision": "maybe", "ids": [mine.public_id]}, {"decision": "approve"}):
        response = bulk_post(operator, **data)
        assert response.status_code == HTTPStatus.FOUND
    assert operator.get(reverse("approvals:inbox_bulk")).status_code == 405
    assert Interaction.objects.filter(state="open").count() == 2
    assert AuditEvent.objects.filter(interaction__isnull=False).count() == 0


def test_the_confirmation_says_up_front_what_it_leaves_out_and_why(transactional_db, agents):
    """The demo deployer holds production for two people, never in bulk: of five selected,
    the page offers the two it will approve and says, before its button, why the three
    others are left out."""
    side = agents.a
    make = side.extra["make"]
    staging = [make.approval(build=f"s{i}") for i in range(2)]
    production = [
        open_interaction(start(side, "deployer", f"deploy build p{i} to production"))
        for i in range(2)
    ]
    question = make.question()
    ids = [i.public_id for i in (*staging, *production, question)]
    client = side.client_for(side.operator)
    page = client.post(reverse("approvals:inbox_bulk"), {"decision": "approve", "ids": ids})
    html = page.content.decode()
    assert page.status_code == HTTPStatus.OK
    assert "<h1>Approve 2 calls?</h1>" in html
    assert "Approve these 2 calls</button>" in html
    assert "3 of the 5 selected are left out" in html
    left = html[html.index('id="left-out"') : html.index("</section>")]
    for interaction in production:
        assert f'data-id="{interaction.public_id}"' in left
    assert "The policy for deploy/deploy_build says bulk: false" in left
    assert "A question is answered on its own page." in left
    # Said before the button, and only what is offered is posted.
    assert html.index('id="left-out"') < html.index('id="bulk-confirm-form"')
    posted = re.findall(r'name="ids" value="([^"]+)"', html)
    assert posted == [i.public_id for i in staging]
    assert Interaction.objects.filter(state="open").count() == 5

    # A viewer's words aside, a person who may not decide a call sees it left out too.
    agent = staging[0].task.agent
    agent.tool_policy = {"deploy/deploy_build": {"action": "approve", "approvers": ["admin"]}}
    agent.save(update_fields=["tool_policy"])
    html = client.post(
        reverse("approvals:inbox_bulk"), {"decision": "approve", "ids": ids[:1]}
    ).content.decode()
    assert "1 of the 1 selected is left out" in html and "Only admins may decide" in html
    assert 'id="bulk-confirm-form"' not in html and "Nothing selected can be approved" in html


def test_the_result_page_counts_the_outcomes_in_words(transactional_db, agents):
    side = agents.a
    make = side.extra["make"]
    approvals = [make.approval(build=f"w{i}") for i in range(2)]
    question = make.question()
    client = side.client_for(side.operator)
    response = bulk_post(
        client,
        decision="deny",
        ids=[*(a.public_id for a in approvals), question.public_id, "no-such-id"],
    )
    html = response.content.decode()
    start = html.index('id="bulk-summary"')
    summary = html[start : html.index("</ul>", start)]
    assert re.findall(r">([^<>]+): <strong>(\d+)</strong>", summary) == [
        ("Denied", "2"),
        ("Left out", "1"),
        ("Not found", "1"),
    ]
    # No outcome's key is shown: the text of the page, without its tags, says them in words.
    text = re.sub(r"<[^>]*>", "", html)
    assert "left_out" not in text and "missing" not in text and "decided:" not in text
