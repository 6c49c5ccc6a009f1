"""Reads of tasks the endpoint and the pages share; every one takes the tenant."""

from dataclasses import dataclass
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


@dataclass(frozen=True)
class TenantTaskRow:
    """What the tasks page shows of a task: no JSON column, no model instance."""

    pk: int
    public_id: str
    agent_name: str
    subject: str
    state: str
    status_timestamp: datetime


@dataclass(frozen=True)
class TenantTasksPage:
    rows: list[TenantTaskRow]
    # (status time, id) of the first row when newer tasks exist, of the last when older do.
    newer: tuple[datetime, int] | None
    older: tuple[datetime, int] | None


def tenant_tasks_page(
    *,
    tenant,
    state: str = "",
    before: tuple[datetime, int] | None = None,
    after: tuple[datetime, int] | None = None,
    page_size: int = 50,
) -> TenantTasksPage:
    """A keyset page of the tenant's tasks, latest status change first: those older than
    ``before`` or, walking back, newer than ``after`` (status time, id).

    One query that reads ``page_size + 1`` rows through the index task_tenant_recent and
    stops: no count (a paginator's COUNT(*) read every one of the tenant's tasks, 10-14 ms
    at 110,000). The redundant ``<=`` / ``>=`` on the time keeps it an index condition;
    the OR only filters ties.
    """
    rows = Task.objects.filter(tenant=tenant)
    if state:
        rows = rows.filter(state=state)
    if after is not None:
        ts, pk = after
        rows = rows.filter(status_timestamp__gte=ts).filter(
            Q(status_timestamp__gt=ts) | Q(status_timestamp=ts, pk__gt=pk)
        )
        rows = rows.order_by("status_timestamp", "pk")
    else:
        if before is not None:
            ts, pk = before
            rows = rows.filter(status_timestamp__lte=ts).filter(
                Q(status_timestamp__lt=ts) | Q(status_timestamp=ts, pk__lt=pk)
            )
        rows = rows.order_by("-status_timestamp", "-pk")
    found = [
        TenantTaskRow(*values)
        for values in rows.values_list(
            "pk", "public_id", "agent__name", "subject", "state", "status_timestamp"
        )[: page_size + 1]
    ]
    more = len(found) > page_size
    found = found[:page_size]
    if after is not None:
        found.reverse()
    if not found:
        return TenantTasksPage(rows=[], newer=None, older=None)
    first, last = found[0], found[-1]
    # A cursor names a row of the page next to it, so across it there is one more page.
    has_newer = more if after is not None else before is not None
    has_older = after is not None or more
    return TenantTasksPage(
        rows=found,
        newer=(first.status_timestamp, first.pk) if has_newer else None,
        older=(last.status_timestamp, last.pk) if has_older else None,
    )


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
