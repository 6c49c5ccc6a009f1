"""Audit retention: a tenant's audit rows older than its retention (``Tenant.
audit_retention_days``, never under AUDIT_RETENTION_FLOOR_DAYS) are removed, and the chain
stays checkable.

Only a prefix of the chain goes: the rows from the last checkpoint up to the newest row
before which every row is past the retention (a row linked later but written earlier waits
for the next run). Before anything is deleted, that piece is checked (a chain edited or cut
in the part about to go refuses the prune: deleting it would hide what happened), and the
tenant records the checkpoint, the place and chain hash of the last row removed
(``audit_pruned_seq``, ``audit_pruned_hash``): ``audit verify`` starts there, and the first
row kept must link to it. The prune writes an ``audit.pruned`` row in the same transaction,
itself a link of the chain. The rows are deleted through the append-only guard's one
sanctioned path (tenants.appendonly.retention_pruning); any other delete is still refused.
The connections' audit rows past the retention go with them.
"""

import logging
from datetime import datetime, timedelta

from django.db import transaction
from django.db.models import Min
from django.utils import timezone

from connections.models import ConnectionAuditEvent
from runtime.kernel.audit import audit_record
from runtime.kernel.audit_chain import audit_row_record, chain_check
from runtime.kernel.task_models import AuditEvent
from tenants.appendonly import retention_pruning
from tenants.models import AUDIT_RETENTION_FLOOR_DAYS, Tenant

logger = logging.getLogger(__name__)

PRUNER = "system:retention"
# Rows deleted per statement: a year of a busy tenant's rows is not one statement.
BATCH = 5000


class AuditPruneRefused(Exception):
    """The piece of the chain that would be pruned does not hold: nothing was removed."""


def audit_prune(*, tenant: Tenant, now: datetime | None = None) -> int:
    """Remove the tenant's audit rows past its retention (see the module); return how many
    chained rows went (0 with no retention set or nothing old enough). One transaction."""
    now = now or timezone.now()
    with transaction.atomic():
        locked = Tenant.objects.select_for_update().get(pk=tenant.pk)
        if not locked.audit_retention_days:
            return 0
        days = max(locked.audit_retention_days, AUDIT_RETENTION_FLOOR_DAYS)
        cutoff = now - timedelta(days=days)
        chained = AuditEvent.objects.filter(tenant=locked, chain_seq__gt=locked.audit_pruned_seq)
        first_kept = chained.filter(created_at__gte=cutoff).aggregate(first=Min("chain_seq"))
        old = chained.filter(created_at__lt=cutoff)
        if first_kept["first"] is not None:
            old = old.filter(chain_seq__lt=first_kept["first"])
        last = old.order_by("-chain_seq").values_list("chain_seq", "chain_hash").first()
        with retention_pruning():
            connection_rows, _ = ConnectionAuditEvent.objects.filter(
                tenant=locked, created_at__lt=cutoff
            ).delete()
        if last is None:
            return 0
        through, checkpoint = last
        piece = chained.filter(chain_seq__lte=through).order_by("chain_seq", "id")
        check = chain_check(
            (audit_row_record(row) for row in piece.iterator(chunk_size=2000)),
            start=(locked.audit_pruned_seq + 1, locked.audit_pruned_hash),
            head=(through, checkpoint),
        )
        if not check.holds:
            raise AuditPruneRefused(
                f"the audit chain of {locked.slug} does not hold where it would be pruned: "
                f"{check.problem}"
            )
        removed = 0
        with retention_pruning():
            start = locked.audit_pruned_seq
            while start < through:
                end = min(start + BATCH, through)
                count, _ = AuditEvent.objects.filter(
                    tenant=locked, chain_seq__gt=start, chain_seq__lte=end
                ).delete()
                removed += count
                start = end
        before = (locked.audit_pruned_seq, locked.audit_pruned_hash)
        locked.audit_pruned_seq, locked.audit_pruned_hash = through, checkpoint
        locked.save(update_fields=["audit_pruned_seq", "audit_pruned_hash"])
        tenant.audit_pruned_seq, tenant.audit_pruned_hash = through, checkpoint
        audit_record(
            tenant_id=locked.pk,
            actor=PRUNER,
            action="audit.pruned",
            via="retention",
            detail={
                "rows": removed,
                "connectionRows": connection_rows,
                "from": before[0] + 1,
                "through": through,
                "checkpoint": checkpoint,
                "olderThan": cutoff.isoformat(),
                "retentionDays": days,
            },
        )
    logger.info("pruned %s audit rows of %s (through row %s)", removed, locked.slug, through)
    return removed


def audit_prune_due(*, now: datetime | None = None) -> int:
    """Prune every tenant that sets a retention (beat, daily; ``manage.py audit prune``);
    each tenant in its own transaction, a refusal logged and the others still pruned."""
    total = 0
    for tenant in Tenant.objects.filter(audit_retention_days__isnull=False).order_by("pk"):
        try:
            total += audit_prune(tenant=tenant, now=now)
        except AuditPruneRefused as exc:
            logger.error("audit prune refused: %s", exc)
    return total
