"""Signed receipts: each receipt is a compact JWS (RFC 7515) of its claims, EdDSA with an
Ed25519 key (RFC 8037), and the public keys are a JWKS (RFC 7517) at /.well-known/jwks.json,
so anyone can check a receipt offline with any JOSE library.

One key signs at a time (SigningKey.active). The first receipt makes one; ``manage.py
rotate_secrets --signing-key`` makes a new one and retires the old, which stays published
while receipts it signed may be checked. The active key is read once per process and kept
for RECEIPT_KEY_CACHE_SECONDS: signing adds no database round trip to a decision; another
process picks up a rotation within that time (the old key still verifies meanwhile).
"""

import base64
import json
import logging
import secrets
import threading
import time
from dataclasses import dataclass

import jwt
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat
from django.conf import settings
from django.db import IntegrityError, transaction
from django.utils import timezone

from connections.crypto import InvalidToken, secret_decrypt, secret_encrypt
from runtime.decisions.decision_models import SigningKey

logger = logging.getLogger(__name__)
ALGORITHM = "EdDSA"


@dataclass(frozen=True)
class LoadedKey:
    kid: str
    private: Ed25519PrivateKey
    loaded_at: float


_lock = threading.Lock()
_loaded: dict[str, LoadedKey] = {}
# Keys this process made in a transaction that has not committed yet: never kept before it
# does (a rollback takes the row away, and no receipt may name a key the JWKS lacks).
_pending: set[str] = set()


def _b64url(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode("ascii")


def _b64url_decode(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def signing_key_row_new() -> SigningKey:
    private = Ed25519PrivateKey.generate()
    public = private.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)
    return SigningKey(
        kid=f"rk_{secrets.token_hex(8)}",
        public_x=_b64url(public),
        private_encrypted=secret_encrypt(_b64url(private.private_bytes_raw())),
    )


def _key_load(row: SigningKey) -> LoadedKey:
    raw = _b64url_decode(secret_decrypt(row.private_encrypted))
    return LoadedKey(
        kid=row.kid,
        private=Ed25519PrivateKey.from_private_bytes(raw),
        loaded_at=time.monotonic(),
    )


def signing_key() -> LoadedKey:
    """The active key, as this process loaded it (at most RECEIPT_KEY_CACHE_SECONDS ago);
    made when there is none."""
    cached = _loaded.get("active")
    ttl = settings.RECEIPT_KEY_CACHE_SECONDS
    if cached is not None and time.monotonic() - cached.loaded_at < ttl:
        return cached
    with _lock:
        row = SigningKey.objects.filter(active=True).first()
        made = row is None
        if row is None:
            row = _key_create()
        try:
            loaded = _key_load(row)
        except InvalidToken:
            # CONNECTIONS_ENCRYPTION_KEY changed without `rotate_secrets`: the key cannot sign,
            # but its public half still checks what it signed. Decisions go on, under a new key.
            logger.error(
                "the receipt signing key %s opens with none of the configured encryption keys "
                "(CONNECTIONS_ENCRYPTION_KEY); a new key signs from now on",
                row.kid,
            )
            row, made = _key_replace(row), True
            loaded = _key_load(row)
        if made:
            _pending.add(row.kid)
            transaction.on_commit(lambda: _key_committed(loaded))
        elif row.kid not in _pending:
            _loaded["active"] = loaded
        return loaded


def _key_committed(loaded: LoadedKey) -> None:
    _pending.discard(loaded.kid)
    _loaded["active"] = loaded


def _key_create() -> SigningKey:
    """The first key, made under the constraint of one active key: of two processes making
    it at once, one wins and the other reads the winner's."""
    row = signing_key_row_new()
    try:
        with transaction.atomic():
            row.save()
    except IntegrityError:
        return SigningKey.objects.get(active=True)
    return row


def _key_replace(unreadable: SigningKey) -> SigningKey:
    """Retire a key that cannot be opened and make the next (or read the one another process
    made meanwhile)."""
    try:
        with transaction.atomic():
            SigningKey.objects.filter(pk=unreadable.pk, active=True).update(
                active=False, retired_at=timezone.now()
            )
            row = signing_key_row_new()
            row.save()
    except IntegrityError:
        return SigningKey.objects.get(active=True)
    return row


@transaction.atomic
def signing_key_rotate() -> SigningKey:
    """Retire the active key (it stays published) and make a new one that signs from now on
    (in this process at once; in others within RECEIPT_KEY_CACHE_SECONDS)."""
    SigningKey.objects.select_for_update().filter(active=True).update(
        active=False, retired_at=timezone.now()
    )
    row = signing_key_row_new()
    row.save()
    _pending.add(row.kid)
    signing_cache_clear()
    transaction.on_commit(lambda: _pending.discard(row.kid))
    return row


def signing_cache_clear() -> None:
    _loaded.clear()


def receipt_sign(claims: dict) -> str:
    """The compact JWS of ``claims`` under the active key (header alg, kid, typ)."""
    key = signing_key()
    return jwt.encode(claims, key.private, algorithm=ALGORITHM, headers={"kid": key.kid})


def jws_claims(jws: str) -> dict:
    """The claims of a JWS this server signed, read without checking it (the receipt row's
    own, to show; a caller checks it against the JWKS)."""
    try:
        payload = jws.split(".")[1]
        claims = json.loads(_b64url_decode(payload))
    except (IndexError, ValueError):
        return {}
    return claims if isinstance(claims, dict) else {}


def jwks() -> dict:
    """Every key that signed or signs receipts, as a JWKS (newest first)."""
    return {
        "keys": [
            {
                "kty": "OKP",
                "crv": "Ed25519",
                "x": x,
                "kid": kid,
                "use": "sig",
                "alg": ALGORITHM,
            }
            for kid, x in SigningKey.objects.values_list("kid", "public_x")
        ]
    }
