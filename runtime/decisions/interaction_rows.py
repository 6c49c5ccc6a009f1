"""New interactions' rows, made and not saved: runtime.decisions.interaction_state, the one
writer of interactions, saves them as a turn pauses (their expiry and its outcome read from
runtime.decisions.deadlines, what lists find them by from runtime.decisions.search)."""

from datetime import datetime, timedelta

from django.utils import timezone

from runtime.decisions.approval_groups import HeldApproval
from runtime.decisions.deadlines import interaction_expiry
from runtime.decisions.decision_models import Interaction
from runtime.decisions.search import listing_columns
from runtime.kernel.task_models import Task


def approval_row(task: Task, held: HeldApproval, **more) -> Interaction:
    """A new approval of ``task`` for the held call of ``held``, not yet saved."""
    return interaction_row(
        task=task,
        kind=Interaction.Kind.APPROVAL,
        public_id=held.public_id,
        prompt=held.prompt,
        detail=held.detail,
        request=held.request,
        deciders=held.deciders,
        approvers=list(held.approvers),
        approvals_required=held.approvals_required,
        risk=held.risk,
        **more,
    )


def interaction_row(
    *,
    task: Task,
    kind: str,
    public_id: str,
    prompt: str,
    detail,
    request,
    expires_by: datetime | None = None,
    **more,
):
    """A new interaction of ``task``, not yet saved."""
    seconds, outcome = interaction_expiry(task, kind, detail, request)
    if outcome and "onExpiry" not in request:
        request = {**request, "onExpiry": outcome}  # the ladder's (the rule's own wins)
    expires_at = timezone.now() + timedelta(seconds=seconds)
    return Interaction(
        **listing_columns(
            task=task, public_id=public_id, kind=kind, prompt=prompt, detail=detail, request=request
        ),
        public_id=public_id,
        tenant_id=task.tenant_id,
        task=task,
        agent_id=task.agent_id,
        kind=kind,
        prompt=prompt,
        detail=detail,
        request=request,
        subject=task.subject,
        expires_at=min(expires_at, expires_by) if expires_by else expires_at,
        **more,
    )
