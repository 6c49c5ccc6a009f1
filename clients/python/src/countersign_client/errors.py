"""What a request for approval can end in besides an approval."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .receipt_claims import Receipt


class CountersignError(Exception):
    """The base of every error this client raises."""


class GateError(CountersignError):
    """The gate refused the request itself (a JSON-RPC error: a tool its policy does not name,
    a malformed request, a bad token, an unknown task). Nothing was created."""

    def __init__(self, message: str, *, code: int | None = None, data: object = None):
        super().__init__(message)
        self.message = message
        self.code = code
        self.data = data


class ReceiptError(CountersignError):
    """A receipt that does not hold: a bad signature, an unknown key, another tenant's, agent's
    or task's receipt, or arguments that do not match their hash. Never act on it."""


class Denied(CountersignError):
    """The call was denied. ``reason`` is the decider's reason, ``receipt`` the verified,
    signed receipt of the denial."""

    def __init__(self, reason: str, *, receipt: Receipt, task_id: str):
        super().__init__(reason or "denied")
        self.reason = reason
        self.receipt = receipt
        self.task_id = task_id


class Expired(Denied):
    """Nobody decided before the request expired: a denial by the clock (so ``except Denied``
    covers it too), with its signed receipt."""


class TimedOut(CountersignError):
    """This client stopped waiting (``timeout``) but the request still stands: the people may
    still decide. ``wait(task_id)`` picks it up later, from this process or another."""

    def __init__(self, task_id: str):
        super().__init__(f"no decision yet on task {task_id}; wait({task_id!r}) picks it up")
        self.task_id = task_id


class TaskFailed(CountersignError):
    """The gate's task ended neither approved nor denied (failed or canceled)."""

    def __init__(self, message: str, *, task_id: str, state: str):
        super().__init__(message)
        self.task_id = task_id
        self.state = state
