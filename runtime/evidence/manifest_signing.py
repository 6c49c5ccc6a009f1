"""The key that signs evidence packs' manifests: Ed25519, derived (HKDF-SHA256) from
``EVIDENCE_SIGNING_KEY`` (by default SECRET_KEY), so that it needs no key file and stays the
same across restarts and processes. Auditors pin its public key (``key_id``)."""

import base64
import hashlib

from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
from django.conf import settings

_INFO = b"countersign evidence pack signing key v1"


def signing_key() -> Ed25519PrivateKey:
    seed = HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=_INFO).derive(
        settings.EVIDENCE_SIGNING_KEY.encode()
    )
    return Ed25519PrivateKey.from_private_bytes(seed)


def public_key_text(key: Ed25519PrivateKey) -> str:
    """The raw public key, base64: what a manifest names and an auditor pins."""
    raw = key.public_key().public_bytes(
        encoding=serialization.Encoding.Raw, format=serialization.PublicFormat.Raw
    )
    return base64.b64encode(raw).decode()


def key_id(public_key: str) -> str:
    """A public key's fingerprint: the first 16 hex digits of the SHA-256 of its raw bytes."""
    return hashlib.sha256(base64.b64decode(public_key)).hexdigest()[:16]
