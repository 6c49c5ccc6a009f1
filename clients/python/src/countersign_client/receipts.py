"""Signed receipts: compact JWS (RFC 7515, EdDSA over Ed25519) checked against the server's
JWKS (RFC 7517, ``/.well-known/jwks.json``).

A receipt's claims are the receipt's fields (the decision, the arguments as approved and
their SHA-256, the policy entry, who decided and how, when) plus the ``tenant``, ``agent``,
``task_id`` and ``interaction_id`` it belongs to. The claims are what is trusted, never the
unsigned copy beside them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import jwt
from jwt.exceptions import InvalidTokenError, PyJWKError

from .errors import ReceiptError
from .receipt_claims import REDACTED, Receipt, arguments_sha256, whole_numbers


class KeySet:
    """The public keys of a JWKS document, by ``kid``."""

    def __init__(self, document: Mapping[str, Any] | None = None):
        self.keys: dict[str, Any] = {}
        if document is not None:
            self.load(document)

    def load(self, document: Mapping[str, Any]) -> None:
        if not isinstance(document, Mapping) or not isinstance(document.get("keys"), list):
            raise ReceiptError("the JWKS is not a JSON object with a list of keys")
        keys: dict[str, Any] = {}
        for jwk in document["keys"]:
            if not isinstance(jwk, Mapping) or not jwk.get("kid"):
                continue
            if jwk.get("kty") != "OKP" or jwk.get("crv") != "Ed25519":
                continue  # only Ed25519 keys sign receipts
            try:
                keys[str(jwk["kid"])] = jwt.PyJWK(dict(jwk), algorithm="EdDSA")
            except PyJWKError:
                continue
        self.keys = keys

    def get(self, kid: str) -> Any | None:
        return self.keys.get(kid)


def header_of(token: str) -> dict[str, Any]:
    """The protected header of a compact JWS, unverified (to pick its key)."""
    try:
        header = jwt.get_unverified_header(token)
    except InvalidTokenError as exc:
        raise ReceiptError(f"not a compact JWS: {exc}") from None
    if header.get("alg") != "EdDSA":
        raise ReceiptError(f"receipts are signed with EdDSA, not {header.get('alg')!r}")
    if not isinstance(header.get("kid"), str) or not header["kid"]:
        raise ReceiptError("the receipt's header names no key (kid)")
    return header


def signed_claims(token: str, key: Any) -> dict[str, Any]:
    """The claims of ``token`` once its signature checks against ``key`` (a PyJWK)."""
    try:
        claims = jwt.decode(
            token,
            key,
            algorithms=["EdDSA"],
            # A receipt is a record, not a session: it does not expire, and names no audience.
            options={"verify_exp": False, "verify_aud": False, "verify_iat": False},
        )
    except InvalidTokenError as exc:
        raise ReceiptError(f"the receipt's signature does not hold: {exc}") from None
    if not isinstance(claims, dict):
        raise ReceiptError("the receipt's claims are not a JSON object")
    return claims


def arguments_to_run(claims: Mapping[str, Any], asked: Mapping[str, Any] | None) -> dict[str, Any]:
    """The arguments the caller runs, checked against the receipt's hash.

    They are the receipt's own arguments when they hash to ``arguments_sha256``. A redacted
    field reads ``•••`` in the receipt while its hash is of the real value: the caller's own
    value is put back where the receipt redacted one (the approver could not have changed
    what they did not see), and the result must hash right."""
    expected = claims.get("arguments_sha256")
    shown = claims.get("arguments")
    if not isinstance(expected, str) or not isinstance(shown, dict):
        raise ReceiptError("the receipt carries no arguments and hash")
    if arguments_sha256(shown) == expected:
        return dict(shown)
    if asked is not None:
        filled = whole_numbers(_unredact(shown, asked))
        if arguments_sha256(filled) == expected:
            return filled
    raise ReceiptError("the arguments do not match the receipt's arguments_sha256")


def _unredact(shown: Any, asked: Any) -> Any:
    if shown == REDACTED:
        return asked
    if isinstance(shown, dict) and isinstance(asked, Mapping):
        return {k: _unredact(v, asked.get(k)) if k in asked else v for k, v in shown.items()}
    return shown


def check_receipt(
    token: str,
    key_for: Callable[[str], Any | None],
    *,
    tenant: str | None = None,
    agent: str | None = None,
    task_id: str | None = None,
    tool: str | None = None,
    arguments: Mapping[str, Any] | None = None,
) -> Receipt:
    """Verify a compact JWS receipt: its signature with the key ``key_for(kid)`` returns, then
    that it belongs to the ``tenant``, ``agent``, ``task_id`` and ``tool`` given (each when
    given), and that its arguments match their hash (``arguments``: what the caller asked,
    for the redacted fields). Raises ReceiptError otherwise."""
    header = header_of(token)
    kid = header["kid"]
    key = key_for(kid)
    if key is None:
        raise ReceiptError(f"no key {kid!r} in the JWKS: the receipt cannot be verified")
    claims = signed_claims(token, key)
    for name, expected in (("tenant", tenant), ("agent", agent), ("task_id", task_id)):
        if expected is not None and claims.get(name) != expected:
            raise ReceiptError(f"the receipt is for {name} {claims.get(name)!r}, not {expected!r}")
    if tool is not None and claims.get("tool") != tool:
        raise ReceiptError(f"the receipt is for the tool {claims.get('tool')!r}, not {tool!r}")
    if not isinstance(claims.get("approved"), bool):
        raise ReceiptError("the receipt says neither approved nor not")
    run = arguments_to_run(claims, arguments)
    return Receipt(claims=claims, jws=token, kid=kid, arguments_run=run)
