"""Check an evidence pack offline (runtime.evidence.pack writes it): the manifest's signature
(a compact JWS, EdDSA, by a key of the pack's JWKS, ``receipt-keys.json``; against the key
the auditor pins, when given), the SHA-256 of every file and receipt, receipts' own
signatures where they carry one, the audit chain's continuity, and that each policy file is
the version it names. The first thing that does not hold is named.

Nothing here reads Django or a database: the Python standard library, ``cryptography`` and
runtime.kernel.audit_hash (itself plain Python) are all it needs.
"""

import base64
import hashlib
import json
import zipfile
from dataclasses import dataclass

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from runtime.kernel.audit_hash import GENESIS, chain_check

SIGNED = ("manifest.json", "manifest.jws")
# A pack of the first format: its manifest signed by a key derived from a setting.
OLD_SIGNATURE = "manifest.sig"


@dataclass(frozen=True)
class PackCheck:
    """What a check of a pack found: ``problem`` "" when everything holds."""

    problem: str = ""
    receipts: int = 0
    audit_rows: int = 0
    policies: int = 0

    @property
    def holds(self) -> bool:
        return not self.problem


def _canonical(value) -> bytes:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def _lines(body: bytes) -> list[dict]:
    return [json.loads(line) for line in body.decode().splitlines() if line.strip()]


def _b64url(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def receipt_signature_problem(record: dict, keys: dict[str, Ed25519PublicKey]) -> str | None:
    """What is wrong with a receipt's compact JWS (EdDSA), or None: it must verify under one
    of ``keys`` (by ``kid``) and its payload must name this receipt."""
    token = record.get("jws")
    if not token:
        return None
    parts = str(token).split(".")
    if len(parts) != 3:
        return "its signature is not a compact JWS"
    try:
        header = json.loads(_b64url(parts[0]))
        payload = json.loads(_b64url(parts[1]))
        signature = _b64url(parts[2])
    except ValueError:
        return "its signature is not a compact JWS"
    key = keys.get(str(header.get("kid", ""))) or (next(iter(keys.values())) if keys else None)
    if header.get("alg") != "EdDSA" or key is None:
        return "its signature's key is not in the pack (receipt-keys.json)"
    try:
        key.verify(signature, f"{parts[0]}.{parts[1]}".encode())
    except InvalidSignature:
        return "its signature does not verify"
    named = payload.get("receipt_id") or payload.get("receipt") or payload.get("id")
    if named != record.get("public_id"):
        return "its signature is of another receipt"
    signed_hash = payload.get("arguments_sha256")
    if signed_hash is not None and signed_hash != record.get("sent_arguments_hash"):
        return "its signature is of other arguments than the receipt's"
    return None


def _jwks_keys(jwks) -> dict[str, str]:
    """A JWKS's Ed25519 keys: kid -> x (base64url), the others left out."""
    keys = {}
    for jwk in (jwks or {}).get("keys", []) if isinstance(jwks, dict) else []:
        if isinstance(jwk, dict) and jwk.get("kty") == "OKP" and jwk.get("crv") == "Ed25519":
            keys[str(jwk.get("kid", ""))] = str(jwk.get("x", ""))
    return keys


def _receipt_keys(files: dict[str, bytes]) -> dict[str, Ed25519PublicKey]:
    body = files.get("receipt-keys.json")
    if body is None:
        return {}
    try:
        found = _jwks_keys(json.loads(body))
        return {kid: Ed25519PublicKey.from_public_bytes(_b64url(x)) for kid, x in found.items()}
    except ValueError:
        return {}


def pinned_keys(key: str) -> set[str]:
    """The public keys (``x``, base64url) an auditor pins with ``--key``: one ``x`` as the
    server's JWKS lists it, or the path of a JWKS file (the server's
    /.well-known/jwks.json, saved)."""
    text = key.strip()
    if text.startswith("{") or text.endswith(".json"):
        try:
            body = text if text.startswith("{") else open(text, encoding="utf-8").read()
            return set(_jwks_keys(json.loads(body)).values())
        except (OSError, ValueError):
            return set()
    return {text.rstrip("=")}


def manifest_signature_problem(
    token: bytes, manifest_bytes: bytes, manifest: dict, keys: dict, *, pinned: str | None
) -> str | None:
    """What is wrong with ``manifest.jws`` (see the module), or None."""
    parts = token.decode("ascii", "replace").strip().split(".")
    try:
        if len(parts) != 3:
            raise ValueError
        header = json.loads(_b64url(parts[0]))
        payload = _b64url(parts[1])
        signature = _b64url(parts[2])
    except ValueError:
        return "manifest.jws is not a compact JWS"
    kid = str(header.get("kid", "")) if isinstance(header, dict) else ""
    if header.get("alg") != "EdDSA" or kid not in keys:
        return (
            f"the manifest's signing key {kid or '(none)'} is not in the pack (receipt-keys.json)"
        )
    if kid != manifest.get("keyId"):
        return "manifest.jws names another key than manifest.json's keyId"
    if pinned is not None:
        public_x = base64.urlsafe_b64encode(keys[kid].public_bytes_raw()).rstrip(b"=").decode()
        if public_x not in pinned_keys(pinned):
            return "the manifest is signed by another key than the one given"
    try:
        keys[kid].verify(signature, f"{parts[0]}.{parts[1]}".encode())
    except InvalidSignature:
        return "manifest.jws does not verify: manifest.json was changed or re-signed"
    if payload != manifest_bytes:
        return "manifest.jws is the signature of another manifest than manifest.json"
    return None


def _receipts_problem(body: bytes, expected: dict) -> str:
    """Which receipt differs from the manifest's list (a file whose hash did not match)."""
    found = {}
    for record in _lines(body):
        found[record.get("public_id")] = hashlib.sha256(_canonical(record)).hexdigest()
    for receipt_id, digest in expected.items():
        if receipt_id not in found:
            return f"receipt {receipt_id} was removed"
        if found[receipt_id] != digest:
            return f"receipt {receipt_id} was altered: its hash is not the manifest's"
    extra = sorted(set(found) - set(expected), key=str)
    return f"receipt {extra[0]} was added" if extra else "its lines were reordered or changed"


def _audit_problem(records: list[dict], chain: dict) -> str:
    if not chain.get("rows"):
        return "the manifest says the period has no audit rows" if records else ""
    start = chain.get("start") or [1, GENESIS]
    end = chain.get("end") or [0, GENESIS]
    check = chain_check(records, start=(start[0], start[1]), head=(end[0], end[1]))
    return check.problem


def pack_verify(path, *, key: str | None = None) -> PackCheck:
    """Check the pack at ``path`` (see the module); ``key``: the keys the auditor pins
    (``pinned_keys``), one of which must be the manifest's."""
    try:
        with zipfile.ZipFile(path) as archive:
            files = {name: archive.read(name) for name in archive.namelist()}
    except (OSError, zipfile.BadZipFile) as exc:
        return PackCheck(f"the pack cannot be read as a zip archive: {exc}")
    if "manifest.json" in files and OLD_SIGNATURE in files and "manifest.jws" not in files:
        return PackCheck(
            "an old-format manifest (manifest.sig, before manifests were signed with the "
            "receipt signing key): this verifier checks packs of the current format; export "
            "the period again"
        )
    if not all(name in files for name in SIGNED):
        return PackCheck("the pack has no manifest.json and manifest.jws")
    manifest_bytes = files["manifest.json"]
    try:
        manifest = json.loads(manifest_bytes)
        listed: dict = manifest.get("files") or {}
    except (ValueError, AttributeError):
        return PackCheck("manifest.json cannot be read")
    problem = manifest_signature_problem(
        files["manifest.jws"], manifest_bytes, manifest, _receipt_keys(files), pinned=key
    )
    if problem:
        return PackCheck(problem)
    for name in sorted(set(files) - set(SIGNED)):
        if name not in listed:
            return PackCheck(f"{name} is in the pack but not in the manifest (added)")
    for name, digest in sorted(listed.items()):
        if name not in files:
            return PackCheck(f"{name} is in the manifest but not in the pack (removed)")
        if hashlib.sha256(files[name]).hexdigest() != digest:
            why = ""
            if name == "receipts.jsonl":
                why = _receipts_problem(files[name], manifest.get("receipts") or {})
            elif name == "audit.jsonl":
                why = _audit_problem(_lines(files[name]), manifest.get("auditChain") or {})
            elif name.startswith("policies/"):
                why = "the policy file was changed"
            return PackCheck(
                f"{name} does not match the manifest's SHA-256" + (f": {why}" if why else "")
            )
    receipts = _lines(files.get("receipts.jsonl", b""))
    keys = _receipt_keys(files)
    for record in receipts:
        problem = receipt_signature_problem(record, keys)
        if problem:
            return PackCheck(f"receipt {record.get('public_id')}: {problem}")
    audit = _lines(files.get("audit.jsonl", b""))
    problem = _audit_problem(audit, manifest.get("auditChain") or {})
    if problem:
        return PackCheck(f"audit.jsonl: {problem}")
    policies = [name for name in listed if name.startswith("policies/")]
    for name in sorted(policies):
        document = json.loads(files[name])
        version = hashlib.sha256(
            json.dumps(document.get("policy"), sort_keys=True, separators=(",", ":")).encode()
        ).hexdigest()
        if version != document.get("version"):
            return PackCheck(f"{name}: its policy is not the version it names")
    return PackCheck("", receipts=len(receipts), audit_rows=len(audit), policies=len(policies))
