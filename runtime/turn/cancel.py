"""A caller's control over its own tasks."""

from django.db import transaction
from django.utils import timezone

from runtime.agents.agent_models import Agent
from runtime.decisions.decision_models import Interaction
from runtime.kernel.errors import TaskNotCancelable
from runtime.kernel.shapes import agent_message
from runtime.kernel.task_models import Task, TaskState
from runtime.kernel.task_selectors import task_for_caller
from runtime.kernel.task_state import task_end


@transaction.atomic(durable=True)
def task_cancel(*, tenant, agent: Agent, subject: str, task_id: str, direct: bool = False) -> Task:
    """Cancel a task (idempotent for a canceled task); its open interactions close.
    ``direct`` also reaches a direct reply not handed out (a 0.x stream whose caller left)."""
    task = task_for_caller(
        tenant=tenant, agent=agent, subject=subject, task_id=task_id, lock=True, direct=direct
    )
    if task.state == TaskState.CANCELED:
        return task
    if task.is_terminal:
        raise TaskNotCancelable(
            f"Task {task_id} is {task.get_state_display()} and can no longer be canceled.",
            taskId=task_id,
        )
    Interaction.objects.filter(task=task, state=Interaction.State.OPEN).update(
        state=Interaction.State.CANCELED,
        # The task's own subject: an anonymous caller's "anonymous" names no one.
        answered_by=task.subject,
        answered_via="cancel",
        answered_at=timezone.now(),
    )
    task_end(task, TaskState.CANCELED, agent_message(task, "Canceled by the caller."))
    return task


def task_hand_out(*, task: Task) -> None:
    """Give a direct send's task to its caller (Task.direct): from now on every task method
    finds it. One conditional UPDATE: idempotent, and it changes nothing else of the row."""
    Task.objects.filter(pk=task.pk, direct=True).update(direct=False)
    task.direct = False
