"""The audit trail: every decision writes its row in the same transaction as its change."""

from runtime.models import AuditEvent, Interaction, Task


def audit_record(
    *,
    tenant_id: int,
    actor: str,
    action: str,
    via: str = "",
    interaction=None,
    task=None,
    detail=None,
) -> AuditEvent:
    return AuditEvent.objects.create(
        tenant_id=tenant_id,
        actor=actor,
        action=action,
        via=via,
        interaction=interaction,
        task=task,
        detail=detail or {},
    )


def audit_decision(*, interaction: Interaction, task: Task) -> AuditEvent:
    answer = interaction.answer or {}
    if interaction.state == Interaction.State.EXPIRED:
        action = "expired"
    elif interaction.kind == Interaction.Kind.APPROVAL:
        action = "approved" if answer.get("approved") else "denied"
    elif interaction.kind == Interaction.Kind.CONNECTION:
        action = "connected" if answer.get("connected") else "declined"
    else:
        action = "answered"
    return audit_record(
        tenant_id=interaction.tenant_id,
        actor=interaction.answered_by,
        action=action,
        via=interaction.answered_via,
        interaction=interaction,
        task=task,
        detail={"kind": interaction.kind, "prompt": interaction.prompt, "answer": answer},
    )
