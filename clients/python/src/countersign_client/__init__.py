"""countersign-client: put a Countersign approval in front of your agent's tool.

``Countersign(base_url, token, tenant="demo").require_approval("payments/send", {...})``
sends the call to the tenant's approval gate over A2A, waits for the people who decide
(following the task's stream, polling when it cannot), and returns a Decision whose signed
receipt has been verified against the server's JWKS, or raises Denied, Expired or TimedOut.
"""

from .client import AsyncCountersign, Countersign, Decision
from .errors import (
    CountersignError,
    Denied,
    Expired,
    GateError,
    ReceiptError,
    TaskFailed,
    TimedOut,
)
from .receipts import KeySet, Receipt, arguments_sha256, check_receipt

__all__ = [
    "AsyncCountersign",
    "Countersign",
    "CountersignError",
    "Decision",
    "Denied",
    "Expired",
    "GateError",
    "KeySet",
    "Receipt",
    "ReceiptError",
    "TaskFailed",
    "TimedOut",
    "arguments_sha256",
    "check_receipt",
]
