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
from datetime import datetime

GENESIS = ""


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
