"""The audit chain read back: each tenant's audit rows, in the order they were linked, and
the check that nothing was removed or edited (``manage.py audit verify``, and the evidence
pack's verifier over the rows it exported). The hashes are runtime.kernel.audit_hash's.

A row edited after it was written no longer hashes to its content hash (or, rewritten with
a new content hash, no longer links to the next row); a row removed leaves a gap in the
places and a row whose previous hash is not the one before it; rows removed from the end
leave the chain shorter than its head says. Rows past the tenant's retention are removed
by the pruner only, which records where the chain now starts (runtime.kernel.audit_prune):
the check starts there.
"""

from collections.abc import Iterator

from django.db.models import Q

from runtime.kernel.audit_hash import GENESIS, ChainCheck, chain_check, content_fields
from runtime.kernel.store import audit_links_made
from runtime.kernel.task_models import AuditChainHead, AuditEvent
from tenants.models import Tenant

__all__ = ["ChainCheck", "audit_chain_verify", "chain_check", "links_made"]


def audit_row_record(row: AuditEvent) -> dict:
    """An audit row as the chain checks it and the evidence pack exports it."""
    return {
        "seq": row.chain_seq,
        **content_fields(row),
        "contentHash": row.content_hash,
        "prevHash": row.prev_hash,
        "chainHash": row.chain_hash,
    }


def links_made(using: str = "default") -> None:
    """Link the audit rows this transaction wrote so far (PostgreSQL links them at the
    commit: runtime.kernel.audit), so that a check in the same transaction sees them."""
    audit_links_made(using=using)


def tenant_audit_records(*, tenant, since=None, until=None, after_seq: int = 0) -> Iterator[dict]:
    """The tenant's audit rows as records, in their places' order (rows not linked last);
    ``after_seq``: only those after that place (and those not linked yet)."""
    rows = AuditEvent.objects.filter(tenant=tenant)
    if after_seq:
        rows = rows.filter(Q(chain_seq__gt=after_seq) | Q(chain_seq__isnull=True))
    if since is not None:
        rows = rows.filter(created_at__gte=since)
    if until is not None:
        rows = rows.filter(created_at__lt=until)
    for row in rows.order_by("chain_seq", "id").iterator(chunk_size=2000):
        yield audit_row_record(row)


def chain_head(*, tenant) -> tuple[int, str]:
    head = AuditChainHead.objects.filter(tenant=tenant).first()
    return (head.seq, head.hash) if head else (0, GENESIS)


def chain_start(*, tenant) -> tuple[int, str]:
    """Where the tenant's chain starts now: (the place of its first row, the hash before it):
    after the retention pruner's checkpoint (runtime.kernel.audit_prune), else the start."""
    pruned = Tenant.objects.filter(pk=tenant.pk).values_list(
        "audit_pruned_seq", "audit_pruned_hash"
    )
    seq, hash_before = pruned.first() or (0, GENESIS)
    return seq + 1, hash_before


def audit_chain_verify(*, tenant) -> ChainCheck:
    """Check the tenant's audit chain in place (``manage.py audit verify``): all of it, or
    from the retention pruner's checkpoint on."""
    links_made()
    start = chain_start(tenant=tenant)
    records = tenant_audit_records(tenant=tenant, after_seq=start[0] - 1)
    return chain_check(records, start=start, head=chain_head(tenant=tenant))
