"""Encryption at rest for stored secrets (connection tokens, push tokens, model credentials).

Fernet (AES-128-CBC with HMAC-SHA256) with keys derived by HKDF from
``settings.CONNECTIONS_ENCRYPTION_KEY``. Deriving rather than demanding a ready-made Fernet key
means any long random string works as the setting, and the default (``SECRET_KEY``) never
doubles as the raw encryption key: HKDF's ``info`` separates the two uses.

The setting is a list of keys (or a comma-separated string): the first encrypts, every one
decrypts (MultiFernet), so a key is rotated by putting the new one first, re-encrypting what
is stored (``secret_rotate``; ``manage.py rotate_secrets``) and then dropping the old one.
"""

import base64
from functools import lru_cache

from cryptography.fernet import Fernet, InvalidToken, MultiFernet
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

__all__ = [
    "InvalidToken",
    "encryption_keys",
    "secret_decrypt",
    "secret_encrypt",
    "secret_is_current",
    "secret_key_position",
    "secret_rotate",
]

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


def encryption_keys() -> tuple[str, ...]:
    """The configured keys, the encrypting one first."""
    configured = settings.CONNECTIONS_ENCRYPTION_KEY
    if isinstance(configured, str):
        configured = configured.split(",")
    keys = tuple(key.strip() for key in configured if key and key.strip())
    if not keys:
        raise ImproperlyConfigured("CONNECTIONS_ENCRYPTION_KEY (or SECRET_KEY) is empty.")
    return keys


@lru_cache(maxsize=4)
def _multi_fernet_for(keys: tuple[str, ...]) -> MultiFernet:
    return MultiFernet([_fernet_for(key) for key in keys])


def _fernet() -> MultiFernet:
    # Looked up on every call (and cached per value) so that override_settings in tests and a
    # changed setting after reload both take effect.
    return _multi_fernet_for(encryption_keys())


def secret_encrypt(plaintext: str) -> str:
    return _fernet().encrypt(plaintext.encode()).decode("ascii")


def secret_decrypt(ciphertext: str) -> str:
    """Decrypt, or raise InvalidToken (no configured key opened it: the key changed without a
    rotation, or the row was tampered with)."""
    return _fernet().decrypt(ciphertext.encode("ascii")).decode()


def secret_rotate(ciphertext: str) -> str:
    """The same secret encrypted under the first key; InvalidToken if no key opens it."""
    return _fernet().rotate(ciphertext.encode("ascii")).decode("ascii")


def secret_is_current(ciphertext: str) -> bool:
    """Whether the first key alone opens it (once every secret is, older keys may go)."""
    try:
        _fernet_for(encryption_keys()[0]).decrypt(ciphertext.encode("ascii"))
    except InvalidToken:
        return False
    return True


def secret_key_position(ciphertext: str) -> int | None:
    """Which of the configured keys (0: the first) opens it, or None if none does."""
    for position, key in enumerate(encryption_keys()):
        try:
            _fernet_for(key).decrypt(ciphertext.encode("ascii"))
        except InvalidToken:
            continue
        return position
    return None
