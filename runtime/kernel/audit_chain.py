"""The audit chain read back: each tenant's audit rows, in the order they were linked, and
the check that nothing was removed or edited (``manage.py audit verify``, and the evidence
pack's verifier over the rows it exported). The hashes are runtime.kernel.audit_hash's.

A row edited after it was written no longer hashes to its content hash (or, rewritten with
a new content hash, no longer links to the next row); a row removed leaves a gap in the
places and a row whose previous hash is not the one before it; rows removed from the end
leave the chain shorter than its head says.
"""

from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from django.db import connections

from runtime.kernel.audit_hash import GENESIS, content_fields, fields_digest, link_hash
from runtime.kernel.task_models import AuditChainHead, AuditEvent

CONTENT_KEYS = ("action", "actor", "createdAt", "detail", "interaction", "task", "via")


@dataclass(frozen=True)
class ChainCheck:
    """What a check of a chain found: how many rows held, and the first that did not (its
    place, ``seq``, and why), or ``problem`` "" when the whole chain holds."""

    rows: int
    seq: int | None = None
    problem: str = ""

    @property
    def holds(self) -> bool:
        return not self.problem


def audit_row_record(row: AuditEvent) -> dict:
    """An audit row as the chain checks it and the evidence pack exports it."""
    return {
        "seq": row.chain_seq,
        **content_fields(row),
        "contentHash": row.content_hash,
        "prevHash": row.prev_hash,
        "chainHash": row.chain_hash,
    }


def _name(record: dict) -> str:
    return (
        f"row {record.get('seq')} ({record.get('action')} by {record.get('actor')}, "
        f"{record.get('createdAt')})"
    )


def chain_check(records: Iterable[dict], *, head: tuple[int, str] | None = None) -> ChainCheck:
    """Check audit row records (audit_row_record's, in their places' order) as one chain
    from its start; ``head``: (rows, last hash) the chain should end at."""
    expected, previous, count = 1, GENESIS, 0
    for record in records:
        seq = record.get("seq")
        if not isinstance(seq, int):
            return ChainCheck(count, None, f"{_name(record)} is not linked into the chain")
        if seq > expected:
            missing = f"{expected}" if seq == expected + 1 else f"{expected} to {seq - 1}"
            return ChainCheck(
                count,
                expected,
                f"row {missing} of the chain is missing (removed) before {_name(record)}",
            )
        if seq < expected:
            return ChainCheck(count, seq, f"{_name(record)} appears twice in the chain")
        fields = {key: record.get(key) for key in CONTENT_KEYS}
        if fields_digest(fields) != record.get("contentHash"):
            return ChainCheck(
                count,
                seq,
                f"{_name(record)} was changed: its fields do not hash to its content hash",
            )
        if record.get("prevHash") != previous:
            return ChainCheck(
                count,
                seq,
                f"{_name(record)} does not follow row {seq - 1}: its previous "
                "hash is not that row's chain hash (a row before it was removed or changed)",
            )
        if link_hash(previous, record["contentHash"]) != record.get("chainHash"):
            return ChainCheck(count, seq, f"{_name(record)} has a chain hash that is not its link")
        previous = record["chainHash"]
        expected += 1
        count += 1
    if head is not None:
        rows, last = head
        if rows > count:
            return ChainCheck(
                count,
                count + 1,
                f"the chain ends at row {count} but its head says {rows} "
                "rows: the last rows were removed",
            )
        if rows == count and last != previous:
            return ChainCheck(count, count, "the chain's last hash is not its head's")
    return ChainCheck(count)


def links_made(using: str = "default") -> None:
    """Link the audit rows this transaction wrote so far (PostgreSQL links them at the
    commit: runtime.kernel.audit), so that a check in the same transaction sees them."""
    connection = connections[using]
    if connection.vendor == "postgresql":
        with connection.cursor() as cur:
            cur.execute("SET CONSTRAINTS runtime_audit_chain_link IMMEDIATE")
            cur.execute("SET CONSTRAINTS runtime_audit_chain_link DEFERRED")


def tenant_audit_records(*, tenant, since=None, until=None) -> Iterator[dict]:
    """The tenant's audit rows as records, in their places' order (rows not linked last)."""
    rows = AuditEvent.objects.filter(tenant=tenant)
    if since is not None:
        rows = rows.filter(created_at__gte=since)
    if until is not None:
        rows = rows.filter(created_at__lt=until)
    for row in rows.order_by("chain_seq", "id").iterator(chunk_size=2000):
        yield audit_row_record(row)


def chain_head(*, tenant) -> tuple[int, str]:
    head = AuditChainHead.objects.filter(tenant=tenant).first()
    return (head.seq, head.hash) if head else (0, GENESIS)


def audit_chain_verify(*, tenant) -> ChainCheck:
    """Check the tenant's whole audit chain in place (``manage.py audit verify``)."""
    links_made()
    return chain_check(tenant_audit_records(tenant=tenant), head=chain_head(tenant=tenant))
