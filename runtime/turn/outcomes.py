"""How a turn ends: finished (its telemetry on the last status), or failed because it cannot go
on. A turn is never stuck: an error that can never succeed (data the
database refuses, a reply nested too deeply to read, a schema or value that does not
validate, a ``$ref`` that resolves to nothing) fails it at once; any other crash is retried,
at most TURN_MAX_ATTEMPTS runs in all, and the claim that would exceed them fails it. Either
way the partner reads why on the task's status (the task page shows it too) and the admin
finds the error itself on the transcript's last entry.

A run's attempts count from its claim to its pause or its end (task_state.lease_release
starts them afresh): a turn resumed by a decision is a new run, not a retry.
"""

import logging

import jsonschema
import referencing.exceptions
from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import DataError, IntegrityError, transaction
from django.utils import timezone

from runtime.kernel import extensions as ext
from runtime.kernel.shapes import agent_message
from runtime.kernel.task_models import Task, TaskState
from runtime.kernel.task_state import task_end, with_plan
from runtime.turn.transcript import TURN_FIELDS, action_record

logger = logging.getLogger(__name__)


def turn_end(task: Task, state: str, text: str = "", message: dict | None = None) -> None:
    """End the turn (the caller holds the task's lock): the status, with the turn's telemetry
    (telemetry/v1) and plan (progress/v1), the lease freed, the context's next turn started."""
    message = message or agent_message(task, text)
    status_ext = {
        ext.TELEMETRY: {
            "steps": task.steps,
            "tokens": task.tokens,
            "costUsd": float(task.cost_usd),
            "traceId": task.trace_id,
        }
    }
    task_end(task, state, message, status_ext=with_plan(task, status_ext), also=TURN_FIELDS)
    logger.info("turn finished: %s", state)


def turn_attempts_max() -> int:
    return max(1, int(getattr(settings, "TURN_MAX_ATTEMPTS", 3)))


# What the partner reads when a turn fails at once, by the error's kind (never the error's
# own text: it may quote stored data, a schema, SQL).
_CANNOT_SUCCEED = (
    (
        (DataError, UnicodeError),
        "something it received or made (a file, a reply, a tool's result) holds data that "
        "cannot be stored, such as a NUL character",
    ),
    (IntegrityError, "it would have stored data that contradicts what is stored"),
    (RecursionError, "a reply was nested too deeply to be read"),
    (
        referencing.exceptions.Unresolvable,
        "a schema it needed names a $ref that resolves to nothing",
    ),
    (
        (ValidationError, jsonschema.ValidationError, jsonschema.SchemaError),
        "something it needed does not validate",
    ),
)


def _chain(exc: BaseException | None):
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        yield exc
        exc = exc.__cause__ or exc.__context__


def _unique_violation(exc: IntegrityError) -> bool:
    """A row another writer made first (a race, which a retry reads), not bad data."""
    for cause in _chain(exc):
        if type(cause).__name__ == "UniqueViolation" or "UNIQUE constraint failed" in str(cause):
            return True
    return False


def cannot_succeed(exc: BaseException) -> str | None:
    """Why a retry of the run that raised ``exc`` would fail the same way (for the partner),
    or None when it might succeed."""
    for found in _chain(exc):
        for kinds, why in _CANNOT_SUCCEED:
            if isinstance(found, kinds):
                if isinstance(found, IntegrityError) and _unique_violation(found):
                    return None
                return why
    return None


def _detail(exc: BaseException) -> str:
    """The error for the admin's transcript, as the database will store it."""
    text = f"{type(exc).__name__}: {exc}".replace("\x00", "")
    return text.encode("utf-8", "replace").decode()[:1000]


def turn_fail(task: Task, text: str, error: str) -> None:
    """Fail the turn (the caller holds the task's lock): ``text`` for the partner, ``error``
    kept for the admin on the transcript's last entry (as when a model gives up)."""
    logger.warning("turn stopped: %s (%s)", text, error)
    action_record(task, {"kind": "fail", "text": text, "error": error})
    turn_end(task, TaskState.FAILED, text)


def attempts_spent_text(attempts: int) -> str:
    return (
        f"The turn stopped after {attempts} attempts that did not finish (a crash each time); "
        "it will not be tried again."
    )


def turn_attempts_spent(task: Task) -> None:
    """The claim of a run that would exceed TURN_MAX_ATTEMPTS: fail the turn instead."""
    spent = task.attempts - 1
    turn_fail(task, attempts_spent_text(spent), f"{spent} runs crashed or lost their lease")


def turn_log_fields(task_pk: int) -> dict:
    """The log context of a turn whose claim never read its task (a crash in the claim)."""
    row = (
        Task.objects.filter(pk=task_pk)
        .values_list("public_id", "tenant__slug", "subject", "trace_id")
        .first()
    )
    if row is None:
        return {"task_id": f"pk:{task_pk}"}
    return dict(zip(("task_id", "tenant", "subject", "trace_id"), row, strict=True))


@transaction.atomic(durable=True)
def turn_crashed(*, task_pk: int, worker_id: str, run_id: str | None, exc: Exception) -> None:
    """After a run crashed (and was logged): fail the turn now when a retry cannot succeed or
    the run used the last attempt; otherwise leave it to the sweep, sooner (the lease is let
    go). ``run_id``: the run's, when its claim committed; None when the crash rolled the claim
    back, whose attempt is counted here instead (or the turn would be retried forever).

    Reads the row afresh, under its lock: the run's copy may hold what the database refused."""
    locked = Task.objects.select_for_update().select_related("tenant", "agent")
    task = locked.filter(pk=task_pk).first()
    if task is None or task.state not in (TaskState.SUBMITTED, TaskState.WORKING):
        return
    now = timezone.now()
    if run_id is not None:
        if (task.run_id, task.lease_owner) != (run_id, worker_id):
            return  # the turn is another run's now (taken over, or canceled and restarted)
        fields = ["lease_expires_at"]
    else:
        free = (
            not task.lease_owner
            or task.lease_owner == worker_id
            or (task.lease_expires_at is not None and task.lease_expires_at < now)
        )
        if not free:
            return  # another worker runs it
        task.attempts += 1
        fields = ["attempts"]
    why = cannot_succeed(exc)
    if why is not None:
        turn_fail(task, f"The turn stopped: {why}; it will not be tried again.", _detail(exc))
    elif task.attempts >= turn_attempts_max():
        turn_fail(task, attempts_spent_text(task.attempts), _detail(exc))
    else:
        task.lease_expires_at = now  # the sweep may give it to a worker at once
        task.save(update_fields=fields)
