"""Stopping a task: the caller's CancelTask (A2A) and an operator's stop (the task page, the
REST API). Both close what the task waits on (its open interactions and its held calls),
end it CANCELED with a message that says who stopped it (and, for an operator, why), and
write an audit row, in one transaction under the task's row lock. A turn running at that
moment finds its task no longer WORKING at its next write and stops (runtime.turn.runner)."""

from django.db import transaction
from django.utils import timezone

from runtime.agents.agent_models import Agent
from runtime.decisions.decision_models import Effect
from runtime.decisions.interaction_state import interactions_cancel
from runtime.kernel.errors import InvalidParams, TaskNotCancelable, TaskNotFound
from runtime.kernel.shapes import agent_message
from runtime.kernel.task_models import Task, TaskState
from runtime.kernel.task_selectors import task_for_caller
from runtime.kernel.task_state import task_end

# The most of an operator's reason the partner is shown (and the audit keeps).
REASON_MAX = 1000


@transaction.atomic(durable=True)
def task_cancel(*, tenant, agent: Agent, subject: str, task_id: str, direct: bool = False) -> Task:
    """Cancel a task (idempotent for a canceled task); its open interactions close.
    ``direct`` also reaches a direct reply not handed out (a 0.x stream whose caller left)."""
    task = task_for_caller(
        tenant=tenant, agent=agent, subject=subject, task_id=task_id, lock=True, direct=direct
    )
    if task.state == TaskState.CANCELED:
        return task
    _cancelable_check(task)
    # The task's own subject: an anonymous caller's "anonymous" names no one.
    _task_close(task, by=task.subject, via="inband", text="Canceled by the caller.")
    return task


@transaction.atomic(durable=True)
def task_stop(*, tenant, task_id: str, by: str, via: str, reason: str) -> Task:
    """An operator's stop: cancel a task of the tenant, saying why (the partner reads the
    reason on the task). A task that has ended already is refused (TaskNotCancelable)."""
    reason = " ".join(str(reason or "").split())
    if not reason:
        raise InvalidParams("reason", "say why the task is stopped: the caller is shown it")
    if len(reason) > REASON_MAX:
        raise InvalidParams("reason", f"must be at most {REASON_MAX} characters")
    task = (
        Task.objects.select_for_update()
        .select_related("agent")
        .filter(tenant=tenant, public_id=task_id)
        .first()
    )
    if task is None:
        # The same answer for another tenant's task as for a missing one.
        raise TaskNotFound(f"Task {task_id} was not found.", taskId=task_id)
    _cancelable_check(task)
    _task_close(task, by=by, via=via, text=f"Canceled by an operator: {reason}", reason=reason)
    return task


def _cancelable_check(task: Task) -> None:
    if task.is_terminal:
        raise TaskNotCancelable(
            f"Task {task.public_id} is {task.get_state_display()} and can no longer be canceled.",
            taskId=task.public_id,
        )


def _task_close(task: Task, *, by: str, via: str, text: str, reason: str = "") -> None:
    """Close what the locked task waits on, end it CANCELED with ``text``, and audit it."""
    now = timezone.now()
    # A held call (or one approved and not yet sent) is never sent now: closed as denied,
    # saying so, so that the journal and the task page show why it did not run.
    calls = Effect.objects.filter(
        task=task, state__in=(Effect.State.HELD, Effect.State.APPROVED)
    ).update(
        state=Effect.State.DENIED,
        outcome={"error": "tool.canceled", "reason": text, "by": by},
        closed_at=now,
    )
    task_end(task, TaskState.CANCELED, agent_message(task, text))
    detail: dict[str, int | str] = {"callsClosed": calls}
    if reason:
        detail["reason"] = reason
    # Its open interactions close with it, and the cancel's audit row says how many.
    interactions_cancel(task=task, by=by, via=via, at=now, detail=detail)


def task_hand_out(*, task: Task) -> None:
    """Give a direct send's task to its caller (Task.direct): from now on every task method
    finds it. One conditional UPDATE: idempotent, and it changes nothing else of the row."""
    Task.objects.filter(pk=task.pk, direct=True).update(direct=False)
    task.direct = False
