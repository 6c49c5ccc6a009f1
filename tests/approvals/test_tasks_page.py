"""The tasks page: keyset pages of the tenant's tasks, latest status change first, walked
older and back newer (no page numbers, no count), with the state filter kept on every link.

Rows are bulk-created (the turn loop is not what is tested here), some sharing one status
time (so the id must break ties), and the other tenant's tasks interleaved with them.
"""

import html
import re
from datetime import timedelta
from http import HTTPStatus
from urllib.parse import parse_qsl

import pytest
from django.urls import reverse
from django.utils import timezone

import approvals.task_views
from runtime.agents.agent_models import Agent
from runtime.kernel.task_models import Context, Task, TaskState

pytestmark = pytest.mark.django_db

TASK_ID = re.compile(r'<td data-label="Task"><a href="[^"]*"><code>([^<]+)</code>')
PAGE_SIZE = 4


def bulk_tasks(tenant, count: int, *, now=None) -> list[Task]:
    """``count`` tasks of the tenant, three to each status time, every third completed."""
    now = now or timezone.now()
    agent = Agent.objects.filter(tenant=tenant).order_by("slug").first()
    context = Context.objects.create(
        tenant=tenant, agent=agent, subject="partner:bulk", context_id=f"bulk-{tenant.slug}"
    )
    return Task.objects.bulk_create(
        Task(
            public_id=f"t{i + 1}.{context.key}",
            tenant=tenant,
            agent=agent,
            context=context,
            wire_context_id=context.context_id,
            turn=i + 1,
            subject=context.subject,
            state=TaskState.COMPLETED if i % 3 == 0 else TaskState.AUTH_REQUIRED,
            status_timestamp=now - timedelta(seconds=i // 3),
        )
        for i in range(count)
    )


def newest_first(tenant, **filters) -> list[str]:
    return list(
        Task.objects.filter(tenant=tenant, **filters)
        .order_by("-status_timestamp", "-pk")
        .values_list("public_id", flat=True)
    )


def link(page: str, rel: str) -> dict | None:
    found = re.search(rf'href="\?([^"]*)" rel="{rel}"', page)
    return dict(parse_qsl(html.unescape(found.group(1)))) if found else None


def walk(client, params: dict, rel: str) -> tuple[list[list[str]], dict]:
    """Every page from ``params`` following the ``rel`` link; and the last page's params."""
    pages = []
    while True:
        response = client.get(reverse("approvals:tasks"), params)
        assert response.status_code == HTTPStatus.OK
        page = response.content.decode()
        pages.append(TASK_ID.findall(page))
        following = link(page, rel)
        if following is None:
            return pages, params
        # A link carries the filter and one cursor, never a page number.
        assert set(following) - {"state"} == {"before" if rel == "next" else "after"}
        params = following


@pytest.fixture
def paged(agents, monkeypatch):
    monkeypatch.setattr(approvals.task_views, "TASKS_PAGE_SIZE", PAGE_SIZE)
    now = timezone.now()
    bulk_tasks(agents.a.tenant, 3 * PAGE_SIZE + 2, now=now)
    # The other tenant's tasks at the same moments: a page that leaked them would show them.
    bulk_tasks(agents.b.tenant, 2 * PAGE_SIZE, now=now)
    return agents


def test_tasks_pages_walk_older_and_back_newer_without_repeats_or_gaps(paged):
    client = paged.a.client_for(paged.a.operator)
    expected = newest_first(paged.a.tenant)
    older, last = walk(client, {}, "next")
    shown = [task for page in older for task in page]
    assert len(older) == 4 and [len(page) for page in older] == [PAGE_SIZE] * 3 + [2]
    assert shown == expected, "a row was repeated, skipped or out of order"
    # Back from the last page: the same pages, newest last, the first one without "Newer".
    newer, first = walk(client, last, "prev")
    assert newer == older[::-1]
    assert "before" not in first and "after" in first
    theirs = set(newest_first(paged.b.tenant))
    assert theirs and not theirs & set(shown)


def test_the_state_filter_holds_on_every_page(paged):
    client = paged.a.client_for(paged.a.operator)
    params = {"state": TaskState.AUTH_REQUIRED}
    older, last = walk(client, params, "next")
    assert last["state"] == TaskState.AUTH_REQUIRED
    assert [t for page in older for t in page] == newest_first(
        paged.a.tenant, state=TaskState.AUTH_REQUIRED
    )
    newer, _ = walk(client, last, "prev")
    assert newer == older[::-1]


def test_the_first_page_has_no_newer_and_a_cursor_that_does_not_read_starts_at_the_newest(
    paged,
):
    client = paged.a.client_for(paged.a.operator)
    first = client.get(reverse("approvals:tasks")).content.decode()
    assert link(first, "prev") is None and link(first, "next") is not None
    assert "Page 1 of" not in first
    junk_cursors = ("zzz", "\x00~1", "2026-12-04T10:00:00~0", "2026-12-04T10:00:00+00:00~x")
    for junk in (*junk_cursors, "0001-01-01T00:00:00+05:00~1"):
        for name in ("before", "after", "page"):
            response = client.get(reverse("approvals:tasks"), {name: junk})
            assert response.status_code == HTTPStatus.OK
            assert TASK_ID.findall(response.content.decode()) == TASK_ID.findall(first)


def test_another_tenants_cursor_shows_only_this_tenants_tasks(paged):
    """A cursor is a place in the order, not a task: one copied from the other tenant's page
    lists this tenant's tasks older than that moment, never theirs."""
    theirs = paged.b.client_for(paged.b.operator).get(reverse("approvals:tasks"))
    cursor = link(theirs.content.decode(), "next")
    assert cursor is not None and set(cursor) == {"before"}
    client = paged.a.client_for(paged.a.operator)
    shown = TASK_ID.findall(client.get(reverse("approvals:tasks"), cursor).content.decode())
    assert shown and set(shown) <= set(newest_first(paged.a.tenant))


def test_a_page_past_the_end_says_so_and_links_to_the_newest(paged):
    client = paged.a.client_for(paged.a.operator)
    oldest = Task.objects.filter(tenant=paged.a.tenant).order_by("status_timestamp", "pk")[0]
    past = f"{oldest.status_timestamp.isoformat()}~{oldest.pk}"
    page = client.get(reverse("approvals:tasks"), {"before": past}).content.decode()
    assert not TASK_ID.findall(page)
    assert "No tasks on this page" in page and 'href="?"' in page
