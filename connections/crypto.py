"""Encryption at rest for connection secrets (pasted tokens, OAuth2 access and refresh tokens).

Fernet (AES-128-CBC with HMAC-SHA256) with a key derived by HKDF from
``settings.CONNECTIONS_ENCRYPTION_KEY``. Deriving rather than demanding a ready-made Fernet key
means any long random string works as the setting, and the default (``SECRET_KEY``) never
doubles as the raw encryption key: HKDF's ``info`` separates the two uses.
"""

import base64
from functools import lru_cache

from cryptography.fernet import Fernet, InvalidToken
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

__all__ = ["InvalidToken", "secret_decrypt", "secret_encrypt"]

_SALT = b"countersign.connections"
_INFO = b"connection-secrets/fernet/v1"


@lru_cache(maxsize=4)
def _fernet_for(key_material: str) -> Fernet:
    if not key_material:
        raise ImproperlyConfigured("CONNECTIONS_ENCRYPTION_KEY (or SECRET_KEY) is empty.")
    derived = HKDF(algorithm=hashes.SHA256(), length=32, salt=_SALT, info=_INFO).derive(
        key_material.encode()
    )
    return Fernet(base64.urlsafe_b64encode(derived))


def _fernet() -> Fernet:
    # Looked up on every call (and cached per value) so that override_settings in tests and a
    # changed setting after reload both take effect.
    return _fernet_for(settings.CONNECTIONS_ENCRYPTION_KEY)


def secret_encrypt(plaintext: str) -> str:
    return _fernet().encrypt(plaintext.encode()).decode("ascii")


def secret_decrypt(ciphertext: str) -> str:
    """Decrypt, or raise InvalidToken (wrong key, e.g. after the key changed, or a tampered row)."""
    return _fernet().decrypt(ciphertext.encode("ascii")).decode()
