"""How an evidence pack's manifest is signed: a compact JWS (RFC 7515) of ``manifest.json``,
EdDSA with the install's receipt signing key (runtime.decisions.signing, the key that
signs receipts now), its ``kid`` in the JWS header and in the manifest (``keyId``). The pack
carries the public keys as a JWKS (``receipt-keys.json``, the same as
/.well-known/jwks.json), so that the pack verifies offline; an auditor pins the key by
checking it against the JWKS the server publishes (``evidence verify --key``). A rotation
(``rotate_secrets --signing-key``) signs later packs with the new key; the old one stays
published, so packs it signed still verify."""

import jwt

from runtime.decisions.signing import ALGORITHM, LoadedKey, jwks, signing_key

# The JWS header's ``typ``: what the signed bytes are.
MANIFEST_TYPE = "countersign-evidence-manifest"


def manifest_key() -> LoadedKey:
    """The key that signs manifests now (made when there is none yet)."""
    return signing_key()


def manifest_sign(manifest: bytes, key: LoadedKey) -> str:
    """The compact JWS of ``manifest`` (its bytes as they are in the pack) under ``key``."""
    return jwt.api_jws.encode(
        manifest, key.private, algorithm=ALGORITHM, headers={"kid": key.kid, "typ": MANIFEST_TYPE}
    )


def signing_keys() -> dict:
    """The public keys a pack carries (``receipt-keys.json``): every key that signed or signs
    receipts and manifests, as a JWKS."""
    return jwks()
