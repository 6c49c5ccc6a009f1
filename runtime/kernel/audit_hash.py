"""The hashes of the audit chain, apart from any database: what a row's fields hash to and
how one link follows the one before. The server (runtime.kernel.audit_chain), the evidence
pack's verifier and an auditor's own script compute the same bytes.

- A row's ``content_hash`` is the SHA-256 of the canonical JSON (sorted keys, no spaces,
  ASCII escapes) of ``{"action", "actor", "createdAt", "detail", "interaction", "task",
  "via"}`` (``createdAt`` in ISO 8601 with its offset; ``interaction`` and ``task`` the row's
  references, null when none).
- Its ``chain_hash`` is the SHA-256 of the previous row's ``chain_hash`` (``""`` before the
  first) followed by its own ``content_hash``, both as lowercase hex text: ``prev_hash`` is
  the former, ``chain_seq`` its place from 1.
"""

import hashlib
import json
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime

GENESIS = ""
CONTENT_KEYS = ("action", "actor", "createdAt", "detail", "interaction", "task", "via")


def content_fields(row) -> dict:
    """The fields of an audit row (a model instance or anything with its attributes) that
    its content hash covers."""
    created = row.created_at
    return {
        "action": row.action,
        "actor": row.actor,
        "createdAt": created.isoformat() if isinstance(created, datetime) else str(created),
        "detail": row.detail if row.detail is not None else {},
        "interaction": row.interaction_id,
        "task": row.task_id,
        "via": row.via,
    }


def fields_digest(fields: dict) -> str:
    """The content hash of a row's fields as content_fields gives them."""
    text = json.dumps(fields, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return hashlib.sha256(text.encode()).hexdigest()


def content_digest(row) -> str:
    return fields_digest(content_fields(row))


def link_hash(prev_hash: str, content_hash: str) -> str:
    """The chain's hash after a row: SHA-256 of the previous hash then the row's content hash."""
    return hashlib.sha256(f"{prev_hash}{content_hash}".encode()).hexdigest()


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


def _name(record: dict) -> str:
    return (
        f"row {record.get('seq')} ({record.get('action')} by {record.get('actor')}, "
        f"{record.get('createdAt')})"
    )


def chain_check(
    records: Iterable[dict],
    *,
    start: tuple[int, str] = (1, GENESIS),
    head: tuple[int, str] | None = None,
) -> ChainCheck:
    """Check audit row records (runtime.kernel.audit_chain.audit_row_record's, in their
    places' order) as one piece of a chain: ``start`` is the place of its first row and the
    hash before it (the chain's start unless told); ``head``: (place of the last row, its
    chain hash) the piece should end at."""
    expected, previous = start
    count = 0
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
        last_seq, last = head
        if last_seq > expected - 1:
            return ChainCheck(
                count,
                expected,
                f"the chain ends at row {expected - 1} but its head says {last_seq}: the "
                "last rows were removed",
            )
        if last_seq == expected - 1 and last != previous:
            return ChainCheck(count, last_seq, "the chain's last hash is not its head's")
    return ChainCheck(count)
