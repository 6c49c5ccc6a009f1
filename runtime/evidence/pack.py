"""Write a tenant's evidence pack for a period: one zip archive an auditor checks offline with
``manage.py evidence verify`` (runtime.evidence.verify), without the server's database.

It holds:

- ``receipts.jsonl``: every receipt of a decision on a held call in the period, all of its
  fields (a receipt's signature too, in whatever field the model keeps it);
- ``audit.jsonl``: the tenant's audit rows of the period, as one unbroken piece of its hash
  chain (runtime.kernel.audit_hash), from the first row written in the period to the last;
- ``policies/<agent>/<n>-<version>.json``: every version of each agent's tool policy that
  was in force at some moment of the period, with when it was;
- ``members.jsonl``: who decided in the period, with their role and approver groups now;
- ``README.md``: what each file is, in plain words, and what duty it is evidence for;
- ``receipt-keys.json``: the public keys that sign receipts and manifests, as a JWKS;
- ``manifest.json``: the SHA-256 of every file (and of each receipt), where the audit piece
  starts and ends, the ``keyId`` of the key that signs it; ``manifest.jws``: its signature,
  a compact JWS (EdDSA) whose payload is manifest.json (runtime.evidence.manifest_signing).
"""

import hashlib
import json
import zipfile
from dataclasses import dataclass
from datetime import datetime
from typing import IO, Any

from django.db.models import Max, Min
from django.utils import timezone

from runtime.agents.agent_models import PolicyVersion
from runtime.decisions.decision_models import Receipt
from runtime.evidence.manifest_signing import manifest_key, manifest_sign, signing_keys
from runtime.evidence.readme import readme_text
from runtime.kernel.audit_chain import audit_row_record, links_made
from runtime.kernel.task_models import AuditEvent
from tenants.models import Membership

# 2: the manifest signed with the receipt signing key (manifest.jws); 1 had manifest.sig.
FORMAT = "countersign-evidence/2"


@dataclass(frozen=True)
class PackWritten:
    receipts: int
    audit_rows: int
    policies: int
    members: int
    key_id: str


def canonical(value: Any) -> bytes:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def record_hash(record: dict) -> str:
    """The SHA-256 of one receipt's line as the pack writes it (canonical JSON)."""
    return hashlib.sha256(canonical(record)).hexdigest()


def _jsonable(value):
    if isinstance(value, datetime):
        return value.isoformat()
    return value


def receipt_evidence(receipt: Receipt) -> dict:
    """A receipt as the pack keeps it: every column but its tenant and row key, so that a
    field added to receipts (a signature) is exported without this changing."""
    return {
        field.name: _jsonable(getattr(receipt, field.attname))
        for field in Receipt._meta.concrete_fields
        if field.name not in ("id", "tenant")
    }


def _audit_records(tenant, since: datetime, until: datetime) -> tuple[list[dict], dict]:
    """The piece of the tenant's chain from the first row written in the period to the last
    (by place, so that a row committed late is not left out between them)."""
    links_made()
    span = AuditEvent.objects.filter(
        tenant=tenant, created_at__gte=since, created_at__lt=until, chain_seq__isnull=False
    ).aggregate(first=Min("chain_seq"), last=Max("chain_seq"))
    if span["first"] is None:
        return [], {"rows": 0}
    rows = AuditEvent.objects.filter(
        tenant=tenant, chain_seq__gte=span["first"], chain_seq__lte=span["last"]
    ).order_by("chain_seq")
    records = [audit_row_record(row) for row in rows.iterator(chunk_size=2000)]
    first, last = records[0], records[-1]
    return records, {
        "rows": len(records),
        "start": [first["seq"], first["prevHash"]],
        "end": [last["seq"], last["chainHash"]],
    }


def _policies(tenant, since: datetime, until: datetime) -> list[tuple[str, dict]]:
    """Every policy version in force at some moment of [since, until): per agent, the last
    recorded before ``since`` and all recorded in the period."""
    files = []
    versions = (
        PolicyVersion.objects.filter(tenant=tenant, created_at__lt=until)
        .select_related("agent")
        .order_by("agent__slug", "created_at", "id")
    )
    by_agent: dict[str, list[PolicyVersion]] = {}
    for version in versions:
        by_agent.setdefault(version.agent.slug, []).append(version)
    for slug, rows in by_agent.items():
        for number, row in enumerate(rows):
            following = rows[number + 1] if number + 1 < len(rows) else None
            if following is not None and following.created_at <= since:
                continue  # replaced before the period began
            document = {
                "agent": slug,
                "version": row.version,
                "inForceFrom": row.created_at.isoformat(),
                "inForceUntil": following.created_at.isoformat() if following else None,
                "policy": row.tool_policy,
                "ladder": row.ladder,
            }
            files.append((f"policies/{slug}/{number + 1}-{row.version[:12]}.json", document))
    return files


def _members(tenant, receipts: list[dict], audit: list[dict]) -> list[dict]:
    """Who decided in the period: each decider of a receipt and each person in the audit,
    with their role and approver groups now (a subject that is no member: its kind)."""
    counts: dict[str, int] = {}
    for receipt in receipts:
        counts[receipt["decider"]] = counts.get(receipt["decider"], 0) + 1
    for row in audit:
        counts.setdefault(row["actor"], 0)
    members = {
        f"user:{m.user.email}": m
        for m in Membership.objects.filter(tenant=tenant)
        .select_related("user")
        .prefetch_related("approver_groups")
    }
    out = []
    for subject in sorted(counts):
        member = members.get(subject)
        entry: dict[str, Any] = {"subject": subject, "decisions": counts[subject]}
        if member is not None:
            entry |= {
                "email": member.user.email,
                "role": member.role,
                "groups": sorted(g.slug for g in member.approver_groups.all()),
            }
        else:
            entry["kind"] = subject.partition(":")[0] or "unknown"
        out.append(entry)
    return out


def evidence_pack_write(*, tenant, since: datetime, until: datetime, out: IO[bytes]) -> PackWritten:
    """Write the tenant's evidence pack for [since, until) to ``out`` (see the module)."""
    receipts = [
        receipt_evidence(r)
        for r in Receipt.objects.filter(
            tenant=tenant, created_at__gte=since, created_at__lt=until
        ).order_by("created_at", "id")
    ]
    audit, chain = _audit_records(tenant, since, until)
    policies = _policies(tenant, since, until)
    members = _members(tenant, receipts, audit)
    # The key first (made when none is yet), so that the JWKS below holds it.
    key = manifest_key()
    files: dict[str, bytes] = {
        "README.md": readme_text(tenant=tenant.slug, since=since, until=until).encode(),
        "receipts.jsonl": b"".join(canonical(r) + b"\n" for r in receipts),
        "audit.jsonl": b"".join(canonical(r) + b"\n" for r in audit),
        "members.jsonl": b"".join(canonical(m) + b"\n" for m in members),
    }
    for path, document in policies:
        files[path] = json.dumps(document, indent=2, sort_keys=True, ensure_ascii=False).encode()
    files["receipt-keys.json"] = json.dumps(signing_keys(), indent=2, sort_keys=True).encode()
    manifest = {
        "format": FORMAT,
        "tenant": tenant.slug,
        "since": since.isoformat(),
        "until": until.isoformat(),
        "createdAt": timezone.now().isoformat(),
        "files": {path: hashlib.sha256(body).hexdigest() for path, body in sorted(files.items())},
        "receipts": {r["public_id"]: record_hash(r) for r in receipts},
        "auditChain": chain,
        "keyId": key.kid,
    }
    manifest_bytes = json.dumps(manifest, indent=2, sort_keys=True).encode()
    signature = manifest_sign(manifest_bytes, key)
    with zipfile.ZipFile(out, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for path, body in sorted(files.items()):
            archive.writestr(path, body)
        archive.writestr("manifest.json", manifest_bytes)
        archive.writestr("manifest.jws", signature + "\n")
    return PackWritten(
        receipts=len(receipts),
        audit_rows=len(audit),
        policies=len(policies),
        members=len(members),
        key_id=manifest["keyId"],
    )
