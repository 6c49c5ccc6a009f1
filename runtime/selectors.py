"""Reads the endpoint and the pages share; every one takes the tenant."""

from datetime import datetime

from django.db.models import Q

from runtime.models import Agent, Task, TaskFile


def tasks_page(
    *,
    tenant,
    agent: Agent,
    subject: str,
    context_id: str | None,
    state: str | None,
    status_after: datetime | None,
    cursor: tuple[datetime, int] | None,
    page_size: int,
) -> tuple[list[Task], int, bool]:
    """A keyset page of a caller's tasks, latest status change first; (tasks, total, more)."""
    base = Task.objects.filter(tenant=tenant, agent=agent, subject=subject)
    if context_id:
        base = base.filter(wire_context_id=context_id)
    if state:
        base = base.filter(state=state)
    if status_after:
        base = base.filter(status_timestamp__gte=status_after)
    page = base
    if cursor:
        ts, pk = cursor
        page = page.filter(Q(status_timestamp__lt=ts) | Q(status_timestamp=ts, pk__lt=pk))
    rows = list(page.order_by("-status_timestamp", "-pk")[: page_size + 1])
    return rows[:page_size], base.count(), len(rows) > page_size


def task_file_for_caller(
    *, tenant, agent_slug: str, task_id: str, subject: str, file_id: str
) -> TaskFile | None:
    """A hosted file of a caller's task, or None when any part does not match (no leaks)."""
    return (
        TaskFile.objects.filter(
            tenant=tenant,
            public_id=file_id,
            task__public_id=task_id,
            task__subject=subject,
            task__agent__slug=agent_slug,
        )
        .select_related("task")
        .first()
    )
