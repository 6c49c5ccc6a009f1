"""The audit trail: every decision writes its row in the same transaction as its change."""

from runtime.kernel.rowsql import row_insert
from runtime.kernel.task_models import AuditEvent


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
    # Its INSERT written once per process (runtime.kernel.rowsql): decisions write one each. No
    # receiver listens for an audit row's save; the model's own save() only refuses updates.
    row_insert(event)
    return event
