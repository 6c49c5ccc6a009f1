"""Reads of tasks the endpoint and the pages share; every one takes the tenant."""

from datetime import datetime
from typing import TYPE_CHECKING

from django.db.models import Q

from runtime.kernel.errors import TaskNotFound
from runtime.kernel.task_models import ANONYMOUS, TURN_RUNTIME_FIELDS, Task, TaskEvent, TaskFile

if TYPE_CHECKING:  # the kernel names agents only in annotations
    from runtime.agents.agent_models import Agent


def task_for_caller(
    *,
    tenant,
    agent: "Agent",
    subject: str,
    task_id: str,
    lock: bool = False,
    direct: bool = False,
    wire_only: bool = False,
) -> Task:
    """The caller's task, or TaskNotFound; ``lock`` takes its row lock (inside a transaction).
    A direct reply never handed to its caller (Task.direct) is found only with ``direct``;
    ``wire_only`` leaves the turn runtime's columns unread (TURN_RUNTIME_FIELDS)."""
    tasks = Task.objects.select_for_update() if lock else Task.objects
    if wire_only:
        tasks = tasks.defer(*TURN_RUNTIME_FIELDS)
    tasks = tasks.filter(tenant=tenant, agent=agent, public_id=task_id)
    if not direct:
        tasks = tasks.filter(direct=False)
    if subject == ANONYMOUS:
        # A caller without credentials owns no subject: the task id (128 random bits in its
        # context key) is its capability, and reaches only tasks anonymous callers started.
        tasks = tasks.filter(Q(subject=ANONYMOUS) | Q(subject__startswith=f"{ANONYMOUS}:"))
    else:
        tasks = tasks.filter(subject=subject)
    # public_id is unique: one row at most, so no ORDER BY to compile and run (.first()).
    task = next(iter(tasks[:1]), None)
    if task is None:
        raise TaskNotFound(f"Task {task_id} was not found.", taskId=task_id)
    return task


def tasks_page(
    *,
    tenant,
    agent: "Agent",
    subject: str,
    context_id: str | None,
    state: str | None,
    status_after: datetime | None,
    cursor: tuple[datetime, int] | None,
    page_size: int,
) -> tuple[list[Task], int, bool]:
    """A keyset page of a caller's tasks, latest status change first; (tasks, total, more)."""
    if subject == ANONYMOUS:
        # Anonymous callers are not one caller: listing would show each the others' tasks.
        return [], 0, False
    base = Task.objects.filter(tenant=tenant, agent=agent, subject=subject, direct=False)
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


def task_for_tenant(*, tenant, public_id: str) -> Task | None:
    return Task.objects.filter(tenant=tenant, public_id=public_id).select_related("agent").first()


def tasks_for_tenant(*, tenant, state: str | None = None, agent_slug: str | None = None):
    """The tenant's tasks, latest status change first (a queryset, for a paginator)."""
    rows = (
        Task.objects.filter(tenant=tenant)
        .select_related("agent")
        .defer("transcript", "history", "artifacts", "runs", "status_ext", "artifact_ext")
    )
    if state:
        rows = rows.filter(state=state)
    if agent_slug:
        rows = rows.filter(agent__slug=agent_slug)
    return rows.order_by("-status_timestamp", "-pk")


def task_events(*, task: Task) -> list[TaskEvent]:
    return list(TaskEvent.objects.filter(tenant_id=task.tenant_id, task=task).order_by("seq"))


def task_file_for_caller(
    *, tenant, agent_slug: str, task_id: str, subject: str, file_id: str
) -> TaskFile | None:
    """A hosted file of a caller's task, or None when any part does not match (no leaks)."""
    return (
        TaskFile.objects.filter(
            tenant=tenant,
            public_id=file_id,
            # The caller's own files: its artifacts and what it sent, never a tool's result.
            role__in=(TaskFile.Role.ARTIFACT, TaskFile.Role.INPUT),
            task__public_id=task_id,
            task__subject=subject,
            task__agent__slug=agent_slug,
        )
        .select_related("task")
        .first()
    )
