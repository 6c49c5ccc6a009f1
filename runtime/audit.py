"""The audit trail: every decision writes its row in the same transaction as its change."""

from runtime.models import AuditEvent, Interaction, Task
from runtime.rowsql import row_insert


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
    event = AuditEvent(
        tenant_id=tenant_id,
        actor=actor,
        action=action,
        via=via,
        interaction=interaction,
        task=task,
        detail=detail or {},
    )
    # Its INSERT written once per process (runtime.rowsql): decisions write one each. No
    # receiver listens for an audit row's save; the model's own save() only refuses updates.
    row_insert(event)
    return event


def decision_word(interaction: Interaction) -> str:
    """What a decided interaction came to, in one word: the audit's action and the
    interactions/v1 ``outcome`` (expired, approved, denied, connected, declined, answered)."""
    answer = interaction.answer or {}
    if interaction.state == Interaction.State.EXPIRED:
        return "expired"
    if interaction.kind == Interaction.Kind.APPROVAL:
        return "approved" if answer.get("approved") else "denied"
    if interaction.kind == Interaction.Kind.CONNECTION:
        return "connected" if answer.get("connected") else "declined"
    return "answered"


def audit_decision(*, interaction: Interaction, task: Task) -> AuditEvent:
    answer = interaction.answer or {}
    action = decision_word(interaction)
    return audit_record(
        tenant_id=interaction.tenant_id,
        actor=interaction.answered_by,
        action=action,
        via=interaction.answered_via,
        interaction=interaction,
        task=task,
        detail={"kind": interaction.kind, "prompt": interaction.prompt, "answer": answer},
    )
