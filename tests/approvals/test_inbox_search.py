"""The inbox's search and filters: in the URL, combinable with the keyset
pages, a fixed number of queries, and only ever the tenant's own items."""

from datetime import timedelta
from http import HTTPStatus

import pytest
from django.urls import reverse
from django.utils import timezone

from runtime.agents.agent_models import Agent
from runtime.decisions.decision_models import Effect, Interaction
from runtime.decisions.inbox import agents_with_open_counts
from tests.approvals.test_inbox_scale import ITEM_ID, MAX_QUERIES, inbox_walk, seed

pytestmark = pytest.mark.django_db


@pytest.fixture
def bulk(agents):
    """120 open, 40 decided and 12 uncertain in A; the same ids' numbers and prompts in B."""
    ids = seed(agents.a.tenant, pending=120, decided=40, uncertain=12)
    other = seed(agents.b.tenant, pending=120, decided=40, uncertain=12)
    return ids, other


def shown(client, params: dict) -> list[str]:
    pages, _ = inbox_walk(client, "approvals:inbox", params)
    ids = [x for page in pages for x in page]
    assert len(ids) == len(set(ids)), "a row was shown on two pages"
    return ids


def test_search_matches_prompt_task_id_agent_and_caller_of_the_tenant_only(agents, bulk):
    ids, other = bulk
    client = agents.a.client_for(agents.a.operator)
    # "approval 1" matches approval 1, 10-19, 100-119 (open ones only, by default).
    by_prompt = shown(client, {"q": "APPROVAL 1"})
    expected = {
        x.public_id
        for x in Interaction.objects.filter(
            tenant=agents.a.tenant, state="open", prompt__istartswith="approval 1"
        )
    }
    assert expected and set(by_prompt) == expected
    # B's items carry the same prompts and numbers: never shown to A.
    everything = shown(client, {"q": "0"}) + shown(client, {"q": "bulk"})
    assert everything and not set(everything) & set(other["open"] + other["uncertain"])
    assert all(x.startswith(f"{agents.a.tenant.slug}-") for x in everything)
    # By task id (t7.<context key>), by agent name and by the caller's subject.
    task_id = Interaction.objects.get(public_id=ids["open"][6]).task.public_id
    assert shown(client, {"q": task_id}) == [ids["open"][6]]
    deployer = shown(client, {"q": "Deploy", "kind": "approval"})
    assert sorted(deployer) == sorted(
        set(ids["by_agent"]["deployer"]) & set(ids["by_kind"]["approval"])
    )
    assert shown(client, {"q": "nothing-like-this"}) == []


def test_filters_by_state_caller_and_age_combine_with_pages(agents, bulk):
    ids, other = bulk
    client = agents.a.client_for(agents.a.operator)
    decided = shown(client, {"state": "decided"})
    assert sorted(decided) == sorted(ids["decided"])
    Interaction.objects.filter(public_id__in=ids["open"][:5]).update(state="expired")
    assert sorted(shown(client, {"state": "expired"})) == sorted(ids["open"][:5])
    assert shown(client, {"state": "expired", "kind": "uncertain"}) == []
    assert len(shown(client, {"caller": "partner:bulk"})) == 115 + 12
    assert shown(client, {"caller": "partner:bul"}) == []
    # Age: everything was made a minute ago; move ten items back a week.
    old = ids["open"][10:20]
    Interaction.objects.filter(public_id__in=old).update(
        created_at=timezone.now() - timedelta(days=8)
    )
    assert sorted(shown(client, {"age": "old7d"})) == sorted(old)
    assert sorted(shown(client, {"age": "old7d", "q": "question"})) == sorted(
        x for x in old if x in ids["by_kind"]["question"]
    )
    recent = shown(client, {"age": "1h", "agent": "deployer"})
    assert set(recent) == set(ids["by_agent"]["deployer"]) - set(old) - set(ids["open"][:5])
    # Every filter rides along on the "Older" link: the pages of a filtered list cover it once.
    pages, params = inbox_walk(client, "approvals:inbox", {"q": "a", "state": "open"})
    assert len(pages) > 1 and all(p.get("q") == "a" for p in params)


def test_stale_or_hostile_filter_values_are_ignored_not_errors(agents, bulk):
    client = agents.a.client_for(agents.a.operator)
    for params in (
        {"state": "bogus", "age": "forever", "kind": "x", "agent": "nope"},
        {"q": "a\x00b"},
        {"caller": "\x00"},
        {"q": "x" * 5000},
        {"q": "%_\\'"},
    ):
        response = client.get(reverse("approvals:inbox"), params)
        assert response.status_code == HTTPStatus.OK, params


def test_open_counts_per_kind_in_the_navigation(agents, bulk):
    client = agents.a.client_for(agents.a.operator)
    body = client.get(reverse("approvals:inbox")).content.decode()
    assert 'data-kind-count="all">132<' in body
    assert 'data-kind-count="approval">40<' in body
    assert 'data-kind-count="question">40<' in body
    assert 'data-kind-count="connection">40<' in body
    assert 'data-kind-count="uncertain">12<' in body


def test_open_counts_per_agent_and_kind_are_the_tenants_own(agents, bulk):
    tenant = agents.a.tenant
    # Counted the slow way: by the task's agent, one count per agent and kind.
    expected = {}
    for agent in Agent.objects.filter(tenant=tenant):
        expected[agent.slug] = {
            kind: Interaction.objects.filter(
                tenant=tenant, state="open", kind=kind, task__agent=agent
            ).count()
            for kind in ("approval", "question", "connection")
        }
        expected[agent.slug]["uncertain"] = Effect.objects.filter(
            tenant=tenant, state="uncertain", task__agent=agent
        ).count()
    found = agents_with_open_counts(tenant=tenant)
    assert [a.slug for a in found] == sorted(expected)
    assert {a.slug: a.open_counts for a in found} == expected
    assert expected["deployer"]["approval"] and expected["code-reviewer"]["question"]
    # An agent with nothing open counts zeros; B's rows (the same numbers) never count for A.
    assert any(not any(counts.values()) for counts in expected.values())
    assert all(a.tenant_id == tenant.pk for a in found)
    assert sum(sum(a.open_counts.values()) for a in found) == 132


def test_a_searched_and_filtered_page_needs_a_fixed_number_of_queries(
    agents, bulk, django_assert_max_num_queries
):
    client = agents.a.client_for(agents.a.operator)
    _, pages = inbox_walk(client, "approvals:inbox", {"q": "bulk"})
    views = [
        ("approvals:inbox", {"q": "bulk"}),
        ("approvals:inbox", pages[1]),
        ("approvals:inbox", {"q": "1", "state": "open", "caller": "partner:bulk", "age": "1d"}),
        ("approvals:inbox", {"state": "decided", "agent": "deployer"}),
        ("approvals:inbox_fragment", {"q": "bulk", "kind": "approval"}),
    ]
    for name, params in views:
        with django_assert_max_num_queries(MAX_QUERIES):
            response = client.get(reverse(name), params)
        assert response.status_code == HTTPStatus.OK
        assert len(ITEM_ID.findall(response.content.decode())) >= 12, (name, params)
