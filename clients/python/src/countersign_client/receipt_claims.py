"""A verified receipt and the hash it carries: what the client hands its caller (Decision,
Denied), apart from how it is checked (countersign_client.receipts), so that the errors that
carry a receipt need nothing of the checking."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

# What a redacted argument reads as in a receipt; the hash is of the real value.
REDACTED = "•••"


def whole_numbers(value: Any) -> Any:
    """``value`` with every whole float an integer (``250.0`` as ``250``), as the gate writes
    arguments before it hashes them: JSON does not tell the two apart, and SDKs built on
    protobuf send every number as a double."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, Mapping):
        return {key: whole_numbers(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [whole_numbers(item) for item in value]
    return value


def arguments_sha256(arguments: Mapping[str, Any]) -> str:
    """The hash a receipt carries: SHA-256 of the arguments (whole floats as integers) as
    canonical JSON (sorted keys, no spaces, non-ASCII as \\u escapes, as Python's json.dumps
    writes it by default)."""
    canonical = json.dumps(whole_numbers(arguments), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


@dataclass(frozen=True)
class Receipt:
    """A verified receipt: its signed ``claims`` and the compact ``jws`` that carries them."""

    claims: dict[str, Any]
    jws: str
    kid: str = ""
    arguments_run: dict[str, Any] = field(default_factory=dict)

    @property
    def receipt_id(self) -> str:
        return str(self.claims.get("receipt_id", ""))

    @property
    def approved(self) -> bool:
        return self.claims.get("approved") is True

    @property
    def decision(self) -> str:
        """``approved``, ``denied``, ``expired`` or ``allowed`` (by the policy, outright)."""
        return str(self.claims.get("decision", ""))

    @property
    def tool(self) -> str:
        return str(self.claims.get("tool", ""))

    @property
    def arguments(self) -> dict[str, Any]:
        """The arguments as the receipt shows them (redacted fields read ``•••``)."""
        return dict(self.claims.get("arguments") or {})

    @property
    def arguments_sha256(self) -> str:
        return str(self.claims.get("arguments_sha256", ""))

    @property
    def edited(self) -> bool:
        return self.claims.get("edited") is True

    @property
    def policy(self) -> dict[str, Any]:
        return dict(self.claims.get("policy") or {})

    @property
    def decided_by(self) -> list[str]:
        return [str(who) for who in self.claims.get("decided_by") or []]

    @property
    def channel(self) -> str:
        return str(self.claims.get("channel", ""))

    @property
    def decided_at(self) -> str:
        return str(self.claims.get("decided_at", ""))

    @property
    def reason(self) -> str:
        return str(self.claims.get("reason") or "")

    @property
    def tenant(self) -> str:
        return str(self.claims.get("tenant", ""))

    @property
    def agent(self) -> str:
        return str(self.claims.get("agent", ""))

    @property
    def task_id(self) -> str:
        return str(self.claims.get("task_id", ""))

    @property
    def interaction_id(self) -> str:
        return str(self.claims.get("interaction_id") or "")
