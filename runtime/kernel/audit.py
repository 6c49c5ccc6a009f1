"""The audit trail: every decision writes its row in the same transaction as its change.

Each row is chained to the tenant's previous one (runtime.kernel.audit_hash): its content
hash is computed here, with the row; its link (place, previous hash, chain hash) is made when
its transaction commits, by a deferred trigger on PostgreSQL (migration runtime 0034). Made
at the insert, the link would lock the tenant's chain from the insert to the commit, and a
transaction that locks a row after writing its audit row (a standing rule's use count, a
second task) would then deadlock with one that locked that row first and waits for the
chain; at the commit nothing else is locked after it. SQLite has one writer at a time: the
link is made here, with the row.
"""

from django.db import connections

from runtime.kernel.audit_hash import content_digest, link_hash
from runtime.kernel.store import audit_chain_advance
from runtime.kernel.task_models import AuditEvent
from runtime.kernel.task_state import TurnBatch, row_add


def audit_record(
    *,
    tenant_id: int,
    actor: str,
    action: str,
    via: str = "",
    interaction=None,
    task=None,
    detail=None,
    batch: TurnBatch | None = None,
) -> AuditEvent:
    """Write the audit row in the caller's transaction, now or with ``batch``'s statement
    (runtime.kernel.task_state.row_add: its key is set when the batch is written)."""
    event = AuditEvent(
        tenant_id=tenant_id,
        actor=actor,
        action=action,
        via=via,
        interaction=interaction,
        task=task,
        detail=detail or {},
    )
    event.content_hash = content_digest(event)
    if connections["default"].vendor != "postgresql":
        _link_here(event)
    # Its INSERT written once per process (runtime.kernel.rowsql): decisions write one each. No
    # receiver listens for an audit row's save; the model's own save() only refuses updates.
    row_add(event, batch)
    return event


def _link_here(event: AuditEvent) -> None:
    """Link ``event`` to its tenant's chain now (SQLite: one writer at a time)."""
    event.chain_seq, event.prev_hash, event.chain_hash = audit_chain_advance(
        tenant_id=event.tenant_id, content_hash=event.content_hash, link=link_hash
    )
