"""The inbox at scale: keyset pages and a fixed number of queries.

Rows are bulk-created (the turn loop is not what is tested here): more open interactions
than a page holds, over two agents and every kind, some sharing one created_at (so the id
must break ties), decided ones beside them, uncertain effects, and another tenant's rows.
An N+1 over a page of 50 would be 50 queries more; the bound is 8.
"""

import html
import re
from datetime import timedelta
from http import HTTPStatus
from urllib.parse import parse_qsl, urlsplit

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone
from rest_framework import serializers

from approvals.api_serializers import (
    InteractionDetailSerializer,
    InteractionRowSerializer,
    InteractionSerializer,
)
from approvals.presenting import span_text
from runtime.agents.agent_models import Agent
from runtime.decisions.decision_models import Effect, Interaction
from runtime.decisions.decision_selectors import interactions_for_tenant
from runtime.decisions.search import search_text
from runtime.kernel.task_models import Context, Task, TaskState

pytestmark = pytest.mark.django_db

MAX_QUERIES = 8
KINDS = ("approval", "question", "connection")


def bearer(token: str) -> dict:
    return {"HTTP_AUTHORIZATION": f"Bearer {token}"}


def seed(tenant, *, pending: int, decided: int, uncertain: int) -> dict:
    """Bulk rows in one tenant; returns the public ids by what they are."""
    agents = {a.slug: a for a in Agent.objects.filter(tenant=tenant)}
    now = timezone.now()
    contexts = Context.objects.bulk_create(
        [
            Context(
                tenant=tenant,
                agent=agents[slug],
                subject="partner:bulk",
                context_id=f"bulk-{slug}",
            )
            for slug in ("deployer", "code-reviewer")
        ]
    )
    total = pending + decided + uncertain
    tasks = []
    for i in range(total):
        context = contexts[i % 2]
        # Three rows share each moment: only the id orders them.
        created = now - timedelta(seconds=i // 3)
        tasks.append(
            Task(
                public_id=f"t{i + 1}.{context.key}",
                tenant=tenant,
                agent_id=context.agent_id,
                context=context,
                wire_context_id=context.context_id,
                turn=i + 1,
                subject=context.subject,
                state=(
                    TaskState.AUTH_REQUIRED
                    if i < pending
                    else TaskState.COMPLETED
                    if i < pending + decided
                    else TaskState.WORKING
                ),
                created_at=created,
            )
        )
    Task.objects.bulk_create(tasks)
    ids = {"open": [], "decided": [], "uncertain": [], "by_agent": {}, "by_kind": {}}
    interactions, effects = [], []
    for i, task in enumerate(tasks):
        slug = "deployer" if i % 2 == 0 else "code-reviewer"
        public_id = f"{tenant.slug}-{i:04d}"
        if i >= pending + decided:
            effects.append(
                Effect(
                    public_id=public_id,
                    tenant=tenant,
                    task=task,
                    step=1,
                    server="deploy",
                    tool="deploy_build",
                    arguments={"build": f"b-{i}"},
                    arguments_hash="0" * 64,
                    state=Effect.State.UNCERTAIN,
                    created_at=task.created_at - timedelta(days=1),
                    # Shown at the time it was sent, here the moment of three interactions:
                    # ties across the two sources are broken by rank (interactions first).
                    sent_at=tasks[(i - pending - decided) * 3].created_at,
                )
            )
            ids["uncertain"].append(public_id)
            ids["by_agent"].setdefault(slug, []).append(public_id)
            ids["by_kind"].setdefault("uncertain", []).append(public_id)
            continue
        kind = KINDS[i % 3]
        is_open = i < pending
        request = {"choices": ["a", "b"]} if kind == "question" else {}
        interactions.append(
            Interaction(
                public_id=public_id,
                tenant=tenant,
                task=task,
                agent_id=task.agent_id,
                kind=kind,
                prompt=f"{kind} {i}",
                request=request,
                detail={"n": i},
                # What interaction_open writes (runtime.decisions.search).
                search_text=search_text(
                    public_id=public_id,
                    kind=kind,
                    prompt=f"{kind} {i}",
                    subject=task.subject,
                    task_public_id=task.public_id,
                    agent_slug=slug,
                    agent_name=agents[slug].name,
                    detail={"n": i},
                    request=request,
                ),
                subject=task.subject,
                state=Interaction.State.OPEN if is_open else Interaction.State.ANSWERED,
                answer=None if is_open else {"approved": True},
                answered_by="" if is_open else "user:someone@x.test",
                answered_via="" if is_open else "page",
                answered_at=None if is_open else task.created_at,
                expires_at=now + timedelta(days=1),
                created_at=task.created_at,
            )
        )
        if is_open:
            ids["open"].append(public_id)
            ids["by_agent"].setdefault(slug, []).append(public_id)
            ids["by_kind"].setdefault(kind, []).append(public_id)
        else:
            ids["decided"].append(public_id)
    Interaction.objects.bulk_create(interactions)
    Effect.objects.bulk_create(effects)
    return ids


@pytest.fixture
def bulk(agents):
    """120 open interactions, 40 decided and 12 uncertain effects in A; some rows in B."""
    ids = seed(agents.a.tenant, pending=120, decided=40, uncertain=12)
    seed(agents.b.tenant, pending=10, decided=5, uncertain=1)
    return ids


ITEM_ID = re.compile(r'id="item-([^"]+)"')
NEXT = re.compile(r'href="\?([^"]*)" rel="next"')


def inbox_walk(client, name: str, params: dict) -> tuple[list[list[str]], list[dict]]:
    """Every page of an inbox view, following its "Older" links: (ids per page, queries)."""
    pages, seen_params = [], []
    while params is not None:
        response = client.get(reverse(name), params)
        assert response.status_code == HTTPStatus.OK
        body = response.content.decode()
        pages.append(ITEM_ID.findall(body))
        seen_params.append(params)
        found = NEXT.search(body)
        params = dict(parse_qsl(html.unescape(found.group(1)))) if found else None
        assert len(pages) < 20, "the pages never end"
    return pages, seen_params


def newest_first(public_ids: list[str]) -> list[str]:
    """Seeded interaction ids in the list's order: three share each moment (number // 3),
    older with the number; among those, the larger id first."""
    number = {x: int(x.rsplit("-", 1)[1]) for x in public_ids}
    return sorted(public_ids, key=lambda x: (number[x] // 3, -number[x]))


def inbox_order(tenant, *, kind=None, agent=None) -> list[str]:
    """The inbox's merged order, worked out from the rows: (time, rank, id), newest first."""
    keyed = []
    if kind != "uncertain":
        rows = Interaction.objects.filter(tenant=tenant, state="open")
        rows = rows.filter(kind=kind) if kind else rows
        rows = rows.filter(task__agent__slug=agent) if agent else rows
        keyed += [(r.created_at, 1, r.pk, r.public_id) for r in rows]
    if kind in (None, "uncertain"):
        rows = Effect.objects.filter(tenant=tenant, state="uncertain")
        rows = rows.filter(task__agent__slug=agent) if agent else rows
        keyed += [(r.sent_at or r.created_at, 0, r.pk, r.public_id) for r in rows]
    return [key[3] for key in sorted(keyed, reverse=True)]


@pytest.mark.parametrize(
    "params,key",
    [
        ({}, None),
        ({"kind": "approval"}, ("by_kind", "approval")),
        ({"kind": "question"}, ("by_kind", "question")),
        ({"kind": "uncertain"}, ("by_kind", "uncertain")),
        ({"agent": "deployer"}, ("by_agent", "deployer")),
        ({"kind": "connection", "agent": "code-reviewer"}, None),
    ],
)
def test_inbox_pages_cover_every_open_item_once_newest_first(agents, bulk, params, key):
    client = agents.a.client_for(agents.a.operator)
    pages, _ = inbox_walk(client, "approvals:inbox", params)
    shown = [x for page in pages for x in page]
    expected = inbox_order(agents.a.tenant, kind=params.get("kind"), agent=params.get("agent"))
    if key is not None:  # the fixture says the same as the rows
        assert sorted(expected) == sorted(bulk[key[0]][key[1]])
    if not params:
        assert sorted(expected) == sorted(bulk["open"] + bulk["uncertain"])
        assert len(pages) == 3 and len(pages[0]) == len(pages[1]) == 50
    assert len(shown) == len(set(shown)), "a row was shown on two pages"
    assert shown == expected
    assert all(pages) and all(len(page) <= 50 for page in pages)
    assert not set(shown) & set(bulk["decided"])


def test_every_inbox_view_needs_a_fixed_number_of_queries(
    agents, bulk, django_assert_max_num_queries
):
    client = agents.a.client_for(agents.a.operator)
    _, second = inbox_walk(client, "approvals:inbox", {})
    older = second[1]
    views = [
        ("approvals:inbox", {}),
        ("approvals:inbox", {"kind": "approval"}),
        ("approvals:inbox", {"kind": "uncertain"}),
        ("approvals:inbox", {"agent": "deployer"}),
        ("approvals:inbox", {"kind": "question", "agent": "code-reviewer"}),
        ("approvals:inbox", older),
        ("approvals:inbox_fragment", {}),
        ("approvals:inbox_fragment", {"kind": "approval", **older}),
    ]
    for name, params in views:
        with django_assert_max_num_queries(MAX_QUERIES):
            response = client.get(reverse(name), params)
        assert response.status_code == HTTPStatus.OK
        assert len(ITEM_ID.findall(response.content.decode())) >= 12, (name, params)


@pytest.mark.skipif(connection.vendor != "postgresql", reason="PostgreSQL's autovacuum settings")
def test_the_interaction_table_is_vacuumed_often_enough_for_the_counts_to_skip_it():
    """The navigation's open counts are an index-only scan only over all-visible pages, which
    only VACUUM marks: runtime_interaction is vacuumed after 2% of its rows changed, not 20%."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT reloptions FROM pg_class WHERE relname = %s", [Interaction._meta.db_table]
        )
        (options,) = cursor.fetchone()
    assert set(options or ()) >= {
        "autovacuum_vacuum_scale_factor=0.02",
        "autovacuum_vacuum_insert_scale_factor=0.02",
    }


def test_an_inbox_page_reads_no_interaction_json_but_the_approvals(agents, bulk):
    """A page of 50 rows does not carry 50 held calls' arguments, questions and answers:
    ``request``, ``detail`` and the rest are read when an interaction is opened."""
    client = agents.a.client_for(agents.a.operator)
    table = connection.ops.quote_name(Interaction._meta.db_table)
    unread = ("request", "detail", "deciders", "approvers", "widened_to", "answer")
    for params in ({}, {"state": "decided"}):
        with CaptureQueriesContext(connection) as queries:
            response = client.get(reverse("approvals:inbox"), params)
        assert response.status_code == HTTPStatus.OK
        selected = " ".join(q["sql"] for q in queries.captured_queries)
        assert f"{table}.{connection.ops.quote_name('approvals')}" in selected
        for column in unread:
            assert f"{table}.{connection.ops.quote_name(column)}" not in selected, column


def plan_nodes(node: dict):
    yield node
    for child in node.get("Plans", ()):
        yield from plan_nodes(child)


@pytest.mark.skipif(connection.vendor != "postgresql", reason="PostgreSQL's plans")
def test_the_open_counts_read_the_open_interactions_once_whatever_the_plan(agents, bulk):
    """The counts per agent and kind are worked out once and joined to the agents: a nested
    loop over the agents (what PostgreSQL chose at 10,000 open interactions once the table
    was vacuumed) must not count them again for each agent."""
    from runtime.decisions.inbox import _AGENTS_WITH_OPEN_COUNTS

    tenant = agents.a.tenant
    assert Agent.objects.filter(tenant=tenant).count() > 1
    params = {"tenant": tenant.pk, "open": "open", "uncertain": "uncertain"}
    with connection.cursor() as cursor:
        for setting in ("enable_hashagg", "enable_hashjoin", "enable_mergejoin", "enable_sort"):
            cursor.execute(f"SET LOCAL {setting} = off")
        cursor.execute(f"EXPLAIN (ANALYZE, FORMAT JSON) {_AGENTS_WITH_OPEN_COUNTS}", params)
        (plan,) = cursor.fetchone()[0]
    scans = [
        node
        for node in plan_nodes(plan["Plan"])
        if node.get("Relation Name") == Interaction._meta.db_table
    ]
    assert scans and all(node["Actual Loops"] == 1 for node in scans), [
        (node["Node Type"], node["Actual Loops"]) for node in scans
    ]


def test_the_fragment_of_a_later_page_polls_that_page(agents, bulk):
    client = agents.a.client_for(agents.a.operator)
    pages, params = inbox_walk(client, "approvals:inbox", {"agent": "deployer"})
    later = client.get(reverse("approvals:inbox"), params[1]).content.decode()
    fragment_url = html.unescape(re.search(r'data-fragment-url="([^"]+)"', later).group(1))
    assert dict(parse_qsl(urlsplit(fragment_url).query)) == params[1]
    fragment = client.get(fragment_url).content.decode()
    assert ITEM_ID.findall(fragment) == pages[1]
    assert "Newest</a>" in later  # a later page links back to the newest


def test_the_count_a_page_announces_says_when_more_are_waiting(agents, bulk):
    # static/inbox.js reads data-count to tell screen readers how many are waiting.
    client = agents.a.client_for(agents.a.operator)
    _, params = inbox_walk(client, "approvals:inbox", {"agent": "deployer"})
    first = client.get(reverse("approvals:inbox"), params[0]).content.decode()
    last = client.get(reverse("approvals:inbox"), params[-1]).content.decode()
    assert 'data-count="50+"' in first
    assert 'data-count="16"' in last  # 60 open interactions and 6 uncertain effects


@pytest.mark.parametrize("before", ["nonsense", "2026-01-01T00:00:00~1~x", "x~1~1", "\x00"])
def test_a_cursor_that_does_not_parse_starts_at_the_newest(agents, bulk, before):
    client = agents.a.client_for(agents.a.operator)
    first, _ = inbox_walk(client, "approvals:inbox", {})
    response = client.get(reverse("approvals:inbox"), {"before": before})
    assert response.status_code == HTTPStatus.OK
    assert ITEM_ID.findall(response.content.decode()) == first[0]


def test_inbox_cursor_outside_any_row_is_an_empty_page_not_an_error(agents, bulk):
    client = agents.a.client_for(agents.a.operator)
    response = client.get(reverse("approvals:inbox"), {"before": "2000-01-01T00:00:00+00:00~1~1"})
    assert response.status_code == HTTPStatus.OK
    assert "Nothing is waiting for a person on this page" in response.content.decode()


def test_ages_are_told_in_their_largest_unit():
    assert span_text(30) == ""
    assert span_text(60) == "1 minute"
    assert span_text(2 * 3600 + 5) == "2 hours"
    assert span_text(86400 * 8) == "1 week"
    assert span_text(86400 * 400) == "1 year"


# --- the REST list ---------------------------------------------------------------------------


def rest_walk(client, auth, params: dict) -> tuple[list[list[str]], list[dict]]:
    pages, bodies = [], []
    url = "/api/v1/interactions"
    while url:
        response = client.get(url, params, **auth)
        assert response.status_code == HTTPStatus.OK, response.content
        body = response.json()
        pages.append([row["id"] for row in body["results"]])
        bodies.append(body)
        url, params = body["next"], {}
        assert len(pages) < 40, "the pages never end"
    return pages, bodies


@pytest.mark.parametrize(
    "params,expected",
    [
        ({}, lambda b: b["open"] + b["decided"]),
        ({"state": "open"}, lambda b: b["open"]),
        ({"state": "answered"}, lambda b: b["decided"]),
        ({"kind": "question"}, None),
        (
            {"agent": "deployer", "state": "open"},
            lambda b: set(b["by_agent"]["deployer"]) & set(b["open"]),
        ),
    ],
)
def test_rest_pages_cover_every_row_once_newest_first(agents, bulk, client, params, expected):
    auth = bearer(agents.a.extra["operator_token"])
    pages, bodies = rest_walk(client, auth, {**params, "limit": 25})
    shown = [x for page in pages for x in page]
    rows = Interaction.objects.filter(tenant=agents.a.tenant, **params_filter(params))
    want = sorted(rows.values_list("public_id", flat=True))
    if expected is not None:
        assert sorted(expected(bulk)) == want
    assert len(shown) == len(set(shown)), "a row was on two pages"
    assert sorted(shown) == want
    assert shown == newest_first(shown)
    assert all(len(page) == 25 for page in pages[:-1])
    assert bodies[0]["previous"] is None and bodies[-1]["next"] is None


def params_filter(params: dict) -> dict:
    names = {"state": "state", "kind": "kind", "agent": "task__agent__slug"}
    return {names[k]: v for k, v in params.items()}


def test_rest_previous_links_lead_back_to_the_same_pages(agents, bulk, client):
    auth = bearer(agents.a.extra["operator_token"])
    pages, bodies = rest_walk(client, auth, {"limit": 30})
    back = []
    url = bodies[-1]["previous"]
    while url:
        body = client.get(url, **auth).json()
        back.append([row["id"] for row in body["results"]])
        url = body["previous"]
    assert list(reversed(back)) == pages[:-1]


def test_rest_list_needs_a_fixed_number_of_queries(
    agents, bulk, client, django_assert_max_num_queries
):
    auth = bearer(agents.a.extra["operator_token"])
    _, bodies = rest_walk(client, auth, {"limit": 50})
    for params in (
        {},
        {"state": "open"},
        {"kind": "approval"},
        {"agent": "code-reviewer"},
        {"limit": 200},
    ):
        with django_assert_max_num_queries(MAX_QUERIES):
            response = client.get("/api/v1/interactions", params, **auth)
        assert len(response.json()["results"]) >= 40, params
    with django_assert_max_num_queries(MAX_QUERIES):
        assert len(client.get(bodies[1]["next"], **auth).json()["results"]) == 50


def test_rest_list_is_the_tenants_own(agents, bulk, client):
    auth = bearer(agents.a.extra["operator_token"])
    pages, _ = rest_walk(client, auth, {"limit": 200})
    assert all(x.startswith(f"{agents.a.tenant.slug}-") for page in pages for x in page)


@pytest.mark.parametrize(
    "cursor", ["cD0yMDI2LTExLTMwVDEwOjAwOjAwfjE=", "cD1ub3BlfjE=", "!!!", "cD0yMDI2fng="]
)
def test_rest_cursors_that_we_did_not_write_are_404(agents, bulk, client, cursor):
    # base64 of "p=2026-11-30T10:00:00~1" (a naive time), "p=nope~1", not base64, "p=2026~x".
    auth = bearer(agents.a.extra["operator_token"])
    response = client.get("/api/v1/interactions", {"cursor": cursor}, **auth)
    assert response.status_code == HTTPStatus.NOT_FOUND


def test_rest_rows_are_what_the_declared_fields_say(agents, bulk):
    """The list's hand-built rows equal DRF's field-by-field output, for every kind and state
    (the OpenAPI schema is read from the fields, the wire from to_representation)."""
    agents.a.extra["make"].approval()
    rows = Interaction.objects.filter(tenant=agents.a.tenant).select_related("task__agent")
    assert {r.kind for r in rows} == set(KINDS) and {r.state for r in rows} > {"open"}
    for row in rows:
        for cls in (InteractionSerializer, InteractionDetailSerializer):
            fast = cls(row).data
            slow = serializers.Serializer.to_representation(cls(row), row)
            assert dict(fast) == dict(slow), (cls.__name__, row.public_id)
            assert list(fast) == list(slow)


def test_rest_list_rows_read_with_their_tasks_columns_say_the_same(
    agents, bulk, django_assert_num_queries
):
    """The list's rows take their task's id, context id and agent from columns of their own
    query (interactions_for_tenant): the same row as from the interaction and its task."""
    agents.a.extra["make"].approval()
    listed = {r.pk: r for r in interactions_for_tenant(tenant=agents.a.tenant)}
    rows = Interaction.objects.filter(tenant=agents.a.tenant).select_related("task__agent")
    assert len(rows) == len(listed) > 0
    for row in rows:
        with django_assert_num_queries(0):  # nothing more is read for a row
            written = InteractionRowSerializer(listed[row.pk]).data
        assert written == InteractionSerializer(row).data


def test_the_schema_describes_the_list_as_a_page(agents, client):
    schema = client.get("/api/schema", {"format": "json"}).json()
    ok = schema["paths"]["/api/v1/interactions"]["get"]["responses"]["200"]
    ref = ok["content"]["application/json"]["schema"]["$ref"]
    page = schema["components"]["schemas"][ref.rsplit("/", 1)[1]]
    assert set(page["properties"]) == {"next", "previous", "results"}
    params = {p["name"] for p in schema["paths"]["/api/v1/interactions"]["get"]["parameters"]}
    assert {"cursor", "limit"} <= params


def test_the_effects_are_not_queried_while_the_counts_say_none_is_uncertain(agents):
    """The navigation's counts are read first: with no uncertain effect in the tenant (or for
    the agent filtered on) the page leaves the effects' query out, and runs it once one is."""
    make = agents.a.extra["make"]
    approval = make.approval()
    client = agents.a.client_for(agents.a.operator)

    def effect_reads(params: dict) -> tuple[int, str]:
        with CaptureQueriesContext(connection) as queries:
            page = client.get(reverse("approvals:inbox"), params).content.decode()
        return sum('"runtime_effect"."public_id"' in q["sql"] for q in queries), page

    reads, page = effect_reads({})
    assert reads == 0 and approval.public_id in page
    effect = make.uncertain()
    reads, page = effect_reads({})
    assert reads == 1 and effect.public_id in page
    # The agent filtered on has it; the other has none.
    assert effect_reads({"agent": "deployer"})[0] == 1
    assert effect_reads({"agent": "code-reviewer"})[0] == 0
